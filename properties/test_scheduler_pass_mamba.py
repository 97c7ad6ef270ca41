"""A hybrid Mamba model's aligned prefill chunks on hand-written traces: the model, the
native target and vLLM's real Scheduler (``models/scheduler_pass_mamba.py`` states the rules).

Every world here caches Mamba states per block of 4 tokens (vLLM's align mode). A release
whose split follows other rules skips (``scheduler_pass_compat.mamba_align_split``). On vllm
the worlds are outside what vLLM builds (a hand-built Mamba group beside OPT; vLLM computes a
hybrid model's block from its pages: ``sim/vllm/hybrid_world.py``): these traces check that the
model and vLLM's two split functions agree, not what a deployment does.
"""

from __future__ import annotations

import pytest

from models.scheduler_pass_values import PlacedItem, SchedRequest
from properties.scenarios import agrees, make_or_skip

TARGETS = ["model", "native", "vllm"]
# What each pass is checked under: its output and the step (gathered rows, finished requests).
OUTPUT = "scheduler-output-agrees"


def build(target: str, **config):
    return make_or_skip(target, "scheduler_pass", drives="mamba", mamba_block_size=4, **config)


@pytest.mark.parametrize("target", TARGETS)
def test_prefill_chunks_end_on_block_boundaries(target):
    """Scenario (budget 6 tokens): r0 has 11 prompt tokens. Its first two chunks end at 4 and
    8 (each pass's 6 tokens go down to a boundary); the last, [8, 11), finishes the prefill
    and is not aligned. r1, waiting, is never started: the 2 or 3 tokens left cannot reach
    its first boundary, and a waiting request without a chunk stops the waiting queue."""
    sched = build(target, cache_size=2, token_budget=6, encoder_compute_budget=2)
    sched.add_request(SchedRequest("r0", 11, 1))
    sched.add_request(SchedRequest("r1", 5, 1))
    agrees(OUTPUT, [sched.step().output.num_scheduled_tokens for _ in range(3)],
           [{"r0": 4}, {"r0": 4}, {"r0": 3}])


@pytest.mark.parametrize("target", TARGETS)
def test_request_left_no_aligned_chunk_judges_no_item(target):
    """Scenario (EAGLE; budget 12 tokens, compute 4 embeds, cache 8): r1's img A @[4,8)
    is refused in the first pass (r0's W took the compute), so r1 stops at 4. In the second
    pass r0 encodes the same A and takes 9 tokens; the 3 left cannot reach r1's next
    boundary, so r1 gets no token and judges nothing: it does not hold A, which r0's update
    then leaves freeable beside W (vLLM 0.33.0 returns from
    ``_try_schedule_encoder_inputs`` before its window when the chunk is empty)."""
    sched = build(target, cache_size=8, token_budget=12, encoder_compute_budget=4,
                  read_ahead=1)
    sched.add_request(SchedRequest("r0", 24, 1, (PlacedItem("W", 0, 4), PlacedItem("A", 8, 4),
                                                 PlacedItem("U", 17, 4))))
    sched.add_request(SchedRequest("r1", 12, 1, (PlacedItem("A", 4, 4),)))
    agrees(OUTPUT, sched.step().output.num_scheduled_tokens, {"r0": 8, "r1": 4})
    step = sched.step()
    agrees(OUTPUT, (step.output.num_scheduled_tokens, step.output.scheduled_encoder_inputs),
           ({"r0": 9}, {"r0": (1,)}))
    agrees("slots-agree", (sched.manager_slots(), sched.freeable_order()),
           ((0, 8), ["W", "A"]))
    agrees(OUTPUT, sched.step().output.num_scheduled_tokens, {"r0": 3, "r1": 4})


@pytest.mark.parametrize("target", ["model", "native"])
def test_mtp_runway_gives_way_where_it_would_stall_the_prefill(target):
    """Scenario (an MTP drafter, lookahead 2; budget 4 tokens): r0 has 9 prompt tokens.
    [0, 4) ends on a boundary; [4, 8) would end one token before the prompt's end, so the
    runway moves it to [4, 7); from 7 the alignment admits 8 only, which the runway would take
    back every pass: the chunk keeps it, [7, 8), and [8, 9) finishes the prompt (vLLM 0.33.0
    stalls at 7 instead: ``fixtures/reproducers/test_scheduler_pass_vllm_mamba_mtp_stall.py``,
    so this scenario has no vllm case)."""
    sched = build(target, cache_size=1, token_budget=4, encoder_compute_budget=1, read_ahead=2)
    sched.add_request(SchedRequest("r0", 9, 1))
    agrees(OUTPUT, [sched.step().output.num_scheduled_tokens for _ in range(4)],
           [{"r0": 4}, {"r0": 3}, {"r0": 1}, {"r0": 1}])
    agrees("liveness", sched.get_num_unfinished_requests(), 0)
