"""The hunt: run every planned (subsystem, target) pair's machine in rounds until the budget is
spent (or, with ``examples``, until each pair ran that many examples).

A pair's ``subsystem`` is its machine's hunt name: the subsystem's own for its main machine,
``<subsystem>.<machine>`` for a further one (``Subsystem.machines``). Finding and program ids,
``--accept`` and round seeds are keyed by it, so a main machine's stay what they were.

Coverage is decided first (``lch/coverage.py``). Then, with the example database on, each pair
replays what the database holds (earlier hunts' failures), reported apart as *replays*. New
examples come in rounds (``FIRST_ROUND_EXAMPLES``, then ``ROUND_EXAMPLES`` each) with the
database read off, each round seeded
from (master seed, pair, round number) only, so ``--seed N --examples M`` gives the same hunt
bit for bit whatever the database holds or the clock says. With a budget, the clock is checked
between examples (a round stops at the deadline), so the budget holds to about one example.

A failure is named by its cause (``properties/findings.py``: subsystem, property, the call
whose answer differs and the shape of the difference) and, when that finding is new,
minimized (keeping the signature) and its reproducer written at once (atomically). From then
on the hunt *accepts* it: every later run is bound with the accepted ids, and a check that
fails with an accepted signature adopts the target's behaviour for what diverged and lets the
example go on (``HarnessMachine.fail``), so a bug that needs seven calls is reached past one
that needs two, in the same examples. Accepted are the ones this hunt found and those given
with ``--accept``. Each finding is a group: the examples that met it (found, or went on past
it), the distinct minimal programs that showed it, and its smallest reproducer.

A failure whose check cannot adopt (the machine cannot re-synchronize what it compares, or a
crash: the target's state after a raise is unknown) ends its Hypothesis run, counted in its
group: the round goes on with the examples it has left under a seed
derived from the round's (``round_seed(..., part)``), so ``--seed N --examples M`` still
repeats bit for bit. Minimizing costs replays, so it is cached per failing program, and a
round minimizes at most ``MINIMIZE_PER_ROUND`` new failures of properties that already have
a finding (past that, the round ends and ``cut_rounds`` counts it). Ctrl-C / SIGTERM (turned
into ``KeyboardInterrupt`` by the CLI) ends the hunt with every reproducer found so far on
disk and the report marked interrupted.
"""

from __future__ import annotations

import hashlib
import time
from collections import Counter

from attrs import define, field
from hypothesis import Phase, settings

from lch.coverage import RUN, Planned
from properties.explore import explore
from properties.findings import finding_id, program_id, signature
from properties.harness import Recorder
from properties.machines import machine_for
from properties.reproducer import write_reproducer
from properties.run import minimize, run_machine
from sim.errors import TargetUnavailable

ROUND_EXAMPLES = 100
FIRST_ROUND_EXAMPLES = 10   # every pair gets examples early, even on a small budget
# Failures of properties with an accepted divergence minimized per round (cache misses):
# each costs up to a few hundred replays, so a bug that fails most examples cannot eat the
# budget; the round ends there instead.
MINIMIZE_PER_ROUND = 5


@define
class PairReport:
    subsystem: str
    target: str
    status: str = RUN            # the plan's status; "run" pairs end failed / passed / not run
    why: str = ""
    examples: int = 0
    steps: int = 0
    rounds: int = 0
    seconds: float = 0.0
    events: Counter = field(factory=Counter)
    hazards: tuple[str, ...] = ()
    failure: dict | None = None      # the first new find (findings[0])
    findings: list[dict] = field(factory=list)   # every new finding: one group per cause
    accepted: dict = field(factory=dict)  # id -> {"id", "property", "seen"}: --accept's
    adopted: dict = field(factory=dict)   # finding id -> what its check adopts, going on
    unconfirmed: int = 0             # accepted-property failures the budget left unminimized
    cut_rounds: int = 0              # rounds ended at MINIMIZE_PER_ROUND
    replayed: dict | None = None     # a failure the example database replayed
    replayed_examples: int = 0
    planned: int = 0                 # generated examples asked for so far (rerun commands)
    trace_hash: str = ""             # over every generated example, in order

    @property
    def result(self) -> str:
        if self.status != RUN:
            return self.status
        if self.failure or self.replayed:
            return "failed"
        if self.examples == 0:
            return "not run"
        return "accepted only" if any(a["seen"] for a in self.accepted.values()) \
            else "no failure"


@define
class HuntReport:
    seed: int
    budget_s: float | None
    examples: int | None
    command: str
    pairs: list[PairReport] = field(factory=list)
    interrupted: bool = False
    elapsed_s: float = 0.0           # the search (what the budget bounds)
    setup_s: float = 0.0             # before it: imports, vLLM's ~10-20 s, planning
    vllm: dict | None = None
    partial: bool = False            # written mid-hunt (a checkpoint), not at its end

    @property
    def failures(self) -> list[PairReport]:
        return [p for p in self.pairs if p.failure or p.replayed]

    @property
    def unchecked(self) -> list[PairReport]:
        """Pairs the hunt was to run that ran no example (or could not run)."""
        return [p for p in self.pairs if p.result in ("not run", "could not run")]


def round_seed(master: int, pair: PairReport, number: int, part: int = 0) -> int:
    """The seed of ``pair``'s round ``number``: from these values only, never from the order
    in which rounds of other pairs ran. ``part`` > 0: the round's rest after its ``part``-th
    accepted failure ended a run."""
    text = f"{master}:{pair.subsystem}:{pair.target}:{number}{f':{part}' if part else ''}"
    text = text.encode()
    return int.from_bytes(hashlib.sha256(text).digest()[:4], "big")


@define
class Hunt:
    plan: list[Planned]
    seed: int
    reproducer_dir: str
    budget_s: float | None = 60.0
    examples: int | None = None      # per pair; fixes the rounds by count, not by clock
    use_db: bool = True
    command: str = ""
    progress: object = print
    setup_s: float = 0.0             # before run(): importing vLLM, planning (not budgeted)
    engine: str = "hypothesis"       # or "explore": seeded random walks (properties/explore.py)
    accept: tuple[str, ...] = ()     # finding ids (--accept): counted, never reported new
    # Called with the report as it stands after each new finding (the CLI writes it), so a
    # process killed later, mid-minimizing on a loaded machine, leaves its findings behind.
    checkpoint: object = None
    report: HuntReport = None        # filled as the hunt goes: complete even if interrupted
    interrupt_requested: bool = False   # set by the CLI's signal handler (see interrupt())
    _start: float = 0.0
    _digests: dict = field(factory=dict)
    _named: dict = field(factory=dict)    # (pair, property, failing program) -> finding id

    def interrupt(self) -> None:
        """Ctrl-C / SIGTERM: the flag is what counts (the ``KeyboardInterrupt`` the handler
        raises can be swallowed, e.g. inside a garbage-collector callback); the hunt stops
        before the next example and writes what it has."""
        self.interrupt_requested = True

    def run(self) -> HuntReport:
        self._start = time.monotonic()      # the budget is the search's: setup is apart
        self.report = HuntReport(self.seed, None if self.examples else self.budget_s,
                                 self.examples, self.command,
                                 [PairReport(p.subsystem, p.target, p.status, p.why)
                                  for p in self.plan])
        runnable = [p for p in self.report.pairs if p.status == RUN]
        for pair in runnable:
            pair.hazards = tuple(machine_for(pair.subsystem).HAZARDS)
            self._digests[id(pair)] = hashlib.sha256()
            pair.accepted = {i: {"id": i, "property": i.split("/")[1], "seen": 0}
                             for i in self.accept if i.split("/")[0] == pair.subsystem}
        try:
            if self.use_db:
                for pair in runnable:
                    if not self._time_up():
                        self._replay_database(pair)
            self._generate(runnable)
        except KeyboardInterrupt:
            self.report.interrupted = True
        self.report.interrupted |= self.interrupt_requested
        self.report.elapsed_s = time.monotonic() - self._start
        self.report.setup_s = self.setup_s
        for pair in runnable:
            pair.trace_hash = self._digests[id(pair)].hexdigest()[:16]
        return self.report

    def _generate(self, runnable: list[PairReport]) -> None:
        while not self._time_up():
            live = [p for p in runnable if p.status == RUN
                    and (self.examples is None or p.planned < self.examples)]
            if not live:
                return
            for position, pair in enumerate(live):
                if self._time_up():
                    return
                size = FIRST_ROUND_EXAMPLES if pair.rounds == 0 else ROUND_EXAMPLES
                share_s = None
                if self.examples is not None:
                    size = min(size, self.examples - pair.planned)
                else:       # a slow pair (vLLM's) cannot starve the ones after it
                    share_s = (self.budget_s - (time.monotonic() - self._start)) \
                        / (len(live) - position)
                pair.planned += size
                self._round(pair, size, round_seed(self.seed, pair, pair.rounds), share_s)
                self._progress(pair)
                if self.report.interrupted or self.interrupt_requested:
                    raise KeyboardInterrupt

    def _time_up(self) -> bool:
        if self.interrupt_requested:
            self.report.interrupted = True
            return True
        return self.examples is None and \
            time.monotonic() - self._start >= self.budget_s

    def _settings(self, examples: int, phases: list[Phase], database) -> settings:
        return settings(settings.get_profile("hunt"), max_examples=examples, phases=phases,
                        database=database)

    def _replay_database(self, pair: PairReport) -> None:
        """What the example database holds for this pair's machine: a failure replayed there
        is an earlier find, reported apart from new ones (or counted, when --accept names
        it). Only the --accept list applies here: what the search counts as accepted never
        depends on what the database holds."""
        profile = self._settings(ROUND_EXAMPLES, [Phase.reuse],
                                 settings.get_profile("hunt").database)
        recorder = Recorder(stop=self._time_up)
        result = self._run(pair, profile, None, recorder)
        pair.replayed_examples += recorder.examples
        self._count_adoptions(pair, recorder)
        if result is not None and result.failure:
            named = finding_id(pair.subsystem, result.failure)
            if named in pair.accepted and result.failure.stopped is None:
                pair.accepted[named]["seen"] += 1
            else:
                pair.replayed = {**self._found(pair, result, None), "id": named,
                                 "signature": signature(result.failure)}
            self._progress(pair)

    def _round(self, pair: PairReport, size: int, seed: int, share_s: float | None) -> None:
        """``size`` examples; a failure ends a Hypothesis run, not the round: it is named
        (new, or one already accepted) and the round goes on with the examples it has left,
        under the next part's seed."""
        # The database is written (a new failure replays next time) but never read here.
        profile = self._settings(size, [Phase.explicit, Phase.generate],
                                 settings.get_profile("hunt").database if self.use_db else None)
        began = time.monotonic()
        # The share ends the search, not the minimizing of a failure it found.
        recorder = Recorder(stop=lambda: self._time_up() or (
            share_s is not None and not recorder.failed
            and time.monotonic() - began >= share_s))
        budget = [MINIMIZE_PER_ROUND]        # minimizations of accepted properties left
        part = 0
        try:
            while recorder.examples < size:
                part_seed = round_seed(self.seed, pair, pair.rounds, part)
                result = self._run(pair, settings(profile, max_examples=size
                                                  - recorder.examples), part_seed, recorder)
                if result is None or result.failure is None:
                    break
                part += 1
                verdict = self._judge(pair, result, part_seed, recorder, budget)
                recorder.failed = False      # the next part's examples may be cut again
                if verdict == "cut":
                    pair.cut_rounds += 1
                    break
                if result.cut or self.report.interrupted or self.interrupt_requested or \
                        recorder.stop():
                    break
        finally:     # counted even when Ctrl-C ends the round
            pair.seconds += time.monotonic() - began
            pair.rounds += 1
            pair.examples += recorder.examples
            pair.steps += recorder.steps
            pair.events.update(recorder.events)
            self._count_adoptions(pair, recorder)
            self._digests[id(pair)].update(recorder.trace_hash().encode())

    def _judge(self, pair: PairReport, result, seed: int, recorder: Recorder,
               budget: list[int]) -> str:
        """Name a failure by its signature: "accepted" (a finding this hunt has: counted, no
        minimizing needed), "new" (minimized keeping its signature, reproducer written,
        accepted from now on), "unconfirmed" (the budget ended its minimizing) or "cut" (this
        round minimized enough failures of properties that already have a finding)."""
        failure = result.failure
        named = finding_id(pair.subsystem, failure)
        if self._count_seen(pair, named, failure):
            return "accepted"
        key = (id(pair), failure.property, failure.trace.text())
        cached = self._named.get(key)
        if cached is None:
            known = {a["property"] for a in pair.accepted.values()} | \
                {f["property"] for f in pair.findings}
            if failure.property in known:
                if budget[0] <= 0:
                    return "cut"
                budget[0] -= 1
            if not failure.stopped:          # (stopped: not replayable, or interrupted)
                failure = minimize(machine_for(pair.subsystem), failure, pair.target,
                                   stop=recorder.stop, accepted=self._accepted(pair),
                                   keep_signature=True)
            if failure.stopped == "interrupted":
                self.report.interrupted = True
            if failure.stopped and failure.property in known:
                pair.unconfirmed += 1        # could be either: never reported as new
                return "unconfirmed"
            cached = failure
            if failure.stopped is None:
                self._named[key] = failure
        failure = cached
        named = finding_id(pair.subsystem, failure)
        if self._count_seen(pair, named, failure):
            return "accepted"
        result.failure = failure
        found = {"id": named, "signature": signature(failure), **self._found(pair, result, seed),
                 "seen": 1, "programs": [program_id(pair.subsystem, failure)]}
        if failure.trace.adopted:
            found["went_past"] = sorted({f for _, f, _ in failure.trace.adopted})
        pair.findings.append(found)
        pair.failure = pair.failure or found
        self._progress(pair)
        if self.checkpoint is not None:
            self.report.elapsed_s = time.monotonic() - self._start
            self.checkpoint(self.report)
        return "new"

    def _count_seen(self, pair: PairReport, named: str, failure) -> bool:
        """A failure of a finding the pair already has: counted in its group (its program
        listed), True; else False."""
        group = pair.accepted.get(named) or next(
            (f for f in pair.findings if f["id"] == named), None)
        if group is None:
            return False
        group["seen"] += 1
        programs = group.setdefault("programs", [])
        example = program_id(pair.subsystem, failure)
        if example not in programs and len(programs) < 20:
            programs.append(example)
        return True

    def _run(self, pair: PairReport, profile: settings, seed: int | None, recorder: Recorder):
        """One run; a failure comes back replayed, minimized only in the database phase (a
        search's failure is minimized by ``_judge``, once per failing program)."""
        try:
            if self.engine == "explore" and seed is not None:    # the database phase stays
                return explore(machine_for(pair.subsystem), pair.target, seed=seed,
                               runs=profile.max_examples, recorder=recorder,
                               shrink_program=False)
            return run_machine(machine_for(pair.subsystem), pair.target, profile, seed=seed,
                               recorder=recorder, shrink_program=seed is None,
                               accepted=self._accepted(pair))
        except TargetUnavailable as why:     # a module this release lacks, found only now
            pair.status, pair.why = "could not run", str(why)
            return None

    def _accepted(self, pair: PairReport) -> frozenset[str]:
        """The finding ids a run of ``pair`` goes on past: --accept's and the hunt's own."""
        return frozenset(pair.accepted) | {f["id"] for f in pair.findings}

    def _count_adoptions(self, pair: PairReport, recorder: Recorder) -> None:
        """Examples that went on past an accepted finding count as its examples."""
        groups = {f["id"]: f for f in pair.findings} | pair.accepted
        for finding, examples in recorder.adopted.items():
            if finding in groups:
                groups[finding]["seen"] += examples
        for finding, what in recorder.adoptions.items():
            pair.adopted.setdefault(finding, what)
            if finding in groups:
                groups[finding].setdefault("adopted", what)

    def _found(self, pair: PairReport, result, seed: int | None) -> dict:
        failure = result.failure
        machine = machine_for(pair.subsystem)
        path = write_reproducer(machine, failure, pair.target, self.reproducer_dir)
        found = {"property": failure.property, "message": failure.message.splitlines()[0],
                 "calls": failure.calls, "reproducer": str(path), "round_seed": seed,
                 "rerun_examples": pair.planned if seed is not None else None,
                 "minimized": failure.stopped is None,
                 "minimization_stopped": ("interrupted" if self.interrupt_requested
                                          else failure.stopped)}
        upstream = write_upstream(machine, failure, pair.target, self.reproducer_dir)
        if upstream:
            found["upstream_reproducer"] = str(upstream)
        if result.interrupted or self.interrupt_requested or \
                failure.stopped == "interrupted":
            self.report.interrupted = True
        return found

    def _progress(self, p: PairReport) -> None:
        elapsed_s = time.monotonic() - self._start
        state = ("FAILED " + ", ".join(f"{f['property']} ({f['calls']} calls, seen "
                                       f"{f['seen']})" for f in p.findings) if p.findings
                 else f"database replay FAILED {p.replayed['property']}" if p.replayed
                 else p.why if p.status != RUN else "no failure yet")
        self.progress(f"[{elapsed_s:6.1f}s] {p.subsystem} x {p.target}: {p.examples} examples, "
                      f"{p.steps} steps, {state}")


def write_upstream(machine, failure, target: str, directory: str):
    """The vLLM-only form of a ``vllm`` target's reproducer, where the machine has one."""
    if not target.startswith("vllm"):
        return None
    from properties.upstream import write_upstream_reproducer
    return write_upstream_reproducer(machine, failure, directory)
