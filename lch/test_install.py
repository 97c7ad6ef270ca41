"""The install a vLLM developer uses, tested for real: the harness in its own virtualenv
(built as a wheel, installed with torch and the vLLM release), run from inside an unpacked vLLM
source tree against that tree (``--vllm-path .``), as vLLM's CI would run it on a pull request.

Why its own virtualenv and not vLLM's: the harness's import names (``models``, ``sim``,
``properties``, ``fixtures``, ``lch``) are generic, and a vLLM development environment holds a
source tree whose test packages could shadow them or be shadowed; the overlay of
``--vllm-path`` needs only the release's wheel for the compiled parts, so the PR's tree is never
built. Slow (a venv with torch and vLLM, about 3 minutes; the vLLM sdist is downloaded once to
the cache ``lch.suites.sdist_path`` uses): marked ``slow``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from lch import suites
from sim.vllm.release import DEFAULT_RELEASE, requirements_file

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow


def run(args: list, **kwargs) -> subprocess.CompletedProcess:
    done = subprocess.run([str(a) for a in args], capture_output=True, text=True,
                          timeout=1800, **kwargs)
    assert done.returncode == 0, f"{args}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> tuple[Path, Path]:
    """(the venv's bin/, the unpacked vLLM sdist): the harness's wheel, torch, vLLM."""
    tmp = tmp_path_factory.mktemp("install")
    # Built from a copy: setuptools writes build/ and *.egg-info next to the sources.
    source = tmp / "harness"
    shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns(
        ".git", ".nox", ".venv", "build", "*.egg-info", ".hypothesis", "__pycache__"))
    run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", tmp / "dist", source])
    wheel = next((tmp / "dist").glob("llm_cache_harness-*.whl"))
    run([sys.executable, "-m", "venv", tmp / "venv"])
    pip = [tmp / "venv" / "bin" / "python", "-m", "pip", "install", "-q"]
    run([*pip, "torch==2.13.0"])
    run([*pip, wheel])
    run([*pip, "--no-deps", f"vllm=={DEFAULT_RELEASE}"])
    run([*pip, "--no-deps", "-r", requirements_file(DEFAULT_RELEASE)])
    # vLLM's tests/conftest.py, which pytest loads from the tree's root, imports it (one of
    # vLLM's test requirements; the rest it imports are vLLM's own).
    run([*pip, "tblib"])
    sdist = suites.sdist_path(DEFAULT_RELEASE, None, Path(os.environ.get(
        "LCH_SDIST_DIR", Path.home() / ".cache" / "llm-cache-harness" / "sdists")))
    with tarfile.open(sdist) as archive:
        archive.extractall(tmp / "src", filter="data")
    tree = next((tmp / "src").iterdir())
    assert (tree / "vllm" / "__init__.py").is_file() and (tree / "tests").is_dir()
    return tmp / "venv" / "bin", tree


def clean_env(**extra) -> dict:
    """No PYTHONPATH of this checkout: the venv must work from its own files alone."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "LCH_REQUIRE_TARGETS", "LCH_VLLM_PATH")}
    return {**env, "VLLM_TARGET_DEVICE": "cpu", **extra}


def test_a_hunt_from_inside_the_vllm_tree_checks_that_tree(installed, tmp_path):
    bin_dir, tree = installed
    run([bin_dir / "llm-cache-harness", "hunt", "--target", "vllm", "--vllm-path", ".",
         "--subsystem", "encoder_cache", "--examples", "10", "--seed", "1", "--no-db",
         "--report-dir", tmp_path, "--reproducer-dir", tmp_path / "found"],
        cwd=tree, env=clean_env())
    report = json.loads((tmp_path / "hunt-report.json").read_text())
    assert report["vllm"]["checkout"] == str(tree)
    assert report["vllm"]["git"] is False                     # an sdist is no git checkout
    assert [p["result"] for p in report["pairs"]] == ["no failure"]


def test_the_suites_run_under_vllm_s_own_pytest_configuration(installed):
    """pytest from the vLLM tree's root (its pyproject's pytest settings apply), the suites
    taken from the installed package, the tree under test through the overlay."""
    bin_dir, tree = installed
    python = bin_dir / "python"
    overlay = run([python, "-m", "sim.vllm.overlay", "."], cwd=tree,
                  env=clean_env()).stdout.strip().splitlines()[-1]
    # Not -q: the quiet report drops the header that names the vLLM under test.
    done = run([python, "-m", "pytest", "-p", "no:cacheprovider", "--pyargs",
                "properties.test_encoder_cache", "-k", "vllm", "--target", "vllm"],
               cwd=tree, env=clean_env(PYTHONPATH=overlay, LCH_VLLM_PATH=str(tree),
                                       LCH_REQUIRE_TARGETS="1", HYPOTHESIS_PROFILE="ci"))
    assert " passed" in done.stdout and "skipped" not in done.stdout, done.stdout[-2000:]
    assert "PytestUnknownMarkWarning" not in done.stdout       # the plugin registers its marks
    assert (f"vLLM under test: {DEFAULT_RELEASE} at {tree}" in done.stdout
            and "not a git checkout" in done.stdout), done.stdout[:2000]


def test_the_install_hint_names_a_file_the_wheel_ships(installed):
    bin_dir, tree = installed
    done = run([bin_dir / "python", "-m", "sim.vllm.release", "requirements-file",
                DEFAULT_RELEASE], cwd=tree, env=clean_env())
    assert Path(done.stdout.strip()).is_file()
