"""The prefix cache's mutation subjects (its manifest names them; ``lch/suites.py`` gathers
them): vLLM's ``BlockPool``, ``FreeKVCacheBlockQueue`` and ``KVCacheManager``, and for hybrid
pools the ``HybridKVCacheCoordinator``'s hit search and the ``ChunkedLocalAttentionManager``,
each judged by
the harness's prefix-cache suites with ``--target vllm`` (the written-out scenarios first:
cheap kills; for the pool, its own calls beside a second pool too) and by vLLM's own unit
tests of that class from the release's sdist.

Mutated methods: the path the suites drive, one full-attention group (hits, allocation,
eviction, freeing, reset, events), and a hybrid pool's hit (full attention beside one or
more local groups of one spec). Left out, for each class, what only other configurations
reach (partial-block hashes, pinning, move_block_hashes, KV-connector and Mamba hooks,
metrics); the free queue is small and mutated whole.
"""

from __future__ import annotations

SCENARIOS = "properties/test_prefix_cache_scenarios.py"
MACHINE = "properties/test_prefix_cache.py"
QUEUE = "properties/test_prefix_cache_queue.py"     # the queue's own calls, first: it is cheap
POOLS = "properties/test_prefix_cache_pools.py"     # the pool's own calls, as cheap
# A hybrid Mamba model's world as vLLM builds it, its Scheduler driven (incremental reports:
# the full-report run is an expected failure on every release it runs on).
MAMBA_WORLD = "properties/test_prefix_cache_mamba_world.py::test_with_incremental_reports"
UPSTREAM_CORE = ("tests/v1/core/test_prefix_caching.py", "tests/v1/core/test_kv_cache_utils.py",
                 "tests/v1/core/test_single_type_kv_cache_manager.py")
# vLLM's core tests that cannot pass offline in vLLM 0.33.0's sdist (each builds a model
# config from a hub model, facebook/opt-125m and others, or needs nixl): deselected from a
# campaign's upstream side through pytest's own PYTEST_ADDOPTS, with HF_HUB_OFFLINE=1 so they
# fail at once (``python -m lch.prefix_cache_suites addopts`` prints the options).
UPSTREAM_OFFLINE_FAILURES = tuple(f"tests/v1/core/{name}" for name in (
    "test_prefix_caching.py::test_nixl_hisparse_full_block_import_keeps_a_writable_tail",
    "test_kv_cache_utils.py::test_hisparse_derived_specs_do_not_affect_kv_cache_layout",
    "test_kv_cache_utils.py::test_dcp_target_allocates_replicated_draft_independently",
    "test_kv_cache_utils.py::test_dcp_replicated_kpool_tail_keeps_block_interior_layout",
    "test_kv_cache_utils.py::test_full_attention_merge_preserves_replicated_cache_geometry",
    "test_kv_cache_utils.py::test_uniform_type_spec_block_table_width_matches_layer_spec",
    "test_kv_cache_utils.py::test_get_max_concurrency_for_kv_cache_config",
    "test_kv_cache_utils.py::test_hma_not_disabled_when_kv_events_enabled",
))
SUPPORT = ("tests/v1/core/utils.py", "tests/utils.py", "tests/v1/kv_connector/unit/utils.py")


def subjects(Subject: type) -> dict:  # noqa: N803 - the class, passed in
    """``MODULE:CLASS`` -> Subject (built with ``lch.suites.Subject``, passed in: that module
    imports this one)."""
    return {
        "vllm.v1.core.block_pool:BlockPool": Subject(
            harness=(SCENARIOS, POOLS, MACHINE),
            upstream=UPSTREAM_CORE, support=SUPPORT,
            methods=("__init__", "get_cached_block", "cache_full_blocks", "get_new_blocks",
                     "_maybe_evict_cached_block", "_remove_cached_block_hashes",
                     "_emit_block_removed_events", "_insert_block_hash", "touch",
                     "free_blocks", "reset_prefix_cache", "get_num_free_blocks",
                     "take_events", "_build_block_stored_event")),
        # The queue's own unit tests are in test_kv_cache_utils.py; test_prefix_caching.py
        # reaches it only through the pool, at four minutes a run (a survivor pays it).
        "vllm.v1.core.kv_cache_utils:FreeKVCacheBlockQueue": Subject(
            harness=(QUEUE, SCENARIOS, MACHINE),
            upstream=UPSTREAM_CORE[1:2], support=SUPPORT),
        # Its retirement on the processed tokens (computed less those in flight) is reached
        # only where a step is in flight: the Mamba world's asynchronous runs, last.
        "vllm.v1.core.kv_cache_manager:KVCacheManager": Subject(
            harness=(SCENARIOS, MACHINE, MAMBA_WORLD),
            upstream=UPSTREAM_CORE, support=SUPPORT,
            warm=("properties.prefix_cache_mamba_worlds:build_worlds",),
            methods=("__init__", "get_computed_blocks", "allocate_slots", "free",
                     "reset_prefix_cache", "take_events", "get_blocks", "get_block_ids",
                     "create_kv_cache_blocks", "cache_blocks", "prefix_cache_lookup_enabled",
                     "remove_skipped_blocks", "get_block_ids_for_computed_tokens",
                     "estimate_cached_tokens", "get_num_cached_tokens")),
        # The hybrid coordinator's hit: its fixed point over the specs, the EAGLE drop, the
        # cut of full attention's blocks, the shared prefix. Its partial-hash and DCP parts
        # are left out (not driven).
        "vllm.v1.core.kv_cache_coordinator:HybridKVCacheCoordinator": Subject(
            harness=(SCENARIOS, MACHINE),
            upstream=UPSTREAM_CORE, support=SUPPORT,
            methods=("verify_and_split_kv_cache_groups", "find_longest_cache_hit")),
        "vllm.v1.core.single_type_kv_cache_manager:ChunkedLocalAttentionManager": Subject(
            harness=(SCENARIOS, MACHINE),
            upstream=UPSTREAM_CORE, support=SUPPORT),
        # A Mamba group in align mode as the CPU platform builds it (no mid-prefill
        # checkpoints, no KV connector), with keys of the block or finer: its hit, its state
        # blocks' allocation, relocation, retirement and freeing, what it caches (a state
        # kept inside a block, too). The checkpoint and connector hand-off methods are left
        # out (not reached there).
        "vllm.v1.core.single_type_kv_cache_manager:MambaManager": Subject(
            harness=(MAMBA_WORLD,),
            upstream=UPSTREAM_CORE, support=SUPPORT,
            warm=("properties.prefix_cache_mamba_worlds:build_worlds",),
            methods=("__init__", "find_longest_cache_hit", "reachable_block_mask",
                     "_remove_blocks_in_range", "remove_skipped_blocks",
                     "get_num_blocks_to_allocate", "allocate_new_blocks",
                     "_relocate_speculative_block", "pop_blocks_for_free",
                     "get_num_skipped_tokens", "cache_blocks", "new_step_starts",
                     "_cache_partial_tail_block")),
    }


def addopts() -> str:
    """PYTEST_ADDOPTS for a campaign: the offline failures deselected (a prefix match, as
    pytest's ``--deselect`` does; harmless on the harness side, which has no such tests)."""
    return " ".join(f"--deselect {node}" for node in UPSTREAM_OFFLINE_FAILURES)


if __name__ == "__main__":
    import sys
    if sys.argv[1:] != ["addopts"]:
        raise SystemExit("usage: python -m lch.prefix_cache_suites addopts")
    print(addopts())
