"""Subsystem -> its state machine, imported on first use (the hunt and the catalogue test
look machines up here; each machine module also has its own pytest module)."""

from __future__ import annotations

import importlib

from properties.harness import HarnessMachine

MACHINES: dict[str, str] = {
    "encoder_cache": "properties.encoder_cache_machine:EncoderCacheMachine",
    "encoder_decoder_cache":
        "properties.encoder_decoder_cache_machine:EncoderDecoderCacheMachine",
    "offload_engine": "properties.offload_engine_machine:OffloadEngineMachine",
    "scheduler_pass": "properties.scheduler_pass_machine:SchedulerPassMachine",
    "secondary_tier": "properties.secondary_tier_machine:SecondaryTierMachine",
    "tiered_lookup": "properties.tiered_lookup_machine:TieredLookupMachine",
    "prefix_cache": "properties.prefix_cache_machine:PrefixCacheMachine",
}


def machine_for(subsystem: str) -> type[HarnessMachine]:
    module, _, name = MACHINES[subsystem].partition(":")
    return getattr(importlib.import_module(module), name)


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
