"""Hunt workers: a worker's budget starts when its search does, so a slow setup (vLLM's
import on a loaded machine) is not taken for a hang; a worker still running past its budget
is told to stop (its report is kept), and killed only if it does not."""

from __future__ import annotations

import json
import subprocess
import sys
import time

from lch import workers


def worker(tmp_path, index: int, script: str) -> workers.Worker:
    log = tmp_path / f"w{index}.log"
    with open(log, "wb") as out:
        process = subprocess.Popen([sys.executable, "-c", script], stdout=out,
                                   start_new_session=True)
    return workers.Worker(index, 0, ["encoder_cache"], tmp_path / f"w{index}",
                          process=process)


def test_a_slow_setup_is_not_a_hang_and_a_silent_search_is(tmp_path, monkeypatch):
    monkeypatch.setattr(workers, "GRACE_S", 1.0)
    slow_setup = worker(tmp_path, 0, "import time; time.sleep(3); print('SEED=1', flush=True)"
                                     "; time.sleep(0.5)")
    stuck = worker(tmp_path, 1, "print('SEED=2', flush=True); import time; time.sleep(60)")
    began = time.monotonic()
    workers._watch([slow_setup, stuck], tmp_path, began, budget_s=1.0)
    assert slow_setup.outcome == "done"                   # ran past began + budget + grace
    assert stuck.outcome.startswith("stopped: still running past the budget")
    assert time.monotonic() - began < 30


def test_a_worker_deaf_to_sigterm_is_killed_after_a_second_grace(tmp_path, monkeypatch):
    monkeypatch.setattr(workers, "GRACE_S", 1.0)
    deaf = worker(tmp_path, 0, "import signal, time; signal.signal(signal.SIGTERM, "
                               "signal.SIG_IGN); print('SEED=3', flush=True); time.sleep(60)")
    began = time.monotonic()
    workers._watch([deaf], tmp_path, began, budget_s=0.5)
    assert deaf.outcome.startswith("hung: killed after the budget and two grace periods")
    assert 2.5 <= time.monotonic() - began < 30


def test_a_stopped_workers_findings_are_merged_and_the_hunt_is_not_interrupted(tmp_path):
    """A worker stopped past its budget writes its report marked interrupted (as Ctrl-C
    would make it): its findings count, and the hunt as a whole was not interrupted."""
    finding = {"id": "scheduler_pass/slots-agree/0123abcd", "property": "slots-agree",
               "seen": 2, "calls": 3}
    pair = {"subsystem": "scheduler_pass", "target": "vllm", "result": "failed",
            "examples": 5, "steps": 50, "rounds": 1, "seconds": 9.0, "events": {},
            "hazards_never_reached": [], "failure": finding, "findings": [finding],
            "accepted": [], "database_replay": None, "trace_hash": "x"}
    stopped = workers.Worker(0, 1, ["scheduler_pass"], tmp_path / "w0", stopped_at=1.0,
                             outcome="stopped: still running past the budget")
    stopped.report_dir.mkdir()
    (stopped.report_dir / "hunt-report.json").write_text(json.dumps(
        {"interrupted": True, "pairs": [pair], "command": "hunt"}))
    merged = workers.merge([stopped], 0, 1.0, 2.0, [])
    assert not merged["interrupted"]
    assert [f["id"] for p in merged["pairs"] for f in p["findings"]] == [finding["id"]]
    # The same report from a worker nobody stopped: the hunt was interrupted.
    stopped.stopped_at = None
    assert workers.merge([stopped], 0, 1.0, 2.0, [])["interrupted"]


def test_a_setup_that_never_ends_is_a_hang(tmp_path, monkeypatch):
    monkeypatch.setattr(workers, "GRACE_S", 0.5)
    monkeypatch.setattr(workers, "SETUP_S", 1.0)
    never = worker(tmp_path, 0, "import time; time.sleep(60)")
    workers._watch([never], tmp_path, time.monotonic(), budget_s=0.5)
    assert never.outcome == "hung: no search started within 1 s of setup"
