"""``models/`` imports neither torch nor vllm: the models must run where neither exists."""

from __future__ import annotations

import pkgutil
import subprocess
import sys

import models


def test_every_model_imports_without_torch_or_vllm():
    names = sorted(f"models.{m.name}" for m in pkgutil.iter_modules(models.__path__))
    assert "models.encoder_cache" in names
    script = ("import sys\nsys.modules['torch'] = None\nsys.modules['vllm'] = None\n"
              + "".join(f"import {name}\n" for name in names))
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
