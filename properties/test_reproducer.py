"""Reproducer emission: the golden text for ``enc-stale-freed``, one file per failure, atomic
writes. The golden file pins what a user pastes into their own suite; it is rendered from a
fixed minimal program (the spec's trace), so it tests the emitter, not the search."""

from __future__ import annotations

from pathlib import Path

import pytest

from models.encoder_cache_values import MmItem, ReqView
from properties.encoder_cache_machine import EncoderCacheMachine
from properties.encoder_cache_worlds import EncoderCacheWorld
from properties.harness import Failure, property_of
from properties.reproducer import render, write_reproducer
from properties.run import replay, run_machine

GOLDEN = Path(__file__).parent.parent / "fixtures" / "golden" / "enc_stale_freed_reproducer.txt"
TARGET = "native:enc-stale-freed"

# cache 1; r1 allocates img1 and finishes; r0's can_allocate evicts img1 but r0 is never
# allocated; r1 comes back and img1 is allocated again in the same pass.
WORLD = EncoderCacheWorld(1, (ReqView("r0", (MmItem("img0", 1),)),
                                ReqView("r1", (MmItem("img1", 1),))))
PROGRAM = [("can_allocate", 1, 0, 0, 0), ("allocate",), ("free", 1),
           ("can_allocate", 0, 0, 0, 0), ("can_allocate", 1, 0, 0, 0), ("allocate",),
           ("get_freed_mm_hashes",)]


def stale_freed_failure() -> Failure:
    error, trace = replay(EncoderCacheMachine, TARGET, WORLD, PROGRAM)
    assert error is not None and property_of(error) == "freed-not-resident", error
    return Failure(property_of(error), str(error), trace, error)


def test_golden_reproducer_for_enc_stale_freed():
    text = render(EncoderCacheMachine, stale_freed_failure(), TARGET)
    assert text == GOLDEN.read_text(), "emitted reproducer changed; if on purpose, " \
        f"regenerate {GOLDEN} from render() and review the diff"


def test_same_failure_twice_writes_one_file(tmp_path):
    first = write_reproducer(EncoderCacheMachine, stale_freed_failure(), TARGET, tmp_path)
    again = write_reproducer(EncoderCacheMachine, stale_freed_failure(), TARGET, tmp_path)
    assert first == again
    assert sorted(p.name for p in tmp_path.iterdir()) == [first.name]   # no temp files left
    compile(first.read_text(), str(first), "exec")


def test_a_failure_in_the_closing_steps_is_reproduced_with_them(tmp_path):
    """Liveness is checked in the run's closing steps (``end_of_run``), which a plain replay
    of the program's actions does not make: the failure is replayed and minimized with them,
    so its reproducer ends with the state the check saw and fails on the bug."""
    from hypothesis import Phase, settings

    from properties.scheduler_pass_machine import SchedulerPassMachine
    from properties.witnesses.scenario import reproducer_test, swapped

    broken = "fixtures.broken.scheduler_pass:CountsFinishedAsUnfinished"
    with swapped(broken):
        result = run_machine(SchedulerPassMachine, "native", settings(
            settings.get_profile("ci"), max_examples=20, phases=[Phase.generate]), seed=0)
    assert result.failure is not None and result.failure.property == "liveness", result
    assert result.failure.trace.ends
    path = write_reproducer(SchedulerPassMachine, result.failure, "native", tmp_path)
    test = reproducer_test(path.read_text())
    test("model")
    test("native")
    with swapped(broken), pytest.raises(AssertionError):
        test("native")

