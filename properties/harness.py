"""What every state machine shares: declared properties, the trace it records, its hazards.

A machine declares its ``PROPERTIES`` (name -> what holds) and ``HAZARDS``; ``check`` fails a
declared property with a ``PropertyFailed`` that carries its name, and ``call`` makes one API
call on the model and on the target, records it as a step and checks the two returned the
same. A machine appends one ``Step`` per API call to the recorder's current trace; after a
failure the runner (``properties/run.py``) replays and minimizes that trace, and the
reproducer writer turns it into a pytest file. The recorder also hashes every trace of a run
(the determinism meta-check) and counts examples, steps and, per example, hazards.
"""

from __future__ import annotations

import hashlib
import sys
from collections import Counter
from collections.abc import Callable
from typing import Any

import attrs
import hypothesis
import hypothesis.errors
from attrs import define, field, frozen
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine

from sim.errors import HarnessError
from sim.outcomes import (
    NO_RAISE,
    property_of,  # noqa: F401 - the runner and tests import it from here
)

# Declared for every machine, on top of its own PROPERTIES.
COMMON_PROPERTIES = {"check-valid": "the target's own structural self-check passes",
                     NO_RAISE: "the target answers every call the model accepts without "
                               "raising"}


class BudgetSpent(KeyboardInterrupt):
    """Raised between examples when the run's ``stop()`` says the time is up. A
    ``KeyboardInterrupt``: the one exception Hypothesis lets through untouched (any other,
    raised mid-run, is recorded in its choice tree and comes back as a flaky failure)."""


class PropertyFailed(AssertionError):
    """A declared property does not hold: ``property`` names it, the message says how."""

    def __init__(self, property: str, detail: str):
        super().__init__(f"{property}: {detail}")
        self.property = property


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
    # Accepted divergences this program went on past: (step number, finding id, what the
    # check adopted), in order (``HarnessMachine.fail``).
    adopted: list[tuple[int, str, str]] = field(factory=list)
    # Why the world is outside what vLLM builds (the vllm target's ``outside_vllm``; empty for
    # a world it builds, and on other targets): a failure there is no finding against vLLM.
    outside: list[str] = field(factory=list)
    # Replays (``Recorder.keep_state``): the state checks right after setup, which a
    # reproducer of a program that fails before its first call ends with; and whether the
    # target has a structural self-check (``check-valid``), which a reproducer then runs last.
    setup_state: tuple[str, ...] = ()
    self_checked: bool = False
    ends: bool = False       # the program fails only in the run's closing steps (end_of_run)

    def actions(self) -> list[tuple]:
        """The replayable program: one entry per machine action. An action that records
        several calls (a lookup, then the load source of its hit) shares one action tuple
        among its steps, and is replayed once: replaying it per step would double it."""
        actions: list[tuple] = []
        for n, step in enumerate(self.steps):
            if n == 0 or step.action is not self.steps[n - 1].action:
                actions.append(step.action)
        return actions

    def text(self) -> str:
        lines = [repr(sorted(self.config.items())), *self.setup]
        lines += [f"{s.call} -> {s.expect}" for s in self.steps]
        return "\n".join(lines)


@define
class Recorder:
    trace: Trace = field(factory=Trace)
    digest: hashlib._Hash = field(factory=hashlib.sha256)
    events: Counter = field(factory=Counter)     # examples that reached each hazard
    examples: int = 0
    _reached: set = field(factory=set)           # hazards reached by the current example
    steps: int = 0
    report_events: bool = True     # False when replaying outside a Hypothesis test
    keep_state: bool = False       # record each step's state checks (replays: reproducers)
    action: tuple = ()             # the action running now (an adapter error names it)
    missing: Counter = field(factory=Counter)   # capabilities the target lacks, and how often
    adopted: Counter = field(factory=Counter)   # examples that went on past each accepted id
    adoptions: dict = field(factory=dict)       # accepted id -> what its check adopted
    _adopted_here: set = field(factory=set)     # accepted ids the current example adopted
    # Examples whose world was outside what vLLM builds, per reason (``Trace.outside``).
    outside: Counter = field(factory=Counter)
    stop: Callable[[], bool] | None = None   # asked before each example: is the time up?
    failed: bool = False           # an example failed: Hypothesis replays it, never cut that

    def begin(self) -> Trace:
        if self.stop is not None and not self.failed and self.stop():
            raise BudgetSpent()     # between examples: the one started last has finished
        self._seal()
        self.trace = Trace()
        self.examples += 1
        self._reached = set()
        self._adopted_here = set()
        self.action = ()
        return self.trace

    def adopt(self, finding: str, what: str) -> None:
        """An accepted divergence this example went on past (counted once per example)."""
        if finding not in self._adopted_here:
            self._adopted_here.add(finding)
            self.adopted[finding] += 1
        self.adoptions.setdefault(finding, what)

    def note_missing(self, reason: str) -> None:
        """A configuration or call this target cannot run (``CapabilityMissing``): skipped,
        counted, and reported beside the outcome."""
        self.missing[reason] += 1

    def step(self, step: Step) -> None:
        self.trace.steps.append(step)
        self.steps += 1

    def hazard(self, name: str) -> None:
        # Counted once per example: a rate is "examples that reached it", so one noisy
        # example cannot carry a pinned rate.
        if name in self._reached:
            return
        self._reached.add(name)
        if self.report_events:
            hypothesis.event(name)
        self.events[name] += 1

    def trace_hash(self) -> str:
        self._seal()
        return self.digest.hexdigest()[:16]

    def _seal(self) -> None:
        if self.trace.steps or self.trace.config:
            self.digest.update(self.trace.text().encode())
            self.outside.update(set(self.trace.outside))
            self.trace = Trace()


class InvalidAction(Exception):
    """A replayed action is not valid in the state reached (the minimizer drops it)."""


class HarnessMachine(RuleBasedStateMachine):
    """Base of every machine: knows its target name and its recorder (set per run).

    Contract for subclasses: the ``@initialize`` rule is ``setup(self, world)``, which builds
    ``self.model`` and the target (``self.<SUBJECT>``, named as the reproducer names it);
    rules choose plain-valued arguments and call ``self.act(name, *args)``, which runs
    ``do_<name>``; each ``do_*`` makes one API call (``self.call``, or the two calls and
    ``record``) and checks what it promises with ``self.check``; ``end_of_run`` may act once
    more when a run ends without a failure.
    """

    target_name: str = "native"
    recorder: Recorder = Recorder()
    # Finding ids this run goes on past (``fail``): set per run by the runner's ``bind``.
    accepted: frozenset[str] = frozenset()
    # The fewest steps a program of this machine may take, whatever the profile says: a
    # machine whose properties need long programs (an eviction policy's) raises it.
    MIN_STATEFUL_STEPS: int = 0
    subsystem: str = ""
    # The target bases ("native", "vllm") this machine can build; empty: every base its
    # subsystem has. The hunt plans no pair of a machine and a base it cannot build.
    TARGET_BASES: tuple[str, ...] = ()
    SUBJECT: str = "target"                # the target's attribute, and its reproducer name
    # property -> text of the reproducer's closing state lines that assert it: dropped when
    # the program went on past an accepted divergence of that property.
    STATE_LINES_OF: dict[str, str] = {}
    PROPERTIES: dict[str, str] = {}        # property name -> what holds
    HAZARDS: tuple[str, ...] = ()

    def __init__(self) -> None:
        super().__init__()
        self.trace = self.recorder.begin()
        self._action: tuple = ()

    def hazard(self, name: str) -> None:
        assert name in self.HAZARDS, f"undeclared hazard {name!r}: add it to HAZARDS"
        self.recorder.hazard(name)

    @property
    def target(self) -> Any:
        return getattr(self, self.SUBJECT)

    def check(self, property: str, holds: object, detail: str | Callable[[], str]) -> None:
        """Fail ``property`` (declared in ``PROPERTIES``) unless ``holds``; ``detail`` (or
        what it returns, computed only on failure) says what was seen."""
        if property not in self.PROPERTIES or not holds:
            self.fail(property, detail() if callable(detail) else detail)

    def fail(self, property: str, detail: str) -> None:
        """``property`` (declared in ``PROPERTIES``) does not hold: ``detail`` says how.

        Unless the divergence is one the run accepted (its finding id, from its signature,
        is in ``accepted``): then the check *adopts* the target's behaviour for what
        diverged (``adopt``: the machine re-synchronizes the state the property compares
        from what the target shows) and the example goes on, so later calls can reach a
        deeper bug. A check that fails at a step where another was adopted is adopted with
        it: one call's first divergence explains the rest of that call's (the cascade of a
        stale freed entry: the freed list, then the worker's tensors)."""
        if property not in self.PROPERTIES and property not in COMMON_PROPERTIES:
            raise HarnessError(f"{type(self).__name__} checks undeclared property "
                               f"{property!r}: add it to PROPERTIES")
        if self.accepted and self._adopted(property, detail):
            return
        raise PropertyFailed(property, detail)

    def _adopted(self, property: str, detail: str) -> bool:
        from properties.machines import finding_scope
        from properties.signatures import signature_id, signature_text
        steps = self.trace.steps
        # Named as the hunt names it: a further machine's ids carry its name.
        finding = signature_id(finding_scope(type(self)), property,
                               signature_text(property, detail))
        at = len(steps)
        cascade = next((f for n, f, _ in reversed(self.trace.adopted) if n == at), None)
        if finding not in self.accepted and cascade is None:
            return False
        if finding not in self.accepted:
            finding, what = cascade, f"{property} at the same call, with it"
        else:
            what = self.adopt(property, detail)
            if what is None:                 # cannot re-synchronize: the example ends here
                return False
        self.recorder.adopt(finding, what)
        self.trace.adopted.append((at, finding, what))
        if steps:        # the reproducer asserts neither the call's answer nor its check
            last = steps[-1]
            steps[-1] = attrs.evolve(last, expect=None, check=None, comment=(
                f"{last.comment} [accepted {finding}: {what}]".strip()))
        return True

    def adopt(self, property: str, detail: str) -> str | None:
        """Adopt the target's behaviour for an accepted divergence of ``property`` and say
        what was adopted; None: this machine cannot re-synchronize what ``property``
        compares, and the example ends at the accepted divergence (counted in its group).
        Machines override it where they can read that state off the target.

        Why not pass the check over and go on: the model's state and the target's then
        drift apart and every later check may report the drift as a new finding (measured
        on vLLM 0.14.0's tiered lookup: past the offered-key eviction, passed over, a
        2-minute hunt reported 15 more groups where the suite had found one)."""
        return None

    def call(self, property: str, method: str, *args, shown: str,
             effect: str | Callable[[Any], str] = "", **kwargs) -> Any:
        """One API call, ``method(*args, **kwargs)``, on the model and on the target; it is
        recorded as ``shown`` (the line a reproducer makes, ``effect`` its comment) and the
        two results must be equal under ``property``. Returns the model's result."""
        expect = getattr(self.model, method)(*args, **kwargs)
        # Recorded before the target makes the call: a call that raises is the program's
        # last step (replayed, minimized, and the reproducer's failing line).
        self.record(shown, expect, effect(expect) if callable(effect) else effect)
        actual = getattr(self.target, method)(*args, **kwargs)
        self.check(property, actual == expect,
                   lambda: f"{method} returned {actual!r}, the model expects {expect!r}")
        return expect

    def apply(self, method: str, *args, shown: str, effect: str | Callable[[], str] = "",
              **kwargs) -> None:
        """One API call that returns nothing, ``method(*args, **kwargs)``, on the model and
        on the target, recorded as ``shown`` (``effect``: its comment, or a function that
        says it from the model's state after the call). What it did is checked by the
        machine's invariants, after every step."""
        getattr(self.model, method)(*args, **kwargs)
        self.record(shown, None, effect() if callable(effect) else effect)   # before: see call
        getattr(self.target, method)(*args, **kwargs)

    def record(self, call: str, expect: Any, comment: str) -> None:
        """Record a step whose call returned ``expect`` (None: nothing to assert)."""
        self.record_step(call, None if expect is None else repr(expect), comment)

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
        error = sys.exc_info()[1]
        if error is None and self.trace.world is not None:
            self.end_of_run()
        elif isinstance(error, Exception) and \
                not isinstance(error, hypothesis.errors.HypothesisException):
            self.recorder.failed = True

    def check_valid(self, target) -> None:
        """The target's structural self-check, where it has one (vLLM's classes have none)."""
        check = getattr(target, "check_valid", None)
        if check is None:
            return
        try:
            check()
        except AssertionError as broken:
            self.fail("check-valid", str(broken))

    def check_all_invariants(self) -> None:
        for inv in self.invariants:
            inv.function(self)


@frozen
class Failure:
    property: str      # the named property in the assertion message ("freed-not-resident")
    message: str
    trace: Trace
    error: BaseException
    stopped: str | None = None   # why minimization stopped early ("interrupted", "budget")

    @property
    def calls(self) -> int:
        return len(self.trace.steps)


@define
class RunResult:
    target: str
    recorder: Recorder
    failure: Failure | None = None
    cut: bool = False            # the run stopped between examples: its time was up
    interrupted: bool = False    # Ctrl-C / SIGTERM arrived while minimizing its failure


# Rule arguments are drawn through these helpers, so one rule serves two engines: under
# Hypothesis ``data`` is ``st.data()`` and the draws are exactly Hypothesis's; in the explorer
# (``properties/explore.py``) ``data`` is a walk's ``WalkData``, whose ``integer`` draws
# straight from the walk's Random (a Hypothesis draw costs more than a cache step).

def meant_subject(subject: str, meant: dict | None, source: str) -> str:
    """A reproducer's subject line (``subject``, its call still open), closed: with the
    meanings of the release it ran on (``meant``, named by ``source``, the compat function
    that picks them) passed to the model side alone, as its machine gave them to the model;
    the target is that release."""
    if not meant:
        return subject + ")"
    return (f"# What the release meant ({source}), for the model:\n"
            f"    meant = {meant!r} if target == \"model\" else {{}}\n    "
            + subject + ", **meant)")


def draw_integer(data, low: int, high: int, label: str | None = None) -> int:
    fast = getattr(data, "integer", None)
    if fast is not None:
        return fast(low, high)
    return data.draw(st.integers(low, high), label=label)


def pick(data, choices: list):
    """One of ``choices``, drawn as an index: building a ``sampled_from`` over a fresh list on
    every step costs more than the step itself."""
    return choices[draw_integer(data, 0, len(choices) - 1)]


def choose(data, choices: list, label: str | None = None):
    """One of ``choices`` as ``st.sampled_from`` draws it (labelled in Hypothesis's output)."""
    if getattr(data, "integer", None) is not None:
        return choices[data.integer(0, len(choices) - 1)]
    return data.draw(st.sampled_from(choices), label=label)


def draw_bool(data, label: str | None = None) -> bool:
    if getattr(data, "integer", None) is not None:
        return data.integer(0, 1) == 1
    return data.draw(st.booleans(), label=label)
