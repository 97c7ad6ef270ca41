"""Native back-pressure drop policies, written from ``models/backpressure.py``'s rules the
way an engine would (a float accumulator carried between decisions, two counters)."""

from __future__ import annotations


class NativeDropPolicy:
    def __init__(self, policy: str = "throttled", ramp_factor: float = 2.0):
        self.policy, self.ramp_factor = policy, ramp_factor
        self._carry = 0.0
        self._stores = self._blocks = 0

    def should_store(self, under_pressure: bool, ema: float, high: float,
                     num_blocks: int) -> bool:
        keep = self._decide(under_pressure, float(ema), float(high))
        if not keep:
            self._stores += 1
            self._blocks += num_blocks
        return keep

    def _decide(self, under_pressure: bool, ema: float, high: float) -> bool:
        if not under_pressure:
            return True
        if self.policy == "drop" or high <= 0:
            return False
        rate = min(1.0, max(0.0, ema - high) / high / self.ramp_factor)
        if rate <= 0 or rate >= 1:
            return rate <= 0
        self._carry += rate
        if self._carry < 1.0:
            return True
        self._carry -= 1.0
        return False

    def pop_stores_dropped(self) -> tuple[int, int]:
        counts = (self._stores, self._blocks)
        self._stores = self._blocks = 0
        return counts

    def reset(self) -> None:
        self._carry, self._stores, self._blocks = 0.0, 0, 0
