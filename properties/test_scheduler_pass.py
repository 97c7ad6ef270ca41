"""The scheduler-pass state machine against each ``--target`` (default ``native``).

A failure is minimized and written as a reproducer (``--reproducer-dir``); the test fails
with the property's message and the reproducer's path.
"""

from __future__ import annotations

import pytest

from fixtures.known_bugs import by_id
from fixtures.pytest_plugin import Divergence
from properties.run import check_machine
from properties.scheduler_pass_machine import (
    AsyncSchedulerPassMachine,
    EncoderDecoderSchedulerPassMachine,
    MambaMtpSchedulerPassMachine,
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


def test_scheduler_pass_mamba_mtp(target, reproducer_dir):
    """Mamba worlds under an MTP drafter, the known-bug catalogue's machine for
    ``sched-mamba-mtp-stall``: every prefill finishes and each pass is the model's.

    Against vLLM the machine meets that stall (from 0.33.0, whose Mamba split and drafter
    runway these worlds need) in worlds vLLM would not build: there the stall is expected,
    as an xfail, another divergence fails, and a release that no longer stalls fails too
    (name the release that fixed it in the catalogue). The finding in the world vLLM builds
    is the reproducer's (``fixtures/reproducers/test_scheduler_pass_vllm_mamba_mtp_stall.py``).
    """
    if target.split(":")[0] != "vllm":
        check_machine(MambaMtpSchedulerPassMachine, target, reproducer_dir)
        return
    from sim.vllm import release
    found = release.installed_release()
    if found is not None and not release.at_least("0.33.0", found):
        pytest.skip(f"absent: vLLM {found} predates 0.33.0's Mamba split and runway")
    stall = by_id("sched-mamba-mtp-stall")
    try:
        check_machine(MambaMtpSchedulerPassMachine, target, reproducer_dir)
    except Divergence as divergence:
        if divergence.info["property"] != stall.property:
            raise
        pytest.xfail(f"vLLM {found} unfixed: {stall.id} ({stall.property}): {divergence.msg}")
    pytest.fail(f"vLLM {found} no longer stalls here ({stall.id}): name the release that "
                "fixed it in fixtures/catalogue/scheduler_pass.py and the reproducer's xfail")
