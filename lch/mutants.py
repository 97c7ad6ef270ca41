"""Mutation campaign on a real vLLM class: how many mutants do the harness's vllm suites kill?

``nox -s mutants -- --class vllm.v1.core.encoder_cache_manager:EncoderCacheManager`` (or
``python -m lch.mutants`` in an environment with vLLM). Every mutant of the class's methods
(``lch.mutate``) runs the harness's vllm suites that reach the class (``lch.suites``) in a
fresh forked child with a time limit, ``--jobs`` at once; ``--compare-upstream`` runs the same
mutants against vLLM's own unit tests for the class, from the release's sdist. Writes
``mutants-<Class>.md`` and ``.json``: both scores, every survivor with its one-line diff, the
mutants only one side kills, the time per mutant.

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
them, each with one sentence on why no caller can observe it; they still run, and one that
a suite kills is reported (the argument was wrong).
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
from collections import Counter
from pathlib import Path

from lch import forked, mutate, suites
from sim.errors import HarnessError
from sim.files import atomic_write, check_writable

EQUIVALENTS_DIR = suites.ROOT / "fixtures" / "mutants"
KILLS = ("killed", "timeout", "crash")


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
    p.add_argument("--check-equivalents", action="store_true",
                   help="run the argued-equivalent mutants too: a kill refutes the argument "
                        "(each costs a whole suite, as every survivor does)")
    p.add_argument("--list", action="store_true", help="print the mutants and exit")
    p.add_argument("--fail-under", type=float, help="exit 1 if the harness score (percent of "
                   "the non-equivalent mutants) is below this")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    started = time.monotonic()
    try:             # before vLLM's import and the baseline: minutes a bad --out would waste
        out = check_writable(args.out, "--out")
    except HarnessError as error:
        raise SystemExit(f"error: {error}") from None
    for name, value in (("HYPOTHESIS_PROFILE", "ci"), ("LCH_REQUIRE_TARGETS", "1"),
                        ("VLLM_TARGET_DEVICE", "cpu"), ("OMP_NUM_THREADS", "1")):
        os.environ.setdefault(name, value)
    module, cls, release = load_class(args.spec, args.release)
    source = Path(module.__file__).read_text()
    subj = suites.subject(args.spec, args.suite, args.upstream_test)
    everything = [m for m in mutate.mutants(source, cls.__name__)
                  if not subj.methods or m.method in subj.methods]
    equivalents, stale = load_equivalents(release, cls.__name__, everything)
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
    runs = {"harness": (suites.harness_args(subj), suites.ROOT)}
    if args.compare_upstream:
        sdist = suites.sdist_path(release, args.sdist, Path(args.sdist_dir))
        root = workdir / "upstream"
        files = suites.extract_upstream(sdist, subj.upstream, root, subj.support)
        runs["upstream"] = (suites.upstream_args(root, files), root)
    warm(subj)
    print(f"{args.spec} (vLLM {release}): {len(everything)} mutants, {len(chosen)} to run, "
          f"{len(equivalents)} argued equivalent; logs in {workdir}", flush=True)
    baseline = run_baseline(module, cls, runs, args, workdir)
    results = run_campaign(module, cls, chosen, runs, baseline, args, workdir)
    report = build_report(args.spec, release, everything, selected, equivalents, stale, runs,
                          baseline, results, time.monotonic() - started)
    atomic_write(out / f"mutants-{cls.__name__}.json", json.dumps(report, indent=2) + "\n")
    atomic_write(out / f"mutants-{cls.__name__}.md", render_markdown(report))
    print(summary(report))
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


def load_equivalents(release: str, class_name: str, everything: list[mutate.Mutant]):
    """{diff: why} of the committed list; also the entries that match no mutant (stale)."""
    import tomllib  # Python 3.11+, as every vLLM these campaigns mutate
    path = EQUIVALENTS_DIR / release / f"{class_name}.toml"
    if not path.exists():
        return {}, []
    entries = tomllib.loads(path.read_text()).get("equivalent", [])
    diffs = {m.diff for m in everything}
    argued = {e["mutant"]: e["why"] for e in entries}
    return argued, sorted(d for d in argued if d not in diffs)


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


def _job(module, cls, mutant, run, budgets=None):
    pytest_args, cwd = run

    def job() -> dict:
        if mutant is not None:
            mutate.apply(mutant, module, cls)
        suites.disable_minimizing()
        return suites.run_pytest(pytest_args, cwd, budgets)
    return job


def run_baseline(module, cls, runs: dict, args, workdir: Path) -> dict[str, float]:
    """Each suite once on the real class: it must pass, and its time sets the limit."""
    tasks = [forked.Task(f"baseline-{name}", _job(module, cls, None, run), timeout_s=1800)
             for name, run in runs.items()]
    seconds = {}
    for task in forked.run_all(tasks, args.jobs, workdir):
        name = task.key.removeprefix("baseline-")
        if task.result["outcome"] != "survived":
            raise SystemExit(f"the {name} suite fails without any mutant "
                             f"({task.result.get('test')}: {task.result.get('message')}); "
                             f"log: {workdir / task.key}.log")
        seconds[name] = {"wall": task.seconds, "cpu": task.cpu_seconds,
                         "test_cpu": task.result.get("test_cpu", {})}
        print(f"unmutated {name} suite: passes in {task.seconds:.1f} s "
              f"({task.cpu_seconds:.1f} s CPU)", flush=True)
    return seconds


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
        print(f"[{len(done):3}/{total}] {m.id} {name:8} {task.result['outcome']:8} "
              f"{task.seconds:5.1f} s  {m.diff}", flush=True)

    results: dict[str, dict] = {m.id: {} for m in chosen}
    for task in forked.run_all(tasks, args.jobs, workdir, on_done=progress):
        mutant_id, _, name = task.key.partition("-")
        result = {k: v for k, v in task.result.items() if k != "test_cpu"}
        results[mutant_id][name] = {**result, "seconds": round(task.seconds, 2),
                                    "cpu_seconds": round(task.cpu_seconds, 2)}
    return results


# -- the report ----------------------------------------------------------------------------------


def build_report(spec, release, everything, selected, equivalents, stale, runs, baseline,
                 results, wall_s) -> dict:
    not_run = {"outcome": "not run", "seconds": 0.0, "cpu_seconds": 0.0}
    rows = []
    for m in selected:
        outcomes = {name: results.get(m.id, {}).get(name, not_run) for name in runs}
        rows.append({"id": m.id, "method": m.method, "line": m.line, "operator": m.operator,
                     "diff": m.diff, "equivalent": equivalents.get(m.diff), **outcomes})
    counted = [r for r in rows if r["equivalent"] is None]
    ran = [r for r in rows if any(r[name] is not not_run for name in runs)]
    report = {"class": spec, "release": release, "mutants": len(everything),
              "ran": len(ran), "operators": dict(Counter(m.operator for m in everything)),
              "equivalent": len([r for r in rows if r["equivalent"] is not None]),
              "wall_s": round(wall_s, 1), "suites": {}, "stale_equivalents": stale,
              "results": rows}
    for name, (pytest_args, _cwd) in runs.items():
        killed = [r["id"] for r in counted if r[name]["outcome"] in KILLS]
        seconds = [r[name]["seconds"] for r in ran]
        report["suites"][name] = {
            "tests": pytest_args, "baseline_s": round(baseline[name]["wall"], 1),
            "baseline_cpu_s": round(baseline[name]["cpu"], 1),
            "killed": len(killed), "of": len(counted),
            "score_percent": round(100 * len(killed) / max(1, len(counted)), 1),
            "timeouts": sum(r[name]["outcome"] == "timeout" for r in rows),
            "errors": [r["id"] for r in rows if r[name]["outcome"] == "error"],
            "survivors": [r["id"] for r in counted if r[name]["outcome"] == "survived"],
            "equivalents_killed": [r["id"] for r in rows if r["equivalent"] is not None
                                   and r[name]["outcome"] in KILLS],
            "seconds_mean": round(sum(seconds) / max(1, len(seconds)), 2),
            "seconds_max": round(max(seconds, default=0), 2)}
    if "upstream" in runs:
        both = [(r["id"], r["harness"]["outcome"] in KILLS, r["upstream"]["outcome"] in KILLS)
                for r in counted]
        report["only_harness"] = [i for i, h, u in both if h and not u]
        report["only_upstream"] = [i for i, h, u in both if u and not h]
        report["killed_by_either"] = sum(h or u for _, h, u in both)
    return report


def summary(report: dict) -> str:
    lines = [f"{report['class']} on vLLM {report['release']}: {report['ran']} mutants, "
             f"{report['equivalent']} argued equivalent, {report['wall_s']:.0f} s"]
    for name, s in report["suites"].items():
        lines.append(f"  {name:8}: {s['killed']}/{s['of']} killed ({s['score_percent']}%), "
                     f"survivors {', '.join(s['survivors']) or 'none'}")
    if "only_harness" in report:
        lines.append(f"  only the harness kills {', '.join(report['only_harness']) or 'none'}; "
                     f"only upstream kills {', '.join(report['only_upstream']) or 'none'}")
    for name, s in report["suites"].items():
        if s["equivalents_killed"] or s["errors"]:
            lines.append(f"  {name}: argued equivalent but killed: {s['equivalents_killed']}; "
                         f"could not run: {s['errors']}")
    return "\n".join(lines)


def render_markdown(report: dict) -> str:
    by_id = {r["id"]: r for r in report["results"]}
    names = list(report["suites"])
    ops = ", ".join(f"{k} {v}" for k, v in sorted(report["operators"].items()))
    out = [f"# Mutants of `{report['class']}` (vLLM {report['release']})", "",
           f"{report['mutants']} mutants in the class's methods ({ops}); {report['ran']} run; "
           f"{report['equivalent']} argued equivalent (`fixtures/mutants/{report['release']}/`). "
           f"Campaign wall time {report['wall_s']:.0f} s.", "",
           "| suite | killed | score | timeouts | unmutated run (CPU) | s per mutant (mean, max) |",
           "|---|---|---|---|---|---|"]
    for name, s in report["suites"].items():
        out.append(f"| {name} | {s['killed']} / {s['of']} | {s['score_percent']}% | "
                   f"{s['timeouts']} | {s['baseline_s']} s ({s['baseline_cpu_s']} s) | "
                   f"{s['seconds_mean']}, {s['seconds_max']} |")
    for name, s in report["suites"].items():
        out += ["", f"## Survivors: {name}", ""]
        out += [f"- {i} `{by_id[i]['diff']}`" for i in s["survivors"]] or ["none"]
    if "only_harness" in report:
        for title, key in (("Killed only by the harness", "only_harness"),
                           ("Killed only by upstream", "only_upstream")):
            out += ["", f"## {title}", ""]
            out += [f"- {i} `{by_id[i]['diff']}`" for i in report[key]] or ["none"]
    out += ["", "## Argued equivalent", ""]
    out += [f"- {r['id']} `{r['diff']}`: {r['equivalent']}" for r in report["results"]
            if r["equivalent"] is not None] or ["none"]
    if report["stale_equivalents"]:
        out += ["", "Entries matching no mutant (stale): "
                + "; ".join(f"`{d}`" for d in report["stale_equivalents"])]
    out += ["", "## Every mutant", "",
            "| id | diff | " + " | ".join(f"{n} | s" for n in names) + " |",
            "|---|---|" + "---|---|" * len(names)]
    for r in report["results"]:
        cells = " | ".join(f"{_cell(r[n])} | {r[n]['seconds']}" for n in names)
        out.append(f"| {r['id']} | `{r['diff'].replace('|', '¦')}` | {cells} |")
    return "\n".join(out) + "\n"


def _cell(result: dict) -> str:
    test = result.get("test", "").rpartition("::")[2]
    return f"{result['outcome']} {test}".strip() if result["outcome"] == "killed" \
        else result["outcome"]


if __name__ == "__main__":
    sys.exit(main())
