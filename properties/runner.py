"""How a pytest module runs a machine: skip an unavailable target with its reason, and turn
a finding into a failure that names the property and the reproducer written for it."""

from __future__ import annotations

import os

import pytest
from hypothesis import settings

from properties.harness import HarnessMachine, RunResult, run_machine
from properties.reproducer import write_reproducer
from sim.errors import TargetUnavailable


def check_machine(machine: type[HarnessMachine], target: str, reproducer_dir: str,
                  **overrides) -> RunResult:
    try:
        result = run_machine(machine, target, settings(settings(), **overrides))
    except TargetUnavailable as why:
        if os.environ.get("LCH_REQUIRE_TARGETS"):
            pytest.fail(f"target {target} is required here but unavailable: {why}")
        pytest.skip(str(why))
    if result.failure:
        path = write_reproducer(machine, result.failure, target, reproducer_dir)
        pytest.fail(f"{result.failure.message}\n{machine.__name__} against {target}: "
                    f"{result.failure.calls} calls; reproducer: {path}", pytrace=False)
    return result
