"""The tiered-lookup machine over the CPU manager alone, one eviction policy at a time.

The mixed machine (``test_tiered_lookup.py``) gives each policy a sixth of its worlds; an
eviction policy's rules (LRU recency, ARC's T1 / T2 split, ghost lists and adaptive target)
show only after several stores, completions, reuses and an evicting store, so each policy
also gets the whole budget here. Same model, rules and checks; only the worlds differ.
"""

from __future__ import annotations

from hypothesis.stateful import initialize

from properties.run import check_machine
from properties.tiered_lookup_machine import TieredLookupMachine
from properties.tiered_lookup_worlds import TieredWorld, tiered_worlds


def policy_machine(policy: str) -> type[TieredLookupMachine]:
    class PolicyMachine(TieredLookupMachine):
        @initialize(world=tiered_worlds(policy=policy))
        def setup(self, world: TieredWorld):
            super().setup(world)

    PolicyMachine.__name__ = PolicyMachine.__qualname__ = f"TieredLookup{policy.upper()}Machine"
    return PolicyMachine


# One test per policy (not parametrized): ``lch/suites.py`` names each as a mutant's suite.
def test_tiered_lookup_lru(target, reproducer_dir):
    check_machine(policy_machine("lru"), target, reproducer_dir)


def test_tiered_lookup_arc(target, reproducer_dir):
    check_machine(policy_machine("arc"), target, reproducer_dir)
