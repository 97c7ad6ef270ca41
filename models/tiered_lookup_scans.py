"""The connector's two lookups over a tiered manager (``docs/specs/tiered-lookup.md``),
as pure functions of a lookup callable: vLLM 0.33.0's ``_maximal_prefix_lookup`` and
``_sliding_window_lookup`` in ``offloading/scheduler.py`` say what a request can load; these
say the same from the spec, and record which keys they looked up (a scan that probes the wrong
keys starts the wrong promotions and probes, whatever it returns).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from models.tiered_lookup_values import LookupResult, Scan

HIT, HIT_PENDING, RETRY, MISS = (LookupResult.HIT, LookupResult.HIT_PENDING,
                                 LookupResult.RETRY, LookupResult.MISS)


def maximal_prefix_lookup(lookup: Callable[[int], LookupResult], keys: Sequence[int]) -> Scan:
    """Scan from the start until the first MISS (RETRY does not stop it: later probes start
    now). The result counts the HIT and HIT_PENDING answers; None if any answer defers
    (RETRY or HIT_PENDING)."""
    said: dict[int, LookupResult] = {}                 # position -> answer, in scan order
    for position, key in enumerate(keys):
        said[position] = lookup(key)
        if said[position] is MISS:
            break
    answers = tuple(said.values())
    found = sum(a is HIT or a is HIT_PENDING for a in answers)
    deferred = RETRY in answers or HIT_PENDING in answers
    return Scan(None if deferred else found, tuple(keys[p] for p in said), answers)


def sliding_window_lookup(lookup: Callable[[int], LookupResult], keys: Sequence[int],
                          window: int, initial_window: int | None = None,
                          pending_as_miss: bool = False) -> Scan:
    """Scan from the end for a run of hits as long as the required window (``initial_window``
    for the rightmost run, ``window`` after a gap). The end index of the first complete run,
    or the run length reaching index 0; None if any RETRY was seen or the winning run holds a
    HIT_PENDING. A gap (MISS or RETRY) resets the run and forgets its pending mark."""
    required = initial_window or window
    made: list[int] = []
    answers: list[LookupResult] = []
    run, pending, deferred = 0, False, False
    for idx in range(len(keys) - 1, -1, -1):
        result = lookup(keys[idx])
        made.append(keys[idx])
        answers.append(result)
        if pending_as_miss and result is HIT_PENDING:
            result = MISS            # before PR #46363: a pending block ended the run
        if result is HIT or result is HIT_PENDING:
            run += 1
            pending = pending or result is HIT_PENDING
        else:
            run, pending, required = 0, False, window
            deferred = deferred or result is RETRY
        if run == required:
            return Scan(None if deferred or pending else idx + required, tuple(made),
                        tuple(answers))
    return Scan(None if deferred or pending else run, tuple(made), tuple(answers))
