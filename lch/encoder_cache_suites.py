"""The encoder cache's mutation subject (its manifest names it; ``lch/suites.py`` gathers
every subsystem's into ``CLASSES``): vLLM's ``EncoderCacheManager``, judged by the harness's
encoder-cache suites and reproducers with ``--target vllm`` and by vLLM's own unit tests of it."""

from __future__ import annotations

ENCODER_REPRODUCERS = tuple(f"fixtures/reproducers/test_encoder_cache_vllm_{name}.py"
                            for name in ("cached_input_ids", "repeat_item", "stale_freed"))


def subjects(Subject: type) -> dict:  # noqa: N803 - the class, passed in
    """``MODULE:CLASS`` -> Subject (built with ``lch.suites.Subject``, passed in: that module
    imports this one)."""
    return {
        "vllm.v1.core.encoder_cache_manager:EncoderCacheManager": Subject(
            harness=(*ENCODER_REPRODUCERS, "properties/test_scheduler_pass_model.py",
                     *(f"properties/test_vllm_target.py::{name}" for name in (
                         "test_vllm_encoder_cache_evicts_oldest_freeable_first",
                         "test_vllm_target_runs_the_installed_release")),
                     "properties/test_encoder_cache.py", "properties/test_scheduler_pass.py",
                     # the same machine on other seeds, native beside vllm: 17 s, so last
                     "properties/test_vllm_target.py::"
                     "test_vllm_reaches_the_same_hazards_as_native"),
            # Not run: the rest of test_vllm_target.py checks release parsing and the install
            # hint (one in a subprocess without vLLM), never the class.
            upstream=("tests/v1/core/test_encoder_cache_manager.py",),
            warm=("sim.vllm.scheduler_pass:_vllm_config",)),
    }
