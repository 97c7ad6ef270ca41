"""The secondary tiers: vLLM's file-system block tier (write-then-rename, probes), its
back-pressure drop policies and its I/O threads (docs/specs/tiered-lookup.md)."""

from sim.manifests.subsystem import Subsystem

SUBSYSTEM = Subsystem(
    name="secondary_tier",
    rank=60,
    factories={"model": "sim.factories.secondary_tier:make_model",
               "native": "sim.factories.secondary_tier:make_native",
               "vllm": "sim.factories.secondary_tier:make_vllm"},
    small_world=dict(num_chunks=2, tier="fs"),
    port="sim.ports:SecondaryTierPort",
    machine="properties.secondary_tier_machine:SecondaryTierMachine",
    worlds="properties.secondary_tier_worlds",
    shrink="properties.secondary_tier_shrink",
    bugs=("fs-rename-before-write", "fs-failed-store-visible", "fs-probe-after-reset",
          "fs-dropped-store-counted"),
    catalogue="fixtures.catalogue.secondary_tier",
    vllm_suites=("properties/test_secondary_tier.py", "properties/test_secondary_tier_crash.py",
                 "properties/test_backpressure.py", "properties/test_linearizability.py"),
    spec_page="docs/specs/tiered-lookup.md",
)
