"""The tiered KV-offload lookup: vLLM's ``TieringOffloadingManager`` over the CPU manager, with
the connector's scans (docs/specs/tiered-lookup.md)."""

from sim.manifests.subsystem import Column, Subsystem

SUBSYSTEM = Subsystem(
    name="tiered_lookup",
    rank=40,
    factories={"model": "sim.factories.tiered_lookup:make_model",
               "native": "sim.factories.tiered_lookup:make_native",
               "vllm": "sim.factories.tiered_lookup:make_vllm"},
    small_world=dict(num_chunks=2, secondary="memory"),
    port="sim.ports:TieredLookupPort",
    machine="properties.tiered_lookup_machine:TieredLookupMachine",
    worlds="properties.tiered_lookup_worlds",
    shrink="properties.tiered_lookup_shrink",
    bugs=("lookup-pending-as-miss", "lookup-promote-when-full", "arc-replace-inverted",
          "arc-ghost-ignored", "lru-tail-after-head", "finish-replayed"),
    catalogue="fixtures.catalogue.tiered_lookup",
    vllm_suites=("properties/test_tiered_lookup.py", "properties/test_tiered_lookup_policies.py",
                 "properties/test_tiered_lookup_vllm_scans.py",
                 "properties/test_tier_poll_thread.py", "properties/test_tiered_lookup_tiering.py",
                 "properties/test_tier_poll_loop.py", "lch/test_tiering_checks_fail.py"),
    history=(
        # One eviction policy at a time (ARC's T1 / T2 and ghosts show only there) and ARC's
        # written-out scenario: the mixed machine gives each policy a sixth of its worlds.
        Column("tiered_lookup", ("properties/test_tiered_lookup.py",
                                 "properties/test_tiered_lookup_policies.py",
                                 "properties/test_tiered_lookup_arc.py"), hunted=True),
        # Not hunted on its own: the tiered lookup's machine drives the connector's scans too.
        Column("connector_scans", ("properties/test_tiered_lookup_vllm_scans.py",)),
    ),
    mutation_subjects="lch.tiered_lookup_suites:subjects",
    spec_page="docs/specs/tiered-lookup.md",
    # The tiering layer's machine (vLLM only) is checked against the same page.
    spec_properties=("properties.tiered_lookup_tiering_machine",),
    # The tiering layer's own files (the rest of the subsystem's are in fixtures/tiers.py).
    tests={"fast": ("properties/test_tiered_lookup_layers_agree.py",),
           "machines": ("properties/test_tiered_lookup_tiering.py",
                        "properties/test_tier_poll_loop.py",
                        "properties/test_tier_poll_thread.py"),
           "catalogue": ("lch/test_tiering_checks_fail.py",)},
    machines={"tiering": "properties.tiered_lookup_tiering_machine:TieredLookupTieringMachine"},
)
