"""The free-block queue's machine (``prefix_cache.free_queue``) against each ``--target``."""

from __future__ import annotations

from properties.prefix_cache_queue_machine import FreeQueueMachine
from properties.run import check_machine


def test_free_queue_machine(target, reproducer_dir):
    check_machine(FreeQueueMachine, target, reproducer_dir)
