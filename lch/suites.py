"""Which tests judge a mutant: the harness's vllm suites for a class, or vLLM's own tests for it.

``CLASSES`` lists, per real class, the harness tests that reach it with ``--target vllm``
(cheap ones first: a run stops at its first failure, so a killed mutant pays little) and the
upstream unit tests of that class in the release's sdist; each subsystem's manifest names the
function that lists its classes (``lch/<s>_suites.py``). A suite runs in-process with
``pytest.main`` in a forked child (``lch.forked``).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tarfile
import threading
import time
from pathlib import Path

from attrs import frozen
from pytest import hookimpl

from lch.forked import WALL_FACTOR
from sim.manifests import Subsystem, all_manifests, resolve

ROOT = Path(__file__).resolve().parent.parent


@frozen
class Subject:
    """A real class under mutation and who tests it."""

    harness: tuple[str, ...]              # pytest args relative to the repo root, in order
    upstream: tuple[str, ...]             # test files inside the sdist (``tests/...``)
    deselect: tuple[str, ...] = ()        # harness tests that do not reach the class
    warm: tuple[str, ...] = ()            # "module:function" run once in the parent
    # The methods mutated (empty: all of the class's). A class too big to be one subject
    # (the Scheduler: 2,000 mutants) is mutated on the path the suites are about.
    methods: tuple[str, ...] = ()
    # Files of the sdist the upstream tests import but that are not run (``tests/...``).
    support: tuple[str, ...] = ()


@frozen
class Run:
    """One suite as a campaign runs it: pytest's arguments, where it runs, which kill rule
    judges its failures (``lch.kills.JUDGES``), and the tests as a record names them
    (``shown``: repository or sdist paths, never the campaign's temporary directory)."""

    pytest_args: list[str]
    cwd: Path
    judge: str
    shown: tuple[str, ...] = ()


def mutation_subjects(manifests: tuple[Subsystem, ...]) -> dict[str, Subject]:
    """``MODULE:CLASS`` -> Subject: each manifest's (``mutation_subjects``, a function given
    ``Subject``), by rank."""
    classes: dict[str, Subject] = {}
    for manifest in manifests:
        if manifest.mutation_subjects:
            make = resolve(manifest, "mutation_subjects", manifest.mutation_subjects)
            classes.update(make(Subject))
    return classes


# Each subsystem keeps its subjects in its own file (``lch/<s>_suites.py``).
CLASSES: dict[str, Subject] = mutation_subjects(all_manifests())


def subject(spec: str, harness: list[str], upstream: list[str]) -> Subject:
    """The registered ``Subject`` of ``MODULE:CLASS``, or one made of the given tests."""
    if harness or upstream:
        known = CLASSES.get(spec)
        return Subject(harness=tuple(harness) or (known.harness if known else ()),
                       upstream=tuple(upstream) or (known.upstream if known else ()),
                       deselect=known.deselect if known and not harness else (),
                       warm=known.warm if known else (),
                       methods=known.methods if known else (),
                       support=known.support if known and not upstream else ())
    if spec not in CLASSES:
        raise SystemExit(f"no suites registered for {spec}; known: {', '.join(CLASSES)}. "
                         "Name the tests with --suite PATH (and --upstream-test tests/...)")
    return CLASSES[spec]


# -- running one suite in the (forked) child ---------------------------------------------------


class OverBudget(BaseException):
    """A test ran past its CPU budget. A BaseException, not an Exception: Hypothesis would
    take an Exception for a failing example and shrink it, re-running the loop it is in."""


class _TestClock:
    """A pytest plugin that measures each test's CPU time (the unmutated run) and, given
    budgets, stops a test that runs past its own.

    Why per test and not only the child's limit (``lch.forked``): a mutant that makes a
    poll loop spin burns the whole suite's budget (three unmutated runs, minutes for the
    tiering manager's suites) in the first test it reaches; stopped at three times that
    test's own CPU, it costs seconds. A test that hangs without burning CPU (a poll thread
    that never reports, waited for in a loop) stops at ``WALL_FACTOR`` times that budget in
    wall time, as the child does (``lch.forked``). The child's limits stay the backstop.

    Why a watchdog thread and not ``ITIMER_PROF``: the kernel delivers a process timer's
    signal to whichever thread is running, usually the spinning one, and the main thread
    blocked in a wait never sees it; the watchdog reads the process's CPU (every thread's)
    and signals the main thread itself, which interrupts the wait."""

    MARGIN_S = 5.0
    POLL_S = 0.05

    def __init__(self, budgets: dict[str, float] | None) -> None:
        self.budgets = budgets or {}
        self.cpu: dict[str, float] = {}
        self.over: str | None = None
        self.armed: tuple[str, float] | None = None    # while a budgeted test runs
        self.installed = False

    def budget(self, nodeid: str) -> float | None:
        base = self.budgets.get(nodeid)
        return None if base is None else 3 * base + self.MARGIN_S

    def _stop(self, _signum, _frame) -> None:
        # Installed once and never removed: a watchdog's signal that lands just after its
        # test ended finds nothing armed and is ignored (the default action would kill).
        nodeid, budget = self.armed or (None, 0.0)
        if nodeid is not None:
            self.armed, self.over = None, nodeid
            raise OverBudget(f"{nodeid} ran past {budget:.0f} s of CPU (3x its unmutated "
                             f"run + 5 s) or {WALL_FACTOR * budget:.0f} s of wall time")

    @hookimpl(wrapper=True)
    def pytest_runtest_call(self, item):
        budget = self.budget(item.nodeid)
        started, wall_started = time.process_time(), time.monotonic()
        finished = threading.Event()
        if budget is not None:
            if not self.installed:
                signal.signal(signal.SIGUSR1, self._stop)
                self.installed = True
            self.armed = (item.nodeid, budget)

            def watch(main: int) -> None:
                while not finished.wait(self.POLL_S):
                    if (time.process_time() - started > budget
                            or time.monotonic() - wall_started > WALL_FACTOR * budget):
                        signal.pthread_kill(main, signal.SIGUSR1)
                        return
            threading.Thread(target=watch, args=(threading.main_thread().ident,),
                             daemon=True).start()
        try:
            return (yield)
        finally:
            finished.set()
            if budget is not None:
                self.armed = None
            self.cpu[item.nodeid] = time.process_time() - started


def run_pytest(args: list[str], cwd: Path, budgets: dict[str, float] | None = None,
               judge: str = "harness") -> dict:
    """``pytest.main(args)`` here, each failing test judged by ``lch.kills.JUDGES[judge]``:
    ``outcome`` is the run's first kill (``test``, ``property``, ``message``), else the first
    other failure's outcome (timeout, unavailable, unnamed, error), else survived (all
    passed) or error (pytest could not run the tests: a broken suite is no kill); a test that
    runs past its CPU budget (``budgets`` holds each test's unmutated CPU seconds) is a
    timeout. ``failures`` counts the failing tests by outcome; ``test_cpu``: each test's CPU
    seconds."""
    import pytest

    from lch import kills
    os.chdir(cwd)
    # Per child, pytest's start-up would cost more than the tests: no plugin scan (anyio's
    # alone takes 1.4 s), no assertion rewriting (a kill needs no rich diff).
    os.environ["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    # No -x: ``Verdicts`` stops at the first kill, and goes on past a failure that is none.
    verdicts, clock = kills.Verdicts(kills.JUDGES[judge]), _TestClock(budgets)
    code = pytest.main(["-q", "-p", "no:cacheprovider", "-p", "_hypothesis_pytestplugin",
                        "--assert=plain", *args], plugins=[verdicts, clock])
    result = verdicts.outcome(code)
    if clock.over is not None and result["outcome"] != "killed":
        result.update(outcome="timeout", test=clock.over)
    return {**result, "test_cpu": clock.cpu}


def harness_args(subj: Subject) -> list[str]:
    args = ["--target", "vllm", "--ignore=fixtures/reproducers/found", *subj.harness]
    for node in subj.deselect:
        args += ["--deselect", node]
    return args


def disable_minimizing() -> None:
    """A mutant needs a kill, not a minimal reproducer: skip the program minimizer, and
    Hypothesis's own shrinking and explaining for the tests that are plain ``@given`` (the
    first failing example is judged as it is; shrinking one that crashes vLLM re-runs the
    crash until the test's budget ends it as a timeout). The profile set here is the one
    every test without its own ``@settings`` reads when it runs (a forked child's)."""
    from hypothesis import Phase, settings

    from properties import run
    run.minimize = lambda machine, failure, target, **_: failure
    settings.register_profile("mutant", parent=settings.default, phases=tuple(
        p for p in settings.default.phases if p not in (Phase.shrink, Phase.explain)),
        report_multiple_bugs=False)
    settings.load_profile("mutant")


# -- the upstream tests, from the release's sdist ------------------------------------------------


def sdist_path(release: str, sdist: str | None, sdist_dir: Path) -> Path:
    """The release's sdist: ``--sdist``, else ``sdist_dir/vllm-X.tar.gz``, else downloaded."""
    if sdist:
        return Path(sdist)
    path = sdist_dir / f"vllm-{release}.tar.gz"
    if path.exists():
        return path
    sdist_dir.mkdir(parents=True, exist_ok=True)
    # pip prepares an sdist's metadata even for `download`; vLLM's needs its build tools and
    # would compile the CUDA build's version string: the empty target skips both.
    env = dict(os.environ, VLLM_TARGET_DEVICE="empty", VLLM_SKIP_VERSION_SUFFIX="1")
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
               "--no-build-isolation", f"vllm=={release}", "-d", str(sdist_dir)]
    print(f"downloading the vLLM {release} sdist for its tests: {' '.join(command)}",
          flush=True)
    run = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    if run.returncode != 0 or not path.exists():
        raise SystemExit(
            f"could not download the vLLM {release} sdist:\n{run.stderr[-2000:]}\n"
            "Its metadata step needs vLLM's build tools in this environment: pip install "
            "'setuptools>=77.0.3,<81' 'setuptools-scm>=8' 'setuptools-rust>=1.9' wheel jinja2 "
            "(nox -s mutants does), or pass --sdist PATH to a downloaded vllm-X.tar.gz")
    return path


def extract_upstream(sdist: Path, tests: tuple[str, ...], into: Path,
                     support: tuple[str, ...] = ()) -> list[Path]:
    """The named test files, the ``support`` files they import (and the ``__init__.py``
    files of their packages) out of the sdist into ``into``; returns the test files' paths
    there."""
    with tarfile.open(sdist) as tar:
        wanted = set()
        for test in (*tests, *support):
            parts = Path(test).parts
            wanted.add(test)
            # A package's conftest.py comes too: tests import helpers from it (``--noconftest``
            # keeps it from loading as a plugin).
            wanted.update(str(Path(*parts[:k], name)) for k in range(1, len(parts))
                          for name in ("__init__.py", "conftest.py"))
        members = [m for m in tar.getmembers()
                   if m.isfile() and m.name.partition("/")[2] in wanted]
        missing = {*tests, *support} - {m.name.partition("/")[2] for m in members}
        if missing:
            raise SystemExit(f"{sdist.name} has no {', '.join(sorted(missing))}: name the "
                             "release's test files with --upstream-test tests/...")
        for member in members:
            target = into / member.name.partition("/")[2]
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(tar.extractfile(member).read())
    (into / "pytest.ini").write_text("[pytest]\n")   # vLLM's own pytest settings stay out
    return [into / test for test in tests]


def upstream_args(root: Path, files: list[Path]) -> list[str]:
    return ["--noconftest", "--rootdir", str(root), "-c", str(root / "pytest.ini"),
            *map(str, files)]
