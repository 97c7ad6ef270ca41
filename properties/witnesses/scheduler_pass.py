"""Written-out witnesses of the scheduler pass's properties."""

from __future__ import annotations

from attrs import evolve

from models.scheduler_pass_values import PlacedItem, SchedRequest
from properties.scheduler_pass_worlds import SchedWorld
from properties.witnesses.kinds import Scenario

MACHINE = "properties.scheduler_pass_machine:SchedulerPassMachine"
MAMBA = "properties.scheduler_pass_machine:MambaSchedulerPassMachine"
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
# fixtures/reproducers/test_scheduler_pass_vllm_mamba_mtp_stall.py: Mamba blocks of 4, an MTP
# drafter looking 2 ahead, a 9-token text prompt: [0, 4), [4, 7), then no token ever.
MTP_STALL = _world(1, 4, 1, SchedRequest("t0", 9, 1), read_ahead=2, mamba_block_size=4)

SCENARIOS = (
    Scenario("scheduler-budget-per-request", MACHINE, "budgets-hold", TWO_FULL_ITEMS,
             (("add_request", 0, 0), ("add_request", 1, 1), ("step",)),
             BROKEN + "BudgetPerRequest",
             "r1's item is judged against the whole budget r0 already spent"),
    Scenario("scheduler-gathers-from-row-zero", MACHINE, "gathered-equals-encoded",
             ONE_TOKEN_PASSES, (("add_request", 0, 0), ("step",), ("step",)),
             BROKEN + "GathersFromRowZero", "pass 2 gathers img0's row 1 as row 0"),
    # No stand-in: vLLM 0.33.0's rules, which the model and the native pass both follow,
    # stall this prefill; with a one-token drafter (no runway to keep) it finishes.
    Scenario("scheduler-mamba-mtp-stall", MAMBA, "liveness", MTP_STALL,
             (("add_request", 0, 0),), None,
             "the MTP runway and the Mamba alignment leave the prefill no token, forever",
             ends=True, control_world=evolve(MTP_STALL, read_ahead=1)),
)
