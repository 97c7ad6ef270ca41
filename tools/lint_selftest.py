"""The lint rules can fail: plant an upward import, a compat module importing an adapter or
another subsystem's compat, the release module importing a compat module, and a global RNG
call in a copy of the tree and require ``lint-imports`` and ``ruff`` to reject each (run by
``nox -s lint``).

A rule that never fires checks nothing; this is the lint's own known-bug catalogue.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("lch", "properties", "fixtures", "sim", "models")
VLLM_LAYERS = "sim.vllm: adapters > their compat modules (independent) > release"
PLANTS = [
    # (file, line added, command that must fail, what it shows[, contract it must break])
    ("sim/targets.py", "import properties.run  # noqa: F401", ["lint-imports"],
     "an upward import (sim -> properties)"),
    ("sim/native/encoder_cache.py", "import sim.vllm.release  # noqa: F401", ["lint-imports"],
     "the native target importing the vllm adapters"),
    ("models/encoder_cache.py", "import torch  # noqa: F401", ["lint-imports"],
     "a model importing torch"),
    ("sim/vllm/tiered_lookup_compat.py", "import sim.vllm.tiered_lookup  # noqa: F401",
     ["lint-imports"], "a compat module importing its adapter", VLLM_LAYERS),
    ("sim/vllm/scheduler_pass_compat.py",
     "import sim.vllm.encoder_cache_compat  # noqa: F401", ["lint-imports"],
     "one subsystem's compat module importing another's", VLLM_LAYERS),
    ("sim/vllm/release.py", "import sim.vllm.encoder_cache_compat  # noqa: F401",
     ["lint-imports"], "the release module importing a compat module (the old cycle)",
     VLLM_LAYERS),
    ("models/encoder_cache.py", "from random import randint  # noqa: F401", ["ruff", "check"],
     "a global RNG imported by name"),
]


def main() -> int:
    failures = []
    for path, line, command, what, *contract in PLANTS:
        with tempfile.TemporaryDirectory() as tmp:
            for package in PACKAGES:
                shutil.copytree(ROOT / package, Path(tmp) / package,
                                ignore=shutil.ignore_patterns("__pycache__", "reproducers"))
            shutil.copy(ROOT / "pyproject.toml", tmp)
            target = Path(tmp) / path
            target.write_text(target.read_text() + "\n" + line + "\n")
            run = subprocess.run([*command, *(["."] if command[0] == "ruff" else [])],
                                 cwd=tmp, env={"PYTHONPATH": tmp, "PATH": _path()},
                                 capture_output=True, text=True, check=False)
            # Rejected by the contract it plants against, not by another one it also breaks.
            caught = run.returncode and all(f"{name} BROKEN" in run.stdout for name in contract)
            verdict = "rejected" if caught else "MISSED"
            print(f"lint selftest: {what}: {verdict}")
            if not caught:
                failures.append(what)
    return 1 if failures else 0


def _path() -> str:
    return os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])


if __name__ == "__main__":
    sys.exit(main())
