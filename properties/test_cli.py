"""Bad input ends with one clear line that names the problem and the fix, no traceback."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from sim.errors import HarnessError
from sim.targets import make


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "lch.cli", *args], capture_output=True,
                          text=True, timeout=120)


@pytest.mark.parametrize("args, needle", [
    (["hunt", "--target", "nativ"], "unknown target 'nativ'; known targets: model, native"),
    (["hunt", "--target", "native:no-such-bug"], "unknown bug id 'no-such-bug'"),
    (["hunt", "--budget", "0s"], "invalid budget '0s'"),
    (["hunt", "--target", "vllm:enc-stale-freed"], "only the native target takes a bug"),
])
def test_bad_cli_input_is_one_line(args, needle):
    done = run_cli(*args)
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0], done.stderr


def test_bad_pytest_target_is_a_usage_error():
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "--target", "nope",
                           "properties/test_encoder_cache.py"], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 4
    assert "unknown target 'nope'" in done.stderr
    assert "Traceback" not in done.stderr + done.stdout


@pytest.mark.parametrize("size", [0, -3])
def test_invalid_cache_size_names_the_problem(size):
    with pytest.raises(HarnessError, match=f"cache_size must be an integer >= 1, got {size}"):
        make("native", "encoder_cache", cache_size=size)


@pytest.mark.parametrize("eagle_groups, world", [
    ((1,), dict(use_eagle=False)),                                  # no drafter
    ((3,), dict(use_eagle=True)),                                   # no such group
    ((1, 2), dict(use_eagle=True, second_window=2)),                # both windows
])
def test_a_drafter_group_the_pool_cannot_hold_names_the_problem(eagle_groups, world):
    with pytest.raises(HarnessError, match=r"eagle_groups must be \(0,\), or with use_eagle"):
        make("native", "prefix_cache", num_blocks=8, block_size=1, max_model_len=8,
             hybrid=True, sliding_window=3, eagle_groups=eagle_groups, **world)


@pytest.mark.parametrize("dcp_world_size, world", [
    (0, {}),                                                        # no rank
    (2, dict(sliding_window=3)),                                    # beside a window
    (2, dict(hybrid=True, attention_chunk_size=2)),                 # beside chunked local
])
def test_decode_context_parallelism_vllm_refuses_names_the_problem(dcp_world_size, world):
    with pytest.raises(HarnessError, match=r"dcp_world_size must be an integer >= 1, and 1 "
                                           r"beside a window's"):
        make("native", "prefix_cache", num_blocks=8, block_size=1, max_model_len=8,
             dcp_world_size=dcp_world_size, **world)


@pytest.mark.parametrize("world", [
    dict(dcp_world_size=1),                                         # no context parallelism
    dict(dcp_world_size=2, use_eagle=True),                         # an EAGLE drafter
    dict(dcp_world_size=2, hash_lookahead=1),                       # its lookahead hashes
])
def test_a_replicated_draft_vllm_does_not_build_names_the_problem(world):
    with pytest.raises(HarnessError, match=r"replicated_draft must be False, or True with "
                                           r"dcp_world_size > 1"):
        make("native", "prefix_cache", num_blocks=8, block_size=1, max_model_len=8,
             replicated_draft=True, **world)


def test_bug_of_another_subsystem_is_refused():
    with pytest.raises(HarnessError, match="no encoder_cache implementation|belongs to"):
        make("native:enc-stale-freed", "tiered_lookup")


def test_hunt_finds_a_planted_bug_and_reports_it(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "lch.cli", "hunt", "--examples", "100", "--seed", "7",
         "--subsystem", "encoder_cache", "--target", "native:enc-stale-freed",
         "--report-dir", str(tmp_path), "--reproducer-dir", str(tmp_path / "found"), "--no-db"],
        capture_output=True, text=True, timeout=300, env={**os.environ, "PYTHONPATH": "."})
    assert done.returncode == 1, done.stdout + done.stderr      # 1: a failure was found
    assert done.stdout.startswith("SEED=7\n")
    report = json.loads((tmp_path / "hunt-report.json").read_text())
    failure = report["pairs"][0]["failure"]
    assert failure["property"] == "freed-not-resident"
    assert Path(failure["reproducer"]).exists()
    assert "freed-not-resident" in (tmp_path / "hunt-report.md").read_text()
