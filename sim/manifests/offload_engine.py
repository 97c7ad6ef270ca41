"""The offload engine: nano-vllm's CPU-offload data plane, ring slots and streams
(docs/specs/offload-engine.md). vLLM has no such class: no vllm target, suites or column."""

from sim.manifests.subsystem import Subsystem

SUBSYSTEM = Subsystem(
    name="offload_engine",
    rank=50,
    factories={"model": "sim.factories.offload_engine:make_model",
               "native": "sim.factories.offload_engine:make_native"},
    small_world=dict(block_size=2, num_slots=1, num_layers=1, num_cpu_blocks=2),
    port="sim.ports:OffloadEnginePort",
    machine="properties.offload_engine_machine:OffloadEngineMachine",
    worlds="properties.offload_engine_worlds",
    shrink="properties.offload_engine_shrink",
    bugs=("offload-id-reuse", "offload-partial-block", "offload-dropped-decode",
          "offload-layer-alias", "offload-race-read-before-load", "offload-race-slot-reuse",
          "offload-race-dbuf-overwrite"),
    catalogue="fixtures.catalogue.offload_engine",
    spec_page="docs/specs/offload-engine.md",
)
