"""The tiered-lookup machine over the CPU manager alone, one eviction policy at a time.

The mixed machine (``test_tiered_lookup.py``) gives each policy a sixth of its worlds; an
eviction policy's rules (LRU recency, ARC's T1 / T2 split, ghost lists and adaptive target)
show only after several stores, completions, reuses and an evicting store, so each policy
also gets the whole budget here. Same model, rules and checks; only the worlds differ.
"""

from __future__ import annotations

from properties.run import check_machine
from properties.tiered_lookup_machine import (
    TieredLookupARCChurnMachine,
    TieredLookupARCMachine,
    TieredLookupLongPromptMachine,
    TieredLookupLRUMachine,
    TieredLookupNoChunksMachine,
)


# One test per policy (not parametrized): ``lch/suites.py`` names each as a mutant's suite.
def test_tiered_lookup_lru(target, reproducer_dir):
    check_machine(TieredLookupLRUMachine, target, reproducer_dir)


def test_tiered_lookup_arc(target, reproducer_dir):
    check_machine(TieredLookupARCMachine, target, reproducer_dir)


def test_tiered_lookup_arc_churn(target, reproducer_dir):
    check_machine(TieredLookupARCChurnMachine, target, reproducer_dir)


def test_tiered_lookup_no_chunks(target, reproducer_dir):
    # Its worlds differ only in requests and options: a few examples cover them.
    check_machine(TieredLookupNoChunksMachine, target, reproducer_dir, max_examples=25)


def test_tiered_lookup_long_prompt(target, reproducer_dir):
    # Each example is a 64-72 block world: fewer of them than the short worlds' budget.
    check_machine(TieredLookupLongPromptMachine, target, reproducer_dir, max_examples=30)
