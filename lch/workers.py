"""``hunt --workers N``: one hunt process per worker, each on its own subsystems and derived
seed, merged into one report.

Why processes and not threads: the machines are pure Python, so only processes use more than
one core; and a worker that crashes or hangs must not take the others' findings with it. Why
not pytest-xdist: a hunt is budgeted by time, not a list of tests, and reports per pair.
Workers on several machines share failures through ``--db redis://...`` (every process uses
the same example database), so a cluster needs no scheduler of its own: each node runs the
same ``nox -s hunt`` with the shared database (README, "Hunting on many machines").
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

from attrs import define

GRACE_S = 60.0          # beyond the budget before a worker is told to stop (SIGTERM), and
#                         again before one that did not is killed (SIGKILL)
# A worker's budget starts when its search does (it prints SEED=...), after its setup: vLLM's
# import takes 10-20 s on an idle machine, minutes on a loaded one. Setup alone may take this
# long before the worker counts as hung.
SETUP_S = 600.0


@define
class Worker:
    index: int
    seed: int
    subsystems: list[str]
    report_dir: Path
    process: subprocess.Popen | None = None
    log_offset: int = 0
    outcome: str = "running"
    searching_since: float | None = None     # when its log said SEED=: setup is over
    stopped_at: float | None = None          # when the watch told it to stop (SIGTERM)


def plan(subsystems: list[str], workers: int, seed: int) -> list[tuple[int, list[str]]]:
    """(derived seed, subsystems) per worker: subsystems dealt round-robin; with more workers
    than subsystems, workers share a subsystem on different seeds."""
    rng = random.Random(seed)
    if workers <= len(subsystems):
        shares = [subsystems[i::workers] for i in range(workers)]
    else:
        shares = [[subsystems[i % len(subsystems)]] for i in range(workers)]
    return [(rng.randrange(2**32), share) for share in shares]


def run_workers(argv_common: list[str], subsystems: list[str], workers: int, seed: int,
                budget_s: float, report_dir: str, planned: list) -> dict:
    """Run the workers to the end (or to Ctrl-C / SIGTERM); returns the merged report."""
    out = Path(report_dir) / "workers"
    out.mkdir(parents=True, exist_ok=True)
    crew = [Worker(i, s, share, out / f"w{i}") for i, (s, share) in
            enumerate(plan(subsystems, workers, seed))]
    for w in crew:
        command = [sys.executable, "-m", "lch", "hunt", *argv_common, "--workers", "1",
                   "--seed", str(w.seed), "--report-dir", str(w.report_dir),
                   *(arg for s in w.subsystems for arg in ("--subsystem", s))]
        log = open(out / f"w{w.index}.log", "wb")  # noqa: SIM115 - the child owns it
        w.process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT,
                                     start_new_session=True)
        print(f"worker {w.index}: seed {w.seed}, {', '.join(w.subsystems)}", flush=True)
    began = time.monotonic()
    # SIGTERM (a CI timeout) stops the workers as Ctrl-C does: they write partial reports.
    # Ctrl-C gets the same handler, not Python's default: a process started with SIGINT
    # ignored (a background job, a test runner's worker) would otherwise never stop on it,
    # where a one-worker hunt (``interrupts_as_keyboard_interrupt``) does.
    previous = signal.signal(signal.SIGTERM, _raise_interrupt)
    previous_int = signal.signal(signal.SIGINT, _raise_interrupt)
    try:
        _watch(crew, out, began, budget_s)
    except KeyboardInterrupt:
        signal.signal(signal.SIGINT, signal.SIG_IGN)      # a second Ctrl-C cannot tear it
        for w in crew:
            if w.process.poll() is None:
                _signal(w, signal.SIGTERM)
                w.outcome = "interrupted"
        for w in crew:
            try:
                w.process.wait(timeout=GRACE_S)
            except subprocess.TimeoutExpired:
                _signal(w, signal.SIGKILL)
                w.process.wait()
    finally:
        signal.signal(signal.SIGTERM, previous)
        signal.signal(signal.SIGINT, previous_int)
    return merge(crew, seed, budget_s, time.monotonic() - began, planned)


def _raise_interrupt(signum, frame) -> None:
    raise KeyboardInterrupt


def _watch(crew: list[Worker], out: Path, began: float, budget_s: float) -> None:
    """Wait for the workers. One still running ``GRACE_S`` past its budget (counted from its
    search's start, or past ``SETUP_S`` of setup) is told to stop as Ctrl-C would (SIGTERM:
    it writes its report, its findings in it); one still running ``GRACE_S`` after that is
    killed, and its last checkpoint (the report as of its last finding) is what is left. A
    loaded machine makes a minimizing worker overrun; its findings are not lost for that."""
    while any(w.process.poll() is None for w in crew):
        _echo(crew, out)
        now = time.monotonic()
        for w in crew:
            if w.process.poll() is not None:
                continue
            start = w.searching_since if w.searching_since is not None else began + SETUP_S
            if w.stopped_at is None and now > start + budget_s + GRACE_S:
                _signal(w, signal.SIGTERM)
                w.stopped_at = now
                w.outcome = ("stopped: still running past the budget and a grace period "
                             "(its report as it stopped kept)"
                             if w.searching_since is not None else
                             f"hung: no search started within {SETUP_S:.0f} s of setup")
            elif w.stopped_at is not None and now > w.stopped_at + GRACE_S:
                _signal(w, signal.SIGKILL)
                if w.searching_since is not None:
                    kept = ("its report as of its last finding kept" if
                            (w.report_dir / "hunt-report.json").exists() else
                            "no finding before it, so no report")
                    w.outcome = f"hung: killed after the budget and two grace periods ({kept})"
        time.sleep(0.5)
    for w in crew:
        w.process.wait()
        if w.outcome == "running":
            code = w.process.returncode
            w.outcome = {0: "done", 1: "done (found failures)"}.get(
                code, f"crashed (exit {code}): see workers/w{w.index}.log")
    _echo(crew, out)


def _signal(w: Worker, signum: int) -> None:
    """``signum`` to the worker's process group; one that ended since its poll is gone."""
    try:
        os.killpg(w.process.pid, signum)
    except ProcessLookupError:
        pass


def _echo(crew: list[Worker], out: Path) -> None:
    """Each worker's new progress lines, prefixed with its number."""
    for w in crew:
        log = out / f"w{w.index}.log"
        with open(log, "rb") as f:
            f.seek(w.log_offset)
            chunk = f.read()
        complete = chunk[:chunk.rfind(b"\n") + 1]
        w.log_offset += len(complete)
        for line in complete.decode(errors="replace").splitlines():
            if line.startswith("SEED=") and w.searching_since is None:
                w.searching_since = time.monotonic()
            if line.startswith("["):
                print(f"[w{w.index}] {line}", flush=True)


def merge(crew: list[Worker], seed: int, budget_s: float, wall_s: float,
          planned: list) -> dict:
    """One report (``lch/report.py``'s format) from the workers' reports: per pair the sums,
    the first failure and replay, the hazards no worker reached; the pairs no worker ran,
    from the plan; per worker its figures and outcome; totals over the wall time."""
    pairs: dict[tuple[str, str], dict] = {}
    per_worker, reports = [], []
    for w in crew:
        path = w.report_dir / "hunt-report.json"
        data = json.loads(path.read_text()) if path.exists() else {"pairs": []}
        reports.append(data)
        steps = sum(p["steps"] for p in data["pairs"])
        per_worker.append({"worker": w.index, "seed": w.seed, "subsystems": w.subsystems,
                           "outcome": w.outcome, "steps": steps,
                           "examples": sum(p["examples"] for p in data["pairs"]),
                           "steps_per_s": round(steps / wall_s) if wall_s else 0})
        for p in data["pairs"]:
            _add_pair(pairs, p)
    for row in planned:                  # pairs no worker ran: not implemented, ...
        pairs.setdefault((row.subsystem, row.target), {
            "subsystem": row.subsystem, "target": row.target, "result": row.status,
            "why": row.why, "examples": 0, "steps": 0, "rounds": 0, "seconds": 0.0,
            "steps_per_s": 0, "events": {}, "hazards_never_reached": [], "failure": None,
            "findings": [], "accepted": [], "unconfirmed": 0, "cut_rounds": 0,
            "database_replay": None, "database_examples": 0, "trace_hash": None})
    for p in pairs.values():
        p["steps_per_s"] = round(p["steps"] / p["seconds"]) if p["seconds"] else 0
    total = sum(w["steps"] for w in per_worker)
    first = next((r for r in reports if "command" in r), {})
    return {"seed": seed, "budget_s": budget_s, "examples": first.get("examples"),
            "command": first.get("command", ""),
            # A worker the watch stopped past its budget reports itself interrupted: the hunt
            # was not (its findings are merged; the outcome says it was stopped).
            "interrupted": any(r.get("interrupted") and w.stopped_at is None
                               for w, r in zip(crew, reports, strict=True))
            or any(w.outcome == "interrupted" for w in crew),
            "elapsed_s": round(wall_s, 2),
            "setup_s": max((r.get("setup_s", 0.0) for r in reports), default=0.0),
            "vllm": next((r["vllm"] for r in reports if r.get("vllm")), None),
            "pairs": sorted(pairs.values(), key=lambda p: (p["subsystem"], p["target"])),
            "workers": per_worker,
            "total": {"steps": total, "wall_s": round(wall_s, 1),
                      "steps_per_s": round(total / wall_s) if wall_s else 0}}


def _add_pair(pairs: dict, p: dict) -> None:
    key = (p["subsystem"], p["target"])
    if key not in pairs:
        pairs[key] = {**p, "events": dict(p["events"]),
                      "hazards_never_reached": list(p["hazards_never_reached"]),
                      "findings": [dict(f) for f in p.get("findings", [])],
                      "accepted": [dict(a) for a in p.get("accepted", [])]}
        return
    into = pairs[key]
    for field in ("examples", "steps", "rounds", "seconds", "database_examples",
                  "unconfirmed", "cut_rounds"):
        into[field] = into.get(field, 0) + p.get(field, 0)
    # Workers sharing a pair (different seeds) may find one divergence each: one entry per
    # finding id, seen counts summed; the first worker's reproducer stays.
    for into_list, more in ((into["findings"], p.get("findings", [])),
                            (into["accepted"], p.get("accepted", []))):
        by_id = {f["id"]: f for f in into_list}
        for f in more:
            if f["id"] in by_id:
                by_id[f["id"]]["seen"] += f["seen"]
            else:
                into_list.append(dict(f))
                by_id[f["id"]] = into_list[-1]
    into["events"] = dict(Counter(into["events"]) + Counter(p["events"]))
    into["hazards_never_reached"] = [h for h in into["hazards_never_reached"]
                                     if h in p["hazards_never_reached"]]
    into["failure"] = into["failure"] or p["failure"]
    into["accepted"].sort(key=lambda a: a["id"])
    into["database_replay"] = into["database_replay"] or p["database_replay"]
    ran = ("failed", "accepted only", "no failure")        # worst first
    if p["result"] in ran:
        into["result"] = "failed" if into["findings"] or into["failure"] else min(
            (r for r in (into["result"], p["result"]) if r in ran), key=ran.index)
    into["trace_hash"] = None            # several streams: no single trace
