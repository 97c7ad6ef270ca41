"""The encoder cache: vLLM's ``EncoderCacheManager`` (docs/specs/encoder-cache.md)."""

from sim.manifests.subsystem import Column, Subsystem

SUBSYSTEM = Subsystem(
    name="encoder_cache",
    rank=10,
    factories={"model": "sim.factories.encoder_cache:make_model",
               "native": "sim.factories.encoder_cache:make_native",
               "vllm": "sim.factories.encoder_cache:make_vllm"},
    small_world=dict(cache_size=4),
    port="sim.ports:EncoderCachePort",
    machine="properties.encoder_cache_machine:EncoderCacheMachine",
    worlds="properties.encoder_cache_worlds",
    shrink="properties.encoder_cache_shrink",
    bugs=("enc-stale-freed", "enc-repeat-item"),
    # The scheduler pass drives this cache: its switches act there too.
    also_acts_in=("scheduler_pass",),
    catalogue="fixtures.catalogue.encoder_cache",
    vllm_suites=("properties/test_encoder_cache.py", "properties/test_vllm_target.py"),
    # The adapter tests of test_vllm_target.py drive the encoder cache.
    history=(Column("encoder_cache", ("properties/test_encoder_cache.py",
                                      "properties/test_vllm_target.py"), hunted=True),),
    mutation_subjects="lch.encoder_cache_suites:subjects",
    spec_page="docs/specs/encoder-cache.md",
)
