"""Command line: ``hunt`` (search, report, reproducers), ``replay``, ``bisect``, ``history``.

    python -m lch.cli hunt --budget 60s [--target native] [--subsystem encoder_cache]
    python -m lch.cli hunt --seed 7 --examples 300 --no-db        (the same hunt, bit for bit)
    python -m lch.cli replay [pytest args...]                      (pytest's own arguments)
    python -m lch.cli bisect --from 0.10.2 --to 0.33.0 [--releases A,B]
    python -m lch.cli history --releases 0.10.2,0.33.0 [--from X --to Y]
    python -m lch.cli hunt --workers 4 --engine explore --db redis://HOST:6379

Exit codes: 0 every pair asked for ran and found nothing new (what --accept names may have
been seen); 1 a new divergence was found; 2 bad input (a bad --accept too), an
unwritable directory or a target that cannot run (see --allow-skip); 3 a pair asked for ran no
example (budget too small) or could not run; 130 interrupted (Ctrl-C, SIGTERM): the partial
report and every reproducer found so far are written.

The entry points sit on top of everything else: they drive the state machines in
``properties/`` (imported lazily) against the targets of ``sim/targets.py``.
"""

from __future__ import annotations

import argparse
import os
import random
import re
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from sim.errors import HarnessError
from sim.manifests import all_manifests, hunt_names
from sim.native.bugs import BUG_SWITCHES, bug_subsystems
from sim.targets import parse_target

# What ``hunt --subsystem`` takes: each subsystem, and its further machines as
# SUBSYSTEM.MACHINE (``Subsystem.machines``).
HUNT_NAMES = tuple(name for m in all_manifests() for name in hunt_names(m))

UNITS_S = {"": 1, "s": 1, "m": 60, "h": 3600}
EXIT_FAILURE, EXIT_ERROR, EXIT_INCOMPLETE, EXIT_INTERRUPTED = 1, 2, 3, 130
DEFAULT_REPRODUCER_DIR = "fixtures/reproducers/found"


def parse_budget(text: str) -> float:
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smh]?)\s*", text)
    if not match or float(match.group(1)) <= 0:
        raise HarnessError(f"invalid budget {text!r}: give a positive duration such as "
                           "30s, 5m or 1h")
    return float(match.group(1)) * UNITS_S[match.group(2)]


def main(argv: list[str] | None = None) -> int:
    started = time.monotonic()     # setup (vLLM's import) is timed apart from the budget
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["replay"] and not {"-h", "--help"} & set(argv[1:2]):
        return run_replay(argv[1:])      # pytest's arguments, untouched (argparse mangles them)
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        import fixtures.profiles  # noqa: F401 - the dev / ci / hunt Hypothesis profiles
        if args.verb == "hunt":
            return run_hunt(args, argv, started)
        if args.verb == "history":
            from lch.history import main as run_history
            return run_history(args)
        from lch.bisect import main as run_bisect
        return run_bisect(args)
    except HarnessError as error:
        print(f"llm-cache-harness: error: {error}", file=sys.stderr)
        return EXIT_ERROR


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="llm-cache-harness", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    verbs = parser.add_subparsers(dest="verb", required=True)
    add_hunt_parser(verbs)
    verbs.add_parser("replay", help="run the saved reproducers with pytest",
                     description="replay [pytest args...]: runs pytest on fixtures/reproducers "
                     "(or the paths given) with every argument passed through untouched, "
                     "e.g. `replay fixtures/reproducers/found -k decode`, `replay -- -k "
                     "seed001`. Exit 0 only when tests ran and passed; 5 when none matched; 3 "
                     "when some could not run (skipped), unless --allow-skip (then 3 only "
                     "when none ran).")
    add_bisect_parser(verbs)
    return parser


def hunt_epilog() -> str:
    from lch.coverage import coverage_table
    from sim.vllm.release import installed_release
    found = installed_release()
    bugs = "\n".join(f"  native:{b:<26} acts in {', '.join(bug_subsystems(b))}"
                     for b in sorted(BUG_SWITCHES))
    return f"""targets (--target, repeatable; default native):
  native                          in-tree torch implementations (sim/native/)
  vllm                            the installed vLLM's real classes on CPU ({
      'installed: ' + found if found else 'not installed: nox -s vllm installs one'})
  native:<bug-id>                 native with one catalogued bug on; hunts only the
                                  subsystems the bug acts in
  native:<bug-id>+<bug-id>        several bugs on at once (the hunt reports each)
{bugs}

coverage (which target implements which subsystem; the default hunts every pair marked yes
and lists the others as not implemented in the report):
{coverage_table()}
  further machines, each a pair of its own (--subsystem SUBSYSTEM.MACHINE):
  {', '.join(n for n in HUNT_NAMES if '.' in n)}

examples:
  python -m lch.cli hunt --budget 30s --target native --target vllm
  python -m lch.cli hunt --target native:enc-stale-freed --budget 10s
  python -m lch.cli hunt --target vllm --vllm-path ~/src/vllm     (your checkout under test)
  python -m lch.cli hunt --seed 7 --examples 200 --no-db          (reproducible to the bit)
  python -m lch.cli hunt --target vllm --accept encoder_cache/slots-agree/1a2b3c4d
                                  (a bug you know about: counted, the hunt looks past it)

A divergence does not end the hunt: it is minimized, reported with its finding id and
reproducer, accepted, and the hunt goes on to the next one (each reported once).
"""


def add_hunt_parser(verbs) -> None:
    hunt = verbs.add_parser("hunt", help="search for failures for a time budget",
                            epilog=hunt_epilog(),
                            formatter_class=argparse.RawDescriptionHelpFormatter)
    hunt.add_argument("--budget", default="60s", help="wall-clock budget (30s, 5m, 1h)")
    hunt.add_argument("--examples", type=int, metavar="M",
                      help="run exactly M examples per pair instead of a budget (no clock: "
                           "with --seed and --no-db the hunt repeats bit for bit)")
    hunt.add_argument("--target", action="append", metavar="NAME",
                      help="target (repeatable; default native): see the list below")
    hunt.add_argument("--subsystem", action="append", choices=HUNT_NAMES, metavar="NAME",
                      help="subsystem, or one of its further machines as SUBSYSTEM.MACHINE "
                           f"(repeatable): {', '.join(HUNT_NAMES)}; default every one the "
                           "targets implement")
    hunt.add_argument("--accept", action="append", metavar="ID", default=[],
                      help="a divergence you know about (repeatable): its finding id as the "
                           "report prints it (subsystem/property/hash) or its reproducer "
                           "file; the hunt counts it and looks for the next one")
    hunt.add_argument("--seed", type=int, help="master seed (default: drawn and printed)")
    hunt.add_argument("--workers", type=int,
                      help="hunt processes, each on its own subsystems and derived seed "
                           "(default: every core with --budget; 1 with --examples, which "
                           "repeats a hunt bit for bit)")
    hunt.add_argument("--engine", choices=("hypothesis", "explore"), default="hypothesis",
                      help="hypothesis: Hypothesis's engine; explore: seeded random walks over "
                           "the same rules, several times faster, failures minimized the same")
    hunt.add_argument("--db", metavar="URL_OR_DIR",
                      help="example database shared by hunts: redis://HOST:PORT (every worker "
                           "replays what another found) or a directory (default .hypothesis/)")
    hunt.add_argument("--no-db", action="store_true",
                      help="neither read nor write the example database (.hypothesis/)")
    hunt.add_argument("--allow-skip", action="store_true",
                      help="a target that cannot run here (vLLM missing) is reported as "
                           "'could not run' instead of stopping the hunt")
    hunt.add_argument("--vllm-path", metavar="PATH",
                      help="a vLLM checkout (or PR branch) to test: its Python files over the "
                           "installed release's wheel, nothing compiled")
    hunt.add_argument("--reproducer-dir", default=os.environ.get(
        "LCH_REPRODUCER_DIR", DEFAULT_REPRODUCER_DIR), help="where reproducers go")
    hunt.add_argument("--report-dir", default=".",
                      help="where hunt-report.{md,json} (and hunt-vllm.log) go")


def add_release_options(parser, what: str) -> None:
    """The options ``bisect`` and ``history`` share: which releases, where their venvs go."""
    parser.add_argument("--from", dest="first", default="0.10.2", help="oldest release")
    parser.add_argument("--to", dest="last", default="0.33.0", help="newest release")
    parser.add_argument("--releases", help="comma-separated releases to run instead")
    parser.add_argument("--venv-dir", default=os.environ.get("LCH_VENV_DIR", ".nox/bisect"),
                        help="one cached venv per release here (LCH_VENV_DIR)")
    parser.add_argument("--reproducer-dir", default=f"fixtures/reproducers/found/{what}",
                        help="reproducers and pytest logs, one folder per release")
    parser.add_argument("pytest_args", nargs=argparse.REMAINDER,
                        help="after --: passed to pytest for every release")


def add_bisect_parser(verbs) -> None:
    bisect = verbs.add_parser("bisect", help="per subsystem, the releases where it changes")
    add_release_options(bisect, "bisect")
    bisect.add_argument("--linear", action="store_true", help="run every release in range")
    bisect.add_argument("--subsystem", action="append",
                        help="subsystem (repeatable): encoder_cache, scheduler_pass, "
                             "tiered_lookup, connector_scans; default all")
    bisect.add_argument("--report", default="bisect-report.md")
    history = verbs.add_parser("history", help="every subsystem over releases: a matrix")
    add_release_options(history, "history")
    history.add_argument("--report-dir", default=".",
                         help="where history-report.{md,json} go")
    history.add_argument("--hunt-budget", default=None, metavar="DURATION",
                         help="after the suites, hunt every subsystem the release has for "
                              "this long per cell (seed 0; e.g. 90s, 3m; default "
                              "DEFAULT_HUNT_BUDGET of lch/history.py): every divergence per "
                              "cell, one group per cause")
    history.add_argument("--hunt-examples", type=int, default=0, metavar="N",
                         help="hunt each cell for N examples instead of a budget (a hunt "
                              "fixed by count: the same findings on any machine)")
    history.add_argument("--no-hunt", action="store_true",
                         help="the suites alone (each cell stops at its first divergence)")
    history.add_argument("--record-dir", default="results",
                         help="the result record goes to DIR/history/ (empty: none)")
    history.add_argument("--subsystem", action="append",
                         help="column (repeatable): encoder_cache, encoder_decoder_cache, "
                              "scheduler_pass, tiered_lookup, connector_scans, prefix_cache; "
                              "default all. Only its suites and hunts run, only its cells "
                              "are recorded")


def planned_machines() -> dict[str, tuple[str, ...]]:
    """Every machine a hunt can run (hunt name -> the target bases it builds)."""
    from properties.machines import HUNT_MACHINES, target_bases
    return {name: target_bases(name) for name in HUNT_MACHINES}


def run_hunt(args: argparse.Namespace, argv: list[str], started: float) -> int:
    from lch.coverage import plan
    from lch.hunt import Hunt
    from lch.report import check_writable
    from properties.machines import import_all_machines

    budget_s = parse_budget(args.budget)
    if args.examples is not None and args.examples < 1:
        raise HarnessError(f"--examples must be at least 1, got {args.examples}")
    targets = args.target or ["native"]
    for name in targets:
        parse_target(name)
    from properties.findings import parse_accept
    accept = tuple(dict.fromkeys(i for text in args.accept for i in parse_accept(text)))
    check_writable(args.reproducer_dir, "--reproducer-dir")
    check_writable(args.report_dir, "--report-dir")
    if args.no_db or args.db:
        from hypothesis import settings

        from fixtures.profiles import example_database
        settings.register_profile("hunt", settings.get_profile("hunt"),
                                  database=None if args.no_db else example_database(args.db))
    if args.workers is None:
        args.workers = 1 if args.examples is not None else (os.cpu_count() or 1)
    if args.workers < 1:
        raise HarnessError(f"--workers {args.workers}: give 1 or more")
    if args.workers > 1:
        return run_hunt_workers(args, targets, argv)
    hunt = None
    try:
        with interrupts_as_keyboard_interrupt(lambda: hunt):
            wants_vllm = prepare_vllm(targets, args)
            pairs = plan(targets, args.subsystem, planned_machines(), allow_skip=args.allow_skip)
            import_all_machines()     # torch and the machines: setup, not the search's time
            vllm_info = describe_vllm(pairs) if wants_vllm else None
            # The one draw outside Hypothesis: the master seed, printed first so a hunt can
            # be rerun.
            seed = args.seed if args.seed is not None else \
                random.SystemRandom().randrange(2**32)
            print(f"SEED={seed}", flush=True)
            if vllm_info:
                vllm_info["log"] = args.vllm_log
                from sim.vllm.overlay import commit_text
                print(f"vLLM under test: {vllm_info['version']} at {vllm_info['path']}"
                      f" ({commit_text(vllm_info)}); its log: "
                      f"{vllm_info['log']}", flush=True)
            hunt = Hunt(pairs, seed, args.reproducer_dir, budget_s=budget_s,
                        examples=args.examples, use_db=not args.no_db,
                        setup_s=time.monotonic() - started,
                        command=shlex.join(["python", "-m", "lch.cli", *argv]),
                        progress=lambda line: print(line, flush=True),
                        engine=args.engine, accept=accept,
                        checkpoint=lambda report: checkpoint(report, vllm_info, args))
            report = hunt.run()
    except KeyboardInterrupt:
        if hunt is None or hunt.report is None:
            print("llm-cache-harness: interrupted before the hunt started; nothing to report",
                  file=sys.stderr)
            return EXIT_INTERRUPTED
        report = hunt.report
        report.interrupted = True
    report.vllm = vllm_info
    if not report.interrupted:
        judge_on_release([f for p in report.pairs for f in [*p.findings, p.replayed] if f],
                         vllm_info)
    return finish(report, args)


def judge_on_release(findings: list[dict], vllm_info: dict | None) -> None:
    """Under ``--vllm-path``: mark each finding with what its reproducer does on the release
    alone (``on_release``: fails, passes, could not run); one the release fails too is the
    release's divergence, not the checkout's, and does not fail the hunt."""
    if not vllm_info or not vllm_info.get("checkout"):
        return
    mine = [f for f in findings if f.get("reproducer") and "on_release" not in f]
    if not mine:
        return
    from lch.baseline import on_release
    print(f"checking {len(mine)} finding(s) on vLLM {vllm_info['version']} without the "
          "checkout...", flush=True)
    verdicts = on_release(sorted({f["reproducer"] for f in mine}))
    for f in mine:
        f["on_release"] = verdicts.get(f["reproducer"], "could not run: not checked")


def checkouts_own(findings: list[dict]) -> list[dict]:
    """The findings that count against what is under test: all, except under --vllm-path the
    ones the release has too."""
    return [f for f in findings if f.get("on_release") != "fails"]


def run_hunt_workers(args: argparse.Namespace, targets: list[str], argv: list[str]) -> int:
    """Several hunt processes (``lch/workers.py``), each on its share of the runnable
    subsystems, one merged report."""
    import json

    from lch.coverage import RUN, plan
    from lch.report import atomic_write, render_markdown
    from lch.workers import run_workers

    planned = plan(targets, args.subsystem, planned_machines(), allow_skip=args.allow_skip)
    subsystems = list(dict.fromkeys(p.subsystem for p in planned if p.status == RUN))
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(2**32)
    print(f"SEED={seed}", flush=True)
    passed = _without(argv, {"--workers": 1, "--seed": 1, "--subsystem": 1,
                             "--report-dir": 1})[1:]       # [1:]: drop the verb
    merged = run_workers(passed, subsystems, args.workers, seed, parse_budget(args.budget),
                         args.report_dir, [p for p in planned if p.status != RUN])
    merged["command"] = shlex.join(["python", "-m", "lch.cli", *argv])
    found = [f for p in merged["pairs"] for f in [*p["findings"], p["database_replay"]] if f]
    if not merged["interrupted"]:
        judge_on_release(found, merged.get("vllm"))
    lines = [render_markdown(merged), "| worker | seed | subsystems | examples | steps | "
             "steps/s | outcome |", "|---|---|---|---|---|---|---|"]
    lines += [f"| {w['worker']} | {w['seed']} | {', '.join(w['subsystems'])} | "
              f"{w['examples']} | {w['steps']} | {w['steps_per_s']} | {w['outcome']} |"
              for w in merged["workers"]]
    total = merged["total"]
    lines.append(f"\nAll workers: {total['steps']} steps in {total['wall_s']} s, "
                 f"{total['steps_per_s']} steps/s.")
    text = "\n".join(lines) + "\n"
    out = Path(args.report_dir)
    atomic_write(out / "hunt-report.json", json.dumps(merged, indent=2) + "\n")
    atomic_write(out / "hunt-report.md", text)
    print(text, flush=True)
    if merged["interrupted"]:
        print("llm-cache-harness: interrupted: partial report in "
              f"{out / 'hunt-report.md'}", file=sys.stderr)
        return EXIT_INTERRUPTED
    if checkouts_own(found):
        return EXIT_FAILURE
    if any(not w["outcome"].startswith("done") for w in merged["workers"]) or any(
            p["result"] not in ("failed", "no failure", "accepted only") and not (
                args.allow_skip and p["result"] == "could not run")
            and p["result"] in ("not run", "could not run") for p in merged["pairs"]):
        return EXIT_INCOMPLETE   # a worker crashed or hung, or a pair asked for did not run
    return 0


def _without(argv: list[str], options: dict[str, int]) -> list[str]:
    """``argv`` without the named options (and their values), ``--name=value`` too."""
    out, skip = [], 0
    for arg in argv:
        if skip:
            skip -= 1
            continue
        name = arg.split("=", 1)[0]
        if name in options:
            skip = 0 if "=" in arg else options[name]
            continue
        out.append(arg)
    return out


def checkpoint(report, vllm_info: dict | None, args) -> None:
    """The report so far, marked partial (``lch/workers.py`` keeps a killed worker's
    findings from it); the hunt's end overwrites it."""
    from lch.report import write_report
    report.vllm, report.partial = vllm_info, True
    try:
        write_report(report, args.report_dir, summary=False)
    finally:
        report.partial = False


def finish(report, args) -> int:
    """Write the report with signals held off (a second Ctrl-C cannot tear it), pick the exit."""
    from lch.report import write_report
    held = {s: signal.signal(s, signal.SIG_IGN) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        print(write_report(report, args.report_dir), end="", flush=True)
    finally:
        for sig, handler in held.items():
            signal.signal(sig, handler)
    if report.interrupted:
        print("llm-cache-harness: interrupted: partial report in "
              f"{os.path.join(args.report_dir, 'hunt-report.md')}", file=sys.stderr)
        return EXIT_INTERRUPTED
    if checkouts_own([f for p in report.failures for f in [*p.findings, p.replayed] if f]):
        return EXIT_FAILURE
    unchecked = [p for p in report.unchecked
                 if not (args.allow_skip and p.result == "could not run")]
    if unchecked:
        names = ", ".join(f"{p.subsystem} x {p.target} ({p.result})" for p in unchecked)
        print(f"llm-cache-harness: incomplete: {names}; give a larger --budget or "
              "--examples", file=sys.stderr)
        return EXIT_INCOMPLETE
    return 0


class interrupts_as_keyboard_interrupt:
    """Ctrl-C and SIGTERM (a CI timeout) stop the hunt the same clean way: once the hunt runs,
    the first one sets its flag (it stops before its next example or minimizer step, without
    raising where a garbage-collector callback would swallow and print it); before that, or
    on a second one, ``KeyboardInterrupt`` is raised at once."""

    def __init__(self, current_hunt):
        self.current_hunt = current_hunt

    def __enter__(self):
        def interrupt(signum, frame):
            hunt = self.current_hunt()
            if hunt is None or hunt.report is None or hunt.interrupt_requested:
                raise KeyboardInterrupt
            hunt.interrupt()
        self._old = {s: signal.signal(s, interrupt) for s in (signal.SIGINT, signal.SIGTERM)}
        return self

    def __exit__(self, *exc):
        for sig, handler in self._old.items():
            signal.signal(sig, handler)
        return False


def prepare_vllm(targets: list[str], args) -> bool:
    """Before vLLM is imported: its logging goes to ``hunt-vllm.log`` (not the progress
    lines), and ``--vllm-path`` puts a checkout's Python files first. False when no vllm
    target was asked for."""
    if not any(parse_target(t).base == "vllm" for t in targets):
        if args.vllm_path:
            raise HarnessError("--vllm-path needs --target vllm")
        return False
    from sim.vllm import overlay
    args.vllm_log = os.path.join(args.report_dir, "hunt-vllm.log")
    overlay.log_to_file(args.vllm_log)
    if args.vllm_path:
        overlay.activate(args.vllm_path)
    return True


def describe_vllm(pairs) -> dict | None:
    """Which vLLM is under test (version, path, commit), when a vllm pair will run."""
    from lch.coverage import RUN
    if not any(p.status == RUN and parse_target(p.target).base == "vllm" for p in pairs):
        return None
    from sim.vllm import overlay
    return overlay.describe()


def run_replay(pytest_args: list[str]) -> int:
    """pytest on the saved reproducers, its arguments untouched (but ``--allow-skip``, ours);
    no path given: the ``fixtures/reproducers`` directory (as pytest's ``testpaths``, so
    ``-k x`` stays an option value). pytest's exit 5 (no tests ran) stays non-zero, with the
    reason; so does a run where a reproducer could not run (skipped: vLLM missing, a release
    without the class), exit 3, unless ``--allow-skip``: a replay that skipped is no pass."""
    if pytest_args[:1] == ["--"]:
        pytest_args = pytest_args[1:]
    allow_skip = "--allow-skip" in pytest_args
    pytest_args = [a for a in pytest_args if a != "--allow-skip"]
    with tempfile.TemporaryDirectory(prefix="lch-replay-") as tmp:
        junit = Path(tmp) / "replay.xml"
        command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider",
                   "-o", "testpaths=fixtures/reproducers", "--junitxml", str(junit),
                   *pytest_args]
        code = subprocess.call(command)
        ran, skipped = _junit_counts(junit)
    if code == 5:
        print("llm-cache-harness: replay ran no test: no reproducer matched "
              f"{shlex.join(pytest_args) or 'fixtures/reproducers'}", file=sys.stderr)
    elif code == 0 and skipped and (not ran or not allow_skip):
        reasons = "; ".join(sorted(set(skipped))[:3])
        print(f"llm-cache-harness: replay: {len(skipped)} reproducer(s) could not run "
              f"({reasons}), {ran} ran" + ("" if ran else ": nothing was checked")
              + ("" if allow_skip else "; pass --allow-skip to accept that"), file=sys.stderr)
        return 3
    return code


def _junit_counts(path: Path) -> tuple[int, list[str]]:
    """(tests that ran, the reasons of those skipped) from pytest's JUnit XML; an expected
    failure (a strict xfail) ran. JUnit XML because pytest writes it for every run without a
    plugin of ours in the reproducers' own test session."""
    import xml.etree.ElementTree as ElementTree
    if not path.exists():
        return 0, []
    ran, skipped = 0, []
    for case in ElementTree.parse(path).iter("testcase"):
        skip = case.find("skipped")
        if skip is not None and skip.get("type") != "pytest.xfail":
            skipped.append((skip.get("message") or "skipped").splitlines()[0][:120])
        else:
            ran += 1
    return ran, skipped


if __name__ == "__main__":
    sys.exit(main())
