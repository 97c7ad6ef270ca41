"""The explorer: a seeded random walk over a machine's own rules, fast, with the normal path
behind it.

Hypothesis's engine, not the code under test, sets the speed of a hunt over cheap cache
managers: per step it tracks choices for shrinking, checks health and replays. The explorer
keeps everything that defines a machine (its ``@initialize`` strategy, its rules with their
argument strategies and preconditions, its invariants, its model and target) and drops the
engine: one explicit ``random.Random(seed)`` feeds a ``ConjectureData`` that draws the world
and every rule argument through the machine's own strategies, so a walk is a sequence of the
same rule calls a Hypothesis run makes.

Each run is a swarm run (Groce et al., "Swarm testing", ISSTA 2012; Hypothesis swarms inside
one run too): it enables a random subset of the rules and draws its own length, so rules that
mask each other (a reset that empties what an eviction needs) are each left out sometimes.

A failing walk is handed to the normal path: its recorded actions are replayed as the
machine's steps, minimized by ``properties.run.minimize`` and written as the usual
reproducer. Why not a ``PrimitiveProvider`` backend (``settings(backend=...)``): it replaces
where choices come from but keeps the engine's per-example cost, which is what the bench
measured as the bottleneck.
"""

from __future__ import annotations

import random

from attrs import define
from hypothesis.control import BuildContext
from hypothesis.errors import UnsatisfiedAssumption
from hypothesis.internal.conjecture.data import ConjectureData
from hypothesis.strategies._internal.core import DataObject, DataStrategy

from properties.harness import Failure, HarnessMachine, Recorder, property_of
from properties.run import NOT_FINDINGS, _replayed, bind, minimize
from sim.errors import CapabilityMissing
from sim.outcomes import message_of

STEPS_MAX = 80                 # the hunt profile's stateful_step_count
CHOICES_MAX = 10**6            # a walk never runs out of choices


@define
class ExploreResult:
    target: str
    recorder: Recorder
    runs: int = 0
    failure: Failure | None = None
    interrupted: bool = False        # (a RunResult's fields the hunt reads)
    cut: bool = False


def explore(machine: type[HarnessMachine], target: str, seed: int, runs: int,
            steps_max: int = STEPS_MAX, recorder: Recorder | None = None,
            shrink_program: bool = True) -> ExploreResult:
    """``runs`` random walks of ``machine`` against ``target`` from ``seed``; stops at the
    first failure, which is returned replayed and (``shrink_program``) minimized."""
    rng = random.Random(seed)
    recorder = recorder or Recorder(report_events=False)
    recorder.report_events = False          # no Hypothesis test to report events to
    bound = bind(machine, target, recorder)
    result = ExploreResult(target, recorder)
    rejected = 0
    for _ in range(runs):
        result.runs += 1
        error = _walk(bound, rng, steps_max)
        if isinstance(error, UnsatisfiedAssumption):
            rejected += 1
            continue
        if error is None:
            continue
        found = _replayed(machine, target, Failure(property_of(error), message_of(error),
                                                    recorder.trace, error))
        result.failure = minimize(machine, found, target) if shrink_program else found
        break
    if rejected == result.runs and recorder.missing and not recorder.steps:
        # Every world needs what the target lacks (as ``run_machine`` reports it): the pair
        # could not run, never a pass.
        raise CapabilityMissing("; ".join(sorted(recorder.missing)))
    recorder.trace_hash()                   # seal the last trace
    return result


def _walk(bound: type[HarnessMachine], rng: random.Random,
          steps_max: int) -> BaseException | None:
    """One walk: None if it passed, the error it failed with, or ``UnsatisfiedAssumption``
    when its world was rejected (``reject()``: the target cannot build it)."""
    data = ConjectureData(random=rng, max_choices=CHOICES_MAX)
    # Strategies that build values (composite ones, st.data()) ask for a build context.
    with BuildContext(data, is_final=False, wrapped_test=_walk):
        machine = bound()
        try:
            for rule in machine._initialize_rules_to_run:
                rule.function(machine, **_arguments(rule, data, rng))
            machine.check_all_invariants()
            enabled = [r for r in machine.rules if rng.random() < 0.5] or machine.rules
            for _ in range(rng.randint(1, steps_max)):
                ready = [r for r in enabled if all(p(machine) for p in r.preconditions)]
                if not ready:
                    break
                rule = ready[rng.randrange(len(ready))]
                rule.function(machine, **_arguments(rule, data, rng))
                machine.check_all_invariants()
            machine.teardown()              # ends the run (end_of_run: liveness checks)
        except NOT_FINDINGS:
            raise
        except UnsatisfiedAssumption as rejected:   # a world the target cannot build
            machine.teardown()
            return rejected
        except Exception as error:  # noqa: BLE001 - any failure of the target is a finding
            machine.teardown()              # inside the handler: skips end_of_run
            return error
    return None


class WalkData(DataObject):
    """``st.data()`` in a walk: the harness's draw helpers (``draw_integer``, ``pick``,
    ``choose``, ``draw_bool``) take integers straight from the walk's Random; any other
    strategy is drawn through the walk's ConjectureData, as Hypothesis would."""

    def __init__(self, data: ConjectureData, rng: random.Random):
        super().__init__(data)
        self.integer = rng.randint


def _arguments(rule, data: ConjectureData, rng: random.Random) -> dict:
    return {name: WalkData(data, rng) if isinstance(strategy, DataStrategy)
            else data.draw(strategy) for name, strategy in rule.arguments_strategies.items()}
