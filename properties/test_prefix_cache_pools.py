"""The block pools' machine (``prefix_cache.block_pools``) against each ``--target``."""

from __future__ import annotations

from properties.prefix_cache_pools_machine import BlockPoolsMachine
from properties.run import check_machine


def test_block_pools_machine(target, reproducer_dir):
    check_machine(BlockPoolsMachine, target, reproducer_dir)
