"""vLLM's ``BlockPool.free_blocks`` given a block listed twice (vLLM issue #42571's shape),
on the installed release: what ``docs/prefix-cache.md`` says about the report rests on this.

Not a finding: no caller the machine drives lists a block twice (``free-lists-held-blocks``
checks every call); this pins the pool's own answer to such a call, per release. A block held
twice and listed twice must be queued once: releases whose ``free_blocks`` decrements every
listing before queueing (0.20.0 and before) queue it twice, and the free count runs ahead of
the free list.
"""

from __future__ import annotations

import pytest

from properties.scenarios import agrees, make_or_skip
from sim.vllm import prefix_cache_compat

FREE_QUEUE = "free-queue-agrees"


def test_a_block_held_and_listed_twice_is_queued_once(target):
    if target != "vllm":
        pytest.skip("vLLM's own BlockPool only")
    cache = make_or_skip(target, "prefix_cache", num_blocks=4, block_size=2, max_model_len=8)
    pool = cache.pool
    (block,) = pool.get_new_blocks(1)
    prefix_cache_compat.touch(pool, [block])                 # held twice: ref_cnt 2
    pool.free_blocks([block, block])
    listed = [b.block_id for b in pool.free_block_queue.get_all_free_blocks()]
    if cache.uncached_first:      # 0.24.0 on: queued when its own decrement reaches zero
        agrees(FREE_QUEUE, sorted(listed), [1, 2, 3])
        agrees(FREE_QUEUE, pool.get_num_free_blocks(), 3)
    else:                         # decrement every listing, then queue each zero: twice;
        agrees(FREE_QUEUE, pool.get_num_free_blocks(), 4)  # the count says four free
        agrees(FREE_QUEUE, sorted(listed), [1, 2, 3])   # blocks, the list links three


def test_the_free_list_check_fails_on_a_broken_link(target):
    """The vLLM target's structural self-check (``check-valid``) reads the queue's links:
    a popped block that kept its link, or a prev link that skips a block, fails it."""
    if target != "vllm":
        pytest.skip("vLLM's own free queue only")
    cache = make_or_skip(target, "prefix_cache", num_blocks=5, block_size=2, max_model_len=8)
    cache.check_valid()
    (block,) = cache.pool.get_new_blocks(1)
    block.next_free_block = cache.pool.free_block_queue.fake_free_list_tail
    with pytest.raises(AssertionError, match="keep free-list links"):
        cache.check_valid()
    block.next_free_block = None
    cache.check_valid()
    first = cache.pool.free_block_queue.fake_free_list_head.next_free_block
    first.next_free_block.prev_free_block = cache.pool.free_block_queue.fake_free_list_head
    with pytest.raises(AssertionError, match="prev link skips"):
        cache.check_valid()
