"""The encoder-cache model against hand-worked examples from the spec (no target involved):
the model is the oracle, so it gets its own checks from the text it was written from."""

from __future__ import annotations

import pytest

from models.encoder_cache import EncoderCacheModel
from models.encoder_cache_values import MmItem, ReqView


def req(rid, *items):
    return ReqView(rid, tuple(MmItem(h, n) for h, n in items))


def test_spec_walkthrough_counts_and_eviction_order():
    cache, a = EncoderCacheModel(10), req("a", ("img1", 4), ("img2", 4))
    assert not cache.check_and_update_cache(a, 0)
    assert cache.can_allocate(a, 0, 100, 0)
    cache.allocate(a, 0)
    assert cache.can_allocate(a, 1, 100, 0)
    cache.allocate(a, 1)
    assert (cache.num_free_slots, cache.num_freeable_slots) == (2, 2)
    cache.free_encoder_input(a, 0)                       # img1 -> freeable
    assert (cache.num_free_slots, cache.num_freeable_slots) == (2, 6)
    b = req("b", ("img3", 6))
    assert cache.can_allocate(b, 0, 100, 0)              # evicts img1, the only freeable one
    cache.allocate(b, 0)
    assert cache.get_freed_mm_hashes() == ["img1"]
    assert cache.get_freed_mm_hashes() == []             # the list is cleared
    c = req("c", ("img2", 4))
    assert cache.check_and_update_cache(c, 0)            # shared with a
    cache.free(a)
    cache.free(c)
    cache.free(b)
    assert (cache.num_free_slots, cache.num_freeable_slots) == (0, 10)
    assert cache.freeable_order() == ["img2", "img3"]


def test_reallocated_in_the_same_pass_is_not_reported():
    cache, a, b = EncoderCacheModel(4), req("a", ("a", 4)), req("b", ("b", 4))
    assert cache.can_allocate(a, 0, 10, 0)
    cache.allocate(a, 0)
    cache.free(a)
    assert cache.can_allocate(b, 0, 10, 0)               # evicts a
    assert cache.can_allocate(a, 0, 10, 0)               # b was never allocated: room again
    cache.allocate(a, 0)
    assert cache.get_freed_mm_hashes() == []


def test_repeated_item_is_held_until_its_last_input_is_freed():
    cache, r = EncoderCacheModel(4), req("r", ("x", 2), ("x", 2))
    assert cache.can_allocate(r, 0, 10, 0)
    cache.allocate(r, 0)
    assert cache.check_and_update_cache(r, 1)
    cache.free_encoder_input(r, 0)
    assert cache.num_freeable_slots == 2                 # still held through input 1
    cache.free_encoder_input(r, 1)
    assert cache.num_freeable_slots == 4


def test_refusals_change_nothing():
    cache, r = EncoderCacheModel(4), req("r", ("x", 3), ("y", 2))
    assert cache.can_allocate(r, 0, 10, 0)
    cache.allocate(r, 0)
    assert not cache.can_allocate(r, 1, 1, 0)            # over the compute budget
    assert not cache.can_allocate(r, 1, 10, 0)           # x is held: no room
    assert (cache.num_free_slots, cache.num_freeable_slots) == (1, 1)


def test_cache_size_must_be_positive():
    with pytest.raises(ValueError, match="cache_size must be at least 1"):
        EncoderCacheModel(0)
