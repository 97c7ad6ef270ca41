"""Reference model of the secondary tiers' back-pressure drop policies (vLLM 0.33.0
``tiering/backpressure.py``: ``DropStorePolicy``, ``ThrottledDropPolicy``), which decide, per
cascaded store, whether a tier under pressure gets it.

What may be dropped and what must never be:
- a store to a tier not under pressure is never dropped (both policies);
- ``DropStorePolicy`` drops every store while the tier is under pressure;
- ``ThrottledDropPolicy`` drops at a rate that ramps with the latency overshoot:
  ``rate = min(1, max(0, ema - high) / high / ramp_factor)``: every store at rate 1 (and when
  ``high <= 0``), none at rate 0; between, the rates of successive decisions add up and a
  store is dropped each time the sum passes a whole number, so after any run of decisions
  the drops are the sum's whole part;
- every drop is counted once: ``pop_stores_dropped()`` answers (stores, blocks) dropped since
  the last pop and starts again from zero; ``reset()`` forgets the counts and the sum.

The model keeps the sum as an exact fraction and computes each answer from it; it does not
model the detector (latency EMA, warm-up, cooldown): the test says, per decision, whether the
tier is under pressure and with what EMA.
"""

from __future__ import annotations

from fractions import Fraction

from attrs import define, field

POLICIES = ("drop", "throttled")


@define
class DropPolicyModel:
    policy: str = "throttled"
    ramp_factor: Fraction = Fraction(2)
    rate_sum: Fraction = Fraction(0)       # the rates of throttled decisions, summed
    drops_in_sum: int = 0                  # drops taken against the sum so far
    dropped: list = field(factory=list)    # blocks of each store dropped since the last pop

    def rate(self, ema: Fraction, high: Fraction) -> Fraction:
        if high <= 0:
            return Fraction(1)
        return min(Fraction(1), max(Fraction(0), ema - high) / high / self.ramp_factor)

    def should_store(self, under_pressure: bool, ema: Fraction, high: Fraction,
                     num_blocks: int) -> bool:
        keep = self._keep(under_pressure, ema, high)
        if not keep:
            self.dropped.append(num_blocks)
        return keep

    def _keep(self, under_pressure: bool, ema: Fraction, high: Fraction) -> bool:
        if not under_pressure:
            return True
        if self.policy == "drop":
            return False
        rate = self.rate(ema, high)
        if rate <= 0:
            return True
        if rate >= 1:
            return False
        self.rate_sum += rate
        if int(self.rate_sum) > self.drops_in_sum:
            self.drops_in_sum += 1
            return False
        return True

    def pop_stores_dropped(self) -> tuple[int, int]:
        counts = (len(self.dropped), sum(self.dropped))
        self.dropped = []
        return counts

    def reset(self) -> None:
        self.rate_sum, self.drops_in_sum, self.dropped = Fraction(0), 0, []
