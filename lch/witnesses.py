"""The record of the property witnesses: which witness each declared property has, and how
long the witness suites take (``python -m lch.witnesses``).

Runs the fast witness suite (``properties/test_property_witnesses.py``) and, with ``--vllm``,
the vLLM mutant witnesses (``lch/test_mutant_witnesses.py --target vllm``, targets required),
each in its own pytest process, timed; writes ``results/witnesses/property-witnesses.json``
(``--record-dir``) with one item per declared (subsystem, property) and one per suite.
``docs/property-witnesses.md`` renders it (``python -m lch.records render``).
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time

from lch import records
from properties.witnesses.coverage import KINDS, table

FAST = ["properties/test_property_witnesses.py"]
VLLM = ["--target", "vllm", "lch/test_mutant_witnesses.py"]


def run_suite(name: str, args: list[str], env: dict) -> dict:
    """One pytest process: its outcome, counts and wall time."""
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args]
    started = time.monotonic()
    done = subprocess.run(command, cwd=records.ROOT, env={**os.environ, **env},
                          capture_output=True, text=True)
    wall = time.monotonic() - started
    tail = (done.stdout.strip().splitlines() or [""])[-1]
    counts = {word: int(n) for n, word in re.findall(r"(\d+) (passed|failed|skipped|error)",
                                                     tail)}
    return {"id": f"suite {name}", "suite": name, "command": " ".join(command[1:]),
            "outcome": "pass" if done.returncode == 0 else "fail", "wall_s": round(wall, 1),
            "counts": counts, "summary_line": tail}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lch.witnesses",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--vllm", action="store_true",
                        help="also run the vLLM mutant witnesses (vLLM 0.33.0 installed)")
    parser.add_argument("--record-dir", default=str(records.RESULTS),
                        help="where the record goes (default: results/)")
    args = parser.parse_args(argv)
    started, clock = records.now(), time.monotonic()
    rows = table()
    base = {"HYPOTHESIS_PROFILE": "ci", "VLLM_TARGET_DEVICE": "cpu"}
    suites = [run_suite("fast", FAST, base)]
    vllm = None
    if args.vllm:
        suites.append(run_suite("vllm", VLLM, {**base, "LCH_REQUIRE_TARGETS": "1"}))
        from sim.vllm.release import release_or_unknown
        vllm = {"version": release_or_unknown()}
    for suite in suites:
        print(f"{suite['suite']}: {suite['outcome']} in {suite['wall_s']} s "
              f"({suite['summary_line']})")
    summary = {"properties": len(rows),
               "unwitnessed": [f"{r['subsystem']}/{r['property']}" for r in rows
                               if not any(r[k] for k in KINDS)],
               "by_kind": {k: sum(bool(r[k]) for r in rows) for k in KINDS},
               "suites": {s["suite"]: {"outcome": s["outcome"], "wall_s": s["wall_s"]}
                          for s in suites}}
    items = [{"id": f"{r['subsystem'] or '*'}/{r['property']}", **r} for r in rows] + suites
    command = "python -m lch.witnesses" + (" --vllm" if args.vllm else "")
    record = records.envelope("witnesses", "property-witnesses", command, vllm=vllm,
                              wall_s=time.monotonic() - clock, summary=summary, items=items,
                              started=started)
    print(f"record: {records.write(record, args.record_dir)}")
    return 0 if all(s["outcome"] == "pass" for s in suites) and not summary["unwitnessed"] \
        else 1


if __name__ == "__main__":
    sys.exit(main())
