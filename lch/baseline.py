"""``hunt --vllm-path``: which findings are the release's own, not the checkout's change.

A pull request is judged against the release its checkout is laid over: a divergence that
vLLM X itself has (a bug upstream has not fixed yet) is reported, but as "also in vLLM X",
and does not make the hunt fail. Each finding's reproducer is run once more on the release
alone (the overlay left off the path), all in one pytest process: a reproducer whose
``vllm`` case fails there too shows a divergence of the release; one that passes shows the
checkout's. A reproducer that could not run on the release is neither: it stays the
checkout's, and the report says the check could not run.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def release_env() -> dict[str, str]:
    """This process's environment without the overlay: its ``PYTHONPATH`` entries that are
    overlays (they hold ``LCH_WHEEL``) and ``LCH_VLLM_PATH`` go; the harness stays on it."""
    entries = [e for e in os.environ.get("PYTHONPATH", "").split(os.pathsep)
               if e and not (Path(e) / "LCH_WHEEL").is_file()]
    env = {k: v for k, v in os.environ.items() if k not in ("LCH_VLLM_PATH",)}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *entries])
    return env


def on_release(reproducers: list[str], timeout_s: float = 900) -> dict[str, str]:
    """reproducer path -> "fails" (the release diverges too), "passes" (the checkout's
    change), or "could not run" (the reason)."""
    if not reproducers:
        return {}
    with tempfile.TemporaryDirectory(prefix="lch-baseline-") as tmp:
        record = Path(tmp) / "outcomes.jsonl"
        command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                   "-p", "fixtures.pytest_plugin", "--outcomes", str(record), "-k", "vllm",
                   *reproducers]
        try:
            subprocess.run(command, cwd=ROOT, env=release_env(), capture_output=True,
                           text=True, timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return {path: f"could not run: no answer in {timeout_s:.0f} s"
                    for path in reproducers}
        lines = record.read_text().splitlines() if record.exists() else []
    outcomes = [json.loads(line) for line in lines]
    verdicts = {}
    for path in reproducers:
        name = Path(path).name
        mine = [r for r in outcomes if r["nodeid"].split("::")[0].endswith(name)]
        kinds = {r["outcome"] for r in mine}
        if "divergence" in kinds:
            verdicts[path] = "fails"
        elif kinds == {"pass"}:
            verdicts[path] = "passes"
        else:
            why = next((r.get("message", "") for r in mine if r["outcome"] != "pass"),
                       "no test ran")
            verdicts[path] = f"could not run: {why}"
    return verdicts
