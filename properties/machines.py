"""Subsystem -> its state machine, imported on first use (the hunt and the catalogue test
look machines up here; each machine module also has its own pytest module). Each subsystem's
manifest (``sim/manifests/<s>.py``) names its machine."""

from __future__ import annotations

import importlib

from properties.harness import HarnessMachine
from sim.manifests import Subsystem, all_manifests, resolve


def machines(manifests: tuple[Subsystem, ...]) -> dict[str, str]:
    """Subsystem -> "module:Class" of its machine, by rank."""
    return {m.name: m.machine for m in manifests}


_MANIFESTS = {m.name: m for m in all_manifests()}
MACHINES: dict[str, str] = machines(tuple(_MANIFESTS.values()))


def machine_for(subsystem: str) -> type[HarnessMachine]:
    manifest = _MANIFESTS[subsystem]
    # A machine the manifest misnames fails with the manifest's name and the fix.
    return resolve(manifest, "machine", MACHINES[subsystem])  # type: ignore[return-value]


def import_all_machines() -> None:
    for subsystem in MACHINES:
        machine_for(subsystem)


def catalogue_machine(bug, subsystem: str) -> type[HarnessMachine]:
    """The machine the known-bug catalogue runs ``bug`` on in ``subsystem``: the entry's own
    (``KnownBug.machine``) in its home subsystem, else the subsystem's."""
    if bug.machine and subsystem == bug.subsystem:
        module, _, name = bug.machine.partition(":")
        return getattr(importlib.import_module(module), name)
    return machine_for(subsystem)
