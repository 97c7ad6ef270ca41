"""Checks of the prefix-cache machine that no catalogue entry reaches first, shown able to
fail: the machine run against the native target with one answer planted wrong."""

from __future__ import annotations

import pytest
from attrs import evolve

from fixtures.pytest_plugin import Divergence
from models.prefix_cache import PrefixCacheModel
from models.prefix_cache_values import BlockRemoved, PrefixRequest
from properties.harness import property_of
from properties.prefix_cache_machine import PrefixCacheMachine, duplicate_listings
from properties.prefix_cache_pools_machine import BlockPoolsMachine
from properties.prefix_cache_queue_machine import FreeQueueMachine
from properties.prefix_cache_worlds import PrefixCacheWorld
from properties.run import check_machine, replay
from sim.native.prefix_cache import NativeFreeQueue, NativePrefixCache
from sim.native.prefix_cache_pools import NativeBlockPools


def _fails(tmp_path, prop: str, max_examples: int = 100) -> dict:
    with pytest.raises(Divergence) as failed:
        check_machine(PrefixCacheMachine, "native", str(tmp_path), max_examples=max_examples)
    assert failed.value.info["property"] == prop, failed.value
    return {**failed.value.info, "message": failed.value.msg}


def test_fit_agrees_can_fail(monkeypatch, tmp_path):
    # An admission's fit check one block short: it refuses a waiting request whenever a
    # single block would be left free (before anything is touched: a running request's
    # step first gives back the blocks behind its window, which this patch would skip).
    real = NativePrefixCache.allocate_slots

    def short(self, request_id, num_new_tokens, hit=None, num_lookahead_tokens=0, **loads):
        if request_id in self.waiting and len(self.queue) <= 1:
            return None
        return real(self, request_id, num_new_tokens, hit, num_lookahead_tokens, **loads)
    monkeypatch.setattr(NativePrefixCache, "allocate_slots", short)
    _fails(tmp_path, "fit-agrees")


def test_free_is_unreferenced_can_fail(monkeypatch, tmp_path):
    # The free queue as read lists the first held block too (a hit left queued: what
    # pc-touch-keeps-queued does, read before allocate_slots hands the block out again).
    monkeypatch.setattr(NativePrefixCache, "free_queue", lambda self: tuple(self.queue) + tuple(
        b for b in range(1, self.num_blocks) if self.refs[b])[:1])
    _fails(tmp_path, "free-is-unreferenced")


def test_refs_agree_can_fail(monkeypatch, tmp_path):
    # A pool that counts one holder too many on every held block (the free queue is right).
    monkeypatch.setattr(NativePrefixCache, "ref_cnt",
                        lambda self, b: self.refs[b] + (self.refs[b] > 0))
    _fails(tmp_path, "refs-agree")


def test_tables_agree_can_fail(monkeypatch, tmp_path):
    # get_block_ids leaves out a request's first block.
    monkeypatch.setattr(NativePrefixCache, "get_block_ids",
                        lambda self, rid: tuple(self.table.get(rid, ()))[1:])
    _fails(tmp_path, "tables-agree")


def test_cached_tokens_agree_can_fail(monkeypatch, tmp_path):
    # Each cached block's hash counted as covering a block fewer tokens than it does (vLLM's
    # block_hash_num_tokens set one block low): the estimate falls a block short.
    real = NativePrefixCache.estimate_cached_tokens
    monkeypatch.setattr(NativePrefixCache, "estimate_cached_tokens",
                        lambda self, rid: max(real(self, rid) - self.block_size, 0))
    _fails(tmp_path, "cached-tokens-agree")


def test_probe_agrees_can_fail(monkeypatch, tmp_path):
    # A probe that reports one block more than the hit it would find (so a cache-aware
    # scheduler favours it wrongly).
    monkeypatch.setattr(NativePrefixCache, "get_num_cached_tokens", lambda self, rid:
                        self._find_hit(rid).num_computed_tokens + self.block_size)
    _fails(tmp_path, "probe-agrees")


def test_cached_hash_names_contents_can_fail(monkeypatch, tmp_path):
    # The hash map names each prefix's block one id off: those blocks hold other tokens.
    monkeypatch.setattr(NativePrefixCache, "cached_blocks", lambda self: {
        key: tuple((b % (self.num_blocks - 1)) + 1 for b in blocks)
        for key, blocks in self.by_hash.items()})
    _fails(tmp_path, "cached-hash-names-contents")


def test_cached_set_agrees_can_fail(monkeypatch, tmp_path):
    # A hash map that lists only a prefix's first block (vLLM keeps every block caching it):
    # each listed block does hold its prefix, but the map is not the model's.
    monkeypatch.setattr(NativePrefixCache, "cached_blocks", lambda self: {
        key: tuple(blocks[:1]) for key, blocks in self.by_hash.items()})
    _fails(tmp_path, "cached-set-agrees", max_examples=300)


def test_block_hash_is_cached_can_fail(monkeypatch, tmp_path):
    # A reset that empties the hash map but leaves every block its own hash (vLLM's reset
    # without its loop clearing each block's hash): the map agrees, the blocks do not.
    real = NativePrefixCache.reset_prefix_cache

    def reset(self):
        kept, done = list(self.hash_of), real(self)
        self.hash_of = kept if done else self.hash_of
        return done
    monkeypatch.setattr(NativePrefixCache, "reset_prefix_cache", reset)
    _fails(tmp_path, "block-hash-is-cached", max_examples=300)


def test_events_account_for_cached_set_can_fail(monkeypatch, tmp_path):
    # Model and target agree on an event stream that leaves out every removal: each
    # answers the other, but a consumer of the events would keep evicted prefixes.
    for cls in (PrefixCacheModel, NativePrefixCache):
        real = cls.take_events
        monkeypatch.setattr(cls, "take_events", lambda self, real=real: tuple(
            e for e in real(self) if not isinstance(e, BlockRemoved)))
    _fails(tmp_path, "events-account-for-cached-set", max_examples=300)


def test_a_full_report_of_blocks_not_held_cached_fails(monkeypatch, tmp_path):
    # Model and target agree on hits reported in full that name one prefix more, never
    # stored: a consumer would take it as cached. The fold of the events before fails at
    # that report, before the batch's end.
    for cls in (PrefixCacheModel, NativePrefixCache):
        real = cls.take_events
        monkeypatch.setattr(cls, "take_events", lambda self, real=real: tuple(
            evolve(e, keys=(*e.keys, ("never stored",))) if getattr(e, "reused", False)
            else e for e in real(self)))
    failed = _fails(tmp_path, "events-account-for-cached-set", max_examples=300)
    assert "a hit reported in full names [('never stored',)]" in failed["message"], failed


def test_free_lists_held_blocks_can_fail(monkeypatch, tmp_path):
    # A pool whose free() lists a finished request's last block twice (vLLM issue #42571's
    # shape), shown to the check the way the vLLM adapter shows real free_blocks calls.
    real = NativePrefixCache._release

    def release(self, request_id):
        table = [b for group in self.table.get(request_id, []) for b in group if b]
        if table:
            self.listed = [*getattr(self, "listed", []),
                           ((*table, table[-1]), {b: self.refs[b] for b in table})]
        real(self, request_id)

    def free_block_calls(self):
        listed, self.listed = getattr(self, "listed", []), []
        return listed
    monkeypatch.setattr(NativePrefixCache, "_release", release)
    monkeypatch.setattr(NativePrefixCache, "free_block_calls", free_block_calls, raising=False)
    _fails(tmp_path, "free-lists-held-blocks")


def test_connector_blocks_agree_can_fail(monkeypatch, tmp_path):
    # The connector is handed every block the finishing request holds, lookahead slots past
    # its computed tokens included (get_block_ids where the clipped read belongs).
    monkeypatch.setattr(NativePrefixCache, "connector_finished",
                        lambda self, rid: tuple(self.table.get(rid, ())))
    _fails(tmp_path, "connector-blocks-agree", max_examples=300)


def _queue_fails(tmp_path, prop: str) -> None:
    with pytest.raises(Divergence) as failed:
        check_machine(FreeQueueMachine, "native", str(tmp_path), max_examples=100)
    assert failed.value.info["property"] == prop, failed.value


def test_pops_agree_can_fail(monkeypatch, tmp_path):
    # popleft_n hands out the front blocks last first.
    real = NativeFreeQueue.popleft_n
    monkeypatch.setattr(NativeFreeQueue, "popleft_n", lambda self, n: real(self, n)[::-1])
    _queue_fails(tmp_path, "pops-agree")


def test_queue_order_agrees_can_fail(monkeypatch, tmp_path):
    # A run given back to the front lands last first (its first block not frontmost).
    real = NativeFreeQueue.prepend_n
    monkeypatch.setattr(NativeFreeQueue, "prepend_n",
                        lambda self, blocks: real(self, tuple(blocks)[::-1]))
    _queue_fails(tmp_path, "queue-order-agrees")


def _pools_fail(tmp_path, prop: str) -> None:
    with pytest.raises(Divergence) as failed:
        check_machine(BlockPoolsMachine, "native", str(tmp_path), max_examples=200)
    assert failed.value.info["property"] == prop, failed.value


def test_handout_agrees_can_fail(monkeypatch, tmp_path):
    # get_new_blocks hands out the front blocks last first.
    real = NativeBlockPools.get_new_blocks
    monkeypatch.setattr(NativeBlockPools, "get_new_blocks",
                        lambda self, pool, n: (lambda t: t and t[::-1])(real(self, pool, n)))
    _pools_fail(tmp_path, "handout-agrees")


def test_holders_agree_can_fail(monkeypatch, tmp_path):
    # touch counts the null block's holders (as releases before 0.33.0 do).
    real = NativeBlockPools.touch

    def touch(self, pool, blocks):
        real(self, pool, blocks)
        self.pools[pool].refs[0] += blocks.count(0)
    monkeypatch.setattr(NativeBlockPools, "touch", touch)
    _pools_fail(tmp_path, "holders-agree")


def test_pool_order_agrees_can_fail(monkeypatch, tmp_path):
    # A freed block with no hash goes to the back (reused last), not to the front.
    from sim.native import prefix_cache_pools
    monkeypatch.setattr(prefix_cache_pools._Pool, "to_front", prefix_cache_pools._Pool.to_back)
    _pools_fail(tmp_path, "pool-order-agrees")


def test_reuse_notices_agree_can_fail(monkeypatch, tmp_path):
    # A reset drops the watchers without telling them.
    real = NativeBlockPools.reset_prefix_cache

    def reset(self, pool):
        self.pools[pool].watchers.clear()
        return real(self, pool)
    monkeypatch.setattr(NativeBlockPools, "reset_prefix_cache", reset)
    _pools_fail(tmp_path, "reuse-notices-agree")


def test_duplicate_listings_names_each_wrong_call():
    assert duplicate_listings([((1, 2), {1: 1, 2: 1})]) == []
    assert duplicate_listings([((3, 3), {3: 2})]) == [
        "free_blocks listed block 3 2x (ref_cnt 2) in [3, 3]"]
    assert duplicate_listings([((4,), {4: 0})]) == [
        "free_blocks listed block 4 1x (ref_cnt 0) in [4]"]


# r0's three tokens computed (two of them a hit once it waits again), r0 preempted, r1
# arrived: two waiting requests holding nothing, so the scheduler probes r0.
PROBED = PrefixCacheWorld(num_blocks=5, block_size=1, max_model_len=4, use_eagle=False,
                          uncached_first=False, requests=(PrefixRequest("r0", (10, 1, 2)),
                                                          PrefixRequest("r1", (10,))))
PROBE_PROGRAM = [("add_request", 0), ("schedule_waiting", 0, 3, 0), ("preempt", 0),
                 ("add_request", 1), ("probe_waiting", 0)]


def test_a_probe_measuring_a_wrong_hit_reports_the_hit():
    # The hit itself takes the last token (so does the probe, which measures it): one bug,
    # reported under the hit's property and signature, with the hit's line in the trace.
    error, trace = replay(PrefixCacheMachine, "native:pc-hit-last-token", PROBED, PROBE_PROGRAM)
    assert property_of(error) == "hit-agrees", error
    probe, lookup = trace.steps[-2:]
    assert probe.call == "cache.get_num_cached_tokens('r0')" and probe.expect is None
    assert lookup.call == "cache.get_computed_blocks('r0')" and "num_computed_tokens=2" in \
        lookup.expect


def test_a_probe_wrong_on_its_own_fails_the_probe(monkeypatch):
    # The hit is right and the probe counts a block more: the probe's own property.
    monkeypatch.setattr(NativePrefixCache, "get_num_cached_tokens", lambda self, rid:
                        self._find_hit(rid).num_computed_tokens + self.block_size)
    error, trace = replay(PrefixCacheMachine, "native", PROBED, PROBE_PROGRAM)
    assert property_of(error) == "probe-agrees", error
    assert trace.steps[-1].call == "cache.get_num_cached_tokens('r0')"
    assert trace.steps[-1].expect == "2"
