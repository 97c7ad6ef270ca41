"""The hybrid world (``sim/vllm/hybrid_world.py``) is vLLM's own: the block size vLLM computes
for the model's pages, the Mamba spec its layers make, the drafter's lookahead from a real
``SpeculativeConfig``, and a setting vLLM rejects is no world at all.

Without vLLM (or the packages the hybrid layers import) these skip; under
``LCH_REQUIRE_TARGETS=1`` (``nox -s vllm``) they fail instead.
"""

from __future__ import annotations

import pytest

from fixtures.hybrid_models import QWEN3_NEXT_MTP
from properties.run import unavailable
from sim.errors import AdapterError, TargetUnavailable


def world(budget: int, max_num_seqs: int = 8):
    from sim.vllm import hybrid_world
    try:
        return hybrid_world.build(QWEN3_NEXT_MTP, budget, max_num_seqs, 2)
    except TargetUnavailable as why:
        if isinstance(why, AdapterError):
            raise
        unavailable("vllm", why)


def test_the_block_size_and_the_mamba_spec_are_vllms():
    built = world(2048)
    vllm_config, facts = built.vllm_config, built.facts()
    # vLLM raised the block size from CacheConfig's 16 until an attention page holds a
    # Mamba state, and aligned the Mamba block to it (align mode under prefix caching).
    assert facts["block_size"] == facts["mamba_block_size"] > 16
    assert facts["mamba_cache_mode"] == "align" and facts["enable_prefix_caching"]
    attention = [g.kv_cache_spec for g in built.kv_cache_config.kv_cache_groups
                 if g.kv_cache_spec is not built.mamba_spec]
    assert all(a.page_size_bytes == built.mamba_spec.page_size_bytes for a in attention)
    # The spec's state shapes are the model class's, for this config and drafter.
    from sim.vllm import release
    models = release.import_module("vllm.model_executor.models.qwen3_next")
    shapes = models.Qwen3NextForCausalLM.get_mamba_state_shape_from_config(vllm_config)
    assert built.mamba_spec.shapes == tuple(shapes)
    assert built.mamba_spec.num_speculative_blocks == 2


def test_the_drafter_is_a_two_module_mtp_with_a_lookahead_of_two():
    facts = world(2048).facts()
    assert (facts["speculative_method"], facts["multi_module_mtp"]) == ("mtp", True)
    assert facts["num_prefill_lookahead_tokens"] == 2 == facts["num_hash_lookahead_tokens"]


def test_a_setting_vllm_rejects_builds_no_world():
    world(512)          # vLLM and the hybrid layers importable, or skip
    with pytest.raises(AdapterError, match="could not build the hybrid world.*max_num_seqs"):
        world(4, max_num_seqs=8)


def test_the_world_is_built_for_the_declared_cpu_whatever_the_host():
    # vLLM's CPU platform reads the host's instruction set while it finalizes the configs: a
    # host without AVX-512 BF16 kept the SSM state in bfloat16 and built 640-token blocks where
    # the reproducers describe 1152. Inside the build, the probes answer the declared host.
    torch = pytest.importorskip("torch")
    from unittest import mock

    from sim.vllm import hybrid_world
    host = {probe: not answer for probe, answer in hybrid_world.CPU_ISA.items()}
    with mock.patch.multiple(torch.cpu, **{p: (lambda a=a: a) for p, a in host.items()}):
        with hybrid_world.declared_cpu():
            seen = {probe: getattr(torch.cpu, probe)() for probe in hybrid_world.CPU_ISA}
        after = {probe: getattr(torch.cpu, probe)() for probe in hybrid_world.CPU_ISA}
    assert seen == hybrid_world.CPU_ISA
    assert after == host                                  # the host's answers come back after
