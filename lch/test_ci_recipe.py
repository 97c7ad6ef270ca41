"""The CI recipe users copy (``docs/ci/``): the GitHub Actions workflow's step runs the shell
script, and the script, run here on a fresh clone against a checkout made of the installed
wheel's files, runs the suites and the hunt, exits 0 on a clean checkout and 1 on one that
raises, and posts the hunt's report to the step summary.

nox runs with ``--no-venv --no-install`` in this interpreter (as ``lch/test_docs.py``
does: CI's own nox call builds the sessions' venvs), the suites cut to one reproducer and the
hunt to a small budget. Needs vLLM: runs in ``nox -s vllm``.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from lch.test_docs import nox_command

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = "docs/ci/vllm-pr.sh"
pytestmark = pytest.mark.xdist_group("ci-recipe")


@pytest.mark.fast      # reads a file; the recipe's runs below are this file's slow tier
def test_the_workflow_runs_the_script_on_the_pr_checkout():
    text = (ROOT / "docs/ci/github-actions.yml").read_text()
    runs = re.findall(r"^\s+run: (.+)$", text, flags=re.M)
    assert runs == [f"bash llm-cache-harness/{SCRIPT} vllm"]
    assert "path: vllm\n" in text and "path: llm-cache-harness\n" in text
    assert "whl/cpu" in text              # a runner gets torch's CPU build, not the CUDA one


def checkout_of_the_wheel(tmp_path: Path, plant: str = "") -> Path:
    spec = importlib.util.find_spec("vllm")
    if spec is None:
        from properties.run import unavailable
        from sim.errors import TargetUnavailable
        unavailable("vllm", TargetUnavailable("vLLM is not installed (nox -s vllm)"))
    wheel = Path(list(spec.submodule_search_locations)[0])
    tree = tmp_path / "vllm-pr"
    (tree / "vllm" / "v1" / "core").mkdir(parents=True)
    shutil.copy(wheel / "__init__.py", tree / "vllm" / "__init__.py")
    source = (wheel / "v1" / "core" / "encoder_cache_manager.py").read_text()
    if plant:
        source = source.replace("        mm_hash = request.mm_features[input_id].identifier\n",
                                "        mm_hash = request.mm_features[input_id].identifier\n"
                                f"        {plant}\n", 1)
        assert plant in source
    (tree / "vllm" / "v1" / "core" / "encoder_cache_manager.py").write_text(source)
    return tree


def run_recipe(tmp_path: Path, checkout: Path) -> tuple[subprocess.CompletedProcess, Path]:
    clone = tmp_path / "llm-cache-harness"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
    nox = nox_command()
    shim = tmp_path / "bin"
    shim.mkdir()
    (shim / "nox").write_text("#!/bin/sh\nexec " + " ".join(nox) + ' "$@"\n')
    (shim / "nox").chmod(0o755)
    summary = tmp_path / "summary.md"
    env = {**os.environ, "PATH": f"{shim}{os.pathsep}{Path(sys.executable).parent}"
           f"{os.pathsep}{os.environ['PATH']}", "PYTHONPATH": str(clone),
           "VLLM_TARGET_DEVICE": "cpu", "NOX_OPTS": "--no-venv --no-install",
           "LCH_SUITE_ARGS": "-k test_encoder_cache_machine -n 0", "LCH_BUDGET": "20s",
           # Two subsystems, so that 20 s reach both on a loaded machine; vLLM 0.33.0's own
           # encoder-decoder manager diverges (a free of a request holding nothing releases
           # slots): the release's divergence, which must not fail a clean checkout.
           "LCH_HUNT_ARGS": "--subsystem encoder_cache --subsystem encoder_decoder_cache",
           "GITHUB_STEP_SUMMARY": str(summary)}
    done = subprocess.run(["bash", str(clone / SCRIPT), str(checkout)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=1200)
    return done, summary


def test_the_recipe_passes_a_clean_checkout(tmp_path):
    done, summary = run_recipe(tmp_path, checkout_of_the_wheel(tmp_path))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    text = summary.read_text()
    assert "# Hunt report" in text and "Suites against the checkout: passed." in text
    assert "**failed" not in text


def test_the_recipe_fails_a_checkout_that_breaks_the_cache(tmp_path):
    plant = "if self.num_free_slots < self.cache_size: raise KeyError(mm_hash)"
    done, summary = run_recipe(tmp_path, checkout_of_the_wheel(tmp_path, plant))
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-3000:]
    text = summary.read_text()
    assert "Suites against the checkout: FAILED" in text, text
    report = json.loads((tmp_path / "llm-cache-harness" / "hunt-report.json").read_text())
    [pair] = [p for p in report["pairs"] if p["subsystem"] == "encoder_cache"]
    mine = [f for f in pair["findings"] if f["property"] == "no-raise"]
    assert mine and all(f["on_release"] == "passes" for f in mine), (pair["findings"], text)
