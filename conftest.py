"""Root conftest: load the harness plugin (options, profiles) for every test run, and every
harness module before any test draws.

Why the second: Hypothesis mixes the literals of every *loaded* local module into what it
generates (its constant pool, ``hypothesis.internal.conjecture.providers``), so without this
a derandomized run's programs depend on which modules the tests that ran before it happened
to import. An xdist worker and a lone ``pytest -k`` could then search different programs,
and a known bug be found in one and missed in the other. Hypothesis offers no setting to
turn the pool off or fix it; loading every module first makes it the same in every process
of one environment (a module that needs what the environment lacks, vLLM in ``nox -s tests``,
is left out there, as it would be by every test).
"""

from __future__ import annotations

import importlib
from pathlib import Path

# pytester: tests that run a small pytest file of their own (a reproducer's marks).
pytest_plugins = ["fixtures.pytest_plugin", "pytester"]

_ROOT = Path(__file__).parent
_PACKAGES = ("models", "sim", "fixtures", "properties", "lch")
_NOT_MODULES = ("reproducers", "golden")        # generated test files, data


def _load_harness_modules() -> None:
    for package in _PACKAGES:
        for path in sorted((_ROOT / package).rglob("*.py")):
            parts = path.relative_to(_ROOT).with_suffix("").parts
            if any(p in _NOT_MODULES for p in parts) or parts[-1] == "__main__":
                continue
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            try:
                importlib.import_module(name)
            except Exception:  # noqa: BLE001, S112 - absent here (e.g. vLLM): tests skip it too
                continue


_load_harness_modules()
