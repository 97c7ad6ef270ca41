"""The same seed gives the same trace: Hypothesis owns the randomness, the test owns time."""

from __future__ import annotations

import pytest
from hypothesis import settings

from properties.machines import MACHINES, machine_for
from properties.run import run_machine

SUBSYSTEMS = sorted(MACHINES)


def trace_hash(subsystem: str, seed: int) -> str:
    profile = settings(settings.get_profile("ci"), derandomize=False, max_examples=40)
    return run_machine(machine_for(subsystem), "native", profile, seed=seed) \
        .recorder.trace_hash()


@pytest.mark.parametrize("subsystem", SUBSYSTEMS)
def test_same_seed_same_trace_hash(subsystem):
    assert trace_hash(subsystem, 1234) == trace_hash(subsystem, 1234)


@pytest.mark.parametrize("subsystem", SUBSYSTEMS)
def test_other_seed_other_trace_hash(subsystem):
    # The hash covers the traces, so it is not a constant that would pass the check above.
    assert trace_hash(subsystem, 1234) != trace_hash(subsystem, 4321)
