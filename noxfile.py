"""Sessions: ``nox -s hunt`` (the main job) and ``nox -s tests`` (what CI runs); ``nox -l``.

torch: every session that needs it installs ``LCH_TORCH`` first (default ``torch==2.13.0``,
the CPU wheel, which these machines serve from local disk). With a GPU, bring your own:
``LCH_TORCH="torch==2.13.0 --index-url https://download.pytorch.org/whl/cu128" nox -s tests``,
or ``LCH_TORCH=system`` to use the torch of the Python running nox.
"""

from __future__ import annotations

import os
import shlex

import nox

nox.options.sessions = ["tests"]
nox.options.default_venv_backend = "venv"

PYPROJECT = nox.project.load_toml("pyproject.toml")
TORCH = os.environ.get("LCH_TORCH", "torch==2.13.0")
VENV_PARAMS = ["--system-site-packages"] if TORCH == "system" else []


def install_harness(session: nox.Session, *groups: str) -> None:
    if TORCH != "system":
        session.install(*shlex.split(TORCH))
    session.install("-e", ".")
    for group in groups:
        session.install(*nox.project.dependency_groups(PYPROJECT, group))


@nox.session(venv_params=VENV_PARAMS)
def tests(session: nox.Session) -> None:
    """Models, native target, known-bug catalogue, determinism (the README's test command)."""
    install_harness(session, "test")
    session.env["HYPOTHESIS_PROFILE"] = "ci"
    session.run("pytest", "-n", "auto", "--dist", "loadgroup", *session.posargs)


@nox.session
def models(session: nox.Session) -> None:
    """The reference models alone, in a virtualenv without torch or vLLM."""
    session.install("attrs", "pytest", *nox.project.dependency_groups(PYPROJECT, "test"))
    session.run("python", "-c", "import importlib.util, sys; sys.exit("
                "importlib.util.find_spec('torch') is not None)", silent=True)
    session.run("pytest", "properties/test_models_pure.py",
                "properties/test_encoder_cache_model.py", *session.posargs)


@nox.session(venv_params=VENV_PARAMS)
def hunt(session: nox.Session) -> None:
    """Time-budgeted search on the chosen targets (default native): report and reproducers."""
    install_harness(session, "test")
    session.env.setdefault("HYPOTHESIS_PROFILE", "hunt")
    session.run("python", "-m", "sim.cli", "hunt", *session.posargs)   # default --budget 60s


@nox.session(venv_params=VENV_PARAMS)
def replay(session: nox.Session) -> None:
    """Run every saved reproducer under fixtures/reproducers."""
    install_harness(session, "test")
    session.run("python", "-m", "sim.cli", "replay", *session.posargs)


@nox.session(venv_params=VENV_PARAMS)
def bench(session: nox.Session) -> None:
    """Steps per second against a trivial machine, time to find and shrink each known bug."""
    install_harness(session, "test")
    session.run("python", "-m", "sim.bench", *session.posargs)


@nox.session
def lint(session: nox.Session) -> None:
    """ruff, plus the import and determinism rules (models/ without torch, no global RNG)."""
    session.install(*nox.project.dependency_groups(PYPROJECT, "lint"))
    session.run("ruff", "check", ".")
    session.run("python", "tools/check_rules.py")
