"""The prefix-cache state machine against each ``--target`` (default ``native``).

A failure is minimized and written as a reproducer (``--reproducer-dir``); the test fails
with the property's message and the reproducer's path.
"""

from __future__ import annotations

from properties.prefix_cache_machine import (
    DcpPrefixCacheMachine,
    EagleHybridPrefixCacheMachine,
    HybridPrefixCacheMachine,
    PrefixCacheMachine,
    ScaledEagleHybridPrefixCacheMachine,
)
from properties.run import check_machine


def test_prefix_cache_machine(target, reproducer_dir):
    check_machine(PrefixCacheMachine, target, reproducer_dir)


def test_hybrid_prefix_cache_machine(target, reproducer_dir):
    check_machine(HybridPrefixCacheMachine, target, reproducer_dir)


def test_eagle_hybrid_prefix_cache_machine(target, reproducer_dir):
    check_machine(EagleHybridPrefixCacheMachine, target, reproducer_dir)


def test_scaled_eagle_hybrid_prefix_cache_machine(target, reproducer_dir):
    check_machine(ScaledEagleHybridPrefixCacheMachine, target, reproducer_dir)


def test_dcp_prefix_cache_machine(target, reproducer_dir):
    check_machine(DcpPrefixCacheMachine, target, reproducer_dir)
