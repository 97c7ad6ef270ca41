"""Written-out witnesses of the secondary tier's properties."""

from __future__ import annotations

from properties.secondary_tier_worlds import TierWorld
from properties.witnesses.kinds import Scenario

MACHINE = "properties.secondary_tier_machine:SecondaryTierMachine"
BROKEN = "fixtures.broken.secondary_tier:"
FS = TierWorld(2, "fs", faults=False)
FS_FAULTS = TierWorld(2, "fs", faults=True)
STORED_0 = (("write_chunk", 0, 0), ("submit_store", (0,), (0,)), ("run_job", 0),
            ("get_finished_jobs",))

SCENARIOS = (
    Scenario("tier-loads-into-first-chunk", MACHINE, "chunks-agree", TierWorld(4, "fs", False),
             (("write_chunk", 0, 0), ("write_chunk", 1, 1), ("submit_store", (0, 1), (0, 1)),
              ("run_job", 0), ("get_finished_jobs",), ("submit_load", (0, 1), (2, 3)),
              ("run_job", 0)), BROKEN + "LoadsIntoFirstChunk",
             "keys 0 and 1 are loaded into chunks 2 and 3: both land in chunk 2"),
    Scenario("tier-temp-left-on-error", MACHINE, "no-temp-left", FS_FAULTS,
             (("arm_fault", "write_short"), ("write_chunk", 1, 0), ("submit_store", (0,), (1,)),
              ("run_job", 0)), BROKEN + "TempLeftOnError",
             "a short write fails the store; its temp file stays"),
    Scenario("tier-drain-leaves-last", MACHINE, "jobs-agree", FS,
             (("submit_load", (3,), (1,)), ("drain_jobs",)), BROKEN + "DrainLeavesLast",
             "drain_jobs leaves the one queued load pending"),
    Scenario("tier-load-error-swallowed", MACHINE, "no-wrong-bytes-served", FS,
             (("submit_load", (3,), (1,)), ("run_job", 0), ("get_finished_jobs",)),
             BROKEN + "LoadErrorSwallowed",
             "key 3 has no file; its load is reported whole over an empty chunk"),
    Scenario("tier-miss-outlives-request", MACHINE, "stored-survives", FS,
             (("lookup", 0), ("on_schedule_end",), ("lookup", 0), *STORED_0),
             BROKEN + "MissOutlivesRequest",
             "key 0 answered MISS, then stored; the next request is still told MISS",
             ends=True),
    Scenario("tier-probe-answer-lost", MACHINE, "deferred-lookup-resolves", FS,
             (("lookup", 3), ("on_schedule_end",), ("lookup", 3)),
             BROKEN + "ProbeAnswerLost", "key 3's probe went out at the step's end, its "
             "answer never comes: RETRY again"),
)
