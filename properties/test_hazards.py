"""Generators create pressure: every named hazard of a machine is reachable, each shown by a
seeded search on the native target that stops once it has reached them all
(``properties/hazards.py``). A machine that never evicts checks nothing.

One test per hazard; the search is run once per machine and shared by its hazards' tests
(one xdist group each). What is asserted is reachability within the search's bound, not a
rate: rates move with Hypothesis's version and the machines' strategies, and were re-pinned
by hand each time they did. They are measured instead: ``python -m lch.measure hazards``
writes every machine's share of examples reaching each hazard to ``results/hazards/``.
"""

from __future__ import annotations

from functools import cache

import pytest

from properties.encoder_cache_machine import EncoderCacheMachine
from properties.hazards import REACHES, SEARCH_SEEDS, first_reached
from properties.machines import MACHINES

BY_NAME = {reach.name: reach for reach in REACHES}


@cache
def searched(name: str) -> dict[str, int]:
    reach = BY_NAME[name]
    return first_reached(reach.load(), reach.hazards(),
                         examples_per_seed=reach.examples_per_seed)


CASES = [pytest.param(reach.name, hazard, id=f"{reach.name}: {hazard}",
                      marks=pytest.mark.xdist_group(f"hazards-{reach.name}"))
         for reach in REACHES for hazard in reach.hazards()]


@pytest.mark.parametrize(("machine", "hazard"), CASES)
def test_hazard_is_reached(machine, hazard):
    first = searched(machine)
    reach = BY_NAME[machine]
    assert hazard in first, (
        f"{machine} never reached {hazard!r} in {len(SEARCH_SEEDS)} seeded runs of "
        f"{reach.examples_per_seed} examples (it reached {sorted(first)}): its worlds or "
        "rules lost the pressure that drove the target there. Compare its rate with the last "
        "record (python -m lch.measure hazards; results/hazards/), or, if this machine cannot "
        "reach it by design, list it in its Reach's unreached with the reason")


def test_every_machine_and_hazard_is_accounted_for():
    """Every registered machine is searched; each exception names a hazard its machine
    declares (a renamed hazard leaves no stale entry behind)."""
    assert {spec for spec in MACHINES.values()} <= {reach.machine for reach in REACHES}
    for reach in REACHES:
        declared = set(reach.load().HAZARDS)
        assert set(reach.only) <= declared and set(reach.unreached) <= declared, reach.name
        assert reach.hazards(), f"{reach.name}: nothing left to reach"


def test_a_hazard_not_reached_is_reported():
    first = first_reached(EncoderCacheMachine, ("can_allocate: no room", "never reached"),
                          seeds=(0,), examples_per_seed=5)
    assert "never reached" not in first and "can_allocate: no room" in first
    assert 1 <= first["can_allocate: no room"] <= 5 + 5       # rejected examples count too
