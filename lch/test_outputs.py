"""Nothing lost: every entry point proves its output directory writable before its work
starts (one line naming the option and the fix), and writes its files atomically."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from sim.errors import HarnessError
from sim.files import atomic_write, check_writable

ROOT = Path(__file__).resolve().parents[1]

ENTRY_POINTS = {    # a command whose real work (installs, vLLM's import, benchmarks) is long
    "--out (mutants)": ["-m", "lch.mutants", "--class", "vllm.nowhere:Nothing", "--out"],
    "--out (bench)": ["-m", "lch.bench", "--out"],
    "--report-dir (history)": ["-m", "lch.cli", "history", "--releases", "0.33.0",
                               "--report-dir"],
}


@pytest.fixture
def unwritable(tmp_path: Path) -> Path:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    return blocker / "reports"          # a directory below a file: never creatable


@pytest.mark.parametrize("option", ENTRY_POINTS)
def test_an_unwritable_output_directory_ends_in_one_line_before_any_work(option, unwritable):
    done = subprocess.run([sys.executable, *ENTRY_POINTS[option], str(unwritable)],
                          cwd=ROOT, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode != 0
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "not writable" in lines[0], done.stderr
    assert "Traceback" not in done.stderr


def test_check_writable_names_the_option(unwritable):
    with pytest.raises(HarnessError, match="--report-dir .* not writable.*pass --report-dir"):
        check_writable(unwritable, "--report-dir")


def test_an_interrupted_write_keeps_the_old_file_and_leaves_no_temporary(tmp_path, monkeypatch):
    path = tmp_path / "report.md"
    atomic_write(path, "old\n")

    def stopped(*args):
        raise KeyboardInterrupt         # Ctrl-C between the write and the rename
    monkeypatch.setattr(os, "replace", stopped)
    with pytest.raises(KeyboardInterrupt):
        atomic_write(path, "new\n")
    assert path.read_text() == "old\n"
    assert [p.name for p in tmp_path.iterdir()] == ["report.md"]
