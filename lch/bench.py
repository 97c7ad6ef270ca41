"""Benchmarks (``nox -s bench``): ratios against a baseline measured in the same run.

1. Steps per second of each subsystem's machine on ``native`` next to a trivial
   RuleBasedStateMachine (one counter, one rule, one invariant) run with the same settings:
   the ratio is the harness's cost over Hypothesis's own floor; and the same machine driven
   by the explorer (``properties/explore.py``): its speed-up over Hypothesis mode.
2. For every catalogued bug, in Hypothesis mode and in explorer mode: examples (walks) and
   seconds to the first failure, seconds to minimize, and the minimized length, over several
   seeds.
3. Hunt throughput (steps per second of wall time, all workers together) with 1, 2, ... N
   workers, and its ratio to one worker: read it on a larger machine to see the scaling.

Written to ``--out`` (default ``bench/``) as ``bench.md``, ``bench.json`` and ``bench.png``.

CPU time of this process (time.process_time) is read here only, outside any state machine
run: it is steadier than wall time on a shared machine.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from hypothesis import Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule, run_state_machine_as_test

from lch import records
from sim.errors import HarnessError
from sim.files import atomic_write, check_writable


class TrivialMachine(RuleBasedStateMachine):
    """The floor: what Hypothesis's stateful engine costs per step with nothing to check."""

    steps = 0

    def __init__(self):
        super().__init__()
        self.total = 0

    @rule(n=st.integers(0, 3))
    def add(self, n):
        self.total += n
        TrivialMachine.steps += 1

    @invariant()
    def non_negative(self):
        assert self.total >= 0


def steps_per_second(examples: int) -> list[tuple[str, float, float, float | None]]:
    """(machine, Hypothesis-mode steps/s, trivial/this, explorer steps/s)."""
    from properties.explore import explore
    from properties.machines import MACHINES, machine_for
    from properties.run import run_machine

    profile = settings(settings.get_profile("ci"), max_examples=examples,
                       phases=[Phase.generate], derandomize=False)
    warm_up = settings(profile, max_examples=5)
    for subsystem in MACHINES:           # imports, device setup and caches stay out of timing
        run_machine(machine_for(subsystem), "native", warm_up, seed=0)
    run_state_machine_as_test(TrivialMachine, settings=warm_up)
    TrivialMachine.steps = 0
    began = time.process_time()
    run_state_machine_as_test(TrivialMachine, settings=profile)
    trivial = TrivialMachine.steps / (time.process_time() - began)
    rows = [("trivial RuleBasedStateMachine", trivial, 1.0, None)]
    for subsystem in MACHINES:
        began = time.process_time()
        result = run_machine(machine_for(subsystem), "native", profile, seed=1)
        rate = result.recorder.steps / (time.process_time() - began)
        began = time.process_time()
        walked = explore(machine_for(subsystem), "native", seed=1, runs=examples)
        walk_rate = walked.recorder.steps / (time.process_time() - began)
        rows.append((f"{subsystem} x native", rate, trivial / rate, walk_rate))
    return rows


def time_to_find(seeds: int, mode: str = "hypothesis") -> list[dict]:
    """Per catalogued bug over ``seeds`` seeds, in ``mode`` (hypothesis or explore)."""
    from fixtures.known_bugs import CATALOGUE
    from properties.explore import explore
    from properties.machines import MACHINES, catalogue_machine
    from properties.run import minimize, run_machine

    rows = []
    # Every bug in its home subsystem, then in the others its switch acts in (also_caught_by).
    cases = [(bug, bug.subsystem, bug.max_calls, bug.id) for bug in CATALOGUE]
    cases += [(bug, sub, bound, f"{bug.id}@{sub}") for bug in CATALOGUE
              for sub, _, bound, _ in bug.also_caught_by]
    for bug, subsystem, bound, label in cases:
        if subsystem not in MACHINES:
            continue
        machine, target = catalogue_machine(bug, subsystem), f"native:{bug.id}"
        found_s, shrink_s, examples, calls = [], [], [], []
        profile = settings(settings.get_profile("ci"), derandomize=False, database=None,
                           max_examples=2000, phases=[Phase.generate])
        for seed in range(seeds):
            began = time.process_time()
            if mode == "explore":
                result = explore(machine, target, seed=seed, runs=2000, shrink_program=False)
            else:
                result = run_machine(machine, target, profile, seed=seed, shrink_program=False)
            found_s.append(time.process_time() - began)
            if result.failure is None:
                continue
            examples.append(result.runs if mode == "explore" else result.recorder.examples)
            began = time.process_time()
            calls.append(minimize(machine, result.failure, target).calls)
            shrink_s.append(time.process_time() - began)
        rows.append({"bug": label, "found": f"{len(calls)}/{seeds}",
                     "examples_median": statistics.median(examples) if examples else None,
                     "find_s_median": round(statistics.median(found_s), 3),
                     "shrink_s_median": round(statistics.median(shrink_s), 3) if shrink_s
                     else None,
                     "calls_max": max(calls) if calls else None, "bound": bound})
    return rows


def shrinking(seeds: int) -> list[dict]:
    """Per catalogued bug (home subsystem), over ``seeds`` seeds: seconds and calls of the
    domain minimizer alone, Hypothesis's shrinker alone, and the two chained."""
    from fixtures.known_bugs import CATALOGUE
    from properties.machines import catalogue_machine
    from properties.run import minimize, run_machine

    rows = []
    profile = settings(settings.get_profile("ci"), derandomize=False, database=None,
                       max_examples=2000, phases=[Phase.generate, Phase.shrink])
    for bug in CATALOGUE:
        machine, target = catalogue_machine(bug, bug.subsystem), f"native:{bug.id}"
        paths: dict[str, tuple[list, list]] = {p: ([], []) for p in
                                               ("minimizer", "hypothesis", "both")}
        for seed in range(seeds):
            found = run_machine(machine, target, profile, seed=seed, shrink_program=False)
            if found.failure is None:
                continue
            began = time.process_time()
            calls = minimize(machine, found.failure, target).calls
            _add(paths["minimizer"], time.process_time() - began, calls)
            began = time.process_time()
            shrunk = run_machine(machine, target, profile, seed=seed, shrink_program=False,
                                 hypothesis_shrink=True)
            hypothesis_s = time.process_time() - began
            _add(paths["hypothesis"], hypothesis_s, shrunk.failure.calls)
            began = time.process_time()
            calls = minimize(machine, shrunk.failure, target).calls
            _add(paths["both"], hypothesis_s + time.process_time() - began, calls)
        for path, (seconds, calls) in paths.items():
            rows.append({"bug": bug.id, "path": path, "bound": bug.max_calls,
                         "shrink_s_median": round(statistics.median(seconds), 3)
                         if seconds else None, "calls_max": max(calls) if calls else None})
    return rows


def _add(into: tuple[list, list], seconds: float, calls: int) -> None:
    into[0].append(seconds)
    into[1].append(calls)


def hunt_scaling(workers_max: int, budget_s: int) -> list[dict]:
    """Steps per second of wall time of a whole hunt with 1..workers_max workers."""
    rows = []
    for workers in range(1, workers_max + 1):
        with tempfile.TemporaryDirectory() as out:
            subprocess.run([sys.executable, "-m", "lch", "hunt", "--workers", str(workers),
                            "--budget", f"{budget_s}s", "--seed", "1", "--db", f"{out}/db",
                            "--report-dir", out, "--reproducer-dir", f"{out}/found"],
                           capture_output=True, check=False, cwd=out,
                           env={**os.environ, "PYTHONPATH": str(Path.cwd())})
            data = json.loads((Path(out) / "hunt-report.json").read_text())
        steps = sum(p["steps"] for p in data["pairs"])
        rows.append({"workers": workers, "steps": steps, "steps_per_s": round(steps / budget_s)})
    for row in rows:
        row["speedup"] = round(row["steps_per_s"] / rows[0]["steps_per_s"], 2)
    return rows


def plot(path: Path, machines: list[tuple], scaling: list[dict]) -> str:
    """bench.png: steps/s per machine and mode, and hunt throughput per worker count."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "no plot: matplotlib is not installed (nox -s bench installs it)"
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    names = [m[0].replace(" x native", "") for m in machines[1:]]
    xs = range(len(names))
    left.bar([x - 0.2 for x in xs], [m[1] for m in machines[1:]], 0.4, label="Hypothesis")
    left.bar([x + 0.2 for x in xs], [m[3] for m in machines[1:]], 0.4, label="explorer")
    left.axhline(machines[0][1], color="grey", linestyle="--", label="trivial machine")
    left.set_xticks(list(xs), names, rotation=15)
    left.set_ylabel("steps/s (CPU time)")
    left.legend()
    if scaling:
        right.plot([r["workers"] for r in scaling], [r["steps_per_s"] for r in scaling], "o-")
        right.set_xlabel("hunt workers")
        right.set_ylabel("hunt steps/s (wall time)")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    return f"plot: {path}"


def main(argv: list[str] | None = None) -> int:
    import fixtures.profiles  # noqa: F401 - registers the Hypothesis profiles

    parser = argparse.ArgumentParser(prog="python -m lch.bench", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--examples", type=int, default=200)
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--workers-max", type=int, default=os.cpu_count() or 1,
                        help="hunt throughput with 1..N workers (0: skip)")
    parser.add_argument("--hunt-budget", type=int, default=20, help="seconds per hunt")
    parser.add_argument("--out", default="bench", help="bench.md, bench.json, bench.png here")
    parser.add_argument("--record-dir", help="also write the result record here (results/: "
                        "what the documents cite, see lch/records.py)")
    args = parser.parse_args(argv)
    started, began = records.now(), time.monotonic()
    try:
        out = check_writable(args.out, "--out")   # checked before the long work starts
        if args.record_dir:
            check_writable(args.record_dir, "--record-dir")
    except HarnessError as error:
        raise SystemExit(f"error: {error}") from None
    lines = [f"{'machine':34} {'steps/s':>9} {'trivial/this':>13} {'explorer steps/s':>17} "
             f"{'explorer/hyp':>13}"]
    machines = steps_per_second(args.examples)
    for name, rate, ratio, walk_rate in machines:
        walk = f"{walk_rate:17.0f} {walk_rate / rate:12.1f}x" if walk_rate else ""
        lines.append(f"{name:34} {rate:9.0f} {ratio:12.2f}x {walk}")
    bugs = {}
    for mode in ("hypothesis", "explore"):
        bugs[mode] = time_to_find(args.seeds, mode)
        lines += ["", f"{mode} mode", f"{'bug':36} {'found':>7} {'examples':>9} {'find s':>8} "
                  f"{'shrink s':>9} {'calls':>6} {'bound':>6}"]
        lines += [f"{r['bug']:36} {r['found']:>7} {r['examples_median']!s:>9} "
                  f"{r['find_s_median']:>8} {r['shrink_s_median']!s:>9} "
                  f"{r['calls_max']!s:>6} {r['bound']:>6}" for r in bugs[mode]]
    shrink_rows = shrinking(min(args.seeds, 3))
    lines += ["", "shrinking (from the same found failure; hypothesis includes re-finding it)",
              f"{'bug':28} {'path':>11} {'shrink s':>9} {'calls':>6} {'bound':>6}"]
    lines += [f"{r['bug']:28} {r['path']:>11} {r['shrink_s_median']!s:>9} "
              f"{r['calls_max']!s:>6} {r['bound']:>6}" for r in shrink_rows]
    scaling = hunt_scaling(args.workers_max, args.hunt_budget) if args.workers_max else []
    if scaling:
        lines += ["", f"{'workers':>8} {'hunt steps/s':>13} {'x one worker':>13}"]
        lines += [f"{r['workers']:>8} {r['steps_per_s']:>13} {r['speedup']:>12}x"
                  for r in scaling]
    lines.append(plot(out / "bench.png", machines, scaling))
    text = "\n".join(lines)
    print(text)
    atomic_write(out / "bench.md", "```\n" + text + "\n```\n")
    data = {"machines": [{"machine": m[0], "hypothesis_steps_per_s": round(m[1]),
                          "trivial_over_this": round(m[2], 2),
                          "explorer_steps_per_s": round(m[3]) if m[3] else None}
                         for m in machines], "bugs": bugs, "shrinking": shrink_rows,
            "scaling": scaling}
    atomic_write(out / "bench.json", json.dumps(data, indent=2) + "\n")
    if args.record_dir:
        items = [{"table": "machines", **row} for row in data["machines"]]
        items += [{"table": f"find-{mode}", **row} for mode, rows in bugs.items() for row in rows]
        items += [{"table": "shrinking", **row} for row in shrink_rows]
        items += [{"table": "scaling", **row} for row in scaling]
        record = records.envelope(
            "bench", "bench", shlex.join(["python", "-m", "lch.bench", *(argv or sys.argv[1:])]),
            vllm=None, wall_s=time.monotonic() - began, started=started,
            summary={"examples": args.examples, "seeds": args.seeds}, items=items)
        print(f"record: {records.write(record, args.record_dir)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
