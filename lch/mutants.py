"""Mutation campaign on a real vLLM class: how many mutants do the harness's vllm suites kill,
by a property?

``nox -s mutants -- --class vllm.v1.core.encoder_cache_manager:EncoderCacheManager`` (or
``python -m lch.mutants`` in an environment with vLLM). Every mutant of the class's methods
(``lch.mutate``) runs the harness's vllm suites that reach the class (``lch.suites``) in a
fresh forked child with a time limit, ``--jobs`` at once; ``--compare-upstream`` runs the same
mutants against vLLM's own unit tests for the class, from the release's sdist. A mutant is
killed only by a failure the kill rules name (``lch.kills``: a declared property, or vLLM
raising on a call the model accepts; for vLLM's tests, an assertion or vLLM raising): a
timeout, a crash, an unavailable target, an unnamed assertion or an error are outcomes of
their own, shown beside the score and never in it. Writes ``mutants-<Class>.md`` and
``.json`` (both scores, every outcome, each survivor's diff, the mutants only one side kills,
the time per mutant) and, with ``--record-dir``, the campaign's record
(``<dir>/mutants/<Class>-<release>.json``, ``lch.records``).

Why not cosmic-ray or mutmut (both evaluated on vLLM 0.33.0): cosmic-ray writes each mutant
into the module's file on disk and runs the test command in a new process per mutant, so it
needs a private vLLM install per worker and pays vLLM's 10-30 s import per mutant (over an
hour for one class on 2 cores). mutmut 3 mutates only files under the project's own source
paths, copied into ``./mutants/`` and put first on ``sys.path``: an installed package must be
copied whole (vLLM is 3,000 modules and compiled extensions) and every function in the copied
files gets a trampoline; it cannot restrict mutation to one class without editing vLLM's
source for pragmas. What they lack here is small: an ``ast`` mutator restricted to one class,
applied in memory to the live class in a child forked after vLLM is imported once.

Equivalent mutants are argued, not assumed: ``fixtures/mutants/<release>/<Class>.toml`` lists
them, each with one sentence naming the callers vLLM ships and why none can tell the mutant
from the original; ``--check-equivalents`` runs them too, and one that a suite kills is
reported (the argument was wrong). Entries once argued equivalent that a caller could observe
are kept there as ``[[formerly]]``: counted like any mutant, and marked so in the record.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import json
import os
import sys
import tempfile
import time
from pathlib import Path

from attrs import frozen

from lch import forked, mutant_report, mutate, records, suites
from sim.errors import HarnessError
from sim.files import atomic_write, check_writable
from sim.outcomes import MUTANT_ENV

EQUIVALENTS_DIR = suites.ROOT / "fixtures" / "mutants"


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="lch.mutants", description=__doc__.splitlines()[0])
    p.add_argument("--class", dest="spec", required=True, metavar="MODULE:CLASS")
    p.add_argument("--release", help="the vLLM release expected installed (nox installs it)")
    p.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    p.add_argument("--compare-upstream", action="store_true",
                   help="also run vLLM's own unit tests of the class from the release's sdist")
    p.add_argument("--sdist", help="a downloaded vllm-X.tar.gz (default: --sdist-dir)")
    p.add_argument("--sdist-dir", default=os.environ.get(
        "LCH_SDIST_DIR", str(Path.home() / ".cache" / "llm-cache-harness" / "sdists")))
    p.add_argument("--suite", action="append", default=[], metavar="PYTEST_ARG",
                   help="harness tests to run instead of the registered ones (repeatable)")
    p.add_argument("--upstream-test", action="append", default=[], metavar="tests/...")
    p.add_argument("--only", action="append", default=[],
                   help="run only mutants whose id or diff contains this (repeatable)")
    p.add_argument("--timeout", type=float, help="CPU seconds per mutant and suite "
                   "(default: 3x the unmutated run's + 20); each test also stops "
                   "at 3x its own unmutated CPU + 5")
    p.add_argument("--out", default=".", help="where mutants-<Class>.md/.json go")
    p.add_argument("--record-dir", metavar="DIR", help="also write the campaign's record to "
                   "DIR/mutants/<Class>-<release>.json (nox -s mutants: results)")
    p.add_argument("--check-equivalents", action="store_true",
                   help="run the argued-equivalent mutants too: a kill refutes the argument "
                        "(each costs a whole suite, as every survivor does)")
    p.add_argument("--list", action="store_true", help="print the mutants and exit")
    p.add_argument("--fail-under", type=float, help="exit 1 if the harness score (percent of "
                   "the non-equivalent mutants killed by a property) is below this")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    command = "python -m lch.mutants " + " ".join(sys.argv[1:] if argv is None else argv)
    started, started_at = time.monotonic(), records.now()
    try:             # before vLLM's import and the baseline: minutes a bad --out would waste
        out = check_writable(args.out, "--out")
        if args.record_dir:
            check_writable(args.record_dir, "--record-dir")
    except HarnessError as error:
        raise SystemExit(f"error: {error}") from None
    # The installed release's known divergences (fixtures/upstream_bugs.py) are expected, as
    # ``nox -s vllm`` expects them: the unmutated suites then pass on a release with an open
    # known bug (vLLM 0.33.0's DCP connector clip had stopped every KVCacheManager campaign
    # at its baseline), and a mutant is killed only by a failure other than those.
    for name, value in (("HYPOTHESIS_PROFILE", "ci"), ("LCH_REQUIRE_TARGETS", "1"),
                        ("VLLM_TARGET_DEVICE", "cpu"), ("OMP_NUM_THREADS", "1"),
                        ("LCH_EXPECT_KNOWN", "1")):
        os.environ.setdefault(name, value)
    module, cls, release = load_class(args.spec, args.release)
    source = Path(module.__file__).read_text()
    subj = suites.subject(args.spec, args.suite, args.upstream_test)
    everything = [m for m in mutate.mutants(source, cls.__name__)
                  if not subj.methods or m.method in subj.methods]
    argued = load_equivalents(release, cls.__name__, everything)
    equivalents = argued.equivalent
    if args.list:
        for m in everything:
            print(f"{m.id} {m.operator:6} {m.diff}"
                  + ("   [equivalent]" if m.diff in equivalents else ""))
        return 0
    selected = [m for m in everything
                if not args.only or any(o == m.id or o in m.diff for o in args.only)]
    chosen = [m for m in selected if args.check_equivalents or m.diff not in equivalents]
    workdir = Path(tempfile.mkdtemp(prefix=f"lch-mutants-{cls.__name__}-"))
    os.environ["LCH_REPRODUCER_DIR"] = str(workdir / "reproducers")
    runs = {"harness": suites.Run(suites.harness_args(subj), suites.ROOT, "harness",
                                  shown=subj.harness)}
    if args.compare_upstream:
        sdist = suites.sdist_path(release, args.sdist, Path(args.sdist_dir))
        root = workdir / "upstream"
        files = suites.extract_upstream(sdist, subj.upstream, root, subj.support)
        runs["upstream"] = suites.Run(suites.upstream_args(root, files), root, "upstream",
                                      shown=subj.upstream)
    warm(subj)
    print(f"{args.spec} (vLLM {release}): {len(everything)} mutants, {len(chosen)} to run, "
          f"{len(equivalents)} argued equivalent; logs in {workdir}", flush=True)
    baseline, could_not_run = run_baseline(module, cls, runs, args, workdir)
    runnable = {name: run for name, run in runs.items() if name not in could_not_run}
    results = run_campaign(module, cls, chosen, runnable, baseline, args, workdir)
    report = mutant_report.build(args.spec, release, everything, selected, argued, runs,
                                 baseline, could_not_run, results, time.monotonic() - started)
    atomic_write(out / f"mutants-{cls.__name__}.json", json.dumps(report, indent=2) + "\n")
    atomic_write(out / f"mutants-{cls.__name__}.md", mutant_report.render_markdown(report))
    print(mutant_report.summary(report))
    if args.record_dir:
        from sim.vllm import overlay
        record = mutant_report.record(report, command, overlay.describe(), started_at)
        print(f"record: {records.write(record, args.record_dir)}")
    score = report["suites"]["harness"]["score_percent"]
    return 1 if args.fail_under is not None and score < args.fail_under else 0


def load_class(spec: str, want_release: str | None):
    """The live module and class named ``MODULE:CLASS``, after vLLM is imported on CPU."""
    from sim.vllm import release
    module_name, _, class_name = spec.partition(":")
    if not class_name:
        raise SystemExit(f"--class wants MODULE:CLASS, got {spec!r}")
    release.load()
    found = release.release()
    if want_release and release.parse_release(found) != release.parse_release(want_release):
        raise SystemExit(f"vLLM {found} is installed, not {want_release}: run "
                         f"`nox -s mutants -- --release {want_release} --class {spec}`")
    module = importlib.import_module(module_name)
    return module, getattr(module, class_name), found


@frozen
class Argued:
    """The committed list of ``release``/``Class``.toml: ``equivalent`` {diff: why} (no
    caller vLLM ships can tell the mutant from the original), ``formerly`` {diff: why not}
    (argued equivalent once, now counted: a caller could observe it), and the entries
    matching no mutant (``stale``)."""

    equivalent: dict[str, str]
    formerly: dict[str, str]
    stale: list[str]


def load_equivalents(release: str, class_name: str, everything: list[mutate.Mutant]) -> Argued:
    import tomllib  # Python 3.11+, as every vLLM these campaigns mutate
    path = EQUIVALENTS_DIR / release / f"{class_name}.toml"
    if not path.exists():
        return Argued({}, {}, [])
    text = tomllib.loads(path.read_text())
    diffs = {m.diff for m in everything}
    argued = {e["mutant"]: e["why"] for e in text.get("equivalent", [])}
    formerly = {e["mutant"]: e["observable"] for e in text.get("formerly", [])}
    stale = sorted(d for d in (*argued, *formerly) if d not in diffs)
    return Argued(argued, formerly, stale)


def warm(subj: suites.Subject) -> None:
    """What every child would otherwise redo: the machines, pytest, torch on one thread, the
    subject's slow set-ups (a ``VllmConfig`` inspects its model in a subprocess)."""
    import pytest  # noqa: F401
    import torch
    torch.set_num_threads(1)          # forked children and OpenMP pools do not mix
    import fixtures.pytest_plugin  # noqa: F401
    from properties.machines import import_all_machines
    import_all_machines()
    for target in subj.warm:
        module_name, _, func = target.partition(":")
        getattr(importlib.import_module(module_name), func)()
    # vLLM's heap, frozen: pytest's gc.collect() at exit (five of them, 3.4 s a child) skips
    # it, and the children share its pages instead of copying them.
    gc.collect()
    gc.freeze()


def _job(module, cls, mutant, run: suites.Run, budgets=None):
    def job() -> dict:
        if mutant is not None:
            mutate.apply(mutant, module, cls)
            os.environ[MUTANT_ENV] = mutant.id      # a forked child: its own environment
        suites.disable_minimizing()
        return suites.run_pytest(run.pytest_args, run.cwd, budgets, run.judge)
    return job


def run_baseline(module, cls, runs: dict, args, workdir: Path):
    """Each suite once on the real class: it must pass, and its time sets the limit. The
    harness suite failing stops the campaign; vLLM's own failing is recorded as could not
    run (its offline machine lacks what they need), with why, and the harness goes on."""
    tasks = [forked.Task(f"baseline-{name}", _job(module, cls, None, run), timeout_s=1800)
             for name, run in runs.items()]
    seconds, could_not_run = {}, {}
    for task in forked.run_all(tasks, args.jobs, workdir):
        name = task.key.removeprefix("baseline-")
        if task.result["outcome"] != "survived":
            why = (f"the {name} suite fails without any mutant ({task.result['outcome']}: "
                   f"{task.result.get('test')}: {task.result.get('message')})")
            if name == "harness":
                raise SystemExit(f"{why}; log: {workdir / task.key}.log")
            could_not_run[name] = why
            print(f"{why}: could not run, scored as such; log: {workdir / task.key}.log",
                  flush=True)
            continue
        seconds[name] = {"wall": task.seconds, "cpu": task.cpu_seconds,
                         "test_cpu": task.result.get("test_cpu", {})}
        print(f"unmutated {name} suite: passes in {task.seconds:.1f} s "
              f"({task.cpu_seconds:.1f} s CPU)", flush=True)
    return seconds, could_not_run


def run_campaign(module, cls, chosen, runs, baseline, args, workdir) -> dict:
    # CPU seconds (lch.forked): three unmutated runs' worth is a hang, not a slow machine
    limit = {name: args.timeout or 3 * baseline[name]["cpu"] + 20 for name in runs}
    # and each test stops at three times its own unmutated CPU (``suites._TestClock``)
    tasks = [forked.Task(f"{m.id}-{name}",
                         _job(module, cls, m, run, baseline[name]["test_cpu"]),
                         timeout_s=limit[name])
             for m in chosen for name, run in runs.items()]
    total, done = len(tasks), []

    def progress(task: forked.Task) -> None:
        done.append(task)
        mutant_id, _, name = task.key.partition("-")
        m = next(x for x in chosen if x.id == mutant_id)
        why = task.result.get("property") or ""
        print(f"[{len(done):3}/{total}] {m.id} {name:8} {task.result['outcome']:11} "
              f"{why:24} {task.seconds:5.1f} s  {m.diff}", flush=True)

    results: dict[str, dict] = {m.id: {} for m in chosen}
    for task in forked.run_all(tasks, args.jobs, workdir, on_done=progress):
        mutant_id, _, name = task.key.partition("-")
        result = {k: v for k, v in task.result.items() if k != "test_cpu"}
        results[mutant_id][name] = {**result, "seconds": round(task.seconds, 2),
                                    "cpu_seconds": round(task.cpu_seconds, 2)}
    return results


if __name__ == "__main__":
    sys.exit(main())
