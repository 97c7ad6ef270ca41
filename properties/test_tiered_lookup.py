"""The tiered-lookup state machine against each ``--target`` (default ``native``).

A failure is minimized and written as a reproducer (``--reproducer-dir``); the test fails
with the property's message and the reproducer's path.
"""

from __future__ import annotations

from properties.run import check_machine
from properties.tiered_lookup_machine import TieredLookupMachine


def test_tiered_lookup_machine(target, reproducer_dir):
    check_machine(TieredLookupMachine, target, reproducer_dir)
