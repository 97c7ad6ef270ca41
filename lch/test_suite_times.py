"""The suite timer: the same suite serial and on every core, recorded; outcomes that differ
between the two runs fail the command."""

from __future__ import annotations

import json

from lch import suite_times

SUITE = '''
import os, time

def test_a():
    time.sleep(0.2)

def test_b():
    time.sleep(0.2)
'''
# Passes in one process, fails on an xdist worker: the two runs' outcomes differ.
WORKER_SENSITIVE = '''
import os

def test_only_serial():
    assert "PYTEST_XDIST_WORKER" not in os.environ
'''


def test_a_suite_is_timed_both_ways_and_recorded(tmp_path, monkeypatch):
    (tmp_path / "test_small.py").write_text(SUITE)
    monkeypatch.chdir(tmp_path)
    code = suite_times.main(["--label", "small", "--record-dir", str(tmp_path / "results"),
                             "--", "test_small.py"])
    assert code == 0
    record = json.loads((tmp_path / "results" / "bench" / "suite-times-small.json").read_text())
    serial, parallel = record["items"]
    assert (serial["mode"], parallel["mode"]) == ("serial", "parallel")
    assert serial["counts"] == parallel["counts"] == {"passed": 2}
    assert record["summary"]["same_outcomes"] is True
    assert record["summary"]["serial_over_parallel"] == round(
        serial["wall_s"] / parallel["wall_s"], 2)
    assert "-n auto" in parallel["command"] and "no:xdist" in serial["command"]


def test_outcomes_that_differ_between_the_runs_fail_the_command(tmp_path, monkeypatch, capsys):
    (tmp_path / "test_worker.py").write_text(WORKER_SENSITIVE)
    monkeypatch.chdir(tmp_path)
    assert suite_times.main(["--label", "w", "--", "test_worker.py"]) == 1
    assert "OUTCOMES DIFFER" in capsys.readouterr().out
