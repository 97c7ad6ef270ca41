"""``tools/gpu_check.sh`` can be trusted on a machine without a GPU: a Python whose ``import
torch`` fails is a failure (exit 1), never a skip; a torch that sees no CUDA is a SKIP with its
own exit code (77), and exit 0 only when the caller allowed skips (``--allow-skip``).

Issue 11: run by a Python whose ``import torch`` failed, the old script printed "no CUDA
device visible to torch; skipping" and exited 0, a check that passed while checking nothing.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parent.parent / "tools" / "gpu_check.sh"
SKIP_EXIT = 77


def run_check(*args: str, pythonpath: str | None = None, python: str = sys.executable,
              **extra_env: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHON=python, CUDA_VISIBLE_DEVICES="", **extra_env)
    env.pop("PYTHONPATH", None)
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    return subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True,
                          env=env, timeout=120, check=False)


@pytest.fixture
def broken_torch(tmp_path) -> str:
    """A directory whose ``torch`` package raises on import (a torch built for another
    CUDA, a missing shared library)."""
    (tmp_path / "torch").mkdir()
    (tmp_path / "torch" / "__init__.py").write_text(
        "raise ImportError('libcudart.so.13: cannot open shared object file')\n")
    return str(tmp_path)


def test_fails_when_torch_cannot_be_imported(broken_torch):
    done = run_check(pythonpath=broken_torch)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "FAIL torch" in done.stdout and "libcudart" in done.stdout
    assert "SKIP" not in done.stdout


def test_fails_when_torch_cannot_be_imported_even_if_skips_are_allowed(broken_torch):
    done = run_check("--allow-skip", pythonpath=broken_torch)
    assert done.returncode == 1, done.stdout + done.stderr


@pytest.mark.skipif(sys.platform != "linux", reason="the script is bash with GNU timeout")
def test_no_cuda_is_a_skip_with_its_own_exit_code():
    pytest.importorskip("torch")
    import torch
    if torch.cuda.is_available():
        pytest.skip("CUDA is visible here: the script would run its steps")
    done = run_check()
    assert done.returncode == SKIP_EXIT, done.stdout + done.stderr
    assert done.stdout.startswith("gpu_check: SKIP torch ")
    assert "nothing was checked" in done.stdout


def test_no_cuda_exits_zero_only_when_skips_are_allowed():
    pytest.importorskip("torch")
    import torch
    if torch.cuda.is_available():
        pytest.skip("CUDA is visible here: the script would run its steps")
    done = run_check("--allow-skip")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SKIP" in done.stdout


def test_unknown_arguments_are_refused():
    done = run_check("--allow-skips")
    assert done.returncode == 2
    assert "unknown argument" in done.stderr


def test_every_step_is_time_boxed_and_the_whole_fits_in_four_minutes():
    text = SCRIPT.read_text()
    limits = [int(line.split()[2]) for line in text.splitlines() if line.startswith("step ")]
    assert len(limits) == 3, "one time box per step: native-suite, race-switches, vllm"
    probe = int(text.split("PROBE_S=")[1].split()[0])
    kill_after = 5 * len(limits)
    assert sum(limits) + probe + kill_after < 240, \
        f"step limits {limits} plus the torch probe ({probe}s) exceed 4 minutes"
    assert 'timeout --kill-after=5 "$limit"' in text


# -- with a (fake) GPU: the step machinery --------------------------------------------------

FAKE_PYTHON = """#!/usr/bin/env bash
# Answers the torch probe as a CUDA machine would; plays pytest per step.
if [ "$1" = "-c" ]; then echo "cuda 2.13.0 12.8 Fake_GPU"; exit 0; fi
case "$*" in
    *--ignore=*) sleep "${FAKE_SLEEP_S:-0}"; echo "80 passed, 8 skipped in 30.0s"; exit 0 ;;
    *test_known_bugs*) echo "1 failed, 3 passed in 9.0s"; exit 1 ;;
    *test_offload_worker*) echo "SKIPPED [1] vLLM is not installed"
                           echo "1 skipped in 1.0s"; exit 0 ;;
esac
exit 3
"""


@pytest.fixture
def fake_gpu_python(tmp_path) -> str:
    path = tmp_path / "python"
    path.write_text(FAKE_PYTHON)
    path.chmod(0o755)
    return str(path)


def test_one_line_per_step_and_a_failed_step_fails_the_check(fake_gpu_python):
    done = run_check(python=fake_gpu_python)
    lines = done.stdout.splitlines()
    assert lines[0] == "gpu_check: device Fake_GPU torch 2.13.0 cuda 12.8"
    assert lines[1].startswith("gpu_check: PASS native-suite (")
    assert lines[2].startswith("gpu_check: FAIL race-switches (exit 1, ")
    assert "1 failed, 3 passed" in lines[2]
    assert lines[3].startswith("gpu_check: SKIP vllm-offload-worker (")
    assert "vLLM is not installed" in lines[3]
    assert lines[4:] == ["gpu_check: FAIL"]
    assert done.returncode == 1


def test_a_step_past_its_time_box_is_a_failure(fake_gpu_python):
    done = run_check(python=fake_gpu_python, FAKE_SLEEP_S="10", GPU_CHECK_LIMIT_S="1")
    assert "gpu_check: FAIL native-suite: timed out after 1s" in done.stdout
    assert done.returncode == 1
