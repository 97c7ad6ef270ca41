"""Written-out witnesses of the scheduler pass's properties."""

from __future__ import annotations

from models.scheduler_pass_values import PlacedItem, SchedRequest
from properties.scheduler_pass_worlds import SchedWorld
from properties.witnesses.kinds import Scenario

MACHINE = "properties.scheduler_pass_machine:SchedulerPassMachine"
KV_MACHINE = "properties.scheduler_pass_machine:KvPressureSchedulerPassMachine"
BROKEN = "fixtures.broken.scheduler_pass:"


def _world(cache_size: int, token_budget: int, encoder_compute_budget: int, *templates,
           **options) -> SchedWorld:
    options = {"read_ahead": 0, "disable_chunked_mm_input": False, **options}
    return SchedWorld(cache_size, token_budget, encoder_compute_budget, templates=templates,
                      **options)


# Two requests whose one item each takes the whole compute budget: one pass encodes one.
TWO_FULL_ITEMS = _world(4, 8, 2, SchedRequest("t0", 3, 1, (PlacedItem("img0", 0, 2),)),
                        SchedRequest("t1", 3, 1, (PlacedItem("img1", 0, 2),)))
# A 1-token budget: the item's two rows are gathered one pass each.
ONE_TOKEN_PASSES = _world(2, 1, 2, SchedRequest("t0", 2, 1, (PlacedItem("img0", 0, 2),)))

# A KV pool of 4 blocks of 16 tokens and a 16-token budget: a 40-token prompt's second chunk
# reaches its second block.
KV_CHUNKS = _world(2, 16, 2, SchedRequest("t0", 40, 1), kv_blocks=4)

SCENARIOS = (
    Scenario("scheduler-budget-per-request", MACHINE, "budgets-hold", TWO_FULL_ITEMS,
             (("add_request", 0, 0), ("add_request", 1, 1), ("step",)),
             BROKEN + "BudgetPerRequest",
             "r1's item is judged against the whole budget r0 already spent"),
    Scenario("scheduler-gathers-from-row-zero", MACHINE, "gathered-equals-encoded",
             ONE_TOKEN_PASSES, (("add_request", 0, 0), ("step",), ("step",)),
             BROKEN + "GathersFromRowZero", "pass 2 gathers img0's row 1 as row 0"),
    Scenario("scheduler-counts-finished-as-unfinished", MACHINE, "liveness", ONE_TOKEN_PASSES,
             (("add_request", 0, 0),), BROKEN + "CountsFinishedAsUnfinished",
             "t0 finishes, yet the target still counts it unfinished", ends=True),
    Scenario("scheduler-kv-blocks-per-chunk", KV_MACHINE, "kv-blocks-agree", KV_CHUNKS,
             (("add_request", 0, 0), ("step",), ("step",)), BROKEN + "BlocksPerChunk",
             "r0's second chunk is counted 1 block, not the 2 its 32 tokens reach"),
)
