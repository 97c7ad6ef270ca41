"""Where every declared property's witness is: the one place witnesses are declared.

A property a machine declares (``PROPERTIES``, and ``COMMON_PROPERTIES`` for every machine)
must be shown able to fail; ``properties/test_property_witnesses.py`` finds every machine and
requires a witness for each (subsystem, property) it declares, and for each common property
one anywhere. A witness is one of:

- a catalogue entry (``fixtures/known_bugs.py``: read from there, not repeated here): its
  native switch caught by that property, home subsystem or ``also_caught_by``, in the fast
  tier (``properties/test_known_bugs.py``);
- a scenario (``SCENARIOS``, by subsystem in this package's modules): a written-out program
  against a broken stand-in of the native target (``fixtures/broken``), run through the
  machine's own checks by the witness test, in the fast tier;
- a vLLM mutant (``MUTANTS``): a named mutant of a vLLM 0.33.0 class, the machine run against
  it in a forked child (``lch/test_mutant_witnesses.py``, in ``nox -s vllm``);
- a test (``TESTS``): a test of the repository that makes the property fail another way.
"""

from __future__ import annotations

from properties.witnesses import (
    encoder_cache,
    offload_engine,
    scheduler_pass,
    secondary_tier,
    tiered_lookup,
)
from properties.witnesses.kinds import Mutant, Scenario, Test

SCENARIOS: tuple[Scenario, ...] = (*encoder_cache.SCENARIOS, *scheduler_pass.SCENARIOS,
                                   *offload_engine.SCENARIOS, *secondary_tier.SCENARIOS,
                                   *tiered_lookup.SCENARIOS)

PREFIX_CHECKS = "properties/test_prefix_cache_checks_fail.py::"

TIERING_CHECKS = "lch/test_tiering_checks_fail.py::test_a_planted_bug_is_reported"
TESTS: tuple[Test, ...] = (
    Test("", "no-raise", "properties/test_outcomes.py::test_vllm_crashing_mid_run_is_a_divergence",
         "a machine run whose target raises inside vLLM's code fails no-raise, replayably"),
    Test("", "no-raise", "properties/test_vllm_path_crash.py::"
         "test_a_checkout_that_raises_is_a_finding_in_every_subsystem",
         "a planted raise in each subsystem's vLLM class, under --vllm-path, is a no-raise "
         "finding", vllm=True),
    Test("tiered_lookup", "request-policy-agrees", "properties/test_tiered_lookup_checks_fail.py"
         "::test_request_policy_agrees_can_fail",
         "a manager telling the connector not to offload"),
    Test("tiered_lookup", "recency-order-agrees", "properties/test_tiered_lookup_checks_fail.py"
         "::test_recency_order_agrees_can_fail",
         "a primary reporting the recency of its evictable chunks only"),
    # The tiering layer's own checks (its machine, vLLM only), each planted in vLLM 0.33.0's
    # manager (``lch.mutate``).
    *(Test("tiered_lookup", prop, f"{TIERING_CHECKS}[vllm-0.33.0-{line}]", why, vllm=True)
      for prop, line, why in (
          ("tier-calls-agree", "_maybe_finalize_request L1077",
           "a tier never told a request finished"),
          ("tier-polls-allowed", "poll_tiers L422",
           "a tier-poll round that lets its serving run the step's poll"),
          ("peer-answers-agree", "lookup L194",
           "a peer told nothing by the parent it is served through"),
          ("config-info-agrees", "config_info L1245",
           "a tier's config left without its label"))),
    Test("scheduler_pass", "cut-before-refused", "properties/test_scheduler_pass_promises.py"
         "::test_a_chunk_cut_where_no_rule_cuts_it",
         "an output that cuts a chunk where neither an item nor a chunk rule ends it"),
    # The prefix cache's checks no catalogue entry reaches first, each planted one at a time.
    Test("prefix_cache", "fit-agrees",
         PREFIX_CHECKS + "test_fit_agrees_can_fail",
         "a fit check one block short: refuses whenever one block would be left free"),
    Test("prefix_cache", "free-is-unreferenced",
         PREFIX_CHECKS + "test_free_is_unreferenced_can_fail",
         "a free queue read listing a held block"),
    Test("prefix_cache", "refs-agree",
         PREFIX_CHECKS + "test_refs_agree_can_fail",
         "a pool counting one holder too many on every held block"),
    Test("prefix_cache", "tables-agree",
         PREFIX_CHECKS + "test_tables_agree_can_fail",
         "get_block_ids leaving out a request's first block"),
    Test("prefix_cache", "cached-tokens-agree",
         PREFIX_CHECKS + "test_cached_tokens_agree_can_fail",
         "each cached block counted as covering a block fewer tokens than its hash does"),
    Test("prefix_cache", "probe-agrees", PREFIX_CHECKS + "test_probe_agrees_can_fail",
         "a probe reporting one block more than the hit it would find"),
    Test("prefix_cache", "cached-hash-names-contents",
         PREFIX_CHECKS + "test_cached_hash_names_contents_can_fail",
         "a hash map naming each prefix's block one id off"),
    Test("prefix_cache", "cached-set-agrees",
         PREFIX_CHECKS + "test_cached_set_agrees_can_fail",
         "a hash map listing only the first of the blocks caching a prefix"),
    Test("prefix_cache", "block-hash-is-cached",
         PREFIX_CHECKS + "test_block_hash_is_cached_can_fail",
         "a reset that empties the hash map but leaves each block its hash"),
    Test("prefix_cache", "events-account-for-cached-set",
         PREFIX_CHECKS + "test_events_account_for_cached_set_can_fail",
         "model and target agreeing on an event stream without removals"),
    Test("prefix_cache", "events-account-for-cached-set",
         PREFIX_CHECKS + "test_a_full_report_of_blocks_not_held_cached_fails",
         "model and target agreeing on full reports of a hit naming a prefix never stored"),
    Test("prefix_cache", "free-lists-held-blocks",
         PREFIX_CHECKS + "test_free_lists_held_blocks_can_fail",
         "free() listing a finished request's last block twice (vLLM #42571's shape)"),
    Test("prefix_cache", "handout-agrees", PREFIX_CHECKS + "test_handout_agrees_can_fail",
         "the block pool's get_new_blocks handing out the front blocks last first"),
    Test("prefix_cache", "holders-agree", PREFIX_CHECKS + "test_holders_agree_can_fail",
         "touch counting holders on the null block"),
    Test("prefix_cache", "pool-order-agrees",
         PREFIX_CHECKS + "test_pool_order_agrees_can_fail",
         "free_blocks sending a released block to the back, not the front"),
    Test("prefix_cache", "reuse-notices-agree",
         PREFIX_CHECKS + "test_reuse_notices_agree_can_fail",
         "a reset dropping unpinned blocks' watchers without telling them"),
    Test("prefix_cache", "pops-agree", PREFIX_CHECKS + "test_pops_agree_can_fail",
         "the free queue's popleft_n handing out the front blocks last first"),
    Test("prefix_cache", "queue-order-agrees", PREFIX_CHECKS + "test_queue_order_agrees_can_fail",
         "a run given back to the free queue's front landing last first"),
    Test("prefix_cache", "connector-blocks-agree",
         PREFIX_CHECKS + "test_connector_blocks_agree_can_fail",
         "the connector handed every held block, lookahead slots past the computed tokens "
         "included"),
)

ENCODER_CACHE = "properties.encoder_cache_machine:EncoderCacheMachine"
ENCODER_CACHE_CLASS = "vllm.v1.core.encoder_cache_manager:EncoderCacheManager"
TIERED = "properties.tiered_lookup_machine:TieredLookupMachine"
TIERING_CLASS = "vllm.v1.kv_offload.tiering.manager:TieringOffloadingManager"
ALLOCATED_0 = (("can_allocate", 0, 0, 0, 0), ("allocate",))

# Properties whose observation goes through the vLLM adapter's own reads (private fields,
# the harness's stand-in secondary tiers, the metrics' wrapping): a planted bug in vLLM's
# class shows those reads can see it.
MUTANTS: tuple[Mutant, ...] = (
    Mutant("encoder_cache", "returns-agree", ENCODER_CACHE, ENCODER_CACHE_CLASS,
           "can_allocate L188: if num_embeds > encoder_compute_budget:  ->  "
           "if num_embeds >= encoder_compute_budget:",
           encoder_cache.ONE_ITEM, ALLOCATED_0[:1],
           "an item with exactly the compute budget's embeds is refused"),
    Mutant("encoder_cache", "cached-inputs-agree", ENCODER_CACHE, ENCODER_CACHE_CLASS,
           "free_encoder_input L276: cached_ids.remove(input_id)  ->  pass",
           encoder_cache.TWO_ITEMS,
           (*ALLOCATED_0, ("can_allocate", 0, 1, 0, 0), ("allocate",),
            ("free_encoder_input", 0, 0)),
           "input 0 freed, input 1 still held: input 0 stays recorded"),
    Mutant("encoder_cache", "worker-agrees-with-manager", ENCODER_CACHE, ENCODER_CACHE_CLASS,
           "can_allocate L208: self.freed.append(mm_hash)  ->  pass",
           encoder_cache.TWO_ITEMS_ONE_SLOT,
           (*ALLOCATED_0, ("free", 0), ("can_allocate", 0, 1, 0, 0), ("allocate",),
            ("get_freed_mm_hashes",)),
           "img1 evicts img0, whose eviction is never reported: the worker keeps it"),
    Mutant("encoder_cache", "bookkeeping-bounded", ENCODER_CACHE, ENCODER_CACHE_CLASS,
           "free_encoder_input L282: del self.request_cached_ids[req_id]  ->  pass",
           encoder_cache.ONE_ITEM, (*ALLOCATED_0, ("free", 0)),
           "r0 finished: its emptied record of cached inputs is kept"),
    Mutant("tiered_lookup", "pending-work-agrees", TIERED, TIERING_CLASS,
           "has_pending_work L1122: return ( ...  ->  pass",
           tiered_lookup.PRELOADED, tiered_lookup.PROMOTED_0,
           "has_pending_work answers None: key 0's finished promotion is no work pending"),
    Mutant("tiered_lookup", "load-source-agrees", TIERED, TIERING_CLASS,
           "get_load_source L683: return load_sources[key]  ->  pass",
           tiered_lookup.PRELOADED, (*tiered_lookup.PROMOTED_0, ("lookup", 0)),
           "key 0 was promoted from the secondary tier: its hit is counted as the primary's"),
    Mutant("tiered_lookup", "tier-touched", TIERED, TIERING_CLASS,
           "touch L798: tier.touch(keys, req_context)  ->  pass",
           tiered_lookup.TIERED, (("touch", (0,)),),
           "a touch is not passed on to the secondary tier"),
    Mutant("tiered_lookup", "shutdown-releases-all", TIERED, TIERING_CLASS,
           "_shutdown_tiers L1291: tier.shutdown()  ->  pass",
           tiered_lookup.TIERED, (), "shutdown never stops the secondary tier", ends=True),
    Mutant("tiered_lookup", "events-agree", TIERED, TIERING_CLASS,
           "take_events L1136: yield from self.primary_tier.take_events()  ->  pass",
           tiered_lookup.TIERED, (*tiered_lookup.WRITTEN_0, ("on_schedule_end",)),
           "key 0's stored event never leaves the primary"),
)
