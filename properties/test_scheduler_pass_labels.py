"""What a scheduler-pass failure says about its world and about whose values it compared:
"outside what vLLM builds" (the target's ``outside_vllm``), "computed by the harness" (a
field the target's adapter derives, ``HARNESS_COMPUTED``) and "judged on the harness's
worker" (``HARNESS_WORKER``). The vllm target declares them; here a native target is given
them, so the labels are shown on failures the native target can be made to have."""

from __future__ import annotations

import attrs
import pytest

from fixtures.pytest_plugin import Divergence
from properties import scheduler_pass_machine
from properties.run import check_machine
from properties.scheduler_pass_machine import SchedulerPassMachine
from sim.native.scheduler_pass import NativeSchedulerPass

REASON = "a setting the test says vLLM does not build"


def test_a_divergence_outside_what_vllm_builds_carries_the_label(tmp_path, monkeypatch):
    monkeypatch.setattr(NativeSchedulerPass, "outside_vllm", [REASON], raising=False)
    monkeypatch.setattr(NativeSchedulerPass, "HARNESS_WORKER", "the test's worker",
                        raising=False)
    with pytest.raises(Divergence) as failed:
        check_machine(SchedulerPassMachine, "native:sched-read-ahead-ungated", str(tmp_path))
    message, info = str(failed.value), failed.value.info
    assert info["property"] == "no-encoder-cache-miss"
    assert "judged on the harness's worker: the test's worker" in message.splitlines()[0]
    assert f"outside what vLLM builds: {REASON}: not a finding against vLLM" in message
    assert info["outside_vllm"] == [REASON]
    text = open(info["reproducer"]).read()
    assert f"World outside what vLLM builds: {REASON}" in text


def test_a_world_vllm_builds_carries_no_label(tmp_path):
    with pytest.raises(Divergence) as failed:
        check_machine(SchedulerPassMachine, "native:sched-read-ahead-ungated", str(tmp_path))
    assert "outside_vllm" not in failed.value.info
    assert "outside what vLLM builds" not in str(failed.value)
    assert "harness's worker" not in str(failed.value)      # native declares no stand-in


def test_a_read_ahead_the_adapter_computes_is_named_as_the_harnesss(tmp_path, monkeypatch):
    schedule = NativeSchedulerPass.schedule

    def one_more(self):
        out = schedule(self)
        return attrs.evolve(out, num_read_ahead_tokens={
            r: n + 1 for r, n in out.num_read_ahead_tokens.items()})
    monkeypatch.setattr(NativeSchedulerPass, "schedule", one_more)
    monkeypatch.setattr(NativeSchedulerPass, "HARNESS_COMPUTED",
                        {"num_read_ahead_tokens": "the test's arithmetic"}, raising=False)
    # The promises judged on the output come first and may see the extra token first (an
    # embed read past what is held: reads-held), in whichever example the derandomized run
    # meets first, which moves with the machine's strategies: this test is about the label.
    monkeypatch.setattr(scheduler_pass_machine, "broken_promises", lambda *args: [])
    with pytest.raises(Divergence) as failed:
        check_machine(SchedulerPassMachine, "native", str(tmp_path))
    first = str(failed.value).splitlines()[0]
    assert first.startswith("scheduler-output-agrees: num_read_ahead_tokens ")
    assert first.endswith("(computed by the harness: the test's arithmetic)")


def test_a_passing_run_counts_its_worlds_outside_what_vllm_builds(tmp_path, monkeypatch):
    monkeypatch.setattr(NativeSchedulerPass, "outside_vllm", [REASON], raising=False)
    result = check_machine(SchedulerPassMachine, "native", str(tmp_path), max_examples=10)
    assert result.recorder.outside[REASON] == result.recorder.examples >= 10
