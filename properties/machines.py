"""Subsystem -> its state machine, imported on first use (the hunt and the catalogue test
look machines up here; each machine module also has its own pytest module). Each subsystem's
manifest (``sim/manifests/<s>.py``) names its machine, and its further machines
(``machines``), which the hunt runs as ``<subsystem>.<name>``."""

from __future__ import annotations

import importlib

from properties.harness import HarnessMachine
from sim.errors import HarnessError
from sim.manifests import Subsystem, all_manifests, hunt_names, resolve


def machines(manifests: tuple[Subsystem, ...]) -> dict[str, str]:
    """Subsystem -> "module:Class" of its machine, by rank."""
    return {m.name: m.machine for m in manifests}


def hunt_machines(manifests: tuple[Subsystem, ...]) -> dict[str, str]:
    """What a hunt can run -> "module:Class": each subsystem's machine by its name, then its
    further machines as ``<subsystem>.<name>``, by rank."""
    return {name: _reference(m, name)[1] for m in manifests for name in hunt_names(m)}


def _reference(manifest: Subsystem, name: str) -> tuple[str, str]:
    """(manifest field, "module:Class") of hunt name ``name`` in ``manifest``."""
    _, _, further = name.partition(".")
    if not further:
        return "machine", manifest.machine
    return f"machines[{further!r}]", manifest.machines[further]


_MANIFESTS = {m.name: m for m in all_manifests()}
MACHINES: dict[str, str] = machines(tuple(_MANIFESTS.values()))
HUNT_MACHINES: dict[str, str] = hunt_machines(tuple(_MANIFESTS.values()))


def machine_for(name: str) -> type[HarnessMachine]:
    """The machine of a subsystem (``name``) or one of its further machines
    (``<subsystem>.<machine>``)."""
    if name not in HUNT_MACHINES:
        raise HarnessError(f"no state machine {name!r}; choose one of: "
                           f"{', '.join(HUNT_MACHINES)}")
    manifest = _MANIFESTS[name.partition(".")[0]]
    # A machine the manifest misnames fails with the manifest's name and the fix.
    return resolve(manifest, *_reference(manifest, name))  # type: ignore[return-value]


def finding_scope(machine: type) -> str:
    """The name that prefixes ``machine``'s finding ids: the hunt name of the nearest class in
    its MRO that a manifest names (a bound or catalogue subclass is its machine's), else its
    ``subsystem``. Read off the names, importing nothing."""
    named = {ref: name for name, ref in HUNT_MACHINES.items()}
    for cls in machine.__mro__:
        name = named.get(f"{cls.__module__}:{cls.__qualname__}")
        if name is not None:
            return name
    return getattr(machine, "subsystem", "")


def target_bases(name: str) -> tuple[str, ...]:
    """The target bases machine ``name`` builds (``HarnessMachine.TARGET_BASES``; empty:
    every base its subsystem has)."""
    return tuple(machine_for(name).TARGET_BASES)


def import_all_machines() -> None:
    # The main machines and what they load (torch among it): setup a budgeted search should
    # not pay for, and the classes ``declared_properties`` walks. A further machine's module
    # is imported where it is used (the hunt's plan imports each, to read TARGET_BASES).
    for subsystem in MACHINES:
        machine_for(subsystem)


def catalogue_machine(bug, subsystem: str) -> type[HarnessMachine]:
    """The machine the known-bug catalogue runs ``bug`` on in ``subsystem``: the entry's own
    (``KnownBug.machine``) in its home subsystem, else the subsystem's."""
    if bug.machine and subsystem == bug.subsystem:
        module, _, name = bug.machine.partition(":")
        return getattr(importlib.import_module(module), name)
    return machine_for(subsystem)
