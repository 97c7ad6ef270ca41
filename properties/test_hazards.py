"""Generators create pressure: under the ``ci`` profile every named hazard of a machine is
reached, and often. A machine that never evicts checks nothing.

The rates are per 100 examples, pinned well below what was measured (see each entry) so the
test flags a generator that lost its pressure, not noise.
"""

from __future__ import annotations

import pytest
from hypothesis import settings

from properties.harness import run_machine
from properties.machines import machine_for

# subsystem -> {hazard: minimum occurrences per 100 examples}. Measured on native, ci profile,
# 300 examples, hypothesis 6.155.2: evicts 20, no room 219, over budget 48, freeable reused 72,
# evicted-then-reallocated 2.7, repeated freed 20, abandoned 129, reports evictions 14.
MIN_RATE_PER_100 = {
    "encoder_cache": {
        "can_allocate: evicts": 8,
        "can_allocate: no room": 80,
        "can_allocate: over compute budget": 15,
        "check_and_update_cache: freeable entry reused": 20,
        "evicted then reallocated in one pass": 1,
        "repeated item freed once": 5,
        "approval abandoned": 40,
        "get_freed_mm_hashes: reports evictions": 5,
    },
    # offload_engine, measured on native with 300 examples, ci profile: id reused 102, block
    # filled 18.7, partial block filled 14.9, decode-filled block read 8.3, preempted then
    # re-prefilled 71, prefill split 72, pool exhausted 102, new decode owner 21.
    "offload_engine": {
        "id reused after finish": 35,
        "decode filled a block": 6,
        "decode filled the prompt's partial block": 5,
        "decode read a decode-filled block": 3,
        "preempted then re-prefilled": 25,
        "prefill split across calls": 25,
        "pool exhausted": 35,
        "new decode owner after another": 7,
    },
}


@pytest.mark.parametrize("subsystem", sorted(MIN_RATE_PER_100))
def test_every_hazard_is_reached_often(subsystem):
    machine = machine_for(subsystem)
    assert set(MIN_RATE_PER_100[subsystem]) == set(machine.HAZARDS)
    result = run_machine(machine, "native",
                         settings(settings.get_profile("ci"), max_examples=300))
    assert result.failure is None
    examples = result.recorder.examples
    rates = {h: 100 * result.recorder.events[h] / examples for h in machine.HAZARDS}
    low = {h: round(r, 1) for h, r in rates.items() if r < MIN_RATE_PER_100[subsystem][h]}
    assert not low, f"hazards reached too rarely (per 100 examples): {low}; all: {rates}"
