"""Program edits the subsystems' world shrinkers share (``properties/*_shrink.py``)."""

from __future__ import annotations

from collections.abc import Collection


def without_request(actions: list[tuple], k: int, request_actions: Collection[str]) -> list[tuple]:
    """Actions with request k's steps removed and later request indexes shifted down: the
    ``request_actions`` take a request's index as their first argument."""
    out = []
    for name, *args in actions:
        if name in request_actions:
            if args[0] == k:
                continue
            args[0] -= args[0] > k
        out.append((name, *args))
    return out
