"""Written-out witnesses of the offload engine's properties."""

from __future__ import annotations

from properties.offload_engine_worlds import OffloadWorld
from properties.witnesses.kinds import Scenario

MACHINE = "properties.offload_engine_machine:OffloadEngineMachine"
BROKEN = "fixtures.broken.offload_engine:"
# Blocks of 2 tokens, one ring slot, one layer.
TWO_BLOCKS = OffloadWorld(block_size=2, num_slots=1, num_layers=1, num_cpu_blocks=2)
ONE_BLOCK = OffloadWorld(block_size=2, num_slots=1, num_layers=1, num_cpu_blocks=1)
PREFILLED_ONE_TOKEN = (("add_request", 0, 1, 3, False), ("prefill", 0, 1))

SCENARIOS = (
    Scenario("offload-extra-block-at-boundary", MACHINE, "block-table-agrees", TWO_BLOCKS,
             (("add_request", 0, 2, 6, False), ("prefill", 0, 1)),
             BROKEN + "ExtraBlockAtBoundary", "a 2-token prompt is given two blocks"),
    Scenario("offload-start-kept-after-full-block", MACHINE, "decode-start-agrees", ONE_BLOCK,
             (*PREFILLED_ONE_TOKEN, ("decode", 0)), BROKEN + "StartKeptAfterFullBlock",
             "the first decode fills the block from row 1; the start stays 1"),
    Scenario("offload-leaks-last-block", MACHINE, "resource-partition", ONE_BLOCK,
             (*PREFILLED_ONE_TOKEN, ("preempt", 0)), BROKEN + "LeaksLastBlock",
             "preempting s0 returns its block's id but not its CPU block"),
    Scenario("offload-stale-inverse-map", MACHINE, "check-valid", ONE_BLOCK,
             (*PREFILLED_ONE_TOKEN, ("preempt", 0)), BROKEN + "StaleInverseMap",
             "preempting s0 leaves its CPU block mapped to a free logical block"),
)
