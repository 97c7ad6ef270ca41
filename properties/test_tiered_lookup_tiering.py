"""The tiered lookup's tiering layer: vLLM's real ``TieringOffloadingManager`` against its model,
its tiers played by the harness (``properties/tiered_lookup_tiering_machine.py``), and the
scenarios the machine's never-evicting primary cannot reach. vLLM only (0.33.0 on:
request-level tiers, peers served through a ``ParentManager``, the tiering metrics); other
targets skip. A machine failure is minimized and written as a reproducer
(``--reproducer-dir``)."""

from __future__ import annotations

from models.tiered_lookup_values import JobOutcome, LookupResult, TierSpec
from properties.run import check_machine, vllm_tiering_module
from properties.scenarios import agrees, holds
from properties.tiered_lookup_tiering_machine import TieredLookupTieringMachine

EXAMPLES, STEPS = 300, 50


def _world_maker(target: str):
    vllm_tiering_module(target, "the tiering manager's tier-facing API is vLLM's",
                        "the machine drives 0.33.0's tiering API (peers served off-step, "
                        "request-level tiers, the tiering metrics)")
    from sim.vllm.tiered_lookup_tiering import VllmTieringWorld
    return VllmTieringWorld


def test_tiered_lookup_tiering_machine(target, reproducer_dir):
    _world_maker(target)
    check_machine(TieredLookupTieringMachine, target, reproducer_dir,
                  max_examples=EXAMPLES, stateful_step_count=STEPS)


def test_a_promotion_the_full_primary_cannot_take_is_a_counted_miss(target):
    """Scenario (the machine's primary never fills, so this one is written out):
    - the primary has 2 chunks, both being written by r0's store; tier t0 holds key 2;
    - r0 looks up 2: t0 has it, but the primary has no chunk to promote it into: MISS
      (not RETRY, which would wait for room forever);
    - get_stats counts the promotion that found no room."""
    maker = _world_maker(target)
    world = maker(2, [TierSpec("t0", False, False, False, {2}),
                      TierSpec("t1", False, False, False)])
    try:
        world.on_new_request("r0")
        agrees("store-outputs-agree", world.prepare_store([0, 1], "r0"), (0, 1))  # pending
        agrees("lookup-results-agree", world.lookup(2, "r0"), LookupResult.MISS)  # no room
        stats = world.get_stats()
        holds("stats-agree", stats.get(("allocation_failures",)) == 1,
              f"the promotion that found no room is counted once: {stats}")
        agrees("lookup-results-agree", world.lookup(2, "r0"), LookupResult.MISS)
        agrees("stats-agree", world.get_stats().get(("allocation_failures",)), 1)  # since last
    finally:
        world.shutdown()


def test_a_finished_request_commits_its_blocks_as_most_recent(target):
    """Scenario (the machine's primary never evicts, so this one is written out): the
    tiering manager passes a request's end on to its primary, whose LRU order commits the
    request's blocks then (``models/tiered_lookup_access.py``).
    - the primary has 2 chunks; r0 stores 0, r1 stores 1; their cascades to t0 finish;
    - r0 finishes: its block 0 becomes the most recent;
    - r1 stores 2: the primary must evict, and evicts 1, not 0."""
    maker = _world_maker(target)
    world = maker(2, [TierSpec("t0", False, False, False), TierSpec("t1", False, False, False)])
    try:
        world.on_new_request("r0")
        world.on_new_request("r1")
        for req, key in (("r0", 0), ("r1", 1)):
            agrees("store-outputs-agree", world.prepare_store([key], req), (key,))
            world.complete_store([key], req, True)
        for i in (0, 1):
            for job in world.jobs(i):
                world.run_job(i, job, JobOutcome(job.keys, True))
        world.on_request_finished("r0")
        agrees("store-outputs-agree", world.prepare_store([2], "r1"), (2,))  # polls first
        holds("store-outputs-agree", world.last_evicted == (1,),
              f"evicted {world.last_evicted}: r0 finished after r1 stored 1, so its block 0 "
              "is the more recent")
    finally:
        world.shutdown()


def test_a_partly_failed_promotion_keeps_the_landed_keys_source(target):
    """Scenario (the machine reaches it only when a partial failure meets a live request's
    readable key, which its derandomized stream may miss):
    - tier t0 holds keys 0 and 1; r0 looks both up: one promotion job of (0, 1) at the
      step's end;
    - t0 lands 0 and fails 1;
    - the next lookup notices the job: 0 is a HIT, whose load source is still t0 (r0's
      cache-hit metrics count it as a t0 hit), while 1's source is forgotten (it failed);
    - 1 looked up again starts a new promotion from t0."""
    maker = _world_maker(target)
    world = maker(4, [TierSpec("t0", False, False, False, {0, 1}),
                      TierSpec("t1", False, False, False)])
    try:
        world.on_new_request("r0")
        agrees("lookup-results-agree", (world.lookup(0, "r0"), world.lookup(1, "r0")),
               (LookupResult.HIT_PENDING, LookupResult.HIT_PENDING))
        world.on_schedule_end()
        jobs = world.jobs(0)
        holds("jobs-agree", len(jobs) == 1 and sorted(jobs[0].keys) == [0, 1],
              f"one promotion of both keys, got {jobs}")
        world.run_job(0, jobs[0], JobOutcome((0,), False))
        agrees("lookup-results-agree", world.lookup(0, "r0"), LookupResult.HIT)   # landed
        holds("load-source-agrees", world.load_source(0, "r0") == 0,
              "the landed key's load source must stay t0: only the failed keys lose theirs")
        holds("load-source-agrees", world.load_source(1, "r0") is None,
              "the failed key's source is forgotten")
        agrees("lookup-results-agree", world.lookup(1, "r0"),     # promoted again from t0
               LookupResult.HIT_PENDING)
    finally:
        world.shutdown()
