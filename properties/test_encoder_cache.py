"""The encoder-cache state machine against each ``--target`` (default ``native``).

A failure is minimized and written as a reproducer (``--reproducer-dir``); the test fails
with the property's message and the reproducer's path.
"""

from __future__ import annotations

from properties.encoder_cache_machine import EncoderCacheMachine
from properties.run import check_machine


def test_encoder_cache_machine(target, reproducer_dir):
    check_machine(EncoderCacheMachine, target, reproducer_dir)
