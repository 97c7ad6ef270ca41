"""The prefix cache on hand-written traces: the model, the native target and vLLM's real
``KVCacheManager``, each value written out by hand from what vLLM promises.

The machine reaches all of these; each trace here is one promise in a few calls, cheap
enough to run first in a mutation campaign (a mutant it kills costs a second, not a run of
the machine).
"""

from __future__ import annotations

import pytest

from models.prefix_cache_values import (
    AllBlocksCleared,
    BlockRemoved,
    BlockStored,
    Hit,
    PrefixRequest,
    in_release_shape,
)
from properties.scenarios import agrees, holds, make_or_skip

# The machine's properties each comparison checks (properties/prefix_cache_machine.py).
HIT, FIT, RESET, EVENTS = "hit-agrees", "fit-agrees", "reset-agrees", "events-agree"
REFS, TABLES = "refs-agree", "tables-agree"
FREEQ, CACHED = "free-queue-agrees", "cached-set-agrees"
NAMES = "cached-hash-names-contents"
CONNECTOR = "connector-blocks-agree"

TARGETS = ["model", "native", "vllm"]


def _valid(cache) -> None:
    """The target's structural self-check, where it has one (vLLM's: the free list's links)."""
    getattr(cache, "check_valid", lambda: None)()


def _stored(cache, keys: tuple, parent, token_ids: tuple, first_extra=None,
            window=None, ahead=None) -> BlockStored:
    """The ``BlockStored`` event the cache must report: one extra-keys entry per block (the
    first block's given, the others none), the pool's block size, the GPU medium, group 0 of
    kind full attention with no window (or sliding window with ``window``), each block's
    lookahead tokens (``ahead``, with lookahead hashes); each field where the target's
    release has it."""
    extra = (first_extra,) + (None,) * (len(keys) - 1)
    kind = "full_attention" if window is None else "sliding_window"
    return in_release_shape(BlockStored(keys, parent, token_ids, extra, cache.block_size,
                                        "GPU", 0, kind, window, ahead),
                            cache.event_fields)


def _sliding(target: str, **config):
    """A cache of one sliding-window group; skipped where the release is not driven so
    (``prefix_cache_compat.sliding_window``)."""
    return make_or_skip(target, "prefix_cache", drives="sliding_window", **config)


def _removed(cache, key: tuple) -> BlockRemoved:
    """The ``BlockRemoved`` event of ``key``: from the GPU pool, group 0, where the target's
    release says so."""
    return in_release_shape(BlockRemoved(key, "GPU", 0), cache.event_fields)


def _computed(cache, rid: str, prompt: tuple[int, ...], **request) -> tuple[int, ...]:
    """``rid`` arrives and its whole prompt is computed in one step; its new blocks."""
    cache.add_request(PrefixRequest(rid, prompt, **request))
    hit = cache.get_computed_blocks(rid)
    return cache.allocate_slots(rid, len(prompt) - hit.num_computed_tokens, hit=hit)


@pytest.mark.parametrize("target", TARGETS)
def test_a_finished_request_is_evicted_tail_first(target):
    """Scenario: r0 caches three one-token blocks and finishes; r1 needs two blocks: it
    takes the never-used block, then r0's tail (its prefix (1, 2, 3) is evicted), and r0's
    head stays cached."""
    cache = make_or_skip(target, "prefix_cache", num_blocks=5, block_size=1, max_model_len=8)
    agrees(FIT, _computed(cache, "r0", (1, 2, 3)), (1, 2, 3))
    cache.free("r0")
    agrees(FREEQ, cache.free_queue(), (4, 3, 2, 1))             # untouched, then r0 tail first
    agrees(EVENTS, cache.take_events(), (_stored(cache, ((1,), (1, 2), (1, 2, 3)), None,
                                                 (1, 2, 3)),))
    agrees(FIT, _computed(cache, "r1", (9, 9)), (4, 3))
    agrees(EVENTS, cache.take_events(), (_removed(cache, (1, 2, 3)),
                                 _stored(cache, ((9,), (9, 9)), None, (9, 9))))
    agrees(CACHED, cache.cached_blocks(), {(1,): (1,), (1, 2): (2,), (9,): (4,), (9, 9): (3,)})
    agrees(REFS, [cache.ref_cnt(b) for b in range(5)], [0, 0, 0, 1, 1])
    _valid(cache)


@pytest.mark.parametrize("target", TARGETS)
def test_an_uncached_block_is_reused_before_cached_ones(target):
    """Scenario: r0's prompt fills one block and half of another, then r0 finishes: the
    half block, which no hash names, is reused first (vLLM 0.24.0 on), else it waits
    behind the untouched block as every released block does."""
    cache = make_or_skip(target, "prefix_cache", num_blocks=4, block_size=2, max_model_len=8)
    agrees(FIT, _computed(cache, "r0", (1, 2, 3)), (1, 2))
    cache.free("r0")
    agrees(FREEQ, cache.free_queue(), (2, 3, 1) if cache.uncached_first else (3, 2, 1))
    agrees(CACHED, cache.cached_blocks(), {(1, 2): (1,)})
    _valid(cache)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("use_eagle", [False, True])
def test_a_prompt_cached_whole_leaves_its_last_block_to_compute(target, use_eagle):
    """Scenario: r0 caches (1, 2) and (1, 2, 3, 4); r1 sends the same prompt: its hit
    stops a block short (the last token is computed to sample from), and with EAGLE one
    more block short (the drafter needs that block's hidden states)."""
    cache = make_or_skip(target, "prefix_cache", num_blocks=6, block_size=2, max_model_len=8,
                         use_eagle=use_eagle)
    agrees(FIT, _computed(cache, "r0", (1, 2, 3, 4)), (1, 2))
    cache.add_request(PrefixRequest("r1", (1, 2, 3, 4)))
    agrees(HIT, cache.get_computed_blocks("r1"), Hit() if use_eagle else Hit((1,), 2))
    _valid(cache)


@pytest.mark.parametrize("target", TARGETS)
def test_a_hit_on_a_free_block_takes_one_of_the_free_blocks(target):
    """Scenario: r0 caches (1, 2) in block 1 and finishes: two blocks are free, one of them
    the hit. r1 (five tokens, three blocks) needs two new blocks and the hit: refused. r2
    (three tokens) needs one new block and the hit: two, it fits."""
    cache = make_or_skip(target, "prefix_cache", num_blocks=3, block_size=2, max_model_len=8)
    agrees(FIT, _computed(cache, "r0", (1, 2)), (1,))
    cache.free("r0")
    cache.add_request(PrefixRequest("r1", (1, 2, 5, 6, 7)))
    hit = cache.get_computed_blocks("r1")
    agrees(HIT, hit, Hit((1,), 2))
    agrees(FIT, cache.allocate_slots("r1", 3, hit=hit), None)
    agrees(FIT, cache.num_free_blocks, 2)
    cache.add_request(PrefixRequest("r2", (1, 2, 5)))
    hit = cache.get_computed_blocks("r2")
    agrees(FIT, cache.allocate_slots("r2", 1, hit=hit), (2,))
    agrees(TABLES, cache.get_block_ids("r2"), (1, 2))
    agrees(FIT, cache.num_free_blocks, 0)
    _valid(cache)


@pytest.mark.parametrize("target", TARGETS)
def test_lookahead_slots_stop_at_max_model_len_and_decode_caches_a_block(target):
    """Scenario: r0 (three tokens) is given three lookahead slots, cut at max_model_len 4:
    two blocks. It samples token 7: the step computing it fills the second block, cached
    after the first (its parent)."""
    cache = make_or_skip(target, "prefix_cache", num_blocks=4, block_size=2, max_model_len=4)
    cache.add_request(PrefixRequest("r0", (1, 2, 3)))
    hit = cache.get_computed_blocks("r0")
    agrees(FIT, cache.allocate_slots("r0", 3, hit=hit, num_lookahead_tokens=3), (1, 2))
    cache.append_token_ids("r0", (7,))
    agrees(FIT, cache.allocate_slots("r0", 1), ())
    agrees(EVENTS, cache.take_events(), (_stored(cache, ((1, 2),), None, (1, 2)),
                                 _stored(cache, ((1, 2, 3, 7),), (1, 2), (3, 7))))
    _valid(cache)


@pytest.mark.parametrize("target", TARGETS)
def test_reset_is_refused_while_a_block_is_held(target):
    """Scenario: r0 holds its block: the reset is refused and the hash stays; once r0 is
    preempted nothing is held: the reset succeeds and reports it."""
    cache = make_or_skip(target, "prefix_cache", num_blocks=3, block_size=2, max_model_len=8)
    agrees(FIT, _computed(cache, "r0", (1, 2, 3)), (1, 2))
    agrees(RESET, cache.reset_prefix_cache(), False)
    agrees(CACHED, cache.cached_blocks(), {(1, 2): (1,)})
    cache.preempt("r0")
    agrees(RESET, cache.reset_prefix_cache(), True)
    agrees(CACHED, cache.cached_blocks(), {})
    agrees(EVENTS, cache.take_events()[-1:], (AllBlocksCleared(),))
    agrees(HIT, cache.get_computed_blocks("r0"), Hit())
    _valid(cache)


@pytest.mark.parametrize("target", TARGETS)
def test_a_salt_keeps_a_prefix_to_its_own_requests(target):
    """Scenario: r0 under salt "a" caches two blocks, the salt in its first block's extra
    keys; r1, the same prompt under salt "b", finds nothing and caches its own; r2 under
    "a" finds r0's first block (its last token is left to compute)."""
    cache = make_or_skip(target, "prefix_cache", num_blocks=8, block_size=2, max_model_len=8)
    agrees(FIT, _computed(cache, "r0", (1, 2, 3, 4), cache_salt="a"), (1, 2))
    agrees(EVENTS, cache.take_events(), (_stored(cache, (("a", 1, 2), ("a", 1, 2, 3, 4)), None,
                                                 (1, 2, 3, 4), first_extra=("a",)),))
    cache.add_request(PrefixRequest("r1", (1, 2, 3, 4), cache_salt="b"))
    agrees(HIT, cache.get_computed_blocks("r1"), Hit())
    cache.add_request(PrefixRequest("r2", (1, 2, 3, 4), cache_salt="a"))
    agrees(HIT, cache.get_computed_blocks("r2"), Hit((1,), 2))
    agrees(CACHED, cache.cached_blocks(), {("a", 1, 2): (1,), ("a", 1, 2, 3, 4): (2,)})
    _valid(cache)


@pytest.mark.parametrize("target", TARGETS)
def test_a_request_wanting_prompt_logprobs_reads_no_cached_prefix(target):
    """Scenario: r0 caches (1, 2); r1, the same prompt asking for its prompt's logprobs,
    finds nothing (each prompt token must be computed), then caches (1, 2) on a second
    block: one prefix, two blocks, the first found by a lookup."""
    cache = make_or_skip(target, "prefix_cache", num_blocks=8, block_size=2, max_model_len=8)
    agrees(FIT, _computed(cache, "r0", (1, 2, 3)), (1, 2))
    agrees(FIT, _computed(cache, "r1", (1, 2, 3), prompt_logprobs=True), (3, 4))
    agrees(CACHED, cache.cached_blocks(), {(1, 2): (1, 3)})
    cache.add_request(PrefixRequest("r2", (1, 2, 3)))
    agrees(HIT, cache.get_computed_blocks("r2"), Hit((1,), 2))
    _valid(cache)


@pytest.mark.parametrize("target", TARGETS)
def test_with_caching_off_nothing_is_cached_and_released_blocks_come_back_first(target):
    """Scenario: prefix caching off. r0 computes two full blocks: nothing is cached, no
    event is stored; once it finishes a second request with its prompt finds nothing and
    is given r0's blocks again, the last released first where the release reuses uncached
    blocks first (0.24.0 on), else the untouched blocks first. The reset succeeds."""
    cache = make_or_skip(target, "prefix_cache", num_blocks=5, block_size=2, max_model_len=8,
                         enable_caching=False)
    agrees(FIT, _computed(cache, "r0", (1, 2, 3, 4)), (1, 2))
    agrees(CACHED, cache.cached_blocks(), {})
    cache.free("r0")
    agrees(FREEQ, cache.free_queue(), (2, 1, 3, 4) if cache.uncached_first else (3, 4, 2, 1))
    agrees(FIT, _computed(cache, "r1", (1, 2, 3, 4)), (2, 1) if cache.uncached_first
           else (3, 4))
    agrees(REFS, [cache.ref_cnt(b) for b in range(5)],
           [0, 1, 1, 0, 0] if cache.uncached_first else [0, 0, 0, 1, 1])
    agrees(EVENTS, cache.take_events(), ())
    cache.free("r1")
    agrees(RESET, cache.reset_prefix_cache(), True)
    agrees(EVENTS, cache.take_events(), (AllBlocksCleared(),))
    _valid(cache)


@pytest.mark.parametrize("target", TARGETS)
def test_with_events_off_no_event_is_queued(target):
    """Scenario: KV events off. r0 caches a block, r1 evicts it, the cache is reset: the
    cached set changes three times and no event is taken."""
    cache = make_or_skip(target, "prefix_cache", num_blocks=2, block_size=2, max_model_len=8,
                         enable_kv_cache_events=False)
    agrees(FIT, _computed(cache, "r0", (1, 2)), (1,))
    agrees(CACHED, cache.cached_blocks(), {(1, 2): (1,)})
    cache.free("r0")
    agrees(FIT, _computed(cache, "r1", (5, 6)), (1,))
    agrees(CACHED, cache.cached_blocks(), {(5, 6): (1,)})
    cache.free("r1")
    agrees(RESET, cache.reset_prefix_cache(), True)
    agrees(EVENTS, cache.take_events(), ())
    _valid(cache)


@pytest.mark.parametrize("target", TARGETS)
def test_a_sliding_window_gives_back_blocks_behind_it_and_a_hit_skips_them(target):
    """Scenario: blocks of 2 tokens, a window of 3. r0 computes three blocks and samples a
    token: its next step gives back its first two blocks (wholly behind the window; the
    last given back first, cached, so at the queue's back) and its table holds the null
    block there. r1, with r0's prompt and another last token, hits all three blocks, but
    only the last is looked up: the two before are the null block, and admitting r1 takes
    one new block."""
    cache = _sliding(target, num_blocks=8, block_size=2, max_model_len=12, sliding_window=3)
    agrees(FIT, _computed(cache, "r0", (1, 2, 3, 4, 5, 6)), (1, 2, 3))
    agrees(EVENTS, cache.take_events(), (_stored(
        cache, ((1, 2), (1, 2, 3, 4), (1, 2, 3, 4, 5, 6)), None, (1, 2, 3, 4, 5, 6),
        window=3),))
    cache.append_token_ids("r0", (7,))
    agrees(FIT, cache.allocate_slots("r0", 1), (4,))
    agrees(TABLES, cache.get_block_ids("r0"), (0, 0, 3, 4))
    agrees(FREEQ, cache.free_queue(), (5, 6, 7, 2, 1))
    cache.add_request(PrefixRequest("r1", (1, 2, 3, 4, 5, 6, 8)))
    hit = cache.get_computed_blocks("r1")
    agrees(HIT, hit, Hit((0, 0, 3), 6))
    agrees(FIT, cache.allocate_slots("r1", 1, hit=hit), (5,))
    agrees(TABLES, cache.get_block_ids("r1"), (0, 0, 3, 5))
    agrees(REFS, [cache.ref_cnt(b) for b in range(8)], [0, 0, 0, 2, 1, 1, 0, 0])
    agrees(EVENTS, cache.take_events(), ())
    _valid(cache)


@pytest.mark.parametrize("target", TARGETS)
def test_a_sliding_window_admission_is_capped_at_what_a_request_holds_at_once(target):
    """Scenario: blocks of one token, a window of 2, one token in flight, the whole sequence
    must fit. r0's six tokens need six blocks and four are free, but a request of this
    group never holds more than the window and one step's tokens plus one block (3): r0 is
    admitted. Its third step gives back its first block (behind the window, cached: the
    queue's back) before taking one."""
    cache = _sliding(target, num_blocks=5, block_size=1, max_model_len=8, sliding_window=2,
                     max_in_flight_tokens=1, reserve_full_isl=True)
    cache.add_request(PrefixRequest("r0", (1, 2, 3, 4, 5, 6)))
    agrees(HIT, cache.get_computed_blocks("r0"), Hit())
    agrees(FIT, cache.allocate_slots("r0", 1), (1,))
    agrees(FIT, cache.allocate_slots("r0", 1), (2,))
    agrees(FIT, cache.allocate_slots("r0", 1), (3,))
    agrees(TABLES, cache.get_block_ids("r0"), (0, 2, 3))
    agrees(FREEQ, cache.free_queue(), (4, 1))
    agrees(EVENTS, cache.take_events(), (
        _stored(cache, ((1,),), None, (1,), window=2),
        _stored(cache, ((1, 2),), (1,), (2,), window=2),
        _stored(cache, ((1, 2, 3),), (1, 2), (3,), window=2)))
    _valid(cache)


@pytest.mark.parametrize("target", TARGETS)
def test_a_connector_load_takes_blocks_before_the_step_and_is_cached_with_it(target):
    """Scenario: a KV connector loads r0's first two tokens (one block) on its first step:
    that block is taken first and is not among the step's new blocks; the step's four tokens
    take the next two. All three blocks are computed, so all three are cached in one event,
    and r1 with the same prompt hits the first two."""
    cache = make_or_skip(target, "prefix_cache", drives="kv_connector", num_blocks=6,
                         block_size=2, max_model_len=8, kv_connector=True)
    cache.add_request(PrefixRequest("r0", (1, 2, 3, 4, 5, 6)))
    agrees(HIT, cache.get_computed_blocks("r0"), Hit())
    agrees(FIT, cache.allocate_slots("r0", 4, num_external_computed_tokens=2), (2, 3))
    agrees(TABLES, cache.get_block_ids("r0"), (1, 2, 3))
    agrees(EVENTS, cache.take_events(), (_stored(
        cache, ((1, 2), (1, 2, 3, 4), (1, 2, 3, 4, 5, 6)), None, (1, 2, 3, 4, 5, 6)),))
    cache.add_request(PrefixRequest("r1", (1, 2, 3, 4, 5, 6)))
    agrees(HIT, cache.get_computed_blocks("r1"), Hit((1, 2), 4))
    _valid(cache)


@pytest.mark.parametrize("target", TARGETS)
def test_a_finishing_request_hands_its_connector_only_the_blocks_of_its_computed_tokens(
        target):
    """Scenario: blocks of 2, a KV connector. r0's three tokens are scheduled with a
    drafter's two lookahead slots, so it holds three blocks; it finishes having computed
    its three tokens, and the connector is handed the two blocks that hold them, not the
    lookahead's block (nothing was computed there)."""
    cache = make_or_skip(target, "prefix_cache", drives="kv_connector", num_blocks=6,
                         block_size=2, max_model_len=8, kv_connector=True)
    cache.add_request(PrefixRequest("r0", (1, 2, 3)))
    hit = cache.get_computed_blocks("r0")
    agrees(FIT, cache.allocate_slots("r0", 3, hit=hit, num_lookahead_tokens=2), (1, 2, 3))
    agrees(CONNECTOR, cache.connector_finished("r0"), (1, 2))
    _valid(cache)


@pytest.mark.parametrize("target", TARGETS)
def test_a_finishing_request_hands_its_connector_only_the_blocks_inside_its_window(target):
    """Scenario: blocks of one token, a window of 2, a KV connector. r0 computes its three
    tokens in one step (nothing is behind its window before that step). When it finishes
    the scheduler first gives back the blocks wholly behind the window of its three
    computed tokens (2, then 1: the last first, both cached, so at the queue's back), then
    hands the connector its table (the null block twice, then 3); freeing r0 releases 3."""
    cache = make_or_skip(target, "prefix_cache", drives=("sliding_window", "kv_connector"),
                         num_blocks=6, block_size=1, max_model_len=4, sliding_window=2,
                         kv_connector=True)
    agrees(FIT, _computed(cache, "r0", (1, 2, 3)), (1, 2, 3))
    agrees(CONNECTOR, cache.connector_finished("r0"), (0, 0, 3))
    agrees(FREEQ, cache.free_queue(), (4, 5, 2, 1))
    cache.free("r0")
    agrees(FREEQ, cache.free_queue(), (4, 5, 2, 1, 3))
    agrees(EVENTS, cache.take_events(), (_stored(
        cache, ((1,), (1, 2), (1, 2, 3)), None, (1, 2, 3), window=2),))
    _valid(cache)


@pytest.mark.parametrize("target", TARGETS)
def test_an_asynchronous_load_holds_its_blocks_and_caches_them_when_done(target):
    """Scenario: blocks of 2 tokens, a KV connector. r0's first four tokens are loaded
    asynchronously: the step takes two blocks for them and none of its own, caches nothing
    and returns no new block. When the load is done both blocks are cached (one event) and
    r0 waits, holding them; its next step computes its last two tokens in a third block,
    cached with that step."""
    cache = make_or_skip(target, "prefix_cache", drives="kv_connector", num_blocks=6,
                         block_size=2, max_model_len=8, kv_connector=True)
    cache.add_request(PrefixRequest("r0", (1, 2, 3, 4, 5, 6)))
    agrees(HIT, cache.get_computed_blocks("r0"), Hit())
    agrees(FIT, cache.allocate_slots("r0", 0, num_external_computed_tokens=4,
                                     delay_cache_blocks=True), ())
    agrees(TABLES, cache.get_block_ids("r0"), (1, 2))
    agrees(EVENTS, cache.take_events(), ())
    cache.finish_load("r0")
    agrees(EVENTS, cache.take_events(), (_stored(cache, ((1, 2), (1, 2, 3, 4)), None,
                                                 (1, 2, 3, 4)),))
    agrees(FIT, cache.allocate_slots("r0", 2), (3,))
    agrees(FREEQ, cache.free_queue(), (4, 5))
    agrees(EVENTS, cache.take_events(), (_stored(cache, ((1, 2, 3, 4, 5, 6),), (1, 2, 3, 4),
                                                 (5, 6)),))
    _valid(cache)


@pytest.mark.parametrize("target", TARGETS)
def test_an_asynchronous_load_leaves_the_blocks_reserved_for_prefills_in_flight(target):
    """Scenario: blocks of 2 tokens, four usable. r0 computes two of its six tokens (one
    block) and needs two more blocks to finish its prefill. r1's asynchronous load of three
    tokens needs two blocks: three are free, but with r0's two reserved one is left, and it
    is refused; with one block reserved it is admitted."""
    cache = make_or_skip(target, "prefix_cache", drives="kv_connector", num_blocks=5,
                         block_size=2, max_model_len=8, kv_connector=True)
    cache.add_request(PrefixRequest("r0", (1, 2, 3, 4, 5, 6)))
    agrees(HIT, cache.get_computed_blocks("r0"), Hit())
    agrees(FIT, cache.allocate_slots("r0", 2), (1,))
    cache.add_request(PrefixRequest("r1", (7, 8, 9, 10)))
    agrees(HIT, cache.get_computed_blocks("r1"), Hit())
    agrees(FIT, cache.allocate_slots("r1", 0, num_external_computed_tokens=3,
                                     delay_cache_blocks=True, reserved_blocks=2), None)
    agrees(FIT, cache.allocate_slots("r1", 0, num_external_computed_tokens=3,
                                     delay_cache_blocks=True, reserved_blocks=1), ())
    agrees(TABLES, cache.get_block_ids("r1"), (2, 3))
    agrees(FREEQ, cache.free_queue(), (4,))
    _valid(cache)


@pytest.mark.parametrize("target", TARGETS)
def test_a_lookahead_hash_caches_a_block_once_the_token_after_it_exists(target):
    """Scenario: blocks of 2 tokens, each block's hash covering the token after it (vLLM
    0.33.0's default for an EAGLE drafter). r0's five prompt tokens fill two blocks, both
    cached at once (the tokens after them exist), each listed with its lookahead token. The
    third block is full once r0 has sampled 6, but is cached only after 7 exists. r1, with
    those seven tokens and one more, hits all three blocks: no block is dropped for EAGLE."""
    cache = make_or_skip(target, "prefix_cache", drives="hash_lookahead", num_blocks=8,
                         block_size=2, max_model_len=10, hash_lookahead=1)
    agrees(FIT, _computed(cache, "r0", (1, 2, 3, 4, 5)), (1, 2, 3))
    agrees(EVENTS, cache.take_events(), (_stored(
        cache, ((1, 2, 3), (1, 2, 3, 4, 5)), None, (1, 2, 3, 4), ahead=((3,), (5,))),))
    cache.append_token_ids("r0", (6,))
    agrees(FIT, cache.allocate_slots("r0", 1), ())
    agrees(EVENTS, cache.take_events(), ())
    cache.append_token_ids("r0", (7,))
    agrees(FIT, cache.allocate_slots("r0", 1), (4,))
    agrees(EVENTS, cache.take_events(), (_stored(
        cache, ((1, 2, 3, 4, 5, 6, 7),), (1, 2, 3, 4, 5), (5, 6), ahead=((7,),)),))
    cache.add_request(PrefixRequest("r1", (1, 2, 3, 4, 5, 6, 7, 8)))
    agrees(HIT, cache.get_computed_blocks("r1"), Hit((1, 2, 3), 6))
    _valid(cache)


@pytest.mark.parametrize("target", TARGETS)
def test_a_connector_load_moves_the_window_before_the_step_is_counted(target):
    """Scenario: blocks of one token, a window of 2, two free blocks. A KV connector loads
    r0's first four tokens and the step computes the fifth: five slots, but the window of
    the fifth token covers only the fourth, so the three blocks behind it are the null block
    and the step needs two: one for the loaded fourth token, one for its own. It fits."""
    cache = make_or_skip(target, "prefix_cache", drives=("sliding_window", "kv_connector"),
                         num_blocks=3, block_size=1, max_model_len=8, sliding_window=2,
                         kv_connector=True)
    cache.add_request(PrefixRequest("r0", (1, 2, 3, 4, 5, 6)))
    agrees(HIT, cache.get_computed_blocks("r0"), Hit())
    agrees(FIT, cache.allocate_slots("r0", 1, num_external_computed_tokens=4), (2,))
    agrees(TABLES, cache.get_block_ids("r0"), (0, 0, 0, 1, 2))
    agrees(FREEQ, cache.free_queue(), ())
    _valid(cache)


def _hybrid(target: str, drives=(), **config):
    """A hybrid model's pool: full attention (group 0) beside a sliding window (group 1);
    skipped where the release is not driven so."""
    return make_or_skip(target, "prefix_cache", drives=("sliding_window", "hybrid", *drives),
                        hybrid=True, **config)


@pytest.mark.parametrize("target", TARGETS)
def test_a_hybrid_pool_serves_each_group_in_group_order(target):
    """Scenario: blocks of 2 tokens, full attention beside a window of 3. r0's eight tokens
    take four blocks in each group, full attention's first, and each group caches its own
    (one event each, group 0's first). r1, with those tokens and one more, hits all four
    full-attention blocks and the window's last block (its other blocks are the null
    block). When r0 finishes, full attention's blocks go back (the last first) before the
    window's."""
    cache = _hybrid(target, num_blocks=12, block_size=2, max_model_len=16, sliding_window=3)
    agrees(FIT, _computed(cache, "r0", (1, 2, 3, 4, 5, 6, 7, 8)), ((1, 2, 3, 4), (5, 6, 7, 8)))
    keys = ((1, 2), (1, 2, 3, 4), (1, 2, 3, 4, 5, 6), (1, 2, 3, 4, 5, 6, 7, 8))
    full, window = (in_release_shape(BlockStored(
        keys, None, (1, 2, 3, 4, 5, 6, 7, 8), (None,) * 4, 2, "GPU", group, kind, size),
        cache.event_fields) for group, kind, size in ((0, "full_attention", None),
                                                     (1, "sliding_window", 3)))
    agrees(EVENTS, cache.take_events(), (full, window))
    cache.add_request(PrefixRequest("r1", (1, 2, 3, 4, 5, 6, 7, 8, 9)))
    agrees(HIT, cache.get_computed_blocks("r1"), Hit(((1, 2, 3, 4), (0, 0, 0, 8)), 8))
    cache.free("r0")
    agrees(FREEQ, cache.free_queue(), (9, 10, 11, 4, 3, 2, 1, 8, 7, 6, 5))
    _valid(cache)


@pytest.mark.parametrize("target", TARGETS)
def test_a_hybrid_hit_is_the_window_s_within_full_attention_s_with_its_boundary(target):
    """Scenario: blocks of 2 tokens, full attention beside a window of 3, a KV connector.
    The connector loads r0's first four tokens: full attention takes blocks for all of them,
    the window only for the two its next token sees (its first block is the null block, so
    it never caches the prefix (1, 2)). r1 = (1, 2, 7, 8): full attention's run is one block,
    but the window's group has nothing to end a hit in: the hit is empty and its
    shared-prefix boundary is full attention's run, 2 tokens."""
    cache = _hybrid(target, drives=("kv_connector",), num_blocks=9, block_size=2,
                    max_model_len=10, sliding_window=3, kv_connector=True)
    cache.add_request(PrefixRequest("r0", (1, 2, 3, 4, 5, 6)))
    agrees(HIT, cache.get_computed_blocks("r0"), Hit(((), ())))
    agrees(FIT, cache.allocate_slots("r0", 2, num_external_computed_tokens=4), ((4,), (5,)))
    agrees(TABLES, cache.get_block_ids("r0"), ((1, 2, 4), (0, 3, 5)))
    cache.add_request(PrefixRequest("r1", (1, 2, 7, 8)))
    agrees(HIT, cache.get_computed_blocks("r1"), Hit(((), ()), 0, shared_prefix_boundary=2))
    _valid(cache)


@pytest.mark.parametrize("target", TARGETS)
def test_an_eagle_hybrid_hit_may_end_at_the_length_cap(target):
    """Scenario: blocks of one token, full attention beside a window of 5, EAGLE. r0 = (2,)
    is computed, samples 1 and computes it: both groups cache (2,) and (2, 1). r1 = (2, 1)
    may hit at most one token (its last must be computed), but with EAGLE each group looks
    one block past its bound and drops it, so the hit is the first block of each group:
    a single group's pool would stop a block short (its search stops at the cap)."""
    cache = _hybrid(target, num_blocks=5, block_size=1, max_model_len=2, sliding_window=5,
                    use_eagle=True)
    agrees(FIT, _computed(cache, "r0", (2,)), ((1,), (2,)))
    cache.append_token_ids("r0", (1,))
    agrees(FIT, cache.allocate_slots("r0", 1), ((3,), (4,)))
    cache.add_request(PrefixRequest("r1", (2, 1)))
    agrees(HIT, cache.get_computed_blocks("r1"), Hit(((1,), (2,)), 1))
    _valid(cache)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("retention", [None, 0])
def test_a_hybrid_window_under_retention_keeps_only_the_run_below_the_replay_boundary(
        target, retention):
    """Scenario: blocks of one token, full attention beside a window of 2. r0 computes its
    six tokens and finishes. With dense retention (None) the window's group caches all six
    blocks; with vLLM 0.33.0's default (0) only the one a resend's hit ends in, below the
    replay boundary (the prompt's last token): one block. r1 extends r0's prompt: full
    attention's run is six blocks, but under retention 0 the window's hit ends a block
    short, at the retained run, and the run's end is reported as the shared prefix."""
    cache = _hybrid(target, num_blocks=16, block_size=1, max_model_len=10, sliding_window=2,
                    retention=retention)
    agrees(FIT, _computed(cache, "r0", (1, 2, 3, 4, 5, 6)),
           ((1, 2, 3, 4, 5, 6), (7, 8, 9, 10, 11, 12)))
    window_blocks = 6 if retention is None else 1
    agrees(CACHED, sum(len(blocks) for key, blocks in cache.cached_blocks().items()
                       if key[0] == 1), window_blocks)
    cache.free("r0")
    cache.add_request(PrefixRequest("r1", (1, 2, 3, 4, 5, 6, 8)))
    agrees(HIT, cache.get_computed_blocks("r1"),
           Hit(((1, 2, 3, 4, 5, 6), (0, 0, 0, 0, 0, 12)), 6) if retention is None else
           Hit(((1, 2, 3, 4, 5), (0, 0, 0, 0, 11)), 5, shared_prefix_boundary=6))
    _valid(cache)


def _chunked(target: str, drives=(), **config):
    """A chunked-local model's pool (Llama 4's): full attention (group 0) beside chunked
    local attention (group 1); skipped where the release is not driven so."""
    return make_or_skip(target, "prefix_cache", drives=("hybrid", *drives), hybrid=True,
                        **config)


@pytest.mark.parametrize("target", TARGETS)
def test_a_chunked_local_hit_reads_only_the_chunk_of_its_next_token(target):
    """Scenario: blocks of 2 tokens, full attention beside chunks of 4. r0's eight tokens
    take four blocks in each group, and each group caches its own (the chunked group's event
    names its kind and no window). r1 = r0's tokens and one more: full attention's run is
    four blocks, and its next token starts a chunk, so the chunked group reads none of them:
    its hit is four null blocks. r2 = r0's first six tokens and another: the run is three
    blocks; its next token (the seventh) is in the second chunk, which starts at the third
    block: the chunked group finds that block (r0's) after two null blocks."""
    cache = _chunked(target, num_blocks=12, block_size=2, max_model_len=16,
                     attention_chunk_size=4)
    agrees(FIT, _computed(cache, "r0", (1, 2, 3, 4, 5, 6, 7, 8)), ((1, 2, 3, 4), (5, 6, 7, 8)))
    keys = ((1, 2), (1, 2, 3, 4), (1, 2, 3, 4, 5, 6), (1, 2, 3, 4, 5, 6, 7, 8))
    full, chunked = (in_release_shape(BlockStored(
        keys, None, (1, 2, 3, 4, 5, 6, 7, 8), (None,) * 4, 2, "GPU", group, kind, None),
        cache.event_fields) for group, kind in ((0, "full_attention"),
                                                (1, "chunked_local_attention")))
    agrees(EVENTS, cache.take_events(), (full, chunked))
    cache.add_request(PrefixRequest("r1", (1, 2, 3, 4, 5, 6, 7, 8, 9)))
    agrees(HIT, cache.get_computed_blocks("r1"), Hit(((1, 2, 3, 4), (0, 0, 0, 0)), 8))
    cache.add_request(PrefixRequest("r2", (1, 2, 3, 4, 5, 6, 9)))
    agrees(HIT, cache.get_computed_blocks("r2"), Hit(((1, 2, 3), (0, 0, 7)), 6))
    _valid(cache)


@pytest.mark.parametrize("target", TARGETS)
def test_a_chunked_local_request_gives_back_a_chunk_it_has_filled(target):
    """Scenario: as above, r0 computes its eight tokens (two chunks of 4), samples a ninth
    and steps again. Its next token starts the third chunk, so before the step's blocks are
    counted all four of its chunked blocks go back (the last first, to the free queue's
    back: they are cached) and its table keeps the null block in their slots; the step
    takes one block per group from the front."""
    cache = _chunked(target, num_blocks=12, block_size=2, max_model_len=16,
                     attention_chunk_size=4)
    agrees(FIT, _computed(cache, "r0", (1, 2, 3, 4, 5, 6, 7, 8)), ((1, 2, 3, 4), (5, 6, 7, 8)))
    cache.append_token_ids("r0", (9,))
    agrees(FIT, cache.allocate_slots("r0", 1), ((9,), (10,)))
    agrees(TABLES, cache.get_block_ids("r0"), ((1, 2, 3, 4, 9), (0, 0, 0, 0, 10)))
    agrees(REFS, [cache.ref_cnt(b) for b in (5, 6, 7, 8)], [0, 0, 0, 0])
    agrees(FREEQ, cache.free_queue(), (11, 8, 7, 6, 5))
    _valid(cache)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize(("num_blocks", "admitted"), [(13, True), (12, False)])
def test_a_chunked_local_admission_is_capped_at_a_chunk_and_a_step(target, num_blocks,
                                                                   admitted):
    """Scenario: blocks of one token, chunks of 2, two tokens a step in flight, the whole
    sequence reserved at admission. r0's eight tokens need eight full-attention blocks and,
    in the chunked group, at most a chunk and a step's tokens at once: four blocks (no extra
    block, as a window that may start inside a block needs). Twelve free blocks admit its
    first step; eleven do not."""
    cache = _chunked(target, num_blocks=num_blocks, block_size=1, max_model_len=8,
                     attention_chunk_size=2, max_in_flight_tokens=2, reserve_full_isl=True)
    cache.add_request(PrefixRequest("r0", (1, 2, 3, 4, 5, 6, 7, 8)))
    hit = cache.get_computed_blocks("r0")
    agrees(FIT, cache.allocate_slots("r0", 2, hit=hit),
           ((1, 2), (3, 4)) if admitted else None)
    _valid(cache)


@pytest.mark.parametrize("target", TARGETS)
def test_a_block_index_is_a_hit_only_where_every_local_group_caches_it(target):
    """Scenario: blocks of one token, full attention beside two chunked-local groups of
    chunks of 2 (a model with twice as many local layers as full ones). r0 computes four
    tokens, samples a fifth and steps: its next token starts a chunk, so both local groups
    give back their four blocks (the first group's, last first, then the second's) and the
    step takes one block per group. r1's one-token step takes three blocks from the front:
    three of the first local group's cached blocks. r2 = (1, 2, 3, 9): full attention's run
    is three blocks (r0 holds them), and its next token's chunk starts at the third block,
    whose prefix (1, 2, 3) the second local group still caches but the first does not: the
    hit stops before it, at the chunk's start, and the run's end is the boundary."""
    cache = _chunked(target, drives=("local_groups",), num_blocks=16, block_size=1,
                     max_model_len=8, attention_chunk_size=2, local_groups=2)
    agrees(FIT, _computed(cache, "r0", (1, 2, 3, 4)),
           ((1, 2, 3, 4), (5, 6, 7, 8), (9, 10, 11, 12)))
    cache.append_token_ids("r0", (5,))
    agrees(FIT, cache.allocate_slots("r0", 1), ((13,), (14,), (15,)))
    agrees(FREEQ, cache.free_queue(), (8, 7, 6, 5, 12, 11, 10, 9))
    agrees(FIT, _computed(cache, "r1", (7,)), ((8,), (7,), (6,)))
    cache.add_request(PrefixRequest("r2", (1, 2, 3, 9)))
    agrees(HIT, cache.get_computed_blocks("r2"),
           Hit(((1, 2), (0, 0), (0, 0)), 2, shared_prefix_boundary=3))
    _valid(cache)


@pytest.mark.parametrize("target", TARGETS)
def test_a_hit_with_two_windows_is_the_longest_both_serve(target):
    """Scenario: blocks of one token, full attention beside a window of 2 (group 1) and one
    of 3 (group 2). r0 computes five tokens, samples a sixth and steps: each window gives
    back the blocks behind it (the window of 2 four, the window of 3 three, the last first)
    and the step takes one block per group. r1's one-token step takes three blocks from the
    front: the window of 2's cached (1..4), (1..3) and (1, 2). r2 = (1, 2, 3, 4, 9): full
    attention's run is four blocks (r0 holds them); the window of 3 could end a hit there
    (it caches (1, 2, 3) and (1..4)), but the window of 2 caches only (1) of that run: the
    hit is one token, each window's block for it, and the run's end is the boundary."""
    cache = _hybrid(target, drives=("second_window",), num_blocks=19, block_size=1,
                    max_model_len=8, sliding_window=2, second_window=3)
    agrees(FIT, _computed(cache, "r0", (1, 2, 3, 4, 5)),
           ((1, 2, 3, 4, 5), (6, 7, 8, 9, 10), (11, 12, 13, 14, 15)))
    cache.append_token_ids("r0", (6,))
    agrees(FIT, cache.allocate_slots("r0", 1), ((16,), (17,), (18,)))
    agrees(TABLES, cache.get_block_ids("r0"),
           ((1, 2, 3, 4, 5, 16), (0, 0, 0, 0, 10, 17), (0, 0, 0, 14, 15, 18)))
    agrees(FREEQ, cache.free_queue(), (9, 8, 7, 6, 13, 12, 11))
    agrees(FIT, _computed(cache, "r1", (7,)), ((9,), (8,), (7,)))
    cache.add_request(PrefixRequest("r2", (1, 2, 3, 4, 9)))
    agrees(HIT, cache.get_computed_blocks("r2"),
           Hit(((1,), (6,), (11,)), 1, shared_prefix_boundary=4))
    _valid(cache)


@pytest.mark.parametrize("target", TARGETS)
def test_a_hit_the_second_window_cuts_is_searched_again_by_the_first(target):
    """Scenario: blocks of one token, full attention beside a window of 3 (group 1) and one
    of 2 (group 2), a retention interval of 2 tokens: the window of 3 needs two blocks for a
    hit, so it caches every block; the window of 2 needs one, so it keeps one block in two
    (the second of each pair) and the run below the replay boundary. r0 = (1..7) computes
    five tokens, then two: that step's windows give back the blocks behind them (the window
    of 3 its first three, the last first, then the window of 2's two cached ones; its
    uncached ones go to the front and the step takes them). r0 finishes, and r1's one-token
    step takes three blocks from the front: two uncached ones and the window of 3's (1, 2, 3).
    r2 = (1..6): full attention's run is five blocks; the window of 3 serves a hit of five,
    the window of 2 (which does not cache (1..5)) cuts it to four, where the window of 3
    lacks (1, 2, 3): searched again, it serves two, as does the window of 2. The hit is two
    tokens, and the run's end is the boundary."""
    cache = _hybrid(target, drives=("second_window",), num_blocks=20, block_size=1,
                    max_model_len=10, sliding_window=3, second_window=2, retention=2)
    prompt = (1, 2, 3, 4, 5, 6, 7)
    cache.add_request(PrefixRequest("r0", prompt))
    agrees(FIT, cache.allocate_slots("r0", 5, hit=cache.get_computed_blocks("r0")),
           ((1, 2, 3, 4, 5), (6, 7, 8, 9, 10), (11, 12, 13, 14, 15)))
    agrees(CACHED, sorted(len(key[1]) for key in cache.cached_blocks() if key[0] == 2), [2, 4])
    agrees(FIT, cache.allocate_slots("r0", 2), ((13, 11), (16, 17), (18, 19)))
    cache.free("r0")
    agrees(FREEQ, cache.free_queue(),
           (19, 15, 8, 7, 6, 14, 12, 11, 13, 5, 4, 3, 2, 1, 17, 16, 10, 9, 18))
    agrees(FIT, _computed(cache, "r1", (9,)), ((19,), (15,), (8,)))
    cache.add_request(PrefixRequest("r2", prompt[:6]))
    agrees(HIT, cache.get_computed_blocks("r2"),
           Hit(((1, 2), (6, 7), (0, 12)), 2, shared_prefix_boundary=5))
    _valid(cache)



@pytest.mark.parametrize("target", TARGETS)
def test_with_eagle_only_full_attention_drops_a_block_in_a_hybrid_pool(target):
    """Scenario: blocks of one token, EAGLE, full attention beside a window of 3 under vLLM
    0.33.0's default retention (0). The drafter's layer is full attention and sits in full
    attention's group, the only group that drops a block. r0 = (1..6) computes its prompt:
    full attention caches all six blocks; the window keeps the runs its hits read at the
    replay points (a resend's and, with EAGLE, an extension's: 4 and 5 tokens), two blocks
    each with no EAGLE block after them: (1..3), (1..4), (1..5), not (1..6). r1 resends the
    prompt: full attention finds six blocks and drops one; the window serves five with its
    two blocks before the fifth token's end. The hit is five tokens."""
    cache = _hybrid(target, num_blocks=14, block_size=1, max_model_len=10, sliding_window=3,
                    retention=0, use_eagle=True)
    prompt = (1, 2, 3, 4, 5, 6)
    agrees(FIT, _computed(cache, "r0", prompt), ((1, 2, 3, 4, 5, 6), (7, 8, 9, 10, 11, 12)))
    agrees(CACHED, sorted(len(key) for group, key in cache.cached_blocks() if group == 1),
           [3, 4, 5])
    cache.free("r0")
    cache.add_request(PrefixRequest("r1", prompt))
    agrees(HIT, cache.get_computed_blocks("r1"), Hit(((1, 2, 3, 4, 5), (0, 0, 0, 10, 11)), 5))
    _valid(cache)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("local_groups", [1, 2])
def test_with_the_drafter_in_a_window_the_window_keeps_and_reads_a_block_past_its_run(
        target, local_groups):
    """Scenario: as test_with_eagle_only_full_attention_drops_a_block_in_a_hybrid_pool, with
    the drafter's layer a window of 3 (vLLM's test_eagle_swa_alignment_caches_extra_block
    builds one): it sits in the last group of the window's spec, marked is_eagle_group, and
    with two groups of that spec the mark holds for both. Full attention drops nothing now.
    r0 = (1..6): each window group keeps the blocks a hit at a replay point (4 and 5 tokens)
    reads and the block past it: its run needs three blocks, (1..3) to (1..6).
    r1 = (1..7): full attention serves all six blocks; the window finds (1..4) to (1..6) and
    drops the last, serving five. The hit is five tokens, and full attention's longer run
    (six) is the shared-prefix boundary."""
    cache = _hybrid(target, num_blocks=24, block_size=1, max_model_len=10, sliding_window=3,
                    retention=0, use_eagle=True, local_groups=local_groups,
                    eagle_groups=(local_groups,))
    prompt = (1, 2, 3, 4, 5, 6)
    windows = [tuple(range(1 + 6 * g, 7 + 6 * g)) for g in range(1, local_groups + 1)]
    agrees(FIT, _computed(cache, "r0", prompt), ((1, 2, 3, 4, 5, 6), *windows))
    for g in range(1, local_groups + 1):
        agrees(CACHED, sorted(len(key) for group, key in cache.cached_blocks() if group == g),
               [3, 4, 5, 6])
    cache.free("r0")
    cache.add_request(PrefixRequest("r1", prompt + (7,)))
    agrees(HIT, cache.get_computed_blocks("r1"),
           Hit(((1, 2, 3, 4, 5), *((0, 0, 0, w[3], w[4]) for w in windows)), 5, 6))
    _valid(cache)


@pytest.mark.parametrize("target", TARGETS)
def test_a_drafter_window_drops_again_at_the_length_another_window_cuts_the_hit_to(target):
    """Scenario: blocks of one token, EAGLE, the drafter's layer a window of 5 (group 1)
    beside a window of 3 (group 2), retention 3. r0 = (1..11) computes seven tokens, then
    four, and finishes; r1 = (1, 2) computes a token at a time and finishes. The blocks of
    both second steps evict cached ones (the windows' blocks behind them, given back first,
    go first): the drafter's window lacks (1..3), the window of 3 lacks (1..3) to (1..5)
    and (1..7) (its retention kept no (1..4), (1..7)), full attention keeps (1..1) to
    (1..8). r2 = (1..9, 99): full attention serves eight blocks; the drafter's
    window finds (1..5) to (1..9) and drops the last, serving eight; the window of 3 cuts
    that to two. At two the drafter's window must read a block past again, (1..3), which it
    lacks: it serves one, and the hit is one token (full attention's eight the boundary).
    vLLM 0.33.0 re-applies the drop at the length a window without the drafter cut the hit
    to (it clears eagle_verified); keeping the drop verified at eight would serve two."""
    cache = _hybrid(target, num_blocks=28, block_size=1, max_model_len=40, sliding_window=5,
                    second_window=3, retention=3, use_eagle=True, eagle_groups=(1,))
    cache.add_request(PrefixRequest("r0", tuple(range(1, 12))))
    hit = cache.get_computed_blocks("r0")
    cache.allocate_slots("r0", 7, hit=hit)
    cache.allocate_slots("r0", 4)
    cache.free("r0")
    cache.add_request(PrefixRequest("r1", (1, 2)))
    hit = cache.get_computed_blocks("r1")
    cache.allocate_slots("r1", 1, hit=hit)
    cache.allocate_slots("r1", 1)
    cache.free("r1")
    lengths = [sorted(len(key) for group, key in cache.cached_blocks() if group == g)
               for g in range(3)]
    agrees(CACHED, lengths, [[1, 2, 3, 4, 5, 6, 7, 8], [1, 2, 4, 5, 6, 7, 8, 9, 10, 11],
                             [1, 2, 6, 8, 9, 10, 11]])
    cache.add_request(PrefixRequest("r2", tuple(range(1, 10)) + (99,)))
    agrees(HIT, cache.get_computed_blocks("r2"), Hit(((1,), (17,), (16,)), 1, 8))
    _valid(cache)


def _gemma(target: str, **config):
    """Gemma 4's layout: full-attention blocks of two one-token window blocks, hashes per
    token, hits on multiples of 2; skipped where the release is not driven so."""
    return _hybrid(target, block_size=1, full_block_size=2, **config)


def _group_stored(cache, group: int, keys: tuple, parent, token_ids: tuple, size: int,
                  window=None) -> BlockStored:
    kind = "full_attention" if window is None else "sliding_window"
    return in_release_shape(BlockStored(keys, parent, token_ids, (None,) * len(keys), size,
                                        "GPU", group, kind, window), cache.event_fields)


@pytest.mark.parametrize("target", TARGETS)
def test_two_block_sizes_cache_below_the_alignment_and_hit_on_it(target):
    """Scenario: Gemma 4's layout, a window of 3. r0's five tokens take three two-token
    blocks in full attention and five in the window. Both groups cache only below the last
    multiple of 2 (4 tokens): the window's fifth block is not cached. r1 (six tokens sharing
    r0's five) hits 4 tokens: full attention's two blocks, and the window's blocks for the
    tokens its next token reads (the first two are the null block)."""
    cache = _gemma(target, num_blocks=12, max_model_len=8, sliding_window=3, retention=None)
    agrees(FIT, _computed(cache, "r0", (1, 2, 3, 4, 5)), ((1, 2, 3), (4, 5, 6, 7, 8)))
    agrees(EVENTS, cache.take_events(), (
        _group_stored(cache, 0, ((1, 2), (1, 2, 3, 4)), None, (1, 2, 3, 4), 2),
        _group_stored(cache, 1, ((1,), (1, 2), (1, 2, 3), (1, 2, 3, 4)), None, (1, 2, 3, 4),
                      1, window=3)))
    cache.add_request(PrefixRequest("r1", (1, 2, 3, 4, 5, 6)))
    agrees(HIT, cache.get_computed_blocks("r1"), Hit(((1, 2), (0, 0, 6, 7)), 4))


@pytest.mark.parametrize("target", TARGETS)
def test_full_attention_keys_the_prompt_end_inside_its_block(target):
    """Scenario: Gemma 4's layout, a window of 3. r0's four-token prompt: full attention
    caches its two blocks, and the block holding the prompt's last hash boundary (3 tokens:
    a resend's hit reaches it) is keyed at that boundary too, reported as a one-token block
    after the first. When the pool reuses that block, both keys go, its own first."""
    cache = _gemma(target, num_blocks=7, max_model_len=8, sliding_window=3, retention=None)
    agrees(FIT, _computed(cache, "r0", (1, 2, 3, 4)), ((1, 2), (3, 4, 5, 6)))
    agrees(EVENTS, cache.take_events(), (
        _group_stored(cache, 0, ((1, 2), (1, 2, 3, 4)), None, (1, 2, 3, 4), 2),
        _group_stored(cache, 0, ((1, 2, 3),), (1, 2), (3,), 1),
        _group_stored(cache, 1, ((1,), (1, 2), (1, 2, 3), (1, 2, 3, 4)), None, (1, 2, 3, 4),
                      1, window=3)))
    agrees(CACHED, cache.cached_blocks(), {
        (0, (1, 2)): (1,), (0, (1, 2, 3, 4)): (2,), (0, (1, 2, 3)): (2,), (1, (1,)): (3,),
        (1, (1, 2)): (4,), (1, (1, 2, 3)): (5,), (1, (1, 2, 3, 4)): (6,)})
    cache.free("r0")
    agrees(FREEQ, cache.free_queue(), (2, 1, 6, 5, 4, 3))
    _computed(cache, "r1", (9,))                     # takes block 2 (and 1) from the front
    agrees(EVENTS, cache.take_events()[:2], tuple(
        in_release_shape(BlockRemoved(key, "GPU", 0), cache.event_fields)
        for key in ((1, 2, 3, 4), (1, 2, 3))))


@pytest.mark.parametrize("target", TARGETS)
def test_a_sibling_diverging_inside_the_last_aligned_block_misses_the_retained_window(target):
    """Scenario (vLLM issue #57610, open): Gemma 4's layout, a window of 3, vLLM's default
    retention (0: a window keeps the run a hit at the prompt's replay boundary reads). r0's
    seven tokens: the window keeps the two blocks below 6 (the replay boundary 6, rounded
    down to a multiple of 2). A resend of r0 hits 6 tokens. r2, sharing r0's first five
    tokens, would resume at 4: the window's blocks for it were not kept, so the hit is
    none, and full attention's run (4 tokens) is the shared-prefix boundary. That is the
    documented rule (``CacheConfig.prefix_cache_retention_interval``: only the replay
    boundary and shared-prefix junctions are kept); #57610 and PR #57613 ask to keep one
    alignment unit more."""
    cache = _gemma(target, num_blocks=20, max_model_len=10, sliding_window=3, retention=0)
    _computed(cache, "r0", (1, 2, 3, 4, 5, 6, 7))
    cache.free("r0")
    cache.add_request(PrefixRequest("r1", (1, 2, 3, 4, 5, 6, 7)))
    agrees(HIT, cache.get_computed_blocks("r1").num_computed_tokens, 6)
    cache.add_request(PrefixRequest("r2", (1, 2, 3, 4, 5, 9)))
    agrees(HIT, cache.get_computed_blocks("r2"), Hit(((), ()), 0, 4))


@pytest.mark.parametrize("target", TARGETS)
def test_a_block_decoded_over_two_ranks_is_hashed_hit_and_reported_whole(target):
    """Scenario: full attention decoded with context parallelism over two ranks, two tokens
    per rank per block: the scheduler's block holds four tokens. r0's six tokens take two
    blocks; the first, full, is cached and reported under all four of its tokens (a
    four-token block). r1, sharing them, hits that block; r2, sharing only the first rank's
    two tokens of it, hits nothing."""
    cache = make_or_skip(target, "prefix_cache", num_blocks=5, block_size=2, max_model_len=8,
                         dcp_world_size=2)
    agrees(FIT, _computed(cache, "r0", (1, 2, 3, 4, 5, 6)), (1, 2))
    named = {b: key for key, blocks in cache.cached_blocks().items() for b in blocks}
    holds(NAMES, named.get(1) == (1, 2, 3, 4),
          lambda: f"block 1 is cached under {named.get(1)} but holds (1, 2, 3, 4)")
    agrees(CACHED, cache.cached_blocks(), {(1, 2, 3, 4): (1,)})
    agrees(EVENTS, cache.take_events(), (in_release_shape(
        BlockStored(((1, 2, 3, 4),), None, (1, 2, 3, 4), (None,), 4, "GPU", 0,
                    "full_attention", None, None), cache.event_fields),))
    cache.add_request(PrefixRequest("r1", (1, 2, 3, 4, 7)))
    agrees(HIT, cache.get_computed_blocks("r1"), Hit((1,), 4))
    cache.add_request(PrefixRequest("r2", (1, 2, 9, 9, 7)))
    agrees(HIT, cache.get_computed_blocks("r2"), Hit((), 0))


@pytest.mark.parametrize("target", TARGETS)
def test_a_replicated_draft_beside_a_dcp_target_caches_and_hits_in_its_own_blocks(target):
    """Scenario: a target decoded over two ranks (blocks of two tokens, one per rank) beside
    a draft model whose cache every rank keeps whole (blocks of one token): two groups of
    full attention. r0's five tokens take three target blocks and five draft blocks; the
    four tokens up to the last whole target block are cached in each group's own blocks
    and reported per group at its block size. r1, sharing them, hits both groups' blocks;
    r2, sharing three tokens, hits the one whole target block and the draft's two blocks
    under it (a hit ends on the target's block)."""
    cache = make_or_skip(target, "prefix_cache", drives="replicated_draft", num_blocks=10,
                         block_size=1, max_model_len=8, dcp_world_size=2,
                         replicated_draft=True)
    agrees(FIT, _computed(cache, "r0", (1, 2, 3, 4, 5)), ((1, 2, 3), (4, 5, 6, 7, 8)))
    agrees(CACHED, cache.cached_blocks(), {
        (0, (1, 2)): (1,), (0, (1, 2, 3, 4)): (2,), (1, (1,)): (4,), (1, (1, 2)): (5,),
        (1, (1, 2, 3)): (6,), (1, (1, 2, 3, 4)): (7,)})
    agrees(EVENTS, cache.take_events(), tuple(in_release_shape(event, cache.event_fields) for
                                              event in (
        BlockStored(((1, 2), (1, 2, 3, 4)), None, (1, 2, 3, 4), (None, None), 2, "GPU", 0,
                    "full_attention", None, None),
        BlockStored(((1,), (1, 2), (1, 2, 3), (1, 2, 3, 4)), None, (1, 2, 3, 4),
                    (None,) * 4, 1, "GPU", 1, "full_attention", None, None))))
    cache.add_request(PrefixRequest("r1", (1, 2, 3, 4, 7)))
    agrees(HIT, cache.get_computed_blocks("r1"), Hit(((1, 2), (4, 5, 6, 7)), 4))
    cache.add_request(PrefixRequest("r2", (1, 2, 3, 9, 7)))
    agrees(HIT, cache.get_computed_blocks("r2"), Hit(((1,), (4, 5)), 2))


@pytest.mark.parametrize("target", TARGETS)
def test_a_hit_reported_in_full_names_the_blocks_it_reuses(target):
    """Scenario: KV events reported in full for one request
    (``sampling_params.extra_args={"kv_cache_report_mode": "full"}``). r0 computes four tokens:
    two blocks cached and reported. r1, the same prefix, hits both: reported incrementally,
    its hit adds no event. r2, reporting in full, hits both too: its lookup reports them
    again, one event from the prompt's start (a consumer that missed r0's learns the
    prefix). Nothing else changes: the cached set is r0's."""
    cache = make_or_skip(target, "prefix_cache", drives="report_mode", num_blocks=5,
                         block_size=2, max_model_len=8)
    agrees(FIT, _computed(cache, "r0", (1, 2, 3, 4, 5)), (1, 2, 3))
    stored = _stored(cache, ((1, 2), (1, 2, 3, 4)), None, (1, 2, 3, 4))
    agrees(EVENTS, cache.take_events(), (stored,))
    cache.add_request(PrefixRequest("r1", (1, 2, 3, 4, 9)))
    agrees(HIT, cache.get_computed_blocks("r1"), Hit((1, 2), 4))
    agrees(EVENTS, cache.take_events(), ())
    cache.add_request(PrefixRequest("r2", (1, 2, 3, 4, 7), kv_cache_report_mode="full"))
    agrees(HIT, cache.get_computed_blocks("r2"), Hit((1, 2), 4))
    agrees(EVENTS, cache.take_events(), (stored,))
    agrees(CACHED, cache.cached_blocks(), {(1, 2): (1,), (1, 2, 3, 4): (2,)})


@pytest.mark.parametrize("target", TARGETS)
def test_the_shortest_hit_reported_in_full_is_reported(target):
    """Scenario: the boundary of a full report, a hit of one token (blocks of one token).
    r0 computes (1, 2): two blocks cached and reported. r1, reporting in full, shares only
    the first token: its lookup hits the first block and reports it, one event of one
    token. The cached set is r0's."""
    cache = make_or_skip(target, "prefix_cache", drives="report_mode", num_blocks=4,
                         block_size=1, max_model_len=4)
    agrees(FIT, _computed(cache, "r0", (1, 2)), (1, 2))
    agrees(EVENTS, cache.take_events(), (_stored(cache, ((1,), (1, 2)), None, (1, 2)),))
    cache.add_request(PrefixRequest("r1", (1, 7), kv_cache_report_mode="full"))
    agrees(HIT, cache.get_computed_blocks("r1"), Hit((1,), 1))
    agrees(EVENTS, cache.take_events(), (_stored(cache, ((1,),), None, (1,)),))
    agrees(CACHED, cache.cached_blocks(), {(1,): (1,), (1, 2): (2,)})
