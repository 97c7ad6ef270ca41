"""Did my PR break the cache? A checkout that makes vLLM raise is a finding, never "could not run".

A copy of the installed release's files, each with one raise planted in one method of the
class a subsystem drives (the way a pull request breaks a cache most often), is put under
test with ``--vllm-path``: the hunt must report every subsystem as a divergence
(``no-raise``), exit 1, and write a reproducer that fails on the checkout and passes on the
release; the pytest form (``--target vllm`` with the overlay on ``PYTHONPATH``) must fail as
a divergence, not skip. One plant raises ``AttributeError`` on a line the checkout added: a
shape error on the release's own lines means "driven wrongly", on the checkout's it is the
checkout's. Needs vLLM (``nox -s vllm``); elsewhere ``unavailable``.
"""

from __future__ import annotations

import ast
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from attrs import frozen

from properties.run import unavailable
from sim.errors import TargetUnavailable

ROOT = Path(__file__).resolve().parents[1]
# One worker runs them all: the module's fixtures (one hunt, one checkout) are shared.
pytestmark = pytest.mark.xdist_group("vllm-path-crash")


@frozen
class Plant:
    subsystem: str
    path: str          # in the vllm package
    method: str        # Class.method
    line: str          # inserted as the method's first statement


PLANTS = (
    Plant("encoder_cache", "v1/core/encoder_cache_manager.py", "EncoderCacheManager.allocate",
          "if self.num_free_slots < self.cache_size: raise KeyError(request.request_id)"),
    Plant("encoder_decoder_cache", "v1/core/encoder_cache_manager.py",
          "EncoderDecoderCacheManager.allocate", "raise RuntimeError('planted')"),
    Plant("scheduler_pass", "v1/core/sched/scheduler.py", "Scheduler.update_from_output",
          "self.planted_missing_field.clear()"),
    Plant("tiered_lookup", "v1/kv_offload/cpu/manager.py", "CPUOffloadingManager.lookup",
          "raise ValueError('planted')"),
    Plant("secondary_tier", "v1/kv_offload/tiering/fs/manager.py",
          "FileSystemTierManager.submit_store", "raise KeyError('planted')"),
)


def installed_vllm() -> Path:
    try:
        from sim.vllm.overlay import installed_package
        return installed_package()
    except TargetUnavailable as why:
        unavailable("vllm", why)


def planted(source: str, method: str, line: str) -> str:
    """``source`` with ``line`` inserted before the first statement of ``Class.method``."""
    cls, name = method.split(".")
    tree = ast.parse(source)
    node = next(f for c in tree.body if isinstance(c, ast.ClassDef) and c.name == cls
                for f in c.body if isinstance(f, ast.FunctionDef) and f.name == name)
    first = node.body[0]
    lines = source.splitlines(keepends=True)
    lines.insert(first.lineno - 1, " " * first.col_offset + line + "\n")
    return "".join(lines)


@pytest.fixture(scope="module")
def checkout(tmp_path_factory) -> Path:
    """A checkout that is not a git repository: the release's files with the plants."""
    wheel = installed_vllm()
    root = tmp_path_factory.mktemp("checkout")
    (root / "vllm").mkdir()
    shutil.copy(wheel / "__init__.py", root / "vllm" / "__init__.py")
    for plant in PLANTS:
        dest = root / "vllm" / plant.path
        dest.parent.mkdir(parents=True, exist_ok=True)
        source = dest.read_text() if dest.exists() else (wheel / plant.path).read_text()
        dest.write_text(planted(source, plant.method, plant.line))
    return root


def env(**extra) -> dict:
    return {**os.environ, "VLLM_TARGET_DEVICE": "cpu", "PYTHONPATH": str(ROOT), **extra}


@pytest.fixture(scope="module")
def hunted(checkout, tmp_path_factory) -> tuple[subprocess.CompletedProcess, dict, Path]:
    out = tmp_path_factory.mktemp("hunt")
    args = [sys.executable, "-m", "lch.cli", "hunt", "--target", "vllm", "--vllm-path",
            str(checkout), "--examples", "20", "--seed", "1", "--no-db",
            "--reproducer-dir", str(out / "found"), "--report-dir", str(out)]
    for plant in PLANTS:
        args += ["--subsystem", plant.subsystem]
    done = subprocess.run(args, cwd=ROOT, env=env(), capture_output=True, text=True,
                          timeout=900)
    report = out / "hunt-report.json"
    assert report.is_file(), done.stdout[-3000:] + done.stderr[-3000:]
    return done, json.loads(report.read_text()), out


def raised(pair: dict) -> dict | None:
    """The pair's first ``no-raise`` finding. vLLM 0.33.0's encoder-decoder manager has a
    divergence of its own (a free of a request holding nothing releases slots), found
    beside the planted raise."""
    return next((f for f in pair["findings"] if f["property"] == "no-raise"), None)


def test_a_checkout_that_raises_is_a_finding_in_every_subsystem(hunted, checkout):
    done, report, _ = hunted
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-3000:]
    pairs = {p["subsystem"]: p for p in report["pairs"]}
    for plant in PLANTS:
        pair = pairs[plant.subsystem]
        assert pair["result"] == "failed", (plant, pair["result"], pair["why"])
        found = raised(pair)
        assert found is not None, (plant, pair["findings"])
        assert f"vllm/{plant.path}" in found["message"], (plant, found["message"])
        assert Path(found["reproducer"]).is_file()
        assert found["on_release"] == "passes", (plant, found)     # the checkout's change
    others = [f for p in report["pairs"] for f in p["findings"] if f["property"] != "no-raise"]
    assert all(f["on_release"] == "fails" for f in others), others  # vLLM 0.33.0's own
    assert report["vllm"]["checkout"] == str(checkout)
    assert report["vllm"]["commit"] is None and report["vllm"]["git"] is False


def test_the_report_says_the_checkout_is_not_under_git(hunted):
    _, _, out = hunted
    text = (out / "hunt-report.md").read_text()
    assert "not a git checkout (no commit)" in text
    assert "commit `" not in text.split("vLLM under test:", 1)[1].splitlines()[0]


def outcomes(paths: list[str], tmp: Path, **extra) -> dict[str, str]:
    """Run reproducers under pytest: nodeid -> outcome (the plugin's --outcomes record)."""
    record = tmp / f"outcomes-{len(list(tmp.iterdir()))}.jsonl"
    # Files outside this checkout: the root conftest.py does not load the plugin for them.
    subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                    "-p", "fixtures.pytest_plugin", "--outcomes", str(record), *paths],
                   cwd=ROOT, env=env(**extra), capture_output=True, text=True, timeout=600)
    lines = record.read_text().splitlines() if record.exists() else []
    return {r["nodeid"].rsplit("::", 1)[-1]: r["outcome"] for r in map(json.loads, lines)}


def test_each_reproducer_fails_on_the_checkout_and_passes_on_the_release(
        hunted, checkout, tmp_path):
    _, report, _ = hunted
    paths = [raised(p)["reproducer"] for p in report["pairs"]]
    overlay = subprocess.run([sys.executable, "-m", "sim.vllm.overlay", str(checkout)],
                             cwd=ROOT, env=env(), capture_output=True, text=True,
                             check=True).stdout.strip().splitlines()[-1]
    on_checkout = outcomes(paths, tmp_path, PYTHONPATH=f"{overlay}{os.pathsep}{ROOT}",
                           LCH_VLLM_PATH=str(checkout), LCH_REQUIRE_TARGETS="1")
    on_release = outcomes(paths, tmp_path, LCH_REQUIRE_TARGETS="1")
    vllm_cases = sorted(n for n in on_release if n.endswith("[vllm]"))
    assert len(vllm_cases) == len(PLANTS), on_release
    assert {on_checkout[n] for n in vllm_cases} == {"divergence"}, on_checkout
    assert set(on_release.values()) == {"pass"}, on_release


def test_the_pytest_form_fails_as_a_divergence_not_a_skip(checkout, tmp_path):
    """``pytest --target vllm`` with the checkout's overlay: the encoder-cache machine fails
    with the finding, where targets are required and where they are not."""
    overlay = subprocess.run([sys.executable, "-m", "sim.vllm.overlay", str(checkout)],
                             cwd=ROOT, env=env(), capture_output=True, text=True,
                             check=True).stdout.strip().splitlines()[-1]
    record = tmp_path / "outcomes.jsonl"
    extra = {k: v for k, v in os.environ.items() if k != "LCH_REQUIRE_TARGETS"}
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           "properties/test_encoder_cache.py", "-k",
                           "test_encoder_cache_machine and vllm", "--target", "vllm",
                           "--outcomes", str(record)], cwd=ROOT,
                          env={**extra, "VLLM_TARGET_DEVICE": "cpu",
                               "PYTHONPATH": f"{overlay}{os.pathsep}{ROOT}",
                               "LCH_VLLM_PATH": str(checkout), "HYPOTHESIS_PROFILE": "ci"},
                          capture_output=True, text=True, timeout=600)
    records = [json.loads(line) for line in record.read_text().splitlines()]
    assert done.returncode == 1, done.stdout[-3000:]
    assert [(r["outcome"], r.get("property")) for r in records] == [("divergence",
                                                                      "no-raise")], records
    assert "reproducer:" in done.stdout
