"""The ``vllm`` target's drop policies: vLLM 0.33.0's real ``DropStorePolicy`` and
``ThrottledDropPolicy``, asked through a real ``EMABackpressureDetector`` whose pressure and
latency EMA the test sets per decision (the detector's own EMA, warm-up and cooldown run on
the wall clock and are not under test here)."""

from __future__ import annotations

from sim.vllm import release


class VllmDropPolicy:
    def __init__(self, policy: str = "throttled", ramp_factor: float = 2.0):
        bp = release.import_module("vllm.v1.kv_offload.tiering.backpressure")
        self.policy = (bp.DropStorePolicy() if policy == "drop"
                       else bp.ThrottledDropPolicy(ramp_factor=ramp_factor))

        class SetDetector(bp.EMABackpressureDetector):
            """The real detector class (ThrottledDropPolicy asserts it), its state set."""

            pressure = False

            def is_under_pressure(self) -> bool:
                return self.pressure

        self.detector = SetDetector(high_water_s=1.0, low_water_s=0.5, policy=self.policy)

    def should_store(self, under_pressure: bool, ema: float, high: float,
                     num_blocks: int) -> bool:
        d = self.detector
        d.pressure = under_pressure
        d.store_latency_ema, d._high = float(ema), float(high)   # vLLM 0.33.0: high water
        # The detector's own entry point: its policy decides and it counts a refusal.
        return bool(d.should_store(num_blocks))

    def pop_stores_dropped(self) -> tuple[int, int]:
        return tuple(self.policy.pop_stores_dropped())

    def reset(self) -> None:
        self.policy.reset()

