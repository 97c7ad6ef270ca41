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


def run_check(*args: str, pythonpath: str | None = None) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHON=sys.executable, CUDA_VISIBLE_DEVICES="")
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
