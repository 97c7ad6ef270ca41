"""Written-out witnesses of the tiered lookup's properties."""

from __future__ import annotations

from properties.tiered_lookup_worlds import TieredWorld
from properties.witnesses.kinds import Scenario

MACHINE = "properties.tiered_lookup_machine:TieredLookupMachine"
BROKEN = "fixtures.broken.tiered_lookup:"
# One chunk, keys 0 and 1: the CPU manager alone, and over a secondary tier in memory (one
# preloading key 0, as a persistent tier keeps an earlier run's blocks).
ALONE = TieredWorld(1, "none", ((0, 1),))
TIERED = TieredWorld(1, "memory", ((0, 1),))
PRELOADED = TieredWorld(1, "memory", ((0, 1),), preloaded=(0,))
STORE_0 = ("prepare_store", (0,))
WRITTEN_0 = (STORE_0, ("complete_store", (0,), False))      # failed=False: stored
PROMOTED_0 = (("lookup", 0), ("on_schedule_end",), ("complete_job", 0))


def _scenario(name, prop, world, actions, broken, why, ends=False):
    return Scenario(name, MACHINE, prop, world, actions, BROKEN + broken, why, ends)


SCENARIOS = (
    _scenario("lookup-pending-write-readable", "lookup-results-agree", ALONE,
              (STORE_0, ("lookup", 0)), "PendingWriteReadable",
              "key 0 is being written: HIT_PENDING, not HIT"),
    _scenario("lookup-evictions-unreported", "store-outputs-agree", ALONE,
              (*WRITTEN_0, ("prepare_store", (1,))), "EvictionsUnreported",
              "storing key 1 evicts key 0, and says it evicted nothing"),
    _scenario("lookup-evicts-under-load", "pinned-never-evicted", ALONE,
              (*WRITTEN_0, ("prepare_load", (0,)), ("prepare_store", (1,))), "EvictsUnderLoad",
              "key 0 is being loaded when storing key 1 evicts it"),
    _scenario("lookup-evictions-silent", "events-agree", ALONE,
              (*WRITTEN_0, ("prepare_store", (1,)), ("on_schedule_end",)), "EvictionsSilent",
              "the step's events lack key 0's removal"),
    _scenario("lookup-stats-never-reset", "stats-agree", ALONE,
              (STORE_0, ("get_stats",), ("get_stats",)), "StatsNeverReset",
              "the second get_stats reports the first one's allocation again"),
    _scenario("lookup-load-never-unpinned", "ref-counts-agree", ALONE,
              (*WRITTEN_0, ("prepare_load", (0,)), ("complete_load", (0,))),
              "LoadNeverUnpinned", "key 0's load completed, its pin stays"),
    _scenario("lookup-store-copy-lost", "data-roundtrip", ALONE, WRITTEN_0, "StoreCopyLost",
              "key 0 is marked written, its chunk holds nobody's bytes"),
    _scenario("lookup-failed-store-chunk-lost", "free-chunks-agree", ALONE,
              (STORE_0, ("complete_store", (0,), True)), "FailedStoreChunkLost",
              "key 0's store failed; its chunk does not come back free"),
    _scenario("lookup-cascade-never-submitted", "jobs-agree", TIERED, WRITTEN_0,
              "CascadeNeverSubmitted", "key 0 is stored: its cascade job is missing"),
    _scenario("lookup-touch-not-forwarded", "tier-touched", TIERED, (("touch", (0,)),),
              "TouchNotForwarded", "the secondary tier never hears of the touch"),
    _scenario("lookup-finished-jobs-not-pending", "pending-work-agrees", PRELOADED,
              PROMOTED_0, "FinishedJobsNotPending",
              "key 0's promotion finished, not yet noticed: work is pending"),
    _scenario("lookup-failed-keys-indexed", "secondary-agrees", TIERED,
              (*WRITTEN_0, ("complete_job", 0, (0,))), "FailedKeysIndexed",
              "key 0's cascade failed: the tier must not hold it"),
    _scenario("lookup-source-forgotten", "load-source-agrees", PRELOADED,
              (*PROMOTED_0, ("lookup", 0)), "SourceForgotten",
              "key 0 came from the secondary tier; its hit is called the primary's"),
    _scenario("lookup-releases-primary-first", "shutdown-releases-all", TIERED, (),
              "ReleasesPrimaryFirst", "shutdown frees the primary before the tier",
              ends=True),
    _scenario("lookup-evictable-count-drift", "check-valid", ALONE,
              (*WRITTEN_0, ("prepare_load", (0,))), "EvictableCountDrift",
              "pinning key 0 leaves the evictable count at 1"),
)
