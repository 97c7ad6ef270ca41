"""Back-pressure drop policies (``models/backpressure.py``) against each ``--target``: the
native policies and vLLM 0.33.0's real ``DropStorePolicy`` / ``ThrottledDropPolicy`` asked
through a real ``EMABackpressureDetector``.

A run is a drawn list of decisions (under pressure or not, the latency EMA against the high
watermark, the store's blocks), pops of the drop counters and resets. Every answer must be
the model's; a store to a tier not under pressure is never dropped; every drop is counted
once. EMAs are drawn so that each rate is a multiple of 1/16: exact in floats, so a float
accumulator and the model's exact sum agree at every whole number.
"""

from __future__ import annotations

from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from models.backpressure import POLICIES
from properties.run import unavailable
from properties.scenarios import agrees, holds
from sim.errors import TargetUnavailable
from sim.targets import make_drop_policy

HIGHS = (Fraction(1, 2), Fraction(1), Fraction(2), Fraction(4))

decision = st.tuples(st.just("should_store"), st.booleans(), st.sampled_from(HIGHS),
                     st.integers(0, 40), st.integers(1, 4))
operations = st.lists(st.one_of(decision, decision, decision,
                                st.just(("pop_stores_dropped",)), st.just(("reset",))),
                      max_size=60)


def _policies(target: str, policy: str):
    try:
        return make_drop_policy("model", policy), make_drop_policy(target, policy)
    except TargetUnavailable as why:
        unavailable(target, why)


@pytest.mark.parametrize("policy", POLICIES)
def test_drop_policy_agrees(target, policy):
    model, real = _policies(target, policy)

    @given(operations)
    def run(ops):
        model.reset()
        real.reset()
        for op in ops:
            if op[0] != "should_store":
                want, got = getattr(model, op[0])(), getattr(real, op[0])()
                holds("drops-agree", got == want, f"{op[0]}() -> {got}, the model expects {want}")
                continue
            _, pressure, high, eighths, blocks = op
            ema = high * (1 + Fraction(eighths, 8))      # rate = eighths / 16, capped at 1
            want = model.should_store(pressure, ema, high, blocks)
            got = real.should_store(pressure, ema, high, blocks)
            holds("drops-agree", got is want, f"should_store(pressure={pressure}, ema={ema}, "
                  f"high={high}) -> {got}, the model expects {want}")
            holds("drops-agree", got or pressure, "a store to a tier not under pressure was "
                  "dropped")
        agrees("drops-agree", real.pop_stores_dropped(), model.pop_stores_dropped())

    run()


@pytest.mark.parametrize("policy", POLICIES)
def test_cascade_drops_under_pressure(target, policy):
    """vLLM's real tiering manager: a cascade the policy drops submits no job and leaves the
    primary chunk unpinned (nothing counted as stored in the tier); a kept one submits a job
    that pins it; drops are counted as the model counts them."""
    if target != "vllm":
        pytest.skip("the cascade is vLLM's TieringOffloadingManager (the native manager has "
                    "no back-pressure)")
    try:
        from sim.vllm.backpressure import VllmCascade
        cascade = VllmCascade(policy)
    except TargetUnavailable as why:
        unavailable(target, why)
    model = make_drop_policy("model", policy)
    try:
        next_key = 0
        for pressure, eighths, size in [(p, e, s) for p in (False, True)
                                        for e in (0, 3, 6, 12, 40) for s in (1, 2)] * 2:
            keys = tuple(range(next_key, next_key + size))
            next_key += size
            high = Fraction(1)
            ema = high * (1 + Fraction(eighths, 8))
            keep = model.should_store(pressure, ema, high, size)
            sent = cascade.store(keys, pressure, ema, high)
            holds("drops-agree", sent == (keys if keep else ()),
                  f"pressure={pressure} ema={ema}: cascade sent {sent}, the model "
                  f"{'keeps' if keep else 'drops'} it")
            holds("ref-counts-agree", [cascade.ref_cnt(k) for k in keys] == [1 if keep else 0]
                  * size, "a kept cascade pins its chunks until polled; a dropped one pins "
                  "nothing")
        agrees("drops-agree", cascade.pop_stores_dropped(), model.pop_stores_dropped())
    finally:
        cascade.close()
