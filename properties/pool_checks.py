"""What a block pool promises of itself, read off its state (no model): every block's
reference count is the number of request tables holding it (``refs-agree``), the free queue
holds exactly the unreferenced blocks, each once (``free-is-unreferenced``), and a prefix-cache
reset succeeds exactly when no block is held, and then leaves nothing cached
(``reset-agrees``). The prefix-cache machines check the same promises against their model;
these take the pool's own numbers (``properties/test_prefix_cache_mamba_world.py``)."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence

from properties.scenarios import holds


def check_refs(refs: Mapping[int, int], holders: Mapping[int, int]) -> None:
    """``refs``: block -> its reference count; ``holders``: block -> tables holding it."""
    wrong = {b: (n, holders.get(b, 0)) for b, n in refs.items() if n != holders.get(b, 0)}
    holds("refs-agree", not wrong, lambda: "block: (reference count, request tables "
          f"holding it): {wrong}")


def check_free(free: Sequence[int], refs: Mapping[int, int]) -> None:
    unreferenced = {b for b, n in refs.items() if n == 0}
    holds("free-is-unreferenced", len(free) == len(set(free)) and set(free) == unreferenced,
          lambda: f"the free queue {tuple(free)}, the unreferenced blocks "
                  f"{sorted(unreferenced)}")


def check_reset(done: bool, held: Collection[int], cached_after: Collection) -> None:
    """``held``: the blocks referenced before the call; ``cached_after``: what it left."""
    holds("reset-agrees", done == (not held),
          lambda: f"reset_prefix_cache returned {done} with blocks {sorted(held)} held")
    holds("reset-agrees", not done or not cached_after,
          lambda: f"a reset that succeeded left {len(cached_after)} prefixes cached")
