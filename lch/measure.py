"""Small measurements as result records (``lch/records.py``), for figures a change reports.

- ``sizes --base REV FILE...``: each file's lines at ``REV`` and in the working tree (a glob
  pattern is expanded on both sides), kind ``sizes``;
- ``hazards [MODULE:MACHINE...] --seeds 0-2 --examples 150``: the share of examples (per
  100) reaching each named hazard (an example counted once per hazard), the examples run up
  to the first that reached it, and the runs that failed; no machine named: every machine
  ``properties/test_hazards.py`` searches (``--target``, default ``native``; ``--profile``,
  default ``ci``, its step count kept and its derandomization off so each seed differs),
  kind ``hazards``;
- ``pytest --name NAME -- ARGS...``: a pytest run's outcome per test (an expected failure
  with its reason), and the known vLLM divergences those reasons name, kind ``suites``.

Each writes ``--record-dir`` (default ``results``) and prints the record's path. Why not
pytest's own ``--junitxml``: the record must carry the harness commit, the vLLM and the
machine's load beside the outcomes, in the one schema the documents render from.
"""

from __future__ import annotations

import argparse
import fnmatch
import importlib
import os
import re
import subprocess
import sys
import time

from lch import records


def sizes(base: str, patterns: list[str]) -> tuple[dict, list[dict]]:
    def at_base(path: str) -> int | None:
        done = subprocess.run(["git", "-C", str(records.ROOT), "show", f"{base}:{path}"],
                              capture_output=True, text=True)
        return len(done.stdout.splitlines()) if done.returncode == 0 else None

    listed = subprocess.run(["git", "-C", str(records.ROOT), "ls-tree", "-r", "--name-only",
                             base], capture_output=True, text=True, check=True).stdout.split()
    now = sorted(str(p.relative_to(records.ROOT)) for pattern in patterns
                 for p in records.ROOT.glob(pattern))
    then = [p for p in listed if any(fnmatch.fnmatch(p, pattern) for pattern in patterns)]
    items = [{"file": f, "lines_base": at_base(f), "lines": (
        len((records.ROOT / f).read_text().splitlines()) if (records.ROOT / f).exists()
        else None)} for f in sorted({*now, *then})]
    totals = {pattern: {side: sum(i[side] or 0 for i in items
                                  if fnmatch.fnmatch(i["file"], pattern))
                        for side in ("lines_base", "lines")} for pattern in patterns}
    return {"base": base, "totals": totals}, items


def hazards(machines: list[str], seeds: range, examples: int, target: str = "native",
            profile_name: str = "ci") -> tuple[dict, list[dict]]:
    from hypothesis import settings

    from properties.harness import Recorder
    from properties.run import run_machine

    items = []
    for spec in machines or every_searched_machine():
        module, _, name = spec.partition(":")
        machine = getattr(importlib.import_module(module), name)
        recorder, first = Recorder(), {}

        def note(recorder: Recorder = recorder, first: dict = first) -> bool:
            # Asked before each example (never stopping): the examples run, over the seeds
            # in order, up to the first that reached each hazard, as the test's search counts.
            for hazard in recorder.events:
                first.setdefault(hazard, recorder.examples)
            return False

        recorder.stop = note
        profile = settings(settings.get_profile(profile_name), derandomize=False,
                           max_examples=examples, database=None)
        failures = [run_machine(machine, target, profile, seed=seed, recorder=recorder)
                    .failure for seed in seeds]
        note()
        items += [{"machine": name, "hazard": h, "per_100": round(
            100 * recorder.events[h] / max(recorder.examples, 1), 1),
            "first_example": first.get(h), "examples": recorder.examples,
            "failures": [f.message for f in failures if f]} for h in machine.HAZARDS]
    return {"seeds": f"{seeds.start}-{seeds.stop - 1}", "examples_per_seed": examples,
            "target": target, "profile": profile_name}, items


def every_searched_machine() -> list[str]:
    """The machines whose hazards ``properties/test_hazards.py`` must reach, each once."""
    from properties.hazards import REACHES
    return list(dict.fromkeys(reach.machine for reach in REACHES))


def run_pytest(args: list[str]) -> tuple[dict, list[dict]]:
    import pytest

    items: dict[str, dict] = {}

    class Collect:
        def pytest_runtest_logreport(self, report):
            if report.when == "call" or report.outcome != "passed":
                # An expected failure is a known finding that still holds, and one that
                # passes turns a strict xfail red: neither is a skip (pytest reports the
                # first as skipped, with ``wasxfail``).
                item = {"outcome": report.outcome}
                if hasattr(report, "wasxfail"):
                    item = {"outcome": "xfailed" if report.skipped else "xpassed",
                            "reason": report.wasxfail}
                items.setdefault(report.nodeid, item)

    code = pytest.main(args, plugins=[Collect()])
    listed = [{"test": t, **i} for t, i in sorted(items.items())]
    counts = {o: sum(i["outcome"] == o for i in listed)
              for o in ("passed", "failed", "skipped", "xfailed", "xpassed")}
    return {"exit_code": int(code), **counts, "known_divergences": known_met(listed)}, listed


# The environment a run's outcomes depend on, written before the command so that the
# command reruns it: the profile (budget, derandomization), the known-bug expectations.
SETTINGS_ENV = ("HYPOTHESIS_PROFILE", "LCH_EXPECT_KNOWN", "LCH_REQUIRE_TARGETS",
                "VLLM_TARGET_DEVICE")


def _settings_env() -> str:
    return "".join(f"{name}={os.environ[name]} " for name in SETTINGS_ENV
                   if os.environ.get(name))


def _targets_vllm(args: list[str]) -> bool:
    return any(a == "--target=vllm" or a.startswith("--target=vllm:") or (
        a == "--target" and b.split(":")[0] == "vllm") for a, b in zip(args, [*args[1:], ""],
                                                                        strict=True))


def known_met(items: list[dict]) -> dict[str, list[str]]:
    """The known vLLM divergences the run's expected failures name (``fixtures/
    upstream_bugs.py`` ids, as ``properties/run.py`` and the reproducers' marks word them),
    each with the tests that met it."""
    from fixtures.upstream_bugs import UPSTREAM_BUGS
    met: dict[str, list[str]] = {}
    for item in items:
        reason = item.get("reason") or ""
        for bug in UPSTREAM_BUGS:
            if re.search(rf"(?<![\w-]){re.escape(bug.id)}(?![\w-])", reason):
                met.setdefault(bug.id, []).append(item["test"])
    return dict(sorted(met.items()))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lch.measure", description=__doc__)
    parser.add_argument("what", choices=("sizes", "hazards", "pytest"))
    parser.add_argument("args", nargs="*")
    parser.add_argument("--name", help="the record's name (default: what was measured)")
    parser.add_argument("--base", default="main")
    parser.add_argument("--seeds", default="0-2")
    parser.add_argument("--examples", type=int, default=150)
    parser.add_argument("--target", default="native")
    parser.add_argument("--profile", default="ci")
    parser.add_argument("--record-dir", default=str(records.RESULTS))
    options = parser.parse_intermixed_args(argv)
    started, start = records.now(), time.monotonic()
    if options.what == "sizes":
        summary, items = sizes(options.base, options.args)
    elif options.what == "hazards":
        low, _, high = options.seeds.partition("-")
        summary, items = hazards(options.args, range(int(low), int(high or low) + 1),
                                 options.examples, options.target, options.profile)
    else:
        summary, items = run_pytest(options.args)
    vllm = None
    if "vllm" in sys.modules:
        vllm = {"version": getattr(sys.modules["vllm"], "__version__", None)}
    elif options.what == "pytest" and _targets_vllm(options.args):
        # Run by xdist workers, vLLM is imported there, not here: its metadata says which.
        from sim.vllm.release import installed_release
        vllm = {"version": installed_release()}
    record = records.envelope(
        options.what if options.what != "pytest" else "suites",
        options.name or f"{options.what}-{options.seeds if options.what == 'hazards' else ''}",
        _settings_env() + "python -m lch.measure "
        + " ".join(argv if argv is not None else sys.argv[1:]),
        vllm=vllm, wall_s=time.monotonic() - start, summary=summary, items=items,
        started=started)
    print(records.write(record, options.record_dir))
    return 0 if options.what != "pytest" or summary["exit_code"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
