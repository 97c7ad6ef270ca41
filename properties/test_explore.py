"""The explorer (``properties/explore.py``) finds what the Hypothesis path finds: every
catalogued bug, under the property it names, handed to the same minimizer and shrunk within
the same bound; with the switches off it finds nothing; one seed gives one trace."""

from __future__ import annotations

import pytest

from properties.explore import explore
from properties.machines import MACHINES, machine_for
from properties.test_known_bugs import CASE_IDS, CASES

RUNS_MAX = 3000                 # every bug was found within 432 runs over seeds 0-2
# Known gap: the explorer meets these two under finished-jobs-agree, and the minimizer does
# not shrink the walk (61 and 52 calls against a bound of 4): its replay of a secondary-tier
# walk does not fail the same way yet. The Hypothesis path catches and minimizes both
# (test_known_bugs). Strict: when the gap closes, this list must shrink.
EXPLORER_GAPS = {"fs-rename-before-write", "fs-failed-store-visible"}


@pytest.mark.parametrize(("bug", "subsystem", "prop", "max_calls", "max_examples"), [
    pytest.param(*case, marks=pytest.mark.xfail(strict=True, reason="explorer walk of the "
                 "secondary tier not minimized yet")) if case[0].id in EXPLORER_GAPS else case
    for case in CASES], ids=CASE_IDS)
def test_explorer_finds_and_shrinks_known_bug(bug, subsystem, prop, max_calls, max_examples):
    result = explore(machine_for(subsystem), f"native:{bug.id}", seed=0, runs=RUNS_MAX)
    assert result.failure is not None, f"{bug.id} not found in {RUNS_MAX} walks"
    allowed = {prop, *bug.also_breaks} if subsystem == bug.subsystem else {prop}
    assert result.failure.property in allowed, result.failure.message
    assert result.failure.calls <= max_calls, \
        f"{bug.id}: shrunk to {result.failure.calls} calls, bound {max_calls}"


@pytest.mark.parametrize("subsystem", sorted(MACHINES))
def test_explorer_passes_without_bugs_and_replays_its_seed(subsystem):
    machine = machine_for(subsystem)
    first = explore(machine, "native", seed=7, runs=60)
    assert first.failure is None, first.failure and first.failure.message
    assert first.recorder.steps > 60, "walks that take no steps check nothing"
    again = explore(machine, "native", seed=7, runs=60)
    assert again.recorder.trace_hash() == first.recorder.trace_hash()
    other = explore(machine, "native", seed=8, runs=60)
    assert other.recorder.trace_hash() != first.recorder.trace_hash()
