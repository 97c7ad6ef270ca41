"""vLLM's real ``TieringOffloadingManager`` against the tiering model, its tiers played by the
harness (``properties/tiering_manager_machine.py``). vLLM only (0.33.0 on: request-level
tiers, peers served through a ``ParentManager``, the tiering metrics); other targets skip."""

from __future__ import annotations

import os

import pytest
from hypothesis import Phase, settings

from properties.tiering_manager_machine import TieringManagerMachine
from sim.errors import TargetUnavailable

EXAMPLES, STEPS = 300, 50


def _world_maker(target: str):
    if target != "vllm":
        pytest.skip("the tiering manager's tier-facing API is vLLM's")
    try:
        from sim.vllm import release
        from sim.vllm.tiering_world import VllmTieringWorld
        manager = release.import_module("vllm.v1.kv_offload.tiering.manager")
    except TargetUnavailable as why:
        if os.environ.get("LCH_REQUIRE_TARGETS"):
            pytest.fail(f"target {target} is required here but unavailable: {why}")
        pytest.skip(str(why))
    if not hasattr(manager.TieringOffloadingManager, "poll_tiers"):
        pytest.skip(f"vLLM {release.release()}: the machine drives 0.33.0's tiering API "
                    "(peers served off-step, request-level tiers, the tiering metrics)")
    return VllmTieringWorld


def test_tiering_manager_machine(target):
    maker = _world_maker(target)

    class Machine(TieringManagerMachine):
        make_world = staticmethod(maker)

    # No shrinking: a failing program is printed as found (shrinking one through vLLM's calls
    # takes minutes, and the mutation campaign stops at the first failure anyway).
    base = Machine.TestCase.settings
    Machine.TestCase.settings = settings(
        base, max_examples=EXAMPLES, stateful_step_count=STEPS, deadline=None,
        report_multiple_bugs=False, phases=[p for p in base.phases if p != Phase.shrink])
    Machine.TestCase().runTest()
