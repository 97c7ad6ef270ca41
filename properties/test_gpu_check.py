"""``tools/gpu_check.sh`` can be trusted on a machine without a GPU: a Python whose ``import
torch`` fails is a failure (exit 1), never a skip; a torch that sees no CUDA is a SKIP with its
own exit code (77), and exit 0 only when the caller allowed skips (``--allow-skip``).

Issue 11: run by a Python whose ``import torch`` failed, the old script printed "no CUDA
device visible to torch; skipping" and exited 0, a check that passed while checking nothing.

With a fake CUDA python (it answers the torch probe as a GPU machine would and plays each
step's pytest or hunt) the steps' machinery: one line per step, a failed step fails the
check, a step that could not run is a SKIP (exit 3, not a pass), a step past its time box
fails, and the one record (``lch/gpu_check.py``) lands under ``--out`` or ``$OUT``. The
verdicts themselves, on what a step leaves, and the plugin's per-test lines are tested in
``lch/test_gpu_check.py`` (``lch`` is above this layer).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parent.parent / "tools" / "gpu_check.sh"
SKIP_EXIT = 77
SOME_SKIPPED_EXIT = 3
PASS, FAIL, SKIP = "PASS", "FAIL", "SKIP"      # the record's outcomes (lch/gpu_check.py)
STEP_NAMES = ["offload-native", "race-switches", "waits-intact", "vllm-offload-worker", "hunt"]


def run_check(*args: str, pythonpath: str | None = None, python: str = sys.executable,
              **extra_env: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "OUT")}
    env.update(PYTHON=python, CUDA_VISIBLE_DEVICES="", REAL_PYTHON=sys.executable, **extra_env)
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    return subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True,
                          env=env, timeout=120, check=False)


def the_record(out: Path) -> dict:
    records = sorted((out / "gpu").glob("*.json"))
    assert len(records) == 1, records
    return json.loads(records[0].read_text())


@pytest.fixture
def broken_torch(tmp_path) -> str:
    """A directory whose ``torch`` package raises on import (a torch built for another
    CUDA, a missing shared library)."""
    (tmp_path / "torch").mkdir()
    (tmp_path / "torch" / "__init__.py").write_text(
        "raise ImportError('libcudart.so.13: cannot open shared object file')\n")
    return str(tmp_path)


def test_fails_when_torch_cannot_be_imported(broken_torch, tmp_path):
    done = run_check("--out", str(tmp_path / "out"), pythonpath=broken_torch)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "FAIL torch" in done.stdout and "libcudart" in done.stdout
    assert "SKIP" not in done.stdout
    record = the_record(tmp_path / "out")
    assert record["summary"]["outcome"] == FAIL and "libcudart" in \
        record["summary"]["probe"]["detail"]


def test_fails_when_torch_cannot_be_imported_even_if_skips_are_allowed(broken_torch, tmp_path):
    done = run_check("--allow-skip", "--out", str(tmp_path), pythonpath=broken_torch)
    assert done.returncode == 1, done.stdout + done.stderr


@pytest.mark.skipif(sys.platform != "linux", reason="the script is bash with GNU timeout")
def test_no_cuda_is_a_skip_with_its_own_exit_code(tmp_path):
    pytest.importorskip("torch")
    import torch
    if torch.cuda.is_available():
        pytest.skip("CUDA is visible here: the script would run its steps")
    done = run_check("--out", str(tmp_path))
    assert done.returncode == SKIP_EXIT, done.stdout + done.stderr
    assert done.stdout.startswith("gpu_check: SKIP torch ")
    assert "nothing was checked" in done.stdout
    assert the_record(tmp_path)["summary"]["outcome"] == SKIP


def test_no_cuda_exits_zero_only_when_skips_are_allowed(tmp_path):
    pytest.importorskip("torch")
    import torch
    if torch.cuda.is_available():
        pytest.skip("CUDA is visible here: the script would run its steps")
    done = run_check("--allow-skip", "--out", str(tmp_path))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SKIP" in done.stdout


def test_unknown_arguments_are_refused():
    done = run_check("--allow-skips")
    assert done.returncode == 2
    assert "unknown argument" in done.stderr


def script_steps() -> list[tuple[str, int]]:
    lines = SCRIPT.read_text().splitlines()
    return [(line.split()[1], int(line.split()[2])) for line in lines if line.startswith("step ")]


def test_every_step_is_time_boxed_and_the_whole_fits_in_six_minutes():
    text = SCRIPT.read_text()
    steps = script_steps()
    assert [name for name, _ in steps] == STEP_NAMES, \
        "lch/test_gpu_check.py checks these are lch/gpu_check.py's STEPS"
    probe = int(text.split("PROBE_S=")[1].split()[0])
    kill_after = 5 * len(steps)
    limits = [limit for _, limit in steps]
    assert sum(limits) + probe + kill_after < 360, \
        f"step limits {limits} plus the torch probe ({probe}s) exceed 6 minutes"
    assert 'timeout --kill-after=5 "$limit"' in text


# -- with a (fake) GPU: the step machinery ----------------------------------------------------

CUDA_TALLY = {"offload_data": {"cuda/async": 40, "cuda/sync": 30},
              "streams": {"CudaStreams": 40, "SyncStreams": 30},
              "cuda_sleeps": 900, "sleep_cycles": {"200000": 500, "2000000": 400}}

FAKE_PYTHON = """#!/usr/bin/env bash
# Answers the torch probe as a CUDA machine would; plays pytest and the hunt per step, writing
# the plugin's test lines ($LCH_GPU_CHECK_TESTS) and the hunt's report; the record is real.
if [ "$1" = "-c" ]; then echo "cuda 2.13.0 12.8 Fake_GPU"; exit 0; fi
if [ "$2" = "lch.gpu_check" ]; then exec "$REAL_PYTHON" "$@"; fi
line() { echo "{\\"nodeid\\": \\"$1\\", \\"outcome\\": \\"$2\\", \\"duration_s\\": 1.0$3}" \\
    >> "$LCH_GPU_CHECK_TESTS"; }
TALLY=', "gpu_check_tally": TALLY_JSON'
KB=properties/test_known_bugs.py
RACE="$KB::test_known_bug_is_caught_and_shrunk"
case "$*" in
    *test_offload_engine.py*)
        sleep "${FAKE_SLEEP_S:-0}"
        line "properties/test_offload_engine.py::test_offload_engine_machine[native]" passed \\
            "$TALLY"
        echo "12 passed in 30.0s"; exit 0 ;;
    *offload-race*)
        line "$RACE[offload-race-read-before-load]" passed "$TALLY"
        line "$RACE[offload-race-slot-reuse]" passed "$TALLY"
        if [ "${FAKE_RACE:-fail}" = pass ]; then
            line "$RACE[offload-race-dbuf-overwrite]" passed "$TALLY"
            echo "3 passed in 9.0s"; exit 0
        fi
        line "$RACE[offload-race-dbuf-overwrite]" failed \\
            ', "message": "E   offload-race-dbuf-overwrite not found in 300 examples"'
        echo "1 failed, 2 passed in 9.0s"; exit 1 ;;
    *test_switch_off*)
        line "$KB::test_switch_off_passes_with_the_same_budget[offload_engine]" passed "$TALLY"
        echo "1 passed in 9.0s"; exit 0 ;;
    *test_offload_worker*)
        for t in test_offload_worker_round_trips_bytes_and_finishes_jobs_once \\
                 test_batched_jobs_round_trip_bytes; do
            line "properties/test_offload_worker.py::$t[vllm]" skipped \\
                ', "message": "Skipped: vLLM is not installed"'
        done
        echo "SKIPPED [2] vLLM is not installed"
        echo "1 passed, 2 skipped in 1.0s"; exit 0 ;;
    *lch.cli\\ hunt*)
        dir=$(echo "$*" | sed 's/.*--report-dir \\([^ ]*\\).*/\\1/'); mkdir -p "$dir"
        echo '{"seed": 1, "pairs": [{"subsystem": "offload_engine", "target": "native",
               "result": "no failure", "examples": 500, "steps": 9000,
               "events": {"pool exhausted": 40}, "findings": []}]}' > "$dir/hunt-report.json"
        exit 0 ;;
esac
exit 3
""".replace("TALLY_JSON", json.dumps(CUDA_TALLY))


@pytest.fixture
def fake_gpu_python(tmp_path) -> str:
    path = tmp_path / "python"
    path.write_text(FAKE_PYTHON)
    path.chmod(0o755)
    return str(path)


def test_one_line_per_step_and_a_failed_step_fails_the_check(fake_gpu_python, tmp_path):
    out = tmp_path / "out"
    done = run_check("--out", str(out), python=fake_gpu_python)
    lines = done.stdout.splitlines()
    assert lines[0] == "gpu_check: device Fake_GPU torch 2.13.0 cuda 12.8", done.stderr
    assert lines[1].startswith("gpu_check: PASS offload-native (")
    assert lines[2].startswith("gpu_check: FAIL race-switches (exit 1, ")
    assert "1 failed, 2 passed" in lines[2] and "not found in 300 examples" in lines[2]
    assert lines[3].startswith("gpu_check: PASS waits-intact (")
    assert lines[4].startswith("gpu_check: SKIP vllm-offload-worker (")
    assert "vLLM is not installed" in lines[4]
    assert lines[5].startswith("gpu_check: PASS hunt (") and "500 examples" in lines[5]
    assert lines[6].startswith(f"gpu_check: record {out}/gpu/gpu-check-fake-gpu.json (FAIL)")
    assert lines[7:] == ["gpu_check: FAIL"]
    assert done.returncode == 1

    record = the_record(out)
    assert record["schema"] == "lch-result/1" and record["kind"] == "gpu"
    assert record["name"] == "gpu-check-fake-gpu"
    summary = record["summary"]
    assert summary["device"] == "Fake GPU" and summary["torch"] == "2.13.0"
    assert summary["cuda"] == "12.8"
    assert summary["steps"] == {"offload-native": PASS, "race-switches": FAIL,
                                "waits-intact": PASS, "vllm-offload-worker": SKIP,
                                "hunt": PASS}
    assert summary["delays"]["sleeps_queued"] == 4 * CUDA_TALLY["cuda_sleeps"]
    items = {item["step"]: item for item in record["items"]}
    assert items["offload-native"]["tests"][0]["ran_on"] == CUDA_TALLY
    assert items["offload-native"]["counts"] == {"passed": 12}
    assert items["hunt"]["hunt"]["pairs"][0]["examples"] == 500
    assert all(item["seconds"] >= 0 and item["limit_s"] > 0 for item in items.values())
    log = (out / "gpu_check-steps.log").read_text()
    assert "===== race-switches: FAIL" in log and "1 failed, 2 passed" in log


def test_a_step_that_could_not_run_is_not_a_pass(fake_gpu_python, tmp_path):
    done = run_check("--out", str(tmp_path), python=fake_gpu_python, FAKE_RACE="pass")
    assert done.returncode == SOME_SKIPPED_EXIT, done.stdout + done.stderr
    assert done.stdout.splitlines()[-1].startswith("gpu_check: SKIP: some steps could not run")
    assert the_record(tmp_path)["summary"]["outcome"] == SKIP
    allowed = run_check("--allow-skip", "--out", str(tmp_path), python=fake_gpu_python,
                        FAKE_RACE="pass")
    assert allowed.returncode == 0, allowed.stdout + allowed.stderr


def test_the_record_goes_to_the_lent_machines_out(fake_gpu_python, tmp_path):
    done = run_check(python=fake_gpu_python, FAKE_RACE="pass", OUT=str(tmp_path))
    assert done.returncode == SOME_SKIPPED_EXIT, done.stdout + done.stderr
    assert the_record(tmp_path)["summary"]["steps"]["race-switches"] == PASS
    assert (tmp_path / "gpu_check-steps.log").is_file()


def test_a_step_past_its_time_box_is_a_failure(fake_gpu_python, tmp_path):
    done = run_check("--out", str(tmp_path), python=fake_gpu_python, FAKE_SLEEP_S="10",
                     GPU_CHECK_LIMIT_S="1")
    assert "gpu_check: FAIL offload-native: timed out after 1s" in done.stdout
    assert done.returncode == 1
    assert the_record(tmp_path)["summary"]["steps"]["offload-native"] == FAIL
