"""The offload-engine state machine against each ``--target`` (default ``native``).

A failure is minimized and written as a reproducer (``--reproducer-dir``); the test fails
with the property's message and the reproducer's path.
"""

from __future__ import annotations

from properties.offload_engine_machine import OffloadEngineMachine
from properties.run import check_machine


def test_offload_engine_machine(target, reproducer_dir):
    check_machine(OffloadEngineMachine, target, reproducer_dir)
