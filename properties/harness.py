"""What every state machine shares: the trace it records, its hazard events, and a runner.

A machine appends one ``Step`` per API call to the recorder's current trace. Hypothesis
replays the minimal failing example last, so after a failure ``recorder.trace`` *is* the
shrunk program; the reproducer writer turns it into a pytest file. The recorder also hashes
every trace of a run (the determinism meta-check) and counts examples, steps and hazards.
"""

from __future__ import annotations

import hashlib
import re
import sys
from collections import Counter
from collections.abc import Callable

import hypothesis
from attrs import define, field, frozen
from hypothesis import Phase
from hypothesis import settings as Settings
from hypothesis.errors import FailedHealthCheck, InvalidArgument, InvalidDefinition, Unsatisfiable
from hypothesis.stateful import RuleBasedStateMachine, run_state_machine_as_test

from sim.errors import AdapterError, CapabilityMissing, HarnessError
from sim.outcomes import classify, property_of

# Errors that say the harness or its input is wrong, not the target: never a "finding".
NOT_FINDINGS = (HarnessError, FailedHealthCheck, InvalidArgument, InvalidDefinition,
                Unsatisfiable)


@frozen
class Step:
    """One API call: the code that makes it (``cache`` is the target), the value the model
    expects it to return (None for calls returning nothing), and what it did."""

    call: str
    expect: str | None
    comment: str
    check: str | None = None    # an extra assertion line after the call (e.g. slot counts)
    action: tuple = ()          # (name, *args) of the machine's do_<name>: replayable
    state: tuple[str, ...] = () # assertions on the whole state after the call (used last)


@define
class Trace:
    setup: list[str] = field(factory=list)   # lines that build the target's inputs
    config: dict = field(factory=dict)       # the drawn configuration, printed first
    world: object = None                     # what the machine's setup() was given
    steps: list[Step] = field(factory=list)

    def text(self) -> str:
        lines = [repr(sorted(self.config.items())), *self.setup]
        lines += [f"{s.call} -> {s.expect}" for s in self.steps]
        return "\n".join(lines)


@define
class Recorder:
    trace: Trace = field(factory=Trace)
    digest: hashlib._Hash = field(factory=hashlib.sha256)
    events: Counter = field(factory=Counter)
    examples: int = 0
    steps: int = 0
    report_events: bool = True     # False when replaying outside a Hypothesis test
    keep_state: bool = False       # record each step's state checks (replays: reproducers)
    action: tuple = ()             # the action running now (an adapter error names it)
    missing: Counter = field(factory=Counter)   # capabilities the target lacks, and how often

    def begin(self) -> Trace:
        self._seal()
        self.trace = Trace()
        self.examples += 1
        self.action = ()
        return self.trace

    def step(self, step: Step) -> None:
        self.trace.steps.append(step)
        self.steps += 1

    def note_missing(self, reason: str) -> None:
        """A configuration or call this target cannot run (``CapabilityMissing``): skipped,
        counted, and reported beside the outcome."""
        self.missing[reason] += 1

    def hazard(self, name: str) -> None:
        if self.report_events:
            hypothesis.event(name)
        self.events[name] += 1

    def trace_hash(self) -> str:
        self._seal()
        return self.digest.hexdigest()[:16]

    def _seal(self) -> None:
        if self.trace.steps or self.trace.config:
            self.digest.update(self.trace.text().encode())
            self.trace = Trace()


class InvalidAction(Exception):
    """A replayed action is not valid in the state reached (the minimizer drops it)."""


class HarnessMachine(RuleBasedStateMachine):
    """Base of every machine: knows its target name and its recorder (set per run).

    Contract for subclasses: the ``@initialize`` rule is ``setup(self, world)``; rules choose
    plain-valued arguments and call ``self.act(name, *args)``, which runs ``do_<name>``; each
    ``do_*`` makes one API call and calls ``record_step``; ``end_of_run`` may act once more
    when a run ends without a failure.
    """

    target_name: str = "native"
    recorder: Recorder = Recorder()
    subsystem: str = ""
    HAZARDS: tuple[str, ...] = ()

    def __init__(self) -> None:
        super().__init__()
        self.trace = self.recorder.begin()
        self._action: tuple = ()

    def hazard(self, name: str) -> None:
        assert name in self.HAZARDS, f"undeclared hazard {name!r}: add it to HAZARDS"
        self.recorder.hazard(name)

    def act(self, name: str, *args) -> None:
        self._action = self.recorder.action = (name, *args)
        getattr(self, f"do_{name}")(*args)

    def record_step(self, call: str, expect: str | None, comment: str,
                    check: str | None = None) -> None:
        state = tuple(self.state_checks()) if self.recorder.keep_state else ()
        self.recorder.step(Step(call, expect, comment, check, self._action, state))

    def end_of_run(self) -> None:
        """Steps that close a run (end the last pass, drain jobs); none by default."""

    def state_checks(self) -> list[str]:
        """Assertion lines on the target's whole observable state, as the model predicts it;
        a reproducer ends with them, so it fails wherever an invariant would have."""
        return []

    @classmethod
    def simpler_worlds(cls, world, actions: list[tuple]):
        """(world, actions) pairs that are simpler than the given ones, for the minimizer."""
        return iter(())

    def teardown(self) -> None:
        # Hypothesis calls teardown from a ``finally``: skip the closing steps after a failure,
        # so the recorded trace ends at the failing step.
        if sys.exc_info()[0] is None and self.trace.world is not None:
            self.end_of_run()

    @staticmethod
    def check_valid(target) -> None:
        """The target's structural self-check, where it has one (vLLM's classes have none)."""
        check = getattr(target, "check_valid", None)
        if check is not None:
            check()

    def check_all_invariants(self) -> None:
        for inv in self.invariants:
            inv.function(self)


@frozen
class Failure:
    property: str      # the named property in the assertion message ("freed-not-resident")
    message: str
    trace: Trace
    error: BaseException

    @property
    def calls(self) -> int:
        return len(self.trace.steps)


@define
class RunResult:
    target: str
    recorder: Recorder
    failure: Failure | None = None


def bind(machine: type[HarnessMachine], target: str, recorder: Recorder) -> type:
    # The bound class keeps the machine's name: Hypothesis derives a derandomized run's seed
    # from it, so every target gets the same stream of choices and their runs compare.
    return type(machine.__name__, (machine,), {"target_name": target, "recorder": recorder,
                                              "__qualname__": machine.__qualname__})


def run_machine(machine: type[HarnessMachine], target: str, settings: Settings,
                seed: int | None = None, recorder: Recorder | None = None,
                shrink_program: bool = True) -> RunResult:
    """Run ``machine`` against ``target``; a failure is returned (minimized), not raised.

    Hypothesis's own shrink phase is skipped: ``minimize`` shrinks the program itself, faster
    and to fewer API calls. Every machine module is imported first because Hypothesis mixes
    literal constants of the loaded local modules into generation: a fixed module set keeps
    a seed's trace the same whichever machines ran before in this process.
    """
    from properties.machines import import_all_machines
    import_all_machines()
    # One error per run: a second, different one would come back as an ExceptionGroup.
    settings = Settings(settings, phases=[p for p in settings.phases if p != Phase.shrink],
                        report_multiple_bugs=False)
    recorder = recorder or Recorder()
    bound = bind(machine, target, recorder)
    factory: Callable[[], HarnessMachine] = bound
    if seed is not None:
        factory = hypothesis.seed(seed)(lambda: bound())
    result = RunResult(target, recorder)
    try:
        run_state_machine_as_test(factory, settings=settings)
    except (Unsatisfiable, FailedHealthCheck):
        if recorder.missing and not recorder.steps:   # every configuration needs what is missing
            raise CapabilityMissing("; ".join(sorted(recorder.missing))) from None
        raise
    except NOT_FINDINGS:
        raise
    except Exception as error:  # noqa: BLE001 - classified: a finding, or an adapter error
        verdict = classify(error)
        if verdict.kind == "unavailable":
            raise AdapterError(f"{target} failed in {_call(recorder.action)}: "
                               f"{verdict.detail} (at {verdict.where})") from error
        found = _replayed(machine, target,
                          Failure(property_of(error), str(error).strip(), recorder.trace, error))
        result.failure = minimize(machine, found, target) if shrink_program else found
    return result


def _call(action: tuple) -> str:
    if not action:
        return "the machine's setup"
    name, *args = action
    return f"{name}({', '.join(map(repr, args))})"


# -- replay and minimization ------------------------------------------------------------------

INVALID = InvalidAction("replayed program is not valid")


def replay(machine: type[HarnessMachine], target: str, world: object,
           actions: list[tuple]) -> tuple[BaseException | None, Trace]:
    """Run ``actions`` on a fresh machine; the error it raises (None: it passed)."""
    recorder = Recorder(report_events=False, keep_state=True)
    m = bind(machine, target, recorder)()
    try:
        m.setup(world=world)
        m.check_all_invariants()
        for action in actions:
            m.act(*action)
            m.check_all_invariants()
    except InvalidAction as error:
        return error, recorder.trace
    except NOT_FINDINGS:
        raise
    except Exception as error:  # noqa: BLE001 - a finding
        return error, recorder.trace
    return None, recorder.trace


def _replayed(machine: type[HarnessMachine], target: str, failure: Failure) -> Failure:
    """The failure replayed once outside Hypothesis, so its trace carries the state checks a
    reproducer ends with (a run records none, to stay fast)."""
    actions = [s.action for s in failure.trace.steps]
    error, trace = replay(machine, target, failure.trace.world, actions)
    if error is None or property_of(error) != failure.property:
        return failure
    return Failure(failure.property, str(error).strip(), trace, error)


def minimize(machine: type[HarnessMachine], failure: Failure, target: str) -> Failure:
    """Shrink the failing *program*: delete steps, then simplify the world, while the same
    property still fails. Hypothesis shrinks the choices that made a program; this shrinks
    the program a reproducer reads, and it is fast (a replay costs about a millisecond)."""
    best = failure
    progress = True
    while progress:
        progress = False
        for world, actions in _candidates(machine, best):
            error, trace = replay(machine, target, world, actions)
            if error is not None and not isinstance(error, InvalidAction) \
                    and property_of(error) == failure.property \
                    and classify(error).kind == "divergence" \
                    and _smaller(trace, best.trace):
                best = Failure(failure.property, str(error).strip(), trace, error)
                progress = True
                break
    return best


def _candidates(machine: type[HarnessMachine], failure: Failure):
    actions = [s.action for s in failure.trace.steps]
    world = failure.trace.world
    yield from _deletions(world, actions, max(1, len(actions) // 2))
    variants = list(machine.simpler_worlds(world, actions))
    yield from variants
    # A rearranged world (e.g. items reordered) may only pay off once some steps go too.
    for variant_world, variant_actions in variants:
        yield from _deletions(variant_world, variant_actions, 2)


def _deletions(world, actions: list[tuple], longest: int):
    chunk = longest
    while chunk >= 1:                               # delete runs of steps, long runs first
        for start in range(0, len(actions) - chunk + 1):
            yield world, actions[:start] + actions[start + chunk:]
        chunk //= 2


def _cost(trace: Trace) -> tuple:
    """Fewer steps first, then smaller numbers in the world and the calls, then shorter text."""
    text = trace.text()
    return len(trace.steps), sum(int(n) for n in re.findall(r"\d+", text)), len(text), text


def _smaller(new: Trace, old: Trace) -> bool:
    return _cost(new) < _cost(old)
