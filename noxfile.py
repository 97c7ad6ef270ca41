"""Sessions: ``nox -s hunt`` (the main job) and ``nox -s tests`` (the fast tiers; CI runs every
tier with ``LCH_TIERS=all``); ``nox -l``.

torch: every session that needs it installs ``LCH_TORCH`` first (default ``torch==2.13.0``,
the CPU wheel, which these machines serve from local disk). With a GPU, bring your own:
``LCH_TORCH="torch==2.13.0 --index-url https://download.pytorch.org/whl/cu128" nox -s tests``,
or ``LCH_TORCH=system`` to use the torch of the Python running nox.
"""

from __future__ import annotations

import os
import shlex
import sys
from pathlib import Path

import nox

# nox imports this file from its own interpreter, which has neither the harness installed nor
# this checkout on sys.path: the manifests (standard library only) are read from here.
sys.path.insert(0, str(Path(__file__).resolve().parent))
from sim.manifests import vllm_suites  # noqa: E402 - after the path it needs

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


# The test tiers (fixtures/tiers.py; nox imports no harness module, so a copy that
# properties/test_tiers.py keeps equal) and those ``nox -s tests`` runs unless told otherwise.
TIERS = ("fast", "machines", "catalogue", "slow")
DEFAULT_TIERS = ("fast", "machines")
# pytest options whose value is the next argument (``-k lch`` names no folder)
VALUED_OPTIONS = ("-k", "-n", "-p", "--target", "--dist", "--reproducer-dir", "--outcomes",
                  "--maxfail", "--durations", "--rootdir", "-c")


@nox.session(venv_params=VENV_PARAMS)
def tests(session: nox.Session) -> None:
    """The fast and machines tiers (LCH_TIERS=all: every tier, as CI runs; -- -m EXPR: yours)."""
    # The sdist group too: the slow tier's install tests download vLLM's sdist (for its tests),
    # and pip prepares its metadata with vLLM's build tools (a clean machine has no sdist cached).
    install_harness(session, "test", "sdist")
    session.env["HYPOTHESIS_PROFILE"] = "ci"
    session.run("pytest", "-n", "auto", "--dist", "loadgroup",
                *tier_selection(session, os.environ.get("LCH_TIERS", "")), *session.posargs)


def tier_selection(session: nox.Session, chosen: str) -> list[str]:
    """``-m`` for the tiers ``LCH_TIERS`` names (``fast,catalogue``; ``all``: every tier;
    unset: ``DEFAULT_TIERS``), or nothing where the arguments select for themselves: a ``-m``
    of their own, or a test file or folder named (run whatever its tier)."""
    args = session.posargs
    values = {b for a, b in zip(args, args[1:], strict=False) if a in VALUED_OPTIONS}
    if any(a.startswith("-m") for a in args) or any(
            a not in values and not a.startswith("-") and Path(a.split("::")[0]).exists()
            for a in args):
        return []
    if chosen == "all":
        return []
    names = [t.strip() for t in chosen.split(",") if t.strip()] or list(DEFAULT_TIERS)
    unknown = [t for t in names if t not in TIERS]
    if unknown:
        session.error(f"LCH_TIERS={chosen}: {', '.join(unknown)} is no tier; name some of "
                      f"{', '.join(TIERS)}, or all")
    return ["-m", " or ".join(names)]


@nox.session
def models(session: nox.Session) -> None:
    """The reference models alone, in a virtualenv without torch or vLLM."""
    session.install("attrs", "pytest", *nox.project.dependency_groups(PYPROJECT, "test"))
    session.run("python", "-c", "import importlib.util, sys; sys.exit("
                "importlib.util.find_spec('torch') is not None)", silent=True)
    session.run("pytest", "properties/test_models_pure.py",
                "properties/test_encoder_cache_model.py", "properties/test_tiered_lookup_model.py",
                *session.posargs)


@nox.session(venv_params=VENV_PARAMS)
def hunt(session: nox.Session) -> None:
    """Time-budgeted search on the chosen targets (default native): report and reproducers."""
    release, args = take_option(session.posargs, "--vllm-version", VLLM_RELEASE)
    if wants_vllm(args):         # --target vllm: this venv gets vLLM, or the hunt would refuse
        install_vllm(session, release)
        session.env["VLLM_TARGET_DEVICE"] = "cpu"
    else:
        install_harness(session, "test")
    session.env.setdefault("HYPOTHESIS_PROFILE", "hunt")
    session.run("python", "-m", "lch.cli", "hunt", *args)   # default --budget 60s


def wants_vllm(args: list[str]) -> bool:
    """``--target vllm`` (or ``--target=vllm``) among ``args``."""
    values = [b for a, b in zip(args, args[1:], strict=False) if a == "--target"]
    values += [a.split("=", 1)[1] for a in args if a.startswith("--target=")]
    return any(v.split(":")[0] == "vllm" for v in values)


@nox.session(venv_params=VENV_PARAMS)
def replay(session: nox.Session) -> None:
    """Run every saved reproducer under fixtures/reproducers."""
    install_harness(session, "test")
    session.run("python", "-m", "lch.cli", "replay", *session.posargs)


@nox.session(venv_params=VENV_PARAMS)
def bench(session: nox.Session) -> None:
    """Steps per second against a trivial machine, time to find and shrink each known bug."""
    suites, args = take_option(session.posargs, "--suites", "")
    install_harness(session, "test")
    if suites:     # -- --suites vllm,tests: each suite's wall time serial and on every core
        for label in suites.split(","):
            if label not in SUITE_ARGS:
                session.error(f"--suites {label}: name one of {', '.join(SUITE_ARGS)}")
            if label == "vllm":
                install_vllm(session, VLLM_RELEASE)
                session.env.update(LCH_REQUIRE_TARGETS="1", VLLM_TARGET_DEVICE="cpu")
            session.run("python", "-m", "lch.suite_times", "--label", label, *args, "--",
                        *SUITE_ARGS[label])
        return
    session.install("matplotlib")                       # the plot
    session.run("python", "-m", "lch.bench", *args)


@nox.session
def lint(session: nox.Session) -> None:
    """ruff (style, banned global RNG and clock), the layer rules, and proof both can fail."""
    session.install(*nox.project.dependency_groups(PYPROJECT, "lint"))
    session.env["PYTHONPATH"] = str(Path.cwd())
    session.run("ruff", "check", ".")
    session.run("lint-imports")
    session.run("python", "tools/lint_selftest.py")


VLLM_RELEASE = "0.33.0"
# The vllm session's files that belong to no one subsystem: the ports of all of them, the
# mutation witnesses, the reproducer plumbing, the CI recipe and the curated reproducers (each
# names the targets it runs on).
CROSS_CUTTING_VLLM_SUITES = ["properties/test_ports.py", "lch/test_mutant_witnesses.py",
                             "properties/test_upstream_reproducer.py",
                             "properties/test_vllm_path_crash.py", "lch/test_ci_recipe.py",
                             "fixtures/reproducers"]
# Each subsystem's vllm suites come from its manifest (sim/manifests/<s>.py: vllm_suites).
VLLM_SUITES = vllm_suites(CROSS_CUTTING_VLLM_SUITES)


# What ``nox -s bench -- --suites`` times: the arguments each session gives pytest.
SUITE_ARGS = {"vllm": ["--ignore=fixtures/reproducers/found", "--target", "vllm", *VLLM_SUITES],
              "tests": ["-m", " or ".join(DEFAULT_TIERS)]}


def take_option(args: list[str], name: str, default: str) -> tuple[str, list[str]]:
    """``--name X`` or ``--name=X`` out of ``args``: (value, the other args)."""
    rest, value, it = [], default, iter(args)
    for arg in it:
        if arg == name:
            value = next(it, default)
        elif arg.startswith(name + "="):
            value = arg.split("=", 1)[1]
        else:
            rest.append(arg)
    return value, rest


def install_vllm(session: nox.Session, release: str) -> None:
    """torch (LCH_TORCH), the harness, then vLLM without its GPU dependencies plus the
    pure-Python packages its imports need (``sim/vllm/requirements/vllm-<family>.txt``)."""
    install_harness(session, "test")
    requirements = session.run_install("python", "-m", "sim.vllm.release",
                                       "requirements-file", release, silent=True)
    if requirements is None:        # --no-install (-R): nox ran nothing, the venv has it all
        return
    requirements = requirements.strip()
    session.install("--no-deps", f"vllm=={release}")
    session.install("--no-deps", "-r", requirements)


@nox.session(venv_params=VENV_PARAMS)
def vllm(session: nox.Session) -> None:
    """The suites against the real vLLM classes on CPU (``-- --vllm-version X``; 0.33.0)."""
    release, pytest_args = take_option(session.posargs, "--vllm-version", VLLM_RELEASE)
    checkout, pytest_args = take_option(pytest_args, "--vllm-path", "")
    install_vllm(session, release)
    # A known vLLM divergence of the installed release (fixtures/upstream_bugs.py) met by a
    # machine is an xfail here, its search going on past it (properties/run.py:
    # check_machine); history counts it found.
    session.env.update(HYPOTHESIS_PROFILE="vllm", LCH_REQUIRE_TARGETS="1",
                       VLLM_TARGET_DEVICE="cpu", LCH_EXPECT_KNOWN="1")
    if checkout:     # your checkout's Python files over the release's wheel (sim/vllm/overlay.py)
        overlay = session.run("python", "-m", "sim.vllm.overlay", checkout,
                              silent=True).strip().splitlines()[-1]
        session.env.update(PYTHONPATH=overlay, LCH_VLLM_PATH=str(Path(checkout).resolve()))
    session.run("python", "-m", "sim.vllm.release", "check")   # names a missing module first
    # Every core (LCH_WORKERS=0: serial); each worker imports vLLM once (about 10 s). The
    # derandomized vllm profile gives each test the same examples whichever worker runs it.
    workers = os.environ.get("LCH_WORKERS", "auto")
    session.run("pytest", "-p", "no:cacheprovider", "--ignore=fixtures/reproducers/found",
                "-n", workers, "--dist", "loadgroup", "--target", "vllm", *VLLM_SUITES,
                *pytest_args)


def release_session(session: nox.Session, verb: str) -> None:
    """``bisect`` and ``history`` run from a small venv; each release gets its own, cached
    under ``LCH_VENV_DIR`` (default ``.nox/bisect``), with the suites run from this checkout."""
    session.install(*nox.project.dependency_groups(PYPROJECT, "test"))
    session.run("python", "-m", "lch.cli", verb, *session.posargs)


@nox.session
def bisect(session: nox.Session) -> None:
    """Per subsystem, the vLLM releases where its outcome changes (``-- --from X --to Y``)."""
    release_session(session, "bisect")


@nox.session
def history(session: nox.Session) -> None:
    """Every subsystem's vllm suites over releases: ``history-report.{md,json}``
    (``-- --releases 0.10.2,0.14.0,...`` or ``-- --from X --to Y``)."""
    release_session(session, "history")


@nox.session(venv_params=VENV_PARAMS)
def mutants(session: nox.Session) -> None:
    """Mutation score of the vllm suites on one real vLLM class (``-- --class M:C``)."""
    release, args = take_option(session.posargs, "--release", VLLM_RELEASE)
    # The campaign's record goes to results/mutants/ unless told otherwise (commit it)
    record_dir, args = take_option(args, "--record-dir", "results")
    install_vllm(session, release)
    if "--compare-upstream" in args:
        # pip prepares the sdist's metadata even to download it: vLLM's build tools
        session.install(*nox.project.dependency_groups(PYPROJECT, "sdist"))
    session.env.update(HYPOTHESIS_PROFILE="ci", LCH_REQUIRE_TARGETS="1",
                       VLLM_TARGET_DEVICE="cpu")
    session.run("python", "-m", "sim.vllm.release", "check")
    session.run("python", "-m", "lch.mutants", "--release", release, "--record-dir", record_dir,
                *args)
