"""Helpers of the written-out scenario tests (``test_*`` files that check one hand-written
trace on several targets): build a target or skip saying why it cannot run the scenario, and
compare a value with the expected one."""

from __future__ import annotations

from typing import Any

import pytest

from properties.run import unavailable
from sim.errors import TargetUnavailable
from sim.targets import make


def agrees(actual: Any, expect: Any) -> None:
    """The target's value is the expected one; the message shows both (mutation runs read
    it without pytest's assertion rewriting)."""
    assert actual == expect, f"{actual!r} != expected {expect!r}"


def make_or_skip(target: str, subsystem: str, drives: str | None = None, **config: Any) -> Any:
    """``make(target, subsystem, **config)``, or a skip naming why the target cannot run the
    scenario: it is missing here, or it reports that it does not drive the world's option
    ``drives`` (its ``drives_<option>`` is false, ``why_no_<option>`` says why)."""
    try:
        port = make(target, subsystem, **config)
    except TargetUnavailable as why:
        unavailable(target, why)     # a skip, or a failure where targets are required
    if drives and not getattr(port, f"drives_{drives}", True):
        pytest.skip(getattr(port, f"why_no_{drives}", f"{target} does not drive {drives}"))
    return port
