"""One manifest per subsystem: ``sim/manifests/<name>.py`` declares ``SUBSYSTEM = Subsystem(...)``
(``subsystem.py``), and every central registry is derived from them: ``sim.targets.SUBSYSTEMS``
and its factories, ``sim.ports.PORTS``, ``sim.native.bugs.BUG_SWITCHES``,
``properties.machines.MACHINES``, the catalogue ``fixtures.known_bugs.CATALOGUE``,
``lch.history`` (``SUITES``, ``COLUMNS``, ``HUNTED``), ``lch.suites.CLASSES`` and the noxfile's
``VLLM_SUITES``. Adding a subsystem adds its files and edits nothing here.

Discovery walks this package with ``pkgutil``, not entry points: the subsystems live in this
repository and nothing installs them, so a checkout run with ``PYTHONPATH=.`` (or nox's own
interpreter, which never installs the harness) would see no entry points, and a stale
installed copy would see yesterday's. ``pkgutil`` reads the package's ``__path__``, which a
test can extend with a temporary directory to add a subsystem without writing here.
"""

from __future__ import annotations

import importlib
import pkgutil
from pathlib import Path

from sim.manifests.subsystem import (
    Column,
    ManifestError,
    Subsystem,
    check_references,
    hunt_names,
    resolve,
)

__all__ = ["Column", "ManifestError", "Subsystem", "all_manifests", "by_name",
           "check_references", "hunt_names", "resolve", "vllm_suites"]

NOT_MANIFESTS = frozenset({"subsystem"})


def all_manifests() -> tuple[Subsystem, ...]:
    """Every subsystem's manifest, by rank (read afresh: a changed ``__path__`` shows)."""
    found = []
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda info: info.name):
        if info.name in NOT_MANIFESTS or info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{__name__}.{info.name}")
        manifest = getattr(module, "SUBSYSTEM", None)
        source = _shown(module.__file__ or info.name)
        if not isinstance(manifest, Subsystem):
            raise ManifestError(f"{source}: defines no SUBSYSTEM = Subsystem(...); declare "
                                "one (see sim/manifests/encoder_cache.py)")
        if manifest.name != info.name:
            raise ManifestError(f"{source}: declares subsystem {manifest.name!r}; name the "
                                f"file {manifest.name}.py or the subsystem {info.name!r}")
        found.append(_with_source(manifest, source))
    ranks = [m.rank for m in found]
    if len(set(ranks)) != len(ranks):
        twice = sorted(m.name for m in found if ranks.count(m.rank) > 1)
        raise ManifestError(f"manifests {', '.join(twice)} share a rank; give each its own")
    return tuple(sorted(found, key=lambda m: m.rank))


def by_name() -> dict[str, Subsystem]:
    return {m.name: m for m in all_manifests()}


def vllm_suites(cross_cutting: list[str]) -> list[str]:
    """The pytest args of the nox ``vllm`` session: each subsystem's (``vllm_suites``), by
    rank, then ``cross_cutting``, the files that belong to no one subsystem (``noxfile.py``
    lists them)."""
    suites = [s for m in all_manifests() for s in m.vllm_suites]
    return list(dict.fromkeys([*suites, *cross_cutting]))


def _shown(path: str) -> str:
    """``path`` from the repository's root where it lies inside it (as errors name files)."""
    root = Path(__file__).resolve().parents[2]
    try:
        return Path(path).resolve().relative_to(root).as_posix()
    except ValueError:
        return path


def _with_source(manifest: Subsystem, source: str) -> Subsystem:
    import dataclasses
    return dataclasses.replace(manifest, source=source)
