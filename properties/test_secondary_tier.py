"""The secondary-tier state machine (vLLM's file-system and example tiers, faults at the os
boundary) against each ``--target`` (default ``native``)."""

from __future__ import annotations

from properties.run import check_machine
from properties.secondary_tier_machine import SecondaryTierMachine


def test_secondary_tier_machine(target, reproducer_dir):
    check_machine(SecondaryTierMachine, target, reproducer_dir)
