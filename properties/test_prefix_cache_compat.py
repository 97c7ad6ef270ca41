"""The prefix cache's release probes that read vLLM's source rather than import it."""

from __future__ import annotations

import pytest

from sim.vllm import prefix_cache_compat, release

# The lines each release's engine core builds its request block hasher from (abridged).
UNSCALED = ("block_size = vllm_config.cache_config.block_size\n"
            "self.request_block_hasher = get_request_block_hasher(block_size, fn)\n")
SCALED = ("scheduler_block_size = (vllm_config.cache_config.block_size\n"
          "    * vllm_config.parallel_config.decode_context_parallel_size)\n"
          "self.request_block_hasher = get_request_block_hasher(scheduler_block_size, fn)\n")
RESOLVED = ("scheduler_block_size, hash_block_size = resolve_kv_cache_block_sizes(...)\n"
            "self.request_block_hasher = get_request_block_hasher(hash_block_size, fn)\n")


@pytest.mark.parametrize(("source", "expected"), [(UNSCALED, 2), (SCALED, 4), (RESOLVED, 4)])
def test_the_engine_hash_block_is_the_release_engine_s(monkeypatch, source, expected):
    # 0.10.2-0.11.0 hash in the cache config's block; 0.11.1 on in the ranks' whole block.
    monkeypatch.setattr(release, "module_source", lambda name: source)
    assert prefix_cache_compat.engine_hash_block_size(2, 2) == expected
    assert prefix_cache_compat.engine_hash_block_size(2, 1) == 2      # one rank: unread
