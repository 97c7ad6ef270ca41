"""One cached virtualenv per vLLM release, shared by ``bisect`` and ``history``.

A release's venv holds torch (``LCH_TORCH``, default the CPU wheel), the harness's pinned test
packages, ``vllm==X`` installed ``--no-deps`` (so none of its GPU dependencies come in) and the
pure-Python packages its imports need (``sim/vllm/requirements/vllm-<family>.txt``). The
harness itself is not installed: suites run from the checkout (``python -m pytest`` with the
repository as the working directory), so one venv serves every branch.

A venv is made once and reused: ``<venv_dir>/vllm-X/.lch-installed`` records that the install
finished and how long it took, so a report can show the fresh install time of a cached venv.
``PIP_FIND_LINKS`` is honoured as pip does, so a directory of downloaded wheels saves the
~400 MB download per release; keep the machine's own entries in it (where the CPU torch wheel
is served, e.g. ``PIP_FIND_LINKS="/opt/wheels /work/wheels"``), or pip resolves
``torch==2.13.0`` to the CUDA build and its ~3 GB of nvidia packages.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

from attrs import frozen

from sim.errors import HarnessError
from sim.vllm.release import check_supported, parse_release, requirements_file

ROOT = Path(__file__).resolve().parents[1]
TEST_PINS = ("attrs==26.1.0", "hypothesis==6.155.2", "numpy==2.4.6", "pytest==9.0.3",
             "pytest-xdist==3.8.0")
MARKER = ".lch-installed"


@frozen
class Venv:
    release: str
    python: Path
    install_s: float        # what this call spent (0 when reused)
    fresh_install_s: float  # what the install took when the venv was made
    cached: bool


def available_releases() -> list[str]:
    """Final vLLM releases on the index, oldest first (``pip index versions vllm``)."""
    out = subprocess.run([sys.executable, "-m", "pip", "index", "versions", "vllm"],
                         capture_output=True, text=True, check=False).stdout
    match = re.search(r"Available versions:\s*(.+)", out)
    if not match:
        raise HarnessError("`pip index versions vllm` listed nothing (offline?); "
                           "give the releases with --releases A,B,C")
    found = [v.strip() for v in match.group(1).split(",")]
    return sorted((v for v in found if re.fullmatch(r"\d+\.\d+\.\d+(\.\d+)?", v)),
                  key=parse_release)


def releases_between(first: str, last: str) -> list[str]:
    check_supported(first)
    lo, hi = parse_release(first), parse_release(last)
    chosen = [v for v in available_releases() if lo <= parse_release(v) <= hi]
    if not chosen:
        raise HarnessError(f"no vLLM release between {first} and {last}")
    return chosen


def parse_releases(text: str) -> list[str]:
    """``"0.10.2, 0.14.0"`` -> the releases, checked, in the order given."""
    releases = [v.strip() for v in text.split(",") if v.strip()]
    if not releases:
        raise HarnessError("--releases is empty; give e.g. --releases 0.10.2,0.33.0")
    for v in releases:
        check_supported(v)
    return releases


def _pip(python: Path, *args: str) -> None:
    run = subprocess.run([str(python), "-m", "pip", "install", "-q", *args],
                         capture_output=True, text=True, check=False)
    if run.returncode != 0:
        # pip's errors, not its warnings (an index location it ignores is warned on every run).
        said = (run.stderr or run.stdout).strip().splitlines()
        tail = [line for line in said if not line.startswith("WARNING:")][-3:] or said[-3:]
        raise HarnessError(f"pip install {' '.join(args)} failed: {' | '.join(tail)}")


def ensure(release: str, venv_dir: Path) -> Venv:
    """The venv of ``release`` under ``venv_dir`` (``vllm-X``), made if missing."""
    venv = venv_dir / f"vllm-{release}"
    venv_dir.mkdir(parents=True, exist_ok=True)
    # One build of a release at a time: two history or bisect runs sharing a venv folder (CI's
    # xdist workers do) would otherwise both build it, and one would find the other's half-made
    # venv and fail its install. fcntl's lock: the one file lock every POSIX machine has.
    with open(venv_dir / f".vllm-{release}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            return _ensure_locked(release, venv)
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _ensure_locked(release: str, venv: Path) -> Venv:
    python = venv / "bin" / "python"
    marker = venv / MARKER
    if marker.exists():
        fresh = json.loads(marker.read_text() or "{}").get("install_s", 0.0)
        return Venv(release, python, 0.0, fresh, cached=True)
    began = time.monotonic()
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    _pip(python, *shlex.split(os.environ.get("LCH_TORCH", "torch==2.13.0")))
    _pip(python, *TEST_PINS)
    _pip(python, "--no-deps", f"vllm=={release}")
    _pip(python, "--no-deps", "-r", str(requirements_file(release)))
    seconds = time.monotonic() - began
    marker.write_text(json.dumps({"release": release, "install_s": round(seconds, 1)}))
    return Venv(release, python, seconds, seconds, cached=False)


def suite_env(**extra: str) -> dict[str, str]:
    """The environment a release's suites run in: CPU platform, the ci profile, targets
    required (an unavailable target fails and is classified, never skipped unseen)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(HYPOTHESIS_PROFILE=os.environ.get("HYPOTHESIS_PROFILE", "ci"),
               LCH_REQUIRE_TARGETS="1", VLLM_TARGET_DEVICE="cpu")
    env.update(extra)          # e.g. the hunt profile for history's hunts
    return env


def main(argv: list[str]) -> int:
    """``python -m lch.venvs --venv-dir DIR 0.10.2 0.14.0``: make the venvs only."""
    venv_dir = Path(argv[argv.index("--venv-dir") + 1]) if "--venv-dir" in argv \
        else ROOT / ".nox" / "bisect"
    releases = [a for a in argv if re.fullmatch(r"\d+\.\d+\.\d+(\.\d+)?", a)]
    for release in releases:
        try:
            venv = ensure(release, venv_dir)
        except HarnessError as error:
            print(f"vllm {release}: {error}", flush=True)
            continue
        how = "cached" if venv.cached else f"installed in {venv.install_s:.0f} s"
        print(f"vllm {release}: {venv.python} ({how})", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
