"""The model's connector scans against a scripted table of answers (the results vLLM 0.33.0's
own ``_maximal_prefix_lookup`` / ``_sliding_window_lookup`` gave on a fake manager answering
the same scripts; ``properties/test_tiered_lookup_vllm_scans.py`` compares them live), and
the model's tiers on two hand-written scenarios. Pure model: no torch, no vLLM."""

from __future__ import annotations

import pytest

from models.tiered_lookup import TieredLookupModel
from models.tiered_lookup_scans import maximal_prefix_lookup, sliding_window_lookup
from models.tiered_lookup_values import LookupResult, StoreOutput

CODES = {"H": LookupResult.HIT, "P": LookupResult.HIT_PENDING, "R": LookupResult.RETRY,
         "M": LookupResult.MISS}

# (scan, script, window, initial_window, result, number of lookups made)
TABLE = [
    ("prefix", "H H M H", None, None, 2, 3),
    ("prefix", "H P H M", None, None, None, 4),
    ("prefix", "H R H M", None, None, None, 4),
    ("window", "H H M H H", 2, None, 5, 2),
    ("window", "H H H M H", 2, None, 3, 4),
    ("window", "H M H M H", 2, None, 1, 5),
    ("window", "H H R H H", 2, None, 5, 2),
    ("window", "H H H H P", 2, 3, None, 3),
]


def scripted(script: str):
    answers = [CODES[c] for c in script.split()]
    return (lambda key: answers[key]), list(range(len(answers)))


@pytest.mark.parametrize("scan,script,window,initial,result,made", TABLE,
                         ids=[f"{row[0]}-{row[1].replace(' ', '')}" for row in TABLE])
def test_scan_matches_the_vllm_table(scan, script, window, initial, result, made):
    lookup, keys = scripted(script)
    if scan == "prefix":
        got = maximal_prefix_lookup(lookup, keys)
    else:
        got = sliding_window_lookup(lookup, keys, window, initial)
    assert (got.result, len(got.lookups)) == (result, made)


def test_pending_as_miss_probes_further_left():
    """Scenario: window 2 over H H P. Since PR #46363 the pending block extends the run and
    defers after 2 lookups; before it, the pending block was a miss: 3 lookups, window 0..2."""
    lookup, keys = scripted("H H P")
    assert sliding_window_lookup(lookup, keys, 2).lookups == (2, 1)
    old = sliding_window_lookup(lookup, keys, 2, pending_as_miss=True)
    assert (old.result, old.lookups) == (2, (2, 1, 0))


def test_promotion_of_an_evicted_key_and_a_full_primary():
    """Scenario (one primary chunk, a memory tier):
    - 0 is stored and cascaded; the cascade job completes: the tier holds 0.
    - storing 1 evicts 0 (the poll in prepare_store released the cascade's pin).
    - lookup(0): the tier hits, but the primary's only chunk is write-pending: MISS.
    - 1 is written and its cascade completes: lookup(0) promotes (evicting 1), HIT_PENDING;
      the promotion is submitted at the step's end and polled by the next lookup: HIT."""
    mgr = TieredLookupModel(num_chunks=1, secondary="memory")
    assert mgr.prepare_store([0]) == StoreOutput((0,), ())
    mgr.complete_store([0])
    mgr.complete_job(0)
    assert mgr.prepare_store([1]) == StoreOutput((1,), (0,))
    assert mgr.lookup(0) is LookupResult.MISS
    mgr.complete_store([1])
    mgr.complete_job(1)
    mgr.on_schedule_end()
    assert mgr.lookup(0) is LookupResult.HIT_PENDING
    mgr.on_schedule_end()
    mgr.complete_job(2)
    mgr.on_schedule_end()
    assert mgr.lookup(0) is LookupResult.HIT
    assert mgr.read_chunk(0) == 0


def test_probe_tier_answers_retry_until_flushed():
    mgr = TieredLookupModel(num_chunks=1, secondary="probe")
    assert mgr.lookup(5) is LookupResult.RETRY
    assert mgr.lookup(5) is LookupResult.RETRY
    mgr.on_schedule_end()
    assert mgr.lookup(5) is LookupResult.MISS
