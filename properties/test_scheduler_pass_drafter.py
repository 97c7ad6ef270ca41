"""The drafter's prefill lookahead on hand-written traces: the model, the native target and
vLLM's real Scheduler (``models/scheduler_pass_grant.py`` rules 4-6 state them).

``read_ahead=1`` stands for an EAGLE head, ``read_ahead=2`` for a two-module MTP drafter
(``sim/vllm/scheduler_pass.py``). A release that shifts under other rules skips. On vllm the
worlds are outside what vLLM builds (the lookahead is set on a Scheduler built without its
``SpeculativeConfig``, the encoder budgets on a text model's): these traces check that the
model and vLLM's functions agree, and the read-ahead compared is the adapter's arithmetic.
"""

from __future__ import annotations

import pytest

from models.scheduler_pass_values import Gathered, PlacedItem, SchedRequest, SchedulerOutputView
from properties.scenarios import agrees, make_or_skip

TARGETS = ["model", "native", "vllm"]
# What each pass is checked under: its output and the step (gathered rows, finished requests).
OUTPUT = "scheduler-output-agrees"


def build(target: str, **config):
    return make_or_skip(target, "scheduler_pass", drives="read_ahead", **config)


@pytest.mark.parametrize("target", TARGETS)
def test_item_only_the_drafter_reaches_is_encoded_in_the_same_pass(target):
    """Scenario (EAGLE; budget 3 tokens): r0's img0 starts at token 3, right past the chunk
    [0, 3). The drafter reads token 3, so the pass encodes img0 now and the drafter reads
    its first row."""
    sched = build(target, cache_size=4, token_budget=3, encoder_compute_budget=4, read_ahead=1)
    sched.add_request(SchedRequest("r0", 8, 1, (PlacedItem("img0", 3, 2),)))
    step = sched.step()
    agrees(OUTPUT, step.output, SchedulerOutputView({"r0": 3}, {"r0": (0,)}, (), {"r0": 1}))
    agrees(OUTPUT, step.gathered, (Gathered("r0", "img0", 0, 1),))     # the drafter's row


@pytest.mark.parametrize("target", TARGETS)
def test_unchunked_item_stops_the_chunk_a_lookahead_early(target):
    """Scenario (EAGLE, unchunked input; budget 4 tokens): r0's img0 spans [3, 6), which the
    chunk [0, 4) would split. The chunk ends one token before img0, so the drafter's read
    (token 2) stops at img0 too; img0 is encoded whole in the next pass."""
    sched = build(target, cache_size=3, token_budget=4, encoder_compute_budget=3, read_ahead=1,
                  disable_chunked_mm_input=True)
    sched.add_request(SchedRequest("r0", 8, 1, (PlacedItem("img0", 3, 3),)))
    out = sched.schedule()                 # the output, before the worker gathers for it
    agrees(OUTPUT, out, SchedulerOutputView({"r0": 2}, {}, (), {"r0": 1}))
    sched.execute_model(out)
    sched.update_from_output(out)
    step = sched.step()                    # [2, 6): img0 whole, the drafter reads token 6
    agrees(OUTPUT, step.output, SchedulerOutputView({"r0": 4}, {"r0": (0,)}, (), {"r0": 1}))
    agrees(OUTPUT, step.gathered, (Gathered("r0", "img0", 0, 3),))


@pytest.mark.parametrize("target", TARGETS)
def test_unchunked_item_inside_the_lookahead_stops_the_chunk(target):
    """Scenario (two-module MTP, unchunked input; budget 4 tokens): img0 starts at token 5,
    inside the drafter's lookahead [4, 6) of the chunk [0, 4). The chunk ends two tokens
    before img0 (at 3), so the drafter never reads part of it."""
    sched = build(target, cache_size=2, token_budget=4, encoder_compute_budget=2, read_ahead=2,
                  disable_chunked_mm_input=True)
    sched.add_request(SchedRequest("r0", 9, 1, (PlacedItem("img0", 5, 2),)))
    agrees(OUTPUT, sched.step().output, SchedulerOutputView({"r0": 3}, {}, (), {"r0": 2}))


@pytest.mark.parametrize("target", TARGETS)
def test_refused_item_cuts_the_chunk_right_before_it(target):
    """Scenario (EAGLE; cache 2 embeds): r0's img1 at [3, 5) cannot be resident beside
    img0. The chunk is cut right before img1, with no lookahead taken off: the drafter's
    token 3 is img1's, which it reads as a token embedding (read-ahead 0)."""
    sched = build(target, cache_size=2, token_budget=5, encoder_compute_budget=4, read_ahead=1)
    sched.add_request(SchedRequest("r0", 8, 1, (PlacedItem("img0", 0, 2),
                                                PlacedItem("img1", 3, 2))))
    step = sched.step()
    agrees(OUTPUT, step.output, SchedulerOutputView({"r0": 3}, {"r0": (0,)}, (), {"r0": 0}))
    agrees(OUTPUT, step.gathered, (Gathered("r0", "img0", 0, 2),))


@pytest.mark.parametrize("target", TARGETS)
def test_mtp_chunk_leaves_the_drafter_its_lookahead(target):
    """Scenario (two-module MTP; budget 5 tokens): r0 has 6 prompt tokens. A chunk [0, 5)
    would leave the drafter one known token of the two it reads: the chunk is [0, 4), the
    next one finishes the prompt."""
    sched = build(target, cache_size=2, token_budget=5, encoder_compute_budget=2, read_ahead=2)
    sched.add_request(SchedRequest("r0", 6, 1, (PlacedItem("img0", 0, 2),)))
    agrees(OUTPUT, sched.step().output, SchedulerOutputView({"r0": 4}, {"r0": (0,)}, (), {"r0": 2}))
    agrees(OUTPUT, sched.step().output.num_scheduled_tokens, {"r0": 2})
