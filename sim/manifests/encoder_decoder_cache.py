"""The encoder-decoder cache: vLLM's ``EncoderDecoderCacheManager``, the encoder cache's API
as encoder-decoder models use it (it shares the encoder cache's worlds and shrinker)."""

from sim.manifests.subsystem import Column, Subsystem

SUBSYSTEM = Subsystem(
    name="encoder_decoder_cache",
    rank=20,
    factories={"model": "sim.factories.encoder_decoder_cache:make_model",
               "native": "sim.factories.encoder_decoder_cache:make_native",
               "vllm": "sim.factories.encoder_decoder_cache:make_vllm"},
    small_world=dict(cache_size=4),
    port="sim.ports:EncoderDecoderCachePort",
    machine="properties.encoder_decoder_cache_machine:EncoderDecoderCacheMachine",
    worlds="properties.encoder_cache_worlds",
    shrink="properties.encoder_cache_shrink",
    bugs=("encdec-freed-same-pass", "encdec-unheld-release"),
    catalogue="fixtures.catalogue.encoder_decoder_cache",
    # Both machines: the first meets encdec-unheld-release (unfixed) on every release with
    # the class, which the vllm session expects and goes on past (properties/run.py:
    # check_machine); the frees-once machine checks the rest with its whole budget.
    vllm_suites=("properties/test_encoder_decoder_cache.py",),
    history=(Column("encoder_decoder_cache", ("properties/test_encoder_decoder_cache.py",),
                    hunted=True),),
    spec_page="docs/specs/encoder-cache.md",
)
