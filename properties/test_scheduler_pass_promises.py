"""Each promise of a scheduling pass (``models/scheduler_pass.py``: ``broken_promises``) fails
on an output that breaks it, under its own name; the model's own passes keep them all.

Each case lets the model schedule a pass, then judges a wrong output for the same pass, as
the scheduler-pass machine judges a target's before it compares outputs.
"""

from __future__ import annotations

import pytest

from models.scheduler_pass import SchedulerPassModel, broken_promises
from models.scheduler_pass_values import PlacedItem, SchedRequest, SchedulerOutputView
from properties.run import unavailable
from sim.errors import TargetUnavailable
from sim.targets import make


def judged(model: SchedulerPassModel, wrong: SchedulerOutputView) -> list[str]:
    """The promises ``wrong`` breaks, in the order the machine reports them."""
    return [name for name, _ in broken_promises(model, wrong, model.resident_mm_hashes())]


def test_encoding_an_input_with_no_embed_in_its_window_is_needless():
    """Scenario: img a's first 3 positions are not embeds; the pass schedules [0, 3)."""
    model = SchedulerPassModel(cache_size=5, token_budget=3, encoder_compute_budget=3)
    a = PlacedItem("a", 0, 6, is_embed=(False, False, False, True, True, True))
    model.add_request(SchedRequest("r0", 8, 1, (a,)))
    assert model.schedule() == SchedulerOutputView({"r0": 3}, {}, ())
    wrong = SchedulerOutputView({"r0": 3}, {"r0": (0,)}, ())     # encodes a a pass early
    assert judged(model, wrong) == ["encoded-input-needed"]


def test_reading_an_item_the_pass_did_not_make_resident():
    """Scenario: the compute budget fits a, not b: the chunk stops before b."""
    model = SchedulerPassModel(cache_size=8, token_budget=8, encoder_compute_budget=4)
    model.add_request(SchedRequest("r0", 8, 1, (PlacedItem("a", 0, 4), PlacedItem("b", 4, 4))))
    assert model.schedule() == SchedulerOutputView({"r0": 4}, {"r0": (0,)}, ())
    wrong = SchedulerOutputView({"r0": 8}, {"r0": (0,)}, ())     # reads b, never encoded
    assert judged(model, wrong) == ["reads-held"]


def test_a_chunk_cut_where_no_rule_cuts_it():
    """Scenario: a text-only prompt of 6 tokens and a budget of 6: nothing cuts it."""
    model = SchedulerPassModel(cache_size=1, token_budget=6, encoder_compute_budget=1)
    model.add_request(SchedRequest("r0", 6, 1))
    assert model.schedule().num_scheduled_tokens == {"r0": 6}
    wrong = SchedulerOutputView({"r0": 3}, {}, ())
    assert judged(model, wrong) == ["cut-before-refused", "pass-maximal"]


def test_a_request_left_no_token_it_could_have_had():
    """Scenario: two text-only requests; the second is left out though the budget has room."""
    model = SchedulerPassModel(cache_size=1, token_budget=8, encoder_compute_budget=1)
    model.add_request(SchedRequest("r0", 3, 1))
    model.add_request(SchedRequest("r1", 3, 1))
    assert model.schedule().num_scheduled_tokens == {"r0": 3, "r1": 3}
    wrong = SchedulerOutputView({"r0": 3}, {}, ())
    assert judged(model, wrong) == ["pass-maximal"]


def test_the_mamba_mtp_stall_fails_the_model_comparison():
    """Scenario (``fixtures/reproducers/test_scheduler_pass_vllm_mamba_mtp_stall.py``):
    blocks of 4, an MTP drafter (lookahead 2), budget 4, a 9-token prompt. Passes 1 and 2
    give [0, 4) and [4, 7) (the runway moves 8 off the prompt's last two tokens); from 7 the
    alignment allows 8 only, which the runway takes back. The model keeps that chunk, so
    every prefill finishes; ``native:sched-mamba-mtp-stall`` (vLLM 0.33.0's behaviour) gives
    no token, and the pass fails ``pass-maximal``, not only liveness."""
    config = dict(cache_size=1, token_budget=4, encoder_compute_budget=1, read_ahead=2,
                  mamba_block_size=4)
    model, stalled = make("model", "scheduler_pass", **config), \
        make("native:sched-mamba-mtp-stall", "scheduler_pass", **config)
    for sched in (model, stalled):
        sched.add_request(SchedRequest("r0", 9, 1))
        assert [sched.step().output.num_scheduled_tokens for _ in range(2)] == [{"r0": 4},
                                                                                 {"r0": 3}]
    assert model.schedule().num_scheduled_tokens == {"r0": 1}
    assert judged(model, stalled.schedule()) == ["pass-maximal"]


def test_vllm_mamba_mtp_stall_fails_the_model_comparison():
    """The same trace on vLLM's own Scheduler (0.33.0 on, unfixed in 0.34.0): its third pass
    gives r0 no token, and the model's promises name it ``pass-maximal`` (the reproducer
    shows the stall through liveness; this, that a comparison with the model catches it in
    the pass it happens). A release that fixes it fails here: name it then."""
    from sim.vllm import release
    config = dict(cache_size=1, token_budget=4, encoder_compute_budget=1, read_ahead=2,
                  mamba_block_size=4)
    try:
        vllm = make("vllm", "scheduler_pass", **config)
    except TargetUnavailable as why:
        unavailable("vllm", why)
    if not release.at_least("0.33.0") or not getattr(vllm, "drives_mamba", True):
        pytest.skip(f"n/a: vLLM {release.release()} predates the Mamba align split and "
                    "drafter runway of 0.33.0, where the stall is")
    model = make("model", "scheduler_pass", **config)
    for sched in (model, vllm):
        sched.add_request(SchedRequest("r0", 9, 1))
        assert [sched.step().output.num_scheduled_tokens for _ in range(2)] == [{"r0": 4},
                                                                                 {"r0": 3}]
    model.schedule()
    assert judged(model, vllm.schedule()) == ["pass-maximal"]
