"""The tiered lookup's mutation subjects (its manifest names them; ``lch/suites.py`` gathers
every subsystem's into ``CLASSES``): vLLM's CPU offloading manager, its eviction policies and
the tiering manager over it."""

from __future__ import annotations

POLICY_SUITES = tuple(f"properties/test_tiered_lookup_policies.py::test_tiered_lookup_{p}"
                      for p in ("lru", "arc"))
# ARC's longer rules (B2's recency, a T2 chunk whose store fails) under churn.
ARC_CHURN_SUITE = "properties/test_tiered_lookup_policies.py::test_tiered_lookup_arc_churn"
# LRU's heap rebuild and compaction, past 64 chunks (a prompt of 64 or more blocks).
LONG_PROMPT_SUITE = "properties/test_tiered_lookup_policies.py::test_tiered_lookup_long_prompt"
TIERING_REPRODUCERS = tuple(f"fixtures/reproducers/test_tiered_lookup_{name}.py" for name in (
    "seed001", "vllm_offered_key_evicted", "vllm_pending_cut_off", "vllm_tiering_reset"))
CPU_MANAGER_TESTS = ("tests/v1/kv_offload/cpu/test_manager.py",)


def subjects(Subject: type) -> dict:  # noqa: N803 - the class, passed in
    """``MODULE:CLASS`` -> Subject (built with ``lch.suites.Subject``, passed in: that module
    imports this one)."""
    return {
        "vllm.v1.kv_offload.cpu.manager:CPUOffloadingManager": Subject(
            harness=("fixtures/reproducers/test_tiered_lookup_seed001.py",
                     "properties/test_tiered_lookup_vllm_scans.py",
                     *POLICY_SUITES, LONG_PROMPT_SUITE, "properties/test_tiered_lookup.py",
                     "properties/test_tiered_lookup_policies.py::test_tiered_lookup_no_chunks"),
            upstream=CPU_MANAGER_TESTS),
        # The eviction policies the CPU manager delegates to (``cache_policy``): the machine
        # over the manager alone with that policy; for LRU also the mixed machine (the tiering
        # manager's primary tier evicts by LRU; ARC is a sixth of its worlds, which adds no
        # kill to the ARC-only machine and would triple a survivor's cost). vLLM tests both
        # through the manager, in one file.
        "vllm.v1.kv_offload.cpu.policies.lru:LRUCachePolicy": Subject(
            harness=(POLICY_SUITES[0], LONG_PROMPT_SUITE,
                     "fixtures/reproducers/test_tiered_lookup_seed001.py",
                     "properties/test_tiered_lookup.py"),
            upstream=CPU_MANAGER_TESTS),
        "vllm.v1.kv_offload.cpu.policies.arc:ARCCachePolicy": Subject(
            harness=(POLICY_SUITES[1], ARC_CHURN_SUITE, "properties/test_tiered_lookup_arc.py"),
            upstream=CPU_MANAGER_TESTS),
        "vllm.v1.kv_offload.tiering.manager:TieringOffloadingManager": Subject(
            harness=("properties/test_tier_poll_thread.py", "properties/test_tier_poll_loop.py",
                     "properties/test_tiered_lookup_tiering.py", *TIERING_REPRODUCERS,
                     "properties/test_backpressure.py::"
                     "test_cascade_drops_under_pressure", "properties/test_tiered_lookup.py"),
            # The test files whose subject is the manager itself; the tier tests (fs, obj,
            # p2p) build one only to carry their tier's events.
            upstream=("tests/v1/kv_offload/tiering/test_tiering_offloading.py",
                      "tests/v1/kv_offload/tiering/test_tier_poll_thread.py",
                      "tests/v1/kv_offload/tiering/test_backpressure.py")),
    }
