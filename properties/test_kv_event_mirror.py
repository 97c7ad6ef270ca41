"""``events-claim-only-cached`` can fail, and fails only on a claim (``EventMirror``): the
events' own classes are stood in for by local ones of the same names and fields, so this runs
without vLLM. ``properties/test_prefix_cache_mamba_world.py`` checks vLLM's real events."""

from __future__ import annotations

from attrs import frozen

from properties.kv_event_mirror import EventMirror


@frozen
class BlockStored:
    block_hashes: list
    group_idx: int | None


@frozen
class BlockRemoved:
    block_hashes: list
    group_idx: int | None


@frozen
class AllBlocksCleared:
    pass


def test_a_stored_prefix_the_pool_does_not_cache_is_named():
    mirror = EventMirror()
    mirror.apply([BlockStored(["a", "b"], 0), BlockStored(["a"], 1)])
    assert mirror.not_cached({(0, "b"), (1, "a")}) == {(0, "a")}


def test_removed_and_cleared_prefixes_are_no_longer_claimed():
    mirror = EventMirror()
    mirror.apply([BlockStored(["a", "b"], 0), BlockRemoved(["a"], 0)])
    assert mirror.not_cached({(0, "b")}) == set()
    mirror.apply([AllBlocksCleared(), BlockStored(["c"], None)])   # no group: the first
    assert mirror.not_cached(set()) == {(0, "c")}


def test_a_prefix_cached_but_not_reported_is_no_claim():
    # vLLM removes per block: where two blocks cached one prefix and one is evicted, a
    # consumer forgets a prefix still cached. That loses a hit, never claims a wrong one.
    mirror = EventMirror()
    mirror.apply([BlockStored(["a"], 0), BlockStored(["a"], 0), BlockRemoved(["a"], 0)])
    assert mirror.not_cached({(0, "a")}) == set()
