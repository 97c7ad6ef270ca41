"""``bisect``: find, per subsystem, the releases where its outcome changes (a divergence
appears, changes property, or is fixed), running as few releases as it can.

    python -m lch.cli bisect --from 0.10.2 --to 0.33.0          # binary search between the ends
    python -m lch.cli bisect --releases 0.10.2,0.20.0,0.33.0     # just these, in order
    python -m lch.cli bisect --from 0.24.0 --to 0.33.0 --subsystem scheduler_pass

A release runs once for every subsystem (``history.run_release``: one cached venv, one pytest
run); a subsystem's state at a release is ``pass`` or the properties that diverged there.
Between two run releases whose states differ for some subsystem, the middle one runs, until
every change sits between neighbours: the report names the last release with the old state
and the first with the new one. When no subsystem differs between the ends, every release
between runs (a divergence may come and go in the middle); ``--linear`` always runs all.
"""

from __future__ import annotations

from pathlib import Path

from lch import venvs
from lch.history import SUITES, ReleaseRun, markdown, pytest_args, run_release, write_reports
from sim.files import atomic_write, check_writable


def bisect(releases: list[str], search: bool, venv_dir: Path, out_dir: Path,
           pytest_args: list[str], suites: dict[str, str]) -> list[ReleaseRun]:
    done: dict[int, ReleaseRun] = {}
    columns = list(dict.fromkeys(suites.values()))

    def run(k: int) -> ReleaseRun:
        if k not in done:
            print(f"vllm {releases[k]}: installing (or reusing) and running ...", flush=True)
            done[k] = run_release(releases[k], venv_dir, out_dir, pytest_args, suites)
            cells = ", ".join(f"{c}: {cell.text()}" for c, cell in done[k].cells.items())
            print(f"  {releases[k]}: {cells}", flush=True)
        return done[k]

    def differs(lo: int, hi: int) -> bool:
        return any(run(lo).state(c) is not None and run(hi).state(c) is not None
                   and run(lo).state(c) != run(hi).state(c) for c in columns)

    last = len(releases) - 1
    if not search or last < 1 or not differs(0, last):
        for k in range(len(releases)):
            run(k)
    else:
        pending = [(0, last)]
        while pending:
            lo, hi = pending.pop()
            if hi - lo > 1 and differs(lo, hi):
                mid = (lo + hi) // 2
                run(mid)
                pending += [(lo, mid), (mid, hi)]
    return [done[k] for k in sorted(done)]


def changes(runs: list[ReleaseRun], columns: list[str]) -> list[str]:
    """One line per change of a subsystem's state between two neighbouring runs."""
    lines = []
    for column in columns:
        known = [r for r in runs if r.state(column) is not None]
        for before, after in zip(known, known[1:], strict=False):
            old, new = before.state(column), after.state(column)
            if old == new:
                continue
            what = (f"divergence {new} appears" if old == "pass" else
                    f"divergence {old} fixed" if new == "pass" else f"{old} -> {new}")
            lines.append(f"- {column}: {what}: last {before.release} ({old}), "
                         f"first {after.release} ({new})")
    return lines


def main(args) -> int:
    releases = venvs.parse_releases(args.releases) if args.releases \
        else venvs.releases_between(args.first, args.last)
    suites = {path: column for path, column in SUITES.items()
              if not args.subsystem or column in args.subsystem}
    check_writable(Path(args.report).parent, "--report")      # before the first install
    check_writable(args.reproducer_dir, "--reproducer-dir")
    print(f"bisect over {len(releases)} release(s): {', '.join(releases)}", flush=True)
    runs = bisect(releases, not args.releases and not args.linear, Path(args.venv_dir),
                  Path(args.reproducer_dir), pytest_args(args), suites)
    columns = list(dict.fromkeys(suites.values()))
    found = changes(runs, columns)
    text = markdown(runs) + "\n## Where outcomes change\n\n" + \
        ("\n".join(found) if found else "- no subsystem changes between the runs") + "\n"
    write_reports(runs, Path(args.report).parent, Path(args.report).stem)
    atomic_write(args.report, text)
    print(text)
    return 1 if any(r.failed for r in runs) else 0
