"""``nox -s history`` for real: two releases, hunting on, through nox, from the session's own
venv (the test packages only, no torch): everything history invokes must run from there,
and every cell is written as it completes.

Slow tier (``-m slow``; CI runs it with the rest of ``nox -s tests``): a few minutes with the
release venvs cached (``LCH_VENV_DIR``; a fresh machine first builds them, ~2-4 min each).
The suites are cut to the encoder cache's machine (``-k``) and the hunts to 20 s per cell.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
RELEASES = ("0.26.0", "0.30.0")      # 0.26.0: two encoder-cache bugs; 0.30.0: both fixed
pytestmark = [pytest.mark.slow, pytest.mark.skipif(
    shutil.which("nox") is None, reason="needs nox on PATH (pip install nox)")]


def test_nox_history_hunts_two_releases_from_a_torch_free_session(tmp_path):
    env = {**os.environ, "LCH_VENV_DIR": os.environ.get("LCH_VENV_DIR")
           or str(ROOT / ".nox" / "bisect")}
    env.pop("PYTHONPATH", None)
    # A hunt fixed by count (seed 0), not by seconds: the findings asserted below must not
    # depend on the machine's load (a 20 s budget met 178 examples on a busy CI machine and
    # missed freed-not-resident; 300 examples find both on 0.26.0).
    done = subprocess.run(
        ["nox", "-s", "history", "--", "--releases", ",".join(RELEASES), "--hunt-examples",
         "300", "--report-dir", str(tmp_path), "--reproducer-dir", str(tmp_path / "found"),
         "--record-dir", str(tmp_path / "results"), "--", "-k",
         "test_encoder_cache_machine and not decoder"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=1500)
    log = done.stdout + done.stderr
    assert done.returncode == 1, log[-3000:]           # 0.26.0 diverges
    assert "ModuleNotFoundError" not in log, log[-3000:]
    # The session's venv has no torch: history read every finding without it.
    session_python = ROOT / ".nox" / "history" / "bin" / "python"
    assert subprocess.run([str(session_python), "-c", "import torch"],
                          capture_output=True).returncode != 0
    data = json.loads((tmp_path / "history-report.json").read_text())
    runs = {r["release"]: r for r in data["releases"]}
    assert sorted(runs) == sorted(RELEASES), runs
    assert all(r["complete"] for r in runs.values()), {
        r["release"]: r["error"] for r in runs.values() if not r["complete"]}
    old, new = runs["0.26.0"]["cells"]["encoder_cache"], runs["0.30.0"]["cells"]["encoder_cache"]
    assert old["hunt"]["examples"] > 0 and new["hunt"]["examples"] > 0   # hunting was on
    assert {d["property"] for d in old["divergences"]} >= {"freed-not-resident",
                                                           "slots-agree"}, old
    assert all(d.get("signature") for d in old["divergences"])
    # 0.30.0 fixed both (0.28.0 the stale freed entry, 0.30.0 the repeated item).
    assert not {"freed-not-resident", "slots-agree"} & {d["property"]
                                                          for d in new["divergences"]}, new
    (record,) = (tmp_path / "results" / "history").glob("*.json")
    items = json.loads(record.read_text())["items"]
    found = {i["release"]: i["known_found"] for i in items if i["column"] == "encoder_cache"}
    assert {"enc-stale-freed", "enc-repeat-item"} <= set(found["0.26.0"]), found
