"""Running a written-out witness (``kinds.Scenario``, and the program of a ``kinds.Mutant``):
the machine's own setup, actions and invariants on one program, outside Hypothesis, the way a
replay runs a failing program (``properties.run.replay``), plus the run's closing steps where
the witness asks for them.

The stand-in replaces the native class under the name the target factories import it by, for
the scenario's run only (``swapped``)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from fixtures.broken import replaced, resolve
from properties.harness import Failure, InvalidAction, Recorder
from properties.reproducer import render
from properties.run import NOT_FINDINGS, bind, replay
from properties.witnesses.kinds import Scenario
from sim.errors import HarnessError
from sim.outcomes import message_of, property_of


@contextlib.contextmanager
def swapped(standin: str | None) -> Iterator[None]:
    """``standin`` (``module:Class``) built wherever its native base class would be."""
    if standin is None:
        yield
        return
    cls = resolve(standin)
    module, name = replaced(cls)
    original = getattr(module, name)
    setattr(module, name, cls)
    try:
        yield
    finally:
        setattr(module, name, original)


def run_scenario(scenario: Scenario, broken: bool = True) -> BaseException | None:
    """The error the scenario's program raises (None: it passed). ``broken=False``: the
    control run, on the plain native target (in ``control_world`` if the scenario has one)."""
    world = scenario.world if broken or scenario.control_world is None \
        else scenario.control_world
    with swapped(scenario.broken if broken else None):
        return run_program(scenario.machine, "native", world, scenario.actions, scenario.ends,
                           scenario.name)


def scenario_reproducer(scenario: Scenario) -> str:
    """The reproducer the harness writes for the scenario's failure on its stand-in (the
    failure replayed with the state checks a reproducer ends with), as a file's text; its
    target is ``native``, which builds the stand-in inside ``swapped``. (At this commit a
    replay has no closing steps: a scenario that fails only in them has no reproducer.)"""
    machine = resolve(scenario.machine)
    with swapped(scenario.broken):
        error, trace = replay(machine, "native", scenario.world, list(scenario.actions))
    if error is None:
        raise HarnessError(f"witness {scenario.name}: its program passed; nothing to "
                           f"reproduce (run_scenario says why)")
    return render(machine, Failure(property_of(error), message_of(error), trace, error),
                  "native")


def run_program(machine_path: str, target: str, world, actions: tuple[tuple, ...],
                ends: bool = False, name: str = "") -> BaseException | None:
    """``actions`` on a fresh ``machine_path`` machine against ``target`` in ``world``, its
    invariants after each, then (``ends``) its closing steps; the error raised, or None."""
    machine = resolve(machine_path)
    m = bind(machine, target, Recorder(report_events=False))()
    try:
        m.setup(world=world)
        m.check_all_invariants()
        for action in actions:
            m.act(*action)
            m.check_all_invariants()
        if ends:
            m.end_of_run()
            m.check_all_invariants()
    except InvalidAction as invalid:
        raise HarnessError(f"witness {name}: its program is not valid in its world "
                           f"({invalid}); write actions the machine accepts") from None
    except NOT_FINDINGS:
        raise
    except Exception as error:  # noqa: BLE001 - the failure is what the caller checks
        return error
    finally:
        close = getattr(getattr(m, machine.SUBJECT, None), "close", None)
        if close is not None:
            close()
    return None
