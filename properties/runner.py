"""How a pytest module runs a machine: an unavailable target is a skip with its reason (a
failure under ``LCH_REQUIRE_TARGETS=1``), a finding is a failure that names the property and
the reproducer written for it. The exception raised says which outcome it is, so the pytest
plugin (``--outcomes``) records ``divergence`` and ``unavailable`` apart."""

from __future__ import annotations

import os

import pytest
from hypothesis import settings

from fixtures.pytest_plugin import Divergence, Unavailable, note_missing
from properties.harness import HarnessMachine, RunResult, run_machine
from properties.reproducer import write_reproducer
from sim.errors import CapabilityMissing, TargetUnavailable


def check_machine(machine: type[HarnessMachine], target: str, reproducer_dir: str,
                  **overrides) -> RunResult:
    try:
        result = run_machine(machine, target, settings(settings(), **overrides))
    except CapabilityMissing as why:        # nothing of this machine exists in the release
        pytest.skip(f"absent: {why}")
    except TargetUnavailable as why:
        unavailable(target, why)
    note_missing(result.recorder.missing)
    if result.failure:
        path = write_reproducer(machine, result.failure, target, reproducer_dir)
        raise Divergence(
            f"{result.failure.message}\n{machine.__name__} against {target}: "
            f"{result.failure.calls} calls; reproducer: {path}",
            property=result.failure.property, calls=result.failure.calls,
            reproducer=str(path), trace=[s.call for s in result.failure.trace.steps])
    return result


def unavailable(target: str, why: BaseException):
    """Skip, or fail as ``unavailable`` where targets are required (``nox -s vllm``)."""
    if os.environ.get("LCH_REQUIRE_TARGETS"):
        raise Unavailable(f"target {target} is required here but unavailable: {why}")
    pytest.skip(str(why))
