"""Hunt workers: a worker's budget starts when its search does, so a slow setup (vLLM's
import on a loaded machine) is not taken for a hang; a worker silent past its budget is."""

from __future__ import annotations

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
    assert stuck.outcome == "hung: killed after the budget and a grace period"
    assert time.monotonic() - began < 30


def test_a_setup_that_never_ends_is_a_hang(tmp_path, monkeypatch):
    monkeypatch.setattr(workers, "GRACE_S", 0.5)
    monkeypatch.setattr(workers, "SETUP_S", 1.0)
    never = worker(tmp_path, 0, "import time; time.sleep(60)")
    workers._watch([never], tmp_path, time.monotonic(), budget_s=0.5)
    assert never.outcome == "hung: no search started within 1 s of setup"
