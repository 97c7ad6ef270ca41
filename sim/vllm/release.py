"""Import the installed vLLM once per process, on CPU, and say clearly when it cannot be used.

``load()`` is the single entry point: it sets ``VLLM_TARGET_DEVICE=cpu`` (the CUDA wheel
otherwise resolves no platform on a machine without a GPU), imports vLLM, checks the release
and caches the outcome, so the ~10 s import and a failed import each happen once.

- vLLM not installed, or an import fails: ``TargetUnavailable`` (tests skip with the reason;
  ``LCH_REQUIRE_TARGETS=1``, as in ``nox -s vllm``, turns the skip into a failure).
- a release before 0.10.2: ``HarnessError`` (the encoder cache was per request then, a
  different API with nothing for these suites to compare).

The bottom of ``sim.vllm``: every subsystem's compat module asks it the release
(``release()``, ``at_least``, ``parse_release``: the one place releases are read and
compared), and it imports none of them (``pyproject.toml``'s contract for ``sim.vllm``). The
release differences it holds are its own: how a release is made to resolve its CPU platform
(``select_cpu_platform``), and how its CPU platform is made to validate a config as vLLM's CPU
build would (``cpu_build``).
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import importlib.util
import inspect
import os
import re
import sys
from pathlib import Path
from types import ModuleType

from sim.errors import HarnessError, TargetUnavailable

MIN_RELEASE = (0, 10, 2)
DEFAULT_RELEASE = "0.33.0"
# Package data (pyproject.toml), so an installed harness has them too.
REQUIREMENTS_DIR = Path(__file__).resolve().parent / "requirements"


def parse_release(text: str) -> tuple[int, int, int]:
    """``"0.10.1.1"`` -> (0, 10, 1); dev/local suffixes are ignored."""
    match = re.match(r"\s*(\d+)\.(\d+)(?:\.(\d+))?", text)
    if not match:
        raise HarnessError(f"cannot read vLLM release {text!r}; give one such as 0.33.0")
    major, minor, patch = match.groups()
    return int(major), int(minor), int(patch or 0)


def at_least(since: str, found: str | None = None) -> bool:
    """Whether release ``found`` (the installed one by default) is ``since`` or later: the one
    comparison of releases the compat modules make, so each reads as its tag does."""
    return parse_release(release() if found is None else found) >= parse_release(since)


def check_supported(release: str) -> None:
    if parse_release(release) < MIN_RELEASE:
        raise HarnessError(
            f"vLLM {release} is not supported: before 0.10.2 the encoder cache was kept per "
            "request (no shared mm_hash entries, no freeable queue), another API these suites "
            "do not model; use vLLM 0.10.2 or later")


def requirements_file(release: str) -> Path:
    """The requirements file of ``release``'s family
    (``sim/vllm/requirements/vllm-<major.minor>.txt``), else the nearest older family that has
    one, else the oldest one kept."""
    want = parse_release(release)[:2]
    kept = sorted((parse_release(p.stem.removeprefix("vllm-"))[:2], p)
                  for p in REQUIREMENTS_DIR.glob("vllm-*.txt"))
    if not kept:
        raise HarnessError(f"no vllm-*.txt under {REQUIREMENTS_DIR}: the harness's install "
                           "is incomplete; reinstall it")
    older = [p for family, p in kept if family <= want]
    return older[-1] if older else kept[0][1]


def install_hint(release: str = DEFAULT_RELEASE) -> str:
    req = _requirements_name(release)
    return (f"run `nox -s vllm` (or `nox -s vllm -- --vllm-version X`), or install it into "
            f"this environment: `pip install torch==2.13.0 && pip install --no-deps "
            f"vllm=={release} && pip install --no-deps -r {req}`")


def load() -> ModuleType:
    """The ``vllm`` package, imported once on CPU; raises as described in the module doc.
    A failure is remembered too: a second attempt would only meet a half-imported package."""
    outcome = _load_once()
    if isinstance(outcome, BaseException):
        raise outcome
    return outcome


@functools.cache
def _load_once() -> ModuleType | HarnessError:
    try:
        return _import_vllm()
    except HarnessError as error:
        return error


def _import_vllm() -> ModuleType:
    os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
    try:
        vllm = importlib.import_module("vllm")
    except ModuleNotFoundError as error:
        if error.name == "vllm":
            raise TargetUnavailable(f"vLLM is not installed; {install_hint()}") from None
        raise _import_failed("vllm", error) from None
    except Exception as error:  # noqa: BLE001 - any import failure makes the target unusable
        raise _import_failed("vllm", error) from None
    check_supported(release())
    if os.environ["VLLM_TARGET_DEVICE"] == "cpu":
        select_cpu_platform(importlib.import_module("vllm.platforms"))
    return vllm


def select_cpu_platform(platforms: ModuleType) -> None:
    """Make vLLM resolve its CPU platform (``vllm.platforms``), before or after ``import vllm``.

    # vLLM >=0.28.0: ``VLLM_TARGET_DEVICE=cpu`` selects it (``cpu_platform_plugin`` reads it).
    # vLLM 0.10.2-0.27.x: the CPU platform is detected only for a CPU build (a ``cpu`` version
    #   suffix) or on macOS; the CUDA wheel on a machine without a GPU resolves
    #   ``UnspecifiedPlatform`` and ``VllmConfig`` fails "Failed to infer device type". The
    #   harness drives the CPU build's platform class instead, as that build would. Up to
    #   0.2x the platform is resolved lazily (set it before anything asks); later releases
    #   resolve it while ``import vllm`` runs, so modules that bound ``current_platform`` by
    #   name are re-bound too (0.26.0).
    """
    if "VLLM_TARGET_DEVICE" in inspect.getsource(platforms.cpu_platform_plugin):
        return
    current = platforms._current_platform
    if current is not None and type(current).__name__ != "UnspecifiedPlatform":
        return
    from vllm.platforms.cpu import CpuPlatform
    cpu = platforms._current_platform = CpuPlatform()
    if current is None:
        return
    for name, module in list(sys.modules.items()):
        if name.startswith("vllm") and getattr(module, "current_platform", None) is current:
            module.current_platform = cpu


@contextlib.contextmanager
def cpu_build():
    """Inside this block, vLLM's CPU platform validates a ``VllmConfig`` as it does in vLLM's
    CPU build on x86, which ships Triton's CPU backend (triton-cpu).

    # vLLM >=0.34.0: ``CpuPlatform.check_and_update_config`` refuses an x86 host without
    #   triton-cpu ("vLLM on x86 CPUs requires Triton"). triton-cpu comes only with vLLM's CPU
    #   wheels, not from PyPI, so the CUDA wheel the harness installs answers "no". What the
    #   harness drives (the scheduler, the KV and encoder caches) runs no Triton kernel. The
    #   question is answered as the CPU build would (``vllm.triton_utils.HAS_TRITON``, which
    #   the check reads when called) during that check only, so no module imported meanwhile
    #   binds the answer.
    # vLLM 0.33.0: the check only warns; earlier ones do not ask. Left as they are.
    """
    from unittest import mock
    platform = importlib.import_module("vllm.platforms").current_platform
    if not at_least("0.34.0") or not platform.is_cpu():
        yield
        return
    triton_utils = importlib.import_module("vllm.triton_utils")
    check = type(platform).check_and_update_config.__func__

    def as_cpu_build(cls, vllm_config):
        with mock.patch.object(triton_utils, "HAS_TRITON", True):
            return check(cls, vllm_config)
    with mock.patch.object(type(platform), "check_and_update_config",
                           classmethod(as_cpu_build)):
        yield


def release() -> str:
    from importlib.metadata import PackageNotFoundError, version
    try:
        return version("vllm")
    except PackageNotFoundError:
        return importlib.import_module("vllm").__version__


_FAILED_IMPORTS: dict[str, TargetUnavailable] = {}


def import_module(name: str) -> ModuleType:
    """Import ``name`` (a vLLM module) after ``load()``; an import failure is explained, and
    remembered: a second attempt would meet half-imported modules and may seem to succeed."""
    load()
    if name in _FAILED_IMPORTS:
        raise _FAILED_IMPORTS[name]
    try:
        return importlib.import_module(name)
    except Exception as error:  # noqa: BLE001
        _FAILED_IMPORTS[name] = _import_failed(name, error)
        raise _FAILED_IMPORTS[name] from None


def has_module(name: str) -> bool:
    """Whether the installed vLLM ships module ``name`` (without importing it)."""
    load()
    try:
        return importlib.util.find_spec(name) is not None
    except ModuleNotFoundError:          # a parent package is missing too
        return False


def module_source(name: str) -> str:
    """The source text of the installed vLLM's module ``name`` without importing it (a
    module whose import needs the whole engine), "" where it ships none."""
    if not has_module(name):
        return ""
    origin = importlib.util.find_spec(name).origin
    return Path(origin).read_text() if origin and origin.endswith(".py") else ""


def _import_failed(name: str, error: Exception) -> TargetUnavailable:
    missing = getattr(error, "name", None)
    found = release_or_unknown()
    why = (f"it needs module {missing!r}, which is not installed"
           if isinstance(error, ModuleNotFoundError) and missing
           else f"{type(error).__name__}: {error}")
    return TargetUnavailable(
        f"vLLM {found} is installed but `import {name}` failed: {why}; the packages vLLM's "
        f"imports need are listed in {_requirements_name(found)} (add the missing one there); "
        f"{install_hint(found if found != 'unknown' else DEFAULT_RELEASE)}")


def release_or_unknown() -> str:
    try:
        return release()
    except Exception:  # noqa: BLE001
        return "unknown"


def _requirements_name(found: str) -> str:
    """The family's requirements file as a user types it: relative to the working directory
    when it is below it (a checkout), else its full path (an installed harness)."""
    try:
        path = requirements_file(found if found != "unknown" else DEFAULT_RELEASE)
    except HarnessError:
        return "sim/vllm/requirements/vllm-<family>.txt"
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


# Modules the harness's vllm target drives or will drive: `nox -s vllm`
# imports them all first, so a missing package is named before any test runs.
DRIVEN_MODULES = (
    "vllm.v1.core.encoder_cache_manager",
    "vllm.v1.request",
    "vllm.v1.core.sched.scheduler",
    "vllm.v1.kv_offload.cpu.manager",
    "vllm.v1.kv_offload.tiering.manager",
    "vllm.distributed.kv_transfer.kv_connector.v1.offloading.scheduler",
)
# Releases without a module yet (the offload managers are newer than 0.10.2): reported, and
# only the encoder cache is required there.
REQUIRED_MODULES = DRIVEN_MODULES[:2]


def check_imports() -> int:
    """``python -m sim.vllm.release check``: import every driven module, explain failures."""
    try:
        load()
        found = release()
        print(f"vLLM {found} (VLLM_TARGET_DEVICE={os.environ['VLLM_TARGET_DEVICE']})")
        problems = 0
        for name in DRIVEN_MODULES:
            try:
                importlib.import_module(name)
                print(f"  ok       {name}")
            except Exception as error:  # noqa: BLE001 - reported, with what to do
                missing = getattr(error, "name", None) or ""
                if missing.startswith("vllm") and name not in REQUIRED_MODULES:
                    print(f"  absent   {name} (not in vLLM {found})")
                    continue
                print(f"  FAILED   {name}")
                print(f"llm-cache-harness: error: {_import_failed(name, error)}",
                      file=sys.stderr)
                problems += 1
        return 1 if problems else 0
    except HarnessError as error:
        print(f"llm-cache-harness: error: {error}", file=sys.stderr)
        return 1


def main(argv: list[str]) -> int:
    """``python -m sim.vllm.release check`` | ``requirements-file X``."""
    if argv[:1] == ["check"]:
        return check_imports()
    if argv[:1] == ["requirements-file"] and len(argv) == 2:
        print(_requirements_name(argv[1]))
        return 0
    print("usage: python -m sim.vllm.release check | requirements-file RELEASE", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))


def installed_release() -> str | None:
    """The installed vLLM's release from its metadata (no import), or None."""
    from importlib.metadata import PackageNotFoundError, version
    try:
        return version("vllm")
    except PackageNotFoundError:
        return None


def skip_before(since: str, reason: str):
    """Skip the ``vllm`` target on releases before ``since``: the scenario needs what that
    release introduced (``pytest.param("vllm", marks=...)``)."""
    import pytest

    found = installed_release()
    older = found is not None and parse_release(found) < parse_release(since)
    return pytest.mark.skipif(older, reason=f"absent: vLLM {found} predates {since}: {reason}")


# What a curated reproducer's expected failure is: a property failing (``PropertyFailed``
# is an ``AssertionError``) or the reproducer's own ``assert``. Never a world that could not
# be built: ``TargetUnavailable`` / ``AdapterError`` (a ``HarnessError``), or a ``TypeError``
# from a call shaped for another release, which would otherwise "reproduce" the bug.
PROPERTY_FAILURE = (AssertionError,)


def xfail_before(fixed_in: str | None, reason: str, since: str | None = None,
                 raises: tuple[type[BaseException], ...] = PROPERTY_FAILURE):
    """A strict xfail for the ``vllm`` target on releases before ``fixed_in``, for curated
    reproducers of divergences that upstream fixed (``pytest.param("vllm", marks=...)``):
    an affected release stays green, and a reproducer that starts passing there turns red.
    ``fixed_in=None``: not fixed in any release checked, so every release from ``since`` on
    is affected (the release that fixes it turns the reproducer red: then name it here).
    With ``since`` (the first release that has the class, or the bug), older releases skip:
    they have nothing to run the reproducer on.

    Only ``raises`` (a property failure, by default) counts as the expected failure: a
    reproducer whose world cannot be built, or whose calls no longer fit the release, fails
    as an error of its own instead of passing as "still reproduces". A reproducer whose
    finding is a crash of vLLM's own code passes the exception it expects."""
    import pytest

    found = installed_release()
    version = parse_release(found) if found is not None else None
    affected = version is not None and (
        fixed_in is None or version < parse_release(fixed_in)) and (
        since is None or version >= parse_release(since))
    bound = "unfixed" if fixed_in is None else f"< {fixed_in}"
    mark = pytest.mark.xfail(affected, strict=True, raises=raises,
                             reason=f"vLLM {found} {bound}: {reason}")
    if since is None:
        return mark
    absent = version is not None and version < parse_release(since)
    return [pytest.mark.skipif(absent, reason=f"absent: vLLM {found} predates {since}"), mark]
