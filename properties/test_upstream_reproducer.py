"""An upstream reproducer runs with vLLM and pytest alone: found by a real hunt against a vLLM
tree with the #38551 fix reverted (a checkout of two files over the installed wheel, through
``--vllm-path``), it passes on the installed release and fails on the reverted tree, with every
harness module unimportable (``runner.py`` below blocks them; plugin autoload is off).

Needs vLLM 0.28.0 or later installed (the fix is in): ``nox -s vllm`` runs it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.vllm
ROOT = Path(__file__).resolve().parents[1]
FIX = ("        # An entry evicted early in the scheduling pass can be allocated again\n"
       "        # later in the same pass. Keep its worker-side tensor in that case.\n"
       "        freed = [mm_hash for mm_hash in self.freed if mm_hash not in self.cached]\n")
HARNESS = ("lch", "properties", "fixtures", "sim", "models")
RUNNER = f'''import importlib.abc, sys

class NoHarness(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name.split(".")[0] in {HARNESS!r}:
            raise ImportError(f"the upstream reproducer imported harness module {{name}}")

sys.meta_path.insert(0, NoHarness())
import pytest
sys.exit(pytest.main(sys.argv[1:]))
'''


def installed_vllm() -> Path:
    import importlib.util
    spec = importlib.util.find_spec("vllm")
    if spec is None:
        if os.environ.get("LCH_REQUIRE_TARGETS"):
            pytest.fail("vLLM is required here but not installed")
        pytest.skip("vLLM is not installed (nox -s vllm installs it)")
    return Path(list(spec.submodule_search_locations)[0])


def reverted_tree(tmp_path: Path) -> Path:
    """A 'checkout' holding the installed package's ``__init__`` and its encoder cache
    manager with the fix of vLLM issue #38551 taken out (a git repo: reports name a commit)."""
    wheel = installed_vllm()
    source = (wheel / "v1" / "core" / "encoder_cache_manager.py").read_text()
    if FIX not in source:
        pytest.skip("the installed vLLM has no #38551 fix to revert (before 0.28.0)")
    tree = tmp_path / "vllm-reverted"
    (tree / "vllm" / "v1" / "core").mkdir(parents=True)
    shutil.copy(wheel / "__init__.py", tree / "vllm" / "__init__.py")
    (tree / "vllm" / "v1" / "core" / "encoder_cache_manager.py").write_text(
        source.replace(FIX, "        freed = self.freed\n"))
    subprocess.run(["git", "init", "-q", str(tree)], check=True)
    subprocess.run(["git", "-C", str(tree), "add", "-A"], check=True)
    subprocess.run(["git", "-C", str(tree), "-c", "user.email=lch@example.invalid", "-c",
                    "user.name=lch", "commit", "-qm", "revert the #38551 fix"], check=True)
    return tree


def vllm_only(tmp_path: Path, test_file: Path, pythonpath: str | None):
    """Run ``test_file`` from a directory outside the repository with vLLM and pytest only."""
    alone = tmp_path / "alone"
    alone.mkdir(exist_ok=True)
    shutil.copy(test_file, alone / test_file.name)
    (alone / "runner.py").write_text(RUNNER)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "LCH_VLLM_PATH")}
    env.update(PYTEST_DISABLE_PLUGIN_AUTOLOAD="1", VLLM_TARGET_DEVICE="cpu")
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    return subprocess.run([sys.executable, "runner.py", "-q", "-p", "no:cacheprovider",
                           test_file.name], cwd=alone, env=env, capture_output=True, text=True,
                          timeout=600)


def test_upstream_reproducer_of_enc_stale_freed_runs_without_the_harness(tmp_path):
    tree = reverted_tree(tmp_path)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "VLLM_TARGET_DEVICE": "cpu"}
    hunt = subprocess.run(
        [sys.executable, "-m", "lch.cli", "hunt", "--target", "vllm", "--vllm-path", str(tree),
         "--subsystem", "encoder_cache", "--seed", "1867950132", "--examples", "100",
         "--no-db"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
    assert hunt.returncode == 1, hunt.stdout + hunt.stderr
    import json
    report = json.loads((tmp_path / "hunt-report.json").read_text())
    assert report["vllm"]["checkout"] == str(tree)
    assert report["vllm"]["commit"] and report["vllm"]["version"]
    failure = report["pairs"][0]["failure"]
    assert failure["property"] == "freed-not-resident"
    upstream = tmp_path / failure["upstream_reproducer"]
    text = upstream.read_text()
    assert not any(f"import {m}" in text or f"from {m}" in text for m in HARNESS)
    assert text.rstrip().splitlines()[-1].strip().startswith("assert cache.get_freed_mm_hashes()")
    overlay = str(tree.parent / "overlay")
    built = subprocess.run([sys.executable, "-c", "import sys; from sim.vllm.overlay import "
                            "build; print(build(sys.argv[1], sys.argv[2]))", str(tree), overlay],
                           env=env, capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, built.stderr
    fixed = vllm_only(tmp_path, upstream, None)
    assert fixed.returncode == 0, fixed.stdout + fixed.stderr          # the release: passes
    broken = vllm_only(tmp_path, upstream, overlay)
    assert broken.returncode == 1, broken.stdout + broken.stderr       # reverted: fails
    assert "get_freed_mm_hashes" in broken.stdout and "harness module" not in broken.stdout
