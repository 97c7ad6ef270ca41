"""The tiered-lookup machine over the CPU manager alone, one eviction policy at a time.

The mixed machine (``test_tiered_lookup.py``) gives each policy a sixth of its worlds; an
eviction policy's rules (LRU recency, ARC's T1 / T2 split, ghost lists and adaptive target)
show only after several stores, completions, reuses and an evicting store, so each policy
also gets the whole budget here. Same model, rules and checks; only the worlds differ.
"""

from __future__ import annotations

from properties.run import check_machine
from properties.tiered_lookup_machine import TieredLookupARCMachine, TieredLookupLRUMachine


# One test per policy (not parametrized): ``lch/suites.py`` names each as a mutant's suite.
def test_tiered_lookup_lru(target, reproducer_dir):
    check_machine(TieredLookupLRUMachine, target, reproducer_dir)


def test_tiered_lookup_arc(target, reproducer_dir):
    check_machine(TieredLookupARCMachine, target, reproducer_dir)
