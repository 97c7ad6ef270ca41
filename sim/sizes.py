"""The one check every world size passes (the target registry and each subsystem's factories
use it): an integer at least ``minimum``, or a one-line error naming the size."""

from __future__ import annotations

from sim.errors import HarnessError


def check_size(name: str, value: int, minimum: int = 1) -> int:
    if not isinstance(value, int) or value < minimum:
        raise HarnessError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return value
