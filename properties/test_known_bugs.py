"""The known-bug catalogue: the harness checks itself (the ``quality/`` of this project).

Every entry must be found against ``native:<id>`` within a fixed, derandomized budget, under
the property it names, minimized to at most its bound, with a reproducer that fails on the
bug and passes on the model and on ``native``; with the switch off the machine passes.
"""

from __future__ import annotations

import pytest
from hypothesis import Phase, settings

from fixtures.known_bugs import CATALOGUE
from properties.machines import MACHINES, catalogue_machine, machine_for
from properties.reproducer import write_reproducer
from properties.run import run_machine
from properties.witnesses.scenario import reproducer_test
from sim.native.bugs import BUG_SWITCHES, bug_subsystems

BUGS = [b for b in CATALOGUE if b.subsystem in MACHINES]
# (bug, subsystem, property, max_calls, max_examples): the home subsystem of every bug, then
# the other subsystems its switch acts in (``KnownBug.also_caught_by``).
CASES = [(b, b.subsystem, b.property, b.max_calls, b.max_examples) for b in BUGS] + [
    (b, *also) for b in CATALOGUE for also in b.also_caught_by if also[0] in MACHINES]
CASE_IDS = [c[0].id if c[1] == c[0].subsystem else f"{c[0].id}-in-{c[1]}" for c in CASES]


def catalogue_settings(max_examples: int) -> settings:
    return settings(settings.get_profile("ci"), max_examples=max_examples,
                    phases=[Phase.explicit, Phase.generate])


def test_catalogue_matches_the_native_switches():
    assert {b.id for b in CATALOGUE} == set(BUG_SWITCHES)
    # The switch's first subsystem is the entry's home; the others are its also_caught_by.
    assert all(bug_subsystems(b.id)[0] == b.subsystem for b in CATALOGUE)
    assert all([a[0] for a in b.also_caught_by] == list(bug_subsystems(b.id)[1:])
               for b in CATALOGUE)


@pytest.mark.parametrize(("bug", "subsystem", "prop", "max_calls", "max_examples"), CASES,
                         ids=CASE_IDS)
def test_known_bug_is_caught_and_shrunk(bug, subsystem, prop, max_calls, max_examples,
                                        tmp_path):
    machine = catalogue_machine(bug, subsystem)
    result = run_machine(machine, f"native:{bug.id}", catalogue_settings(max_examples))
    assert result.failure is not None, f"{bug.id} not found in {max_examples} examples"
    named = (prop, *bug.same_promise) if subsystem == bug.subsystem else (prop,)
    assert result.failure.property in named, result.failure.message
    assert result.failure.calls <= max_calls, \
        f"{bug.id}: shrunk to {result.failure.calls} calls, bound {max_calls}"

    path = write_reproducer(machine, result.failure, f"native:{bug.id}", tmp_path)
    test = _load_test(path)
    test("model")
    test("native")
    with pytest.raises((AssertionError, RuntimeError)):   # RuntimeError: the engine's own
        test(f"native:{bug.id}")                          # crash ("Encoder cache miss")


# With every switch off, each machine passes the largest budget any of its bugs gets (one
# run per machine rather than one per bug).
SWITCH_OFF_BUDGETS = sorted({b.subsystem: max(c.max_examples for c in BUGS
                                              if c.subsystem == b.subsystem)
                             for b in BUGS}.items())


@pytest.mark.parametrize(("subsystem", "max_examples"), SWITCH_OFF_BUDGETS,
                         ids=[s for s, _ in SWITCH_OFF_BUDGETS])
def test_switch_off_passes_with_the_same_budget(subsystem, max_examples):
    result = run_machine(machine_for(subsystem), "native", catalogue_settings(max_examples))
    assert result.failure is None, result.failure.message


def _load_test(path):
    return reproducer_test(path.read_text())
