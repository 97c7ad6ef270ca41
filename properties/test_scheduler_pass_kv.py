"""The scheduler pass under KV pressure: the model, the native target and vLLM's real
Scheduler over a KV pool of a few 16-token blocks (``models/scheduler_pass_kv.py`` states the
rules), on written-out traces and on the KV-pressure machine.

On vllm these worlds are ones vLLM builds: its default block size, ``max_model_len`` no
longer than the pool holds (the engine refuses a KV cache that cannot hold one request of
that length), full attention, prefix caching off or (last trace) on, with the engine's block
hasher. Prompts are all alike (token 0), so with caching two requests share exactly the
blocks whose multimodal items agree. An image's encoder budget and cache are set by hand on
the text model's Scheduler: the last trace says so (``sim/vllm/scheduler_world.py``).
"""

from __future__ import annotations

import pytest

from models.scheduler_pass_values import PlacedItem, SchedRequest
from properties.run import check_machine
from properties.scenarios import agrees, make_or_skip
from properties.scheduler_pass_machine import (
    KvPressureSchedulerPassMachine,
    PrefixKvSchedulerPassMachine,
)

TARGETS = ["model", "native", "vllm"]
OUTPUT = "scheduler-output-agrees"
BLOCKS = "kv-blocks-agree"


def build(target: str, **config):
    return make_or_skip(target, "scheduler_pass", cache_size=1, encoder_compute_budget=1,
                        **config)


def passes(sched, n: int) -> list[dict]:
    return [dict(sched.step().output.num_scheduled_tokens) for _ in range(n)]


@pytest.mark.parametrize("target", TARGETS)
def test_waiting_request_is_admitted_only_when_its_whole_sequence_fits(target):
    """Scenario (pool 4 blocks, budget 32): r0 (40 prompt tokens) takes 32 tokens, 2 blocks.
    r1 (40 tokens, 3 blocks) waits though the budget has room in the second pass (its first
    chunk would fit the 1 block left, its whole prompt does not), and while r0 decodes; it
    starts once r0 has finished and given its blocks back."""
    sched = build(target, token_budget=32, kv_blocks=4)
    if not getattr(sched, "drives_reserve_full_isl", True):
        pytest.skip("the release has no whole-sequence admission gate "
                    "(SchedulerConfig.scheduler_reserve_full_isl)")
    sched.add_request(SchedRequest("r0", 40, 2))
    sched.add_request(SchedRequest("r1", 40, 2))
    agrees(OUTPUT, passes(sched, 1), [{"r0": 32}])
    agrees(BLOCKS, sched.kv_blocks_held(), {"r0": 2})
    agrees(OUTPUT, passes(sched, 3), [{"r0": 8}, {"r0": 1}, {"r1": 32}])
    agrees(BLOCKS, sched.kv_blocks_held(), {"r1": 2})


@pytest.mark.parametrize("reserve_full_isl", [True, False])
@pytest.mark.parametrize("target", TARGETS)
def test_a_request_admitted_on_its_first_chunk_can_lose_it(target, reserve_full_isl):
    """Scenario (pool 4 blocks, budget 16): r0 and r1 (40 prompt tokens each, 2 samples). r0
    prefills 16 tokens a pass and holds 3 blocks after its third. With the whole-sequence
    gate (vLLM's default) r1 waits until r0 has finished. Without it
    (``--no-scheduler-reserve-full-isl``, or a release that has no gate) r1 is admitted in
    the third pass on the 8 tokens the budget leaves, in the last free block; in the fourth
    its next chunk needs a block none has, and r1, started last, preempts itself: its 8
    tokens are lost, and it starts over once r0 has finished."""
    sched = build(target, token_budget=16, kv_blocks=4, reserve_full_isl=reserve_full_isl)
    if reserve_full_isl and not getattr(sched, "drives_reserve_full_isl", True):
        pytest.skip("the release has no whole-sequence admission gate "
                    "(SchedulerConfig.scheduler_reserve_full_isl)")
    sched.add_request(SchedRequest("r0", 40, 2))
    sched.add_request(SchedRequest("r1", 40, 2))
    third = {"r0": 8} if reserve_full_isl else {"r0": 8, "r1": 8}
    agrees(OUTPUT, passes(sched, 3), [{"r0": 16}, {"r0": 16}, third])
    agrees(BLOCKS, sched.kv_blocks_held(), {"r0": 3} if reserve_full_isl else {"r0": 3, "r1": 1})
    agrees(OUTPUT, passes(sched, 2), [{"r0": 1}, {"r1": 16}])
    agrees(BLOCKS, sched.kv_blocks_held(), {"r1": 1})


@pytest.mark.parametrize("watermark", [0.0, 0.4])
@pytest.mark.parametrize("target", TARGETS)
def test_an_admission_beside_a_running_request_leaves_the_watermark_free(target, watermark):
    """Scenario (pool 4 blocks and the null block, budget 64): r0 (32 prompt tokens, 1
    sample) is admitted first, alone, into 2 blocks. r1 (16 tokens) needs 1 of the 2 left:
    without a watermark it starts in the same pass; with ``watermark=0.4`` an admission
    beside a running request must leave int(0.4 * 5) = 2 blocks free, so r1 waits a pass,
    until r0 has finished and no request runs."""
    sched = build(target, token_budget=64, kv_blocks=4, watermark=watermark)
    if watermark and not getattr(sched, "drives_watermark", True):
        pytest.skip("the release has no KV watermark (SchedulerConfig.watermark)")
    sched.add_request(SchedRequest("r0", 32, 1))
    sched.add_request(SchedRequest("r1", 16, 1))
    agrees(OUTPUT, passes(sched, 2), [{"r0": 32}, {"r1": 16}] if watermark
           else [{"r0": 32, "r1": 16}, {}])


@pytest.mark.parametrize("target", TARGETS)
def test_running_request_short_of_a_block_preempts_the_one_started_last(target):
    """Scenario (pool 4 blocks, budget 64): r0 and r1 (32 prompt tokens each) prefill
    together, 2 blocks each. Their first decode crosses into a third block: r0, first,
    preempts r1 (started last), which loses its blocks and its computed tokens; the pass
    admits no waiting request. r1 waits while r0 holds 3 blocks, then recomputes its 33
    tokens (prompt and its sample) in one pass."""
    sched = build(target, token_budget=64, kv_blocks=4)
    sched.add_request(SchedRequest("r0", 32, 3))
    sched.add_request(SchedRequest("r1", 32, 3))
    agrees(OUTPUT, passes(sched, 2), [{"r0": 32, "r1": 32}, {"r0": 1}])
    agrees(BLOCKS, sched.kv_blocks_held(), {"r0": 3})
    agrees(OUTPUT, passes(sched, 2), [{"r0": 1}, {"r1": 33}])
    agrees(BLOCKS, sched.kv_blocks_held(), {"r1": 3})


@pytest.mark.parametrize("target", TARGETS)
def test_the_last_running_request_short_of_a_block_preempts_itself(target):
    """Scenario (pool 4 blocks, budget 64): r0 (30 tokens) and r1 (32) prefill together.
    r0's decode stays in its 2 blocks; r1's crosses into a third, none is free and r1 is the
    running request started last: it preempts itself. It recomputes once r0 has finished."""
    sched = build(target, token_budget=64, kv_blocks=4)
    sched.add_request(SchedRequest("r0", 30, 2))
    sched.add_request(SchedRequest("r1", 32, 2))
    agrees(OUTPUT, passes(sched, 2), [{"r0": 30, "r1": 32}, {"r0": 1}])
    agrees(BLOCKS, sched.kv_blocks_held(), {})
    agrees(OUTPUT, passes(sched, 1), [{"r1": 33}])


@pytest.mark.parametrize("target", TARGETS)
def test_a_prefix_hit_skips_the_image_only_where_the_image_is_the_same(target):
    """Scenario (pool 4 blocks, budget 64, prefix caching; encoder cache and budget 4): r0
    (40 tokens, image img0 at [2, 6)) prefills, encodes img0, finishes; its two full blocks
    stay cached. r1 has the same tokens but another image at the same place, img1: its
    blocks hash apart from r0's, so it misses, prefills all 40 tokens and encodes img1
    (evicting img0 from the encoder cache, and r0's second block from the pool). r2 repeats
    r0's prompt and image: it hits r0's first block, starts at 16 and never encodes img0
    (wholly inside the hit) though no cache holds it; the hit block, free until then, is
    held again (3 blocks held, 1 free)."""
    sched = make_or_skip(target, "scheduler_pass", cache_size=4, encoder_compute_budget=4,
                         token_budget=64, kv_blocks=4, enable_prefix_caching=True)
    if not getattr(sched, "drives_prefix_caching", True):
        pytest.skip(sched.why_no_prefix_caching)
    for rid, image, max_tokens in (("r0", "img0", 1), ("r1", "img1", 1), ("r2", "img0", 2)):
        sched.add_request(SchedRequest(rid, 40, max_tokens, (PlacedItem(image, 2, 4),)))
        step = sched.step()
        hit = rid == "r2"
        agrees(OUTPUT, (dict(step.output.num_scheduled_tokens),
                        dict(step.output.scheduled_encoder_inputs)),
               ({rid: 24}, {}) if hit else ({rid: 40}, {rid: (0,)}))
        agrees(OUTPUT, [(g.mm_hash, g.start, g.end) for g in step.gathered],
               [] if hit else [(image, 0, 4)])
    agrees(BLOCKS, (sched.kv_blocks_held(), sched.kv_free_blocks()), ({"r2": 3}, 1))


def test_kv_pressure_machine(target, reproducer_dir):
    check_machine(KvPressureSchedulerPassMachine, target, reproducer_dir)


def test_prefix_kv_machine(target, reproducer_dir):
    check_machine(PrefixKvSchedulerPassMachine, target, reproducer_dir)
