"""Hunts on several machines share findings through Hypothesis's Redis example database: a
real ``redis-server`` on loopback, two hunt processes with different seeds, the second
replays the failure the first found instead of searching for it again.

Needs ``redis-server`` on PATH (Debian's ``redis-server``; ``.ci/run`` installs it). Without
it the test skips, and fails instead where ``LCH_REQUIRE_REDIS=1`` says it must run (CI).
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BUG = "native:enc-stale-freed"


@pytest.fixture
def redis_url(tmp_path):
    server = shutil.which("redis-server")
    if server is None:
        if os.environ.get("LCH_REQUIRE_REDIS"):
            pytest.fail("redis-server is required here but missing: apt-get install "
                        "redis-server")
        pytest.skip("redis-server not installed (apt-get install redis-server)")
    with socket.socket() as probe:              # a free loopback port
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    process = subprocess.Popen([server, "--port", str(port), "--bind", "127.0.0.1",
                                "--save", "", "--appendonly", "no", "--dir", str(tmp_path)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait_for(port)
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        process.terminate()
        process.wait(timeout=10)


def _wait_for(port: int) -> None:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"redis-server did not listen on {port} within 10 s")


def _hunt(tmp_path: Path, name: str, seed: int, db: str) -> dict:
    out = tmp_path / name
    done = subprocess.run(
        [sys.executable, "-m", "lch", "hunt", "--workers", "1", "--examples", "300",
         "--seed", str(seed),
         "--target", BUG, "--subsystem", "encoder_cache", "--db", db,
         "--report-dir", str(out), "--reproducer-dir", str(out / "found")],
        cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 1, done.stdout + done.stderr      # 1: a failure was found
    (pair,) = json.loads((out / "hunt-report.json").read_text())["pairs"]
    return pair


def test_a_failure_found_by_one_hunt_replays_in_another(tmp_path, redis_url):
    first = _hunt(tmp_path, "first", seed=1, db=redis_url)
    second = _hunt(tmp_path, "second", seed=2, db=redis_url)
    alone = _hunt(tmp_path, "alone", seed=2, db=str(tmp_path / "empty-db"))
    assert first["failure"]["property"] == "freed-not-resident"
    assert first["database_replay"] is None             # Redis was empty
    # The second hunt's database phase replays the first hunt's failure, read back from
    # Redis, before it searches; the same seed with an empty database replays nothing.
    assert second["database_replay"]["property"] == "freed-not-resident", second
    assert alone["database_replay"] is None, alone
