"""Wall time of a test suite run serially and on every core (``nox -s bench -- --suites``).

The same pytest arguments run twice in this process's environment: once with xdist off
(``-p no:xdist``: one process, as ``LCH_WORKERS=0`` runs ``nox -s vllm``) and once with
``-n auto --dist loadgroup`` (what the nox sessions run). Both runs must end with the same
outcome counts: the derandomized ``ci`` profile gives each test the same examples whichever
worker runs it, so a difference is a defect of the parallel run, reported and failing this
command. The ratio serial / parallel is the figure; both times are measured in the same run on
the same machine, with its load average at the end in the record.

pytest's own ``--durations`` times tests, not a whole run with its worker start-up (each
worker imports vLLM once): hence a wall clock around two child processes.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import subprocess
import sys
import time

from lch import records

COUNTS = re.compile(r"(\d+) (passed|failed|skipped|xfailed|xpassed|errors?|deselected)")


def run_pytest(label: str, mode: list[str], args: list[str]) -> dict:
    """One pytest child: its wall time, exit code and outcome counts."""
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *mode, *args]
    began = time.monotonic()
    # Not an xdist worker's identity: run from inside one (this command's own tests under
    # ``pytest -n``), the serial child would inherit PYTEST_XDIST_WORKER and pass for a worker.
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_XDIST_")}
    done = subprocess.run(command, capture_output=True, text=True,
                          env={**env, "HYPOTHESIS_PROFILE": "ci"})
    wall = time.monotonic() - began
    lines = done.stdout.strip().splitlines() or [""]
    counts = {word.rstrip("s") if word.startswith("error") else word: int(n)
              for n, word in COUNTS.findall(lines[-1])}
    return {"id": f"{label} {'serial' if 'no:xdist' in mode else 'parallel'}",
            "mode": "serial" if "no:xdist" in mode else "parallel",
            "command": shlex.join(["python", *command[1:]]), "exit_code": done.returncode,
            "wall_s": round(wall, 1), "counts": counts, "summary_line": lines[-1]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lch.suite_times",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--label", required=True, help="the suite's name in the record "
                        "(e.g. vllm, tests)")
    parser.add_argument("--record-dir", help="write the record to DIR/bench/ (results/)")
    parser.add_argument("pytest_args", nargs="+", help="after --: the suite's pytest arguments")
    args = parser.parse_args(argv)
    if args.record_dir:
        from sim.files import check_writable
        check_writable(args.record_dir, "--record-dir")        # before the long work
    started, began = records.now(), time.monotonic()
    serial = run_pytest(args.label, ["-p", "no:xdist"], args.pytest_args)
    parallel = run_pytest(args.label, ["-n", "auto", "--dist", "loadgroup"], args.pytest_args)
    same = serial["counts"] == parallel["counts"] and \
        serial["exit_code"] == parallel["exit_code"]
    ratio = round(serial["wall_s"] / parallel["wall_s"], 2) if parallel["wall_s"] else None
    for run in (serial, parallel):
        print(f"{args.label} {run['mode']:8} {run['wall_s']:8.1f} s  {run['summary_line']}")
    print(f"{args.label}: serial / parallel = {ratio}x on {os.cpu_count()} cores"
          + ("" if same else "; OUTCOMES DIFFER between the serial and the parallel run"))
    if args.record_dir:
        record = records.envelope(
            "bench", f"suite-times-{args.label}",
            shlex.join(["python", "-m", "lch.suite_times", *(argv or sys.argv[1:])]),
            vllm=_vllm_version(args.pytest_args), wall_s=time.monotonic() - began,
            started=started, items=[serial, parallel],
            summary={"label": args.label, "serial_s": serial["wall_s"],
                     "parallel_s": parallel["wall_s"], "serial_over_parallel": ratio,
                     "same_outcomes": same})
        print(f"record: {records.write(record, args.record_dir)}")
    return 0 if same else 1


def _vllm_version(pytest_args: list[str]) -> dict | None:
    if "vllm" not in pytest_args:           # --target vllm
        return None
    from sim.vllm.release import release_or_unknown
    return {"version": release_or_unknown()}


if __name__ == "__main__":
    sys.exit(main())
