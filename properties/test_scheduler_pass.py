"""The scheduler-pass state machine against each ``--target`` (default ``native``).

A failure is minimized and written as a reproducer (``--reproducer-dir``); the test fails
with the property's message and the reproducer's path.
"""

from __future__ import annotations

from properties.run import check_machine
from properties.scheduler_pass_machine import (
    AsyncSchedulerPassMachine,
    EncoderDecoderSchedulerPassMachine,
    MambaSchedulerPassMachine,
    SchedulerPassMachine,
)


def test_scheduler_pass_machine(target, reproducer_dir):
    check_machine(SchedulerPassMachine, target, reproducer_dir)


def test_scheduler_pass_encoder_decoder(target, reproducer_dir):
    check_machine(EncoderDecoderSchedulerPassMachine, target, reproducer_dir)


def test_scheduler_pass_async_scheduling(target, reproducer_dir):
    check_machine(AsyncSchedulerPassMachine, target, reproducer_dir)


def test_scheduler_pass_mamba(target, reproducer_dir):
    check_machine(MambaSchedulerPassMachine, target, reproducer_dir)
