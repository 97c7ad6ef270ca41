"""Command line: ``hunt`` (time-budgeted search, report, reproducers), ``replay``, ``bisect``.

    python -m lch.cli hunt --budget 60s [--target native] [--subsystem encoder_cache]
    python -m lch.cli replay [pytest args...]
    python -m lch.cli bisect --from 0.10.2 --to 0.33.0 [--releases A,B] (sim/vllm/bisect.py)

The entry points sit on top of everything else: they drive the state machines in
``properties/`` (imported lazily) against the targets of ``sim/targets.py``.
"""

from __future__ import annotations

import argparse
import os
import random
import re
import subprocess
import sys

from sim.errors import HarnessError
from sim.targets import SUBSYSTEMS, parse_target

UNITS_S = {"": 1, "s": 1, "m": 60, "h": 3600}


def parse_budget(text: str) -> float:
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smh]?)\s*", text)
    if not match or float(match.group(1)) <= 0:
        raise HarnessError(f"invalid budget {text!r}: give a positive duration such as "
                           "30s, 5m or 1h")
    return float(match.group(1)) * UNITS_S[match.group(2)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="llm-cache-harness", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    verbs = parser.add_subparsers(dest="verb", required=True)
    hunt = verbs.add_parser("hunt", help="search for failures for a time budget")
    hunt.add_argument("--budget", default="60s", help="wall-clock budget (30s, 5m, 1h)")
    hunt.add_argument("--target", action="append", help="target (repeatable); default native")
    hunt.add_argument("--subsystem", action="append", choices=SUBSYSTEMS,
                      help="subsystem (repeatable); default every one with a machine")
    hunt.add_argument("--seed", type=int, help="master seed (default: drawn and printed)")
    hunt.add_argument("--workers", type=int, default=os.cpu_count() or 1,
                      help="hunt processes, each on its own subsystems and derived seed "
                           "(default: every core)")
    hunt.add_argument("--db", metavar="URL_OR_DIR",
                      help="example database shared by hunts: redis://HOST:PORT (every worker "
                           "replays what another found) or a directory (default .hypothesis/)")
    hunt.add_argument("--engine", choices=("hypothesis", "explore"), default="hypothesis",
                      help="hypothesis: Hypothesis's engine; explore: seeded random walks over "
                           "the same rules, several times faster, failures minimized the same")
    hunt.add_argument("--reproducer-dir", default=os.environ.get(
        "LCH_REPRODUCER_DIR", "fixtures/reproducers/found"))
    hunt.add_argument("--report-dir", default=".", help="where hunt-report.{md,json} go")
    replay = verbs.add_parser("replay", help="run every saved reproducer with pytest")
    replay.add_argument("pytest_args", nargs=argparse.REMAINDER)
    add_bisect_parser(verbs)
    args = parser.parse_args(argv)
    try:
        import fixtures.profiles  # noqa: F401 - the dev / ci / hunt Hypothesis profiles
        if args.verb == "hunt":
            return run_hunt(args)
        if args.verb == "bisect":
            from lch.bisect import main as run_bisect
            return run_bisect(args)
        return run_replay(args.pytest_args)
    except HarnessError as error:
        print(f"llm-cache-harness: error: {error}", file=sys.stderr)
        return 2


def add_bisect_parser(verbs) -> None:
    bisect = verbs.add_parser("bisect", help="the vllm suites over a range of vLLM releases")
    bisect.add_argument("--from", dest="first", default="0.10.2", help="oldest release")
    bisect.add_argument("--to", dest="last", default="0.33.0", help="newest release")
    bisect.add_argument("--releases", help="comma-separated releases to run instead")
    bisect.add_argument("--linear", action="store_true", help="run every release in range")
    bisect.add_argument("--venv-dir", default=".nox/bisect", help="one venv per release here")
    bisect.add_argument("--reproducer-dir", default="fixtures/reproducers/found/bisect")
    bisect.add_argument("--report", default="bisect-report.md")
    bisect.add_argument("pytest_args", nargs=argparse.REMAINDER)


def run_hunt(args: argparse.Namespace) -> int:
    from lch.hunt import Hunt

    budget_s = parse_budget(args.budget)
    targets = args.target or ["native"]
    for name in targets:
        parse_target(name)
    # The one draw outside Hypothesis: the master seed, printed first so a hunt can be rerun.
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(2**32)
    print(f"SEED={seed}", flush=True)
    if args.workers < 1:
        raise HarnessError(f"--workers {args.workers}: give 1 or more")
    if args.workers > 1:
        return run_hunt_workers(args, targets, seed, budget_s)
    hunt = Hunt(targets=targets, subsystems=args.subsystem, budget_s=budget_s, seed=seed,
                reproducer_dir=args.reproducer_dir, report_dir=args.report_dir,
                engine=args.engine, database=args.db)
    report = hunt.run()
    return 1 if report.failures else 0


def run_hunt_workers(args: argparse.Namespace, targets: list[str], seed: int,
                     budget_s: float) -> int:
    """Several hunt processes (``lch/workers.py``), one merged report."""
    import json
    from pathlib import Path

    from lch.hunt import _atomic_write, render_markdown
    from lch.workers import run_workers
    from properties.machines import MACHINES

    common = ["--budget", args.budget, "--engine", args.engine,
              "--reproducer-dir", args.reproducer_dir,
              *(arg for t in targets for arg in ("--target", t)),
              *(["--db", args.db] if args.db else [])]
    subsystems = args.subsystem or list(MACHINES)
    merged = run_workers(common, subsystems, args.workers, seed, budget_s, args.report_dir)
    out = Path(args.report_dir)
    lines = [render_markdown(merged), "", "| worker | seed | subsystems | examples | steps | "
             "steps/s | outcome |", "|---|---|---|---|---|---|---|"]
    lines += [f"| {w['worker']} | {w['seed']} | {', '.join(w['subsystems'])} | "
              f"{w['examples']} | {w['steps']} | {w['steps_per_s']} | {w['outcome']} |"
              for w in merged["workers"]]
    total = merged["total"]
    lines.append(f"\nAll workers: {total['steps']} steps in {total['wall_s']} s, "
                 f"{total['steps_per_s']} steps/s.")
    text = "\n".join(lines) + "\n"
    _atomic_write(out / "hunt-report.json", json.dumps(merged, indent=2) + "\n")
    _atomic_write(out / "hunt-report.md", text)
    print(text, flush=True)
    if any(not w["outcome"].startswith("done") for w in merged["workers"]):
        return 3                 # a worker crashed or hung: its pairs were not fully hunted
    return 1 if any(p["failure"] for p in merged["pairs"]) else 0


def run_replay(pytest_args: list[str]) -> int:
    paths = [a for a in pytest_args if not a.startswith("-")] or ["fixtures/reproducers"]
    flags = [a for a in pytest_args if a.startswith("-")]
    command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *flags, *paths]
    code = subprocess.call(command)
    return 0 if code == 5 else code     # 5: no reproducers saved yet, nothing to replay


if __name__ == "__main__":
    sys.exit(main())
