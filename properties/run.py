"""Running a machine: one Hypothesis run against a target, a failure replayed outside
Hypothesis and minimized into the shortest program that still breaks the same property, and
the pytest form of it (``check_machine``: skip an unavailable target, fail with the property
and the reproducer written).

An error ends a run in one of two ways (``sim/outcomes.py`` decides by where it arose): a
divergence is a finding, minimized and returned; anything else (the adapter raised, vLLM
raised a ``TypeError`` on what the adapter passed) is ``AdapterError``, naming the action
that was running. The exception ``check_machine`` raises says which outcome it is
(``Divergence`` / ``Unavailable``), so ``--outcomes`` records them apart.
"""

from __future__ import annotations

import hashlib
import os
import re
import unittest
from collections.abc import Callable

import attrs
import hypothesis
import pytest
from hypothesis import Phase
from hypothesis import settings as Settings
from hypothesis.errors import FailedHealthCheck, InvalidArgument, InvalidDefinition, Unsatisfiable
from hypothesis.stateful import get_state_machine_test

from fixtures.pytest_plugin import Divergence, Unavailable, note_missing, note_outside
from properties.harness import (
    BudgetSpent,
    Failure,
    HarnessMachine,
    InvalidAction,
    Recorder,
    RunResult,
    Trace,
    property_of,
)
from properties.reproducer import write_reproducer
from sim.errors import AdapterError, CapabilityMissing, HarnessError, NotDriven, TargetUnavailable
from sim.outcomes import classify, message_of, outside_label, same_failure

# Errors that say the harness or its input is wrong, not the target: never a "finding".
NOT_FINDINGS = (HarnessError, FailedHealthCheck, InvalidArgument, InvalidDefinition,
                Unsatisfiable)


def bind(machine: type[HarnessMachine], target: str, recorder: Recorder,
         accepted: frozenset[str] = frozenset()) -> type:
    # The bound class keeps the machine's name: Hypothesis derives a derandomized run's seed
    # from it, so every target gets the same stream of choices and their runs compare.
    return type(machine.__name__, (machine,), {"target_name": target, "recorder": recorder,
                                              "accepted": frozenset(accepted),
                                              "__qualname__": machine.__qualname__})


def run_machine(machine: type[HarnessMachine], target: str, settings: Settings,
                seed: int | None = None, recorder: Recorder | None = None,
                shrink_program: bool = True, hypothesis_shrink: bool = False,
                accepted: frozenset[str] = frozenset()) -> RunResult:
    """Run ``machine`` against ``target``; a failure is returned (minimized), not raised.

    Hypothesis's own shrink phase is skipped unless ``hypothesis_shrink``: ``minimize``
    shrinks the program itself, faster and to fewer API calls (``nox -s bench`` compares the
    two, alone and chained). A seed's trace does not depend on the modules loaded before it:
    the profiles pin Hypothesis's pool of local constants empty (``fixtures/constant_pool.py``).

    ``recorder.stop`` (optional) is asked before each example; once it says the time is up
    the run ends there (``result.cut``) and minimization stops early too. Ctrl-C while
    minimizing keeps the shortest program so far (``result.interrupted``).
    """
    # One error per run: a second, different one would come back as an ExceptionGroup.
    settings = Settings(settings, report_multiple_bugs=False, stateful_step_count=max(
        settings.stateful_step_count, machine.MIN_STATEFUL_STEPS))
    # A machine rejects the worlds the target's release cannot build (no secondary tiers, no
    # ARC, no store filter before some release): on an old release most worlds, by design.
    settings = Settings(settings, suppress_health_check=[
        *settings.suppress_health_check, hypothesis.HealthCheck.filter_too_much])
    if not hypothesis_shrink:
        settings = Settings(settings, phases=[p for p in settings.phases if p != Phase.shrink])
    recorder = recorder or Recorder()
    bound = bind(machine, target, recorder, accepted)
    # The seed goes on the bound class itself (not a wrapper): Hypothesis keys its example
    # database by the factory, so seeded and unseeded runs of a machine share one key, and a
    # failure a seeded hunt round saved is replayed by the next hunt's database phase.
    factory: Callable[[], HarnessMachine] = bound
    if seed is not None:
        factory = hypothesis.seed(seed)(bound)
    result = RunResult(target, recorder)
    try:
        test = get_state_machine_test(factory, settings=settings)
        # Hypothesis keys saved examples by the test function, which is the same wrapper for
        # every machine: key them by machine and target, so a failure saved by one hunt
        # replays in the same pair on every worker sharing the database, and only there.
        test._hypothesis_internal_database_key = database_key(machine, target)
        test()
    except BudgetSpent:
        result.cut = True
    except unittest.SkipTest:
        pass     # nothing to run: only the reuse phase, and the database holds nothing
    except (Unsatisfiable, FailedHealthCheck):
        if recorder.missing and not recorder.steps:   # every configuration needs what is missing
            raise CapabilityMissing("; ".join(sorted(recorder.missing))) from None
        raise
    except NOT_FINDINGS:
        raise
    except Exception as raised:  # noqa: BLE001 - classified: a finding, or an adapter error
        error = _unwrapped(raised)
        if isinstance(error, NOT_FINDINGS):
            raise error from raised
        if recorder.trace.world is None and recorder.stop is not None and recorder.stop():
            result.cut = True    # an interrupt that surfaced as another error, before setup
            return result
        verdict = classify(error)
        if verdict.kind == "unavailable":
            raise AdapterError(f"{target} failed in {_call(recorder.action)}: "
                               f"{verdict.detail} (at {verdict.where})") from error
        found = Failure(property_of(error), message_of(error), recorder.trace, error)
        if found.trace.world is None:
            found = attrs.evolve(found, stopped="not replayable")
        try:
            found = _replayed(machine, target, found, accepted)
        except KeyboardInterrupt:
            found = attrs.evolve(found, stopped="interrupted")
        if shrink_program and not found.stopped:
            found = minimize(machine, found, target, stop=recorder.stop, accepted=accepted)
        result.failure = found
        result.interrupted = found.stopped == "interrupted"
    return result


def database_key(machine: type[HarnessMachine], target: str) -> bytes:
    return f"llm-cache-harness:{machine.__name__}:{target}".encode()


def _unwrapped(error: BaseException) -> BaseException:
    """The error inside Hypothesis's ``FlakyFailure`` (an ExceptionGroup: the failing example
    did not fail the same way when replayed), so it is classified like any other."""
    while getattr(error, "exceptions", None):       # ExceptionGroup (a backport on 3.10)
        error = error.exceptions[0]
    return error


def _call(action: tuple) -> str:
    if not action:
        return "the machine's setup"
    name, *args = action
    return f"{name}({', '.join(map(repr, args))})"


# -- replay and minimization ------------------------------------------------------------------

INVALID = InvalidAction("replayed program is not valid")


def replay(machine: type[HarnessMachine], target: str, world: object,
           actions: list[tuple], accepted: frozenset[str] = frozenset(), ends: bool = False
           ) -> tuple[BaseException | None, Trace]:
    """Run ``actions`` on a fresh machine, then (``ends``) the run's closing steps; the
    error it raises (None: it passed)."""
    recorder = Recorder(report_events=False, keep_state=True)
    m = bind(machine, target, recorder, accepted)()
    try:
        m.setup(world=world)
        recorder.trace.ends = ends
        recorder.trace.setup_state = tuple(m.state_checks())
        recorder.trace.self_checked = callable(
            getattr(getattr(m, machine.SUBJECT, None), "check_valid", None))
        m.check_all_invariants()
        for action in actions:
            m.act(*action)
            m.check_all_invariants()
        if ends:
            m.end_of_run()
            m.check_all_invariants()
    except InvalidAction as error:
        return error, recorder.trace
    except NOT_FINDINGS:
        raise
    except Exception as error:  # noqa: BLE001 - a finding
        return error, recorder.trace
    return None, recorder.trace


def _replayed(machine: type[HarnessMachine], target: str, failure: Failure,
              accepted: frozenset[str] = frozenset()) -> Failure:
    """The failure replayed once outside Hypothesis, so its trace carries the state checks a
    reproducer ends with (a run records none, to stay fast).

    The replay checks the invariants after every step, also the closing steps a run makes in
    its teardown (``end_of_run``), where a run checks none: a program can then fail earlier,
    on another property. That failure is the one its reproducer shows, so it is the one
    reported and minimized (minimizing towards the run's property would keep the whole
    program, as no shorter one reaches it past the earlier check).

    A program that passes its steps and fails as the run did once the closing steps follow
    failed in their checks (liveness): it is replayed with them, and minimized so
    (``Trace.ends``). One that fails otherwise there (past an accepted divergence, its
    consequence) keeps the run's trace."""
    actions = failure.trace.actions()
    error, trace = replay(machine, target, failure.trace.world, actions, accepted)
    if error is None:
        closing = replay(machine, target, failure.trace.world, actions, accepted, True)
        if closing[0] is not None and same_failure(closing[0], failure.error):
            error, trace = closing
    if error is None or isinstance(error, InvalidAction) \
            or classify(error).kind != "divergence":
        return failure
    return Failure(property_of(error), message_of(error), trace, error)


def minimize(machine: type[HarnessMachine], failure: Failure, target: str,
             stop: Callable[[], bool] | None = None, accepted: frozenset[str] = frozenset(),
             keep_signature: bool = False) -> Failure:
    """Shrink the failing *program*: delete steps, then simplify the world, while the same
    property still fails. Hypothesis shrinks the choices that made a program; this shrinks
    the program a reproducer reads, and it is fast (a replay costs about a millisecond).
    Ctrl-C, or ``stop()`` turning true, ends it early with the shortest program so far
    (``stopped`` says why), so a hunt that is interrupted still writes its reproducer.

    ``accepted``: the divergences the program may go on past (each replay adopts them as the
    run did). ``keep_signature``: a smaller program must fail with the same signature, not
    only the same property (a hunt's, so the reproducer shows the finding it names)."""
    try:
        return _minimize(machine, failure, target, stop, accepted, keep_signature)
    except _Stopped as why:
        return attrs.evolve(why.best, stopped=why.reason)


class _Stopped(Exception):
    def __init__(self, best: Failure, reason: str):
        super().__init__(reason)
        self.best, self.reason = best, reason


def _minimize(machine: type[HarnessMachine], failure: Failure, target: str,
              stop: Callable[[], bool] | None, accepted: frozenset[str],
              keep_signature: bool) -> Failure:
    from properties.findings import signature
    wanted = signature(failure) if keep_signature else None
    best = failure
    progress = True
    while progress:
        progress = False
        for world, actions in _candidates(machine, best):
            if stop is not None and stop():
                raise _Stopped(best, "budget")
            try:
                error, trace = replay(machine, target, world, actions, accepted,
                                      best.trace.ends)
            except KeyboardInterrupt:
                raise _Stopped(best, "interrupted") from None
            if error is not None and not isinstance(error, InvalidAction) \
                    and same_failure(error, failure.error) \
                    and classify(error).kind == "divergence" \
                    and _smaller(trace, best.trace):
                candidate = Failure(failure.property, message_of(error), trace, error)
                if wanted is not None and signature(candidate) != wanted:
                    continue
                best = candidate
                progress = True
                break
    return best


def _candidates(machine: type[HarnessMachine], failure: Failure):
    actions = failure.trace.actions()
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


# -- the pytest form ---------------------------------------------------------------------------

# Where the known divergences of the installed release are expected (``LCH_EXPECT_KNOWN``),
# the search goes on past each one it meets, in at most this many runs sharing the budget: a
# known bug met first no longer hides what the rest of the budget meets behind it (a second
# known bug, or a new divergence, which fails the test).
KNOWN_PARTS = 8


def check_machine(machine: type[HarnessMachine], target: str, reproducer_dir: str,
                  **overrides) -> RunResult:
    """Run ``machine`` under the loaded profile (with ``overrides``) as a pytest test.

    A failure fails the test as a ``Divergence``, with its minimized reproducer; one that is
    a known divergence of the installed release (``known_divergence``) is noted and the
    search goes on with the examples left (the first run derandomized as the profile says,
    each further one under its own fixed seed), with the known bug's finding accepted (a
    machine that can adopt the target's behaviour goes on past it inside the example). The
    test is then an xfail naming every known divergence met, unless a new one fails it."""
    from properties.findings import finding_id
    from properties.machines import finding_scope
    settings = Settings(Settings(), **overrides)
    met: dict[str, _Met] = {}     # known bug id -> its first failure here, and how often
    accepted: frozenset[str] = frozenset()
    left, part = settings.max_examples, 0
    while True:
        result = _run_part(machine, target, Settings(settings, max_examples=left),
                           None if part == 0 else _part_seed(machine, part), accepted)
        failure = result.failure
        if failure is None:
            break
        bug = known_divergence(machine, target, failure)
        if bug is not None and bug.id in met:
            met[bug.id].times += 1
        else:
            if not failure.stopped:
                failure = minimize(machine, failure, target, accepted=accepted,
                                   keep_signature=bug is not None)
                result.failure = failure
            path = write_reproducer(machine, failure, target, reproducer_dir)
            bug = known_divergence(machine, target, failure)
            if bug is None:
                raise _divergence(machine, target, failure, path, met)
            met[bug.id] = _Met(bug, failure.message, path)
        accepted |= {finding_id(finding_scope(machine), failure)}
        left -= max(1, result.recorder.examples)
        part += 1
        if left <= 0 or part >= KNOWN_PARTS or result.cut:
            break
    if met:
        pytest.xfail(_known_met(met))
    return result


@attrs.define
class _Met:
    """A known divergence a test met: the bug, its first failure's message and reproducer."""
    bug: object
    message: str
    path: object
    times: int = 1


def _run_part(machine: type[HarnessMachine], target: str, settings: Settings,
              seed: int | None, accepted: frozenset[str]) -> RunResult:
    try:
        # Minimized by the caller: a known divergence met again needs no second reproducer.
        result = run_machine(machine, target, settings, seed=seed, shrink_program=False,
                             accepted=accepted)
    except NotDriven as why:                # the release has it; the harness cannot drive it
        pytest.skip(str(why))               # "unavailable: ...": recorded as unavailable
    except CapabilityMissing as why:        # nothing of this machine exists in the release
        pytest.skip(f"absent: {why}")
    except TargetUnavailable as why:
        unavailable(target, why)
    note_missing(result.recorder.missing)
    result.recorder.trace_hash()         # seals the last example: its reasons are counted
    note_outside(result.recorder.outside)
    return result


def _part_seed(machine: type[HarnessMachine], part: int) -> int:
    return int.from_bytes(hashlib.sha256(f"{machine.__name__}/{part}".encode()).digest()[:4],
                          "big")


def _divergence(machine: type[HarnessMachine], target: str, failure: Failure, path,
                met: dict[str, _Met]) -> Divergence:
    outside = list(failure.trace.outside)
    return Divergence(
        f"{failure.message}\n{machine.__name__} against {target}: "
        f"{failure.calls} calls; reproducer: {path}"
        + (f"\n{outside_label(outside)}: not a finding against vLLM" if outside else "")
        + (f"\nmet before it, known: {', '.join(met)}" if met else ""),
        property=failure.property, calls=failure.calls,
        reproducer=str(path), trace=[s.call for s in failure.trace.steps],
        outside_vllm=outside)


def _known_met(met: dict[str, _Met]) -> str:
    from sim.vllm import release
    found = release.installed_release()
    return "; ".join(
        f"vLLM {found}: known divergence {bug_id} ({m.bug.property}; fixtures/reproducers/"
        f"{m.bug.reproducer}), met {m.times}x: {m.message}; reproducer: {m.path}"
        for bug_id, m in met.items())


def known_divergence(machine: type[HarnessMachine], target: str, failure: Failure):
    """Where the run expects the known vLLM divergences (``LCH_EXPECT_KNOWN``: ``nox -s
    vllm`` sets it), the known bug affecting the installed release that ``failure`` is
    (``fixtures/upstream_bugs.py``: the machine's column, property and signature), else
    None. Each is kept as a strict-xfail reproducer: the session stays green on a release
    with an unfixed known bug and fails on anything else. ``history`` leaves it unset: there
    each is found and counted."""
    if not os.environ.get("LCH_EXPECT_KNOWN") or target.split(":")[0] != "vllm":
        return None
    from fixtures.upstream_bugs import UPSTREAM_BUGS
    from properties.findings import signature
    from sim.vllm import release
    found = release.installed_release()
    group = {"property": failure.property, "signature": signature(failure)}
    return next((b for b in UPSTREAM_BUGS if found is not None and b.affects(found)
                 and b.matches(machine.subsystem, group)), None)


def unavailable(target: str, why: BaseException):
    """A target that cannot run this test: ``absent`` (the release lacks what it needs, a
    ``CapabilityMissing``: a skip everywhere), else a skip, or a failure as ``unavailable``
    where targets are required (``LCH_REQUIRE_TARGETS``: ``nox -s vllm``, the mutants)."""
    if isinstance(why, CapabilityMissing):
        pytest.skip(f"absent: {why}")
    # The in-tree targets are always there: an error in one is the harness's own (a broken
    # adapter, or a test's patch that no longer fits the call), never a skip. Two witnesses
    # of properties skipped so, unseen, until this was read.
    if os.environ.get("LCH_REQUIRE_TARGETS") or target.split(":")[0] in ("model", "native"):
        raise Unavailable(f"target {target} is required here but unavailable: {why}")
    pytest.skip(str(why))


def vllm_tiering_module(target: str, not_vllm: str, before_poll_tiers: str):
    """vLLM's tiering manager module, for the tests of its 0.33.0 API (``poll_tiers``: the
    tier-poll thread, peers served off-step, request-level tiers). Skips with ``not_vllm`` on
    another target and with ``before_poll_tiers`` on an older release; an uninstalled vLLM
    is ``unavailable``."""
    if target != "vllm":
        pytest.skip(not_vllm)
    try:
        from sim.vllm import release
        module = release.import_module("vllm.v1.kv_offload.tiering.manager")
    except TargetUnavailable as why:
        unavailable(target, why)
    if not hasattr(module.TieringOffloadingManager, "poll_tiers"):
        pytest.skip(f"vLLM {release.release()}: {before_poll_tiers}")
    return module
