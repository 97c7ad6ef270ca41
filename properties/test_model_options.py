"""Every model option a release gets adopts a change upstream made on purpose, with its
citation; none absorbs a bug fix (PR #46363's window scan stays a divergence on 0.22-0.24).

No vLLM needed: ``tiered_lookup_compat.model_semantics`` (and ``tiering_semantics``) is a
table by release, and the model
runs alone.
"""

from __future__ import annotations

import pytest

from models.tiered_lookup import TieredLookupModel
from models.tiered_lookup_values import LookupResult
from sim.vllm import tiered_lookup_compat

# One release per family the adapters tell apart, 0.10.2 to 0.34.0.
RELEASES = ["0.10.2", "0.11.0", "0.14.0", "0.15.0", "0.18.0", "0.20.0", "0.22.0", "0.23.0",
            "0.24.0", "0.25.0", "0.26.0", "0.28.0", "0.30.0", "0.32.0", "0.33.0", "0.34.0"]
# The primary's model's options and the tiering model's.
OPTIONS = sorted({name for r in RELEASES for name in (
    *tiered_lookup_compat.model_semantics(r), *tiered_lookup_compat.tiering_semantics(r))})


def test_every_option_is_listed_with_its_citation():
    assert OPTIONS, "model_semantics gives no release an option: the test checks nothing"
    assert sorted(tiered_lookup_compat.MODEL_OPTIONS) == OPTIONS, \
        "every option model_semantics or tiering_semantics returns has a MODEL_OPTIONS " \
        "entry, and only those"


@pytest.mark.parametrize("option", OPTIONS)
def test_option_cites_why_it_is_a_meaning_not_a_fix(option):
    kind, citation = tiered_lookup_compat.MODEL_OPTIONS[option]
    assert kind in ("meaning", "vocabulary"), option
    # A release range and what justifies it (or that no upstream reason was found).
    assert any(c.isdigit() for c in citation) and len(citation) > 60, citation
    assert "fix" not in citation.lower().replace("fixed", "").replace("prefix", "") or \
        "not" in citation.lower(), f"{option} cites a fix: a fix is never an option"


def _pending_window_scan(options: dict) -> tuple[int, ...]:
    """The keys a window scan over [1, 3, 2] (window 1) looks up with 3's write pending."""
    model = TieredLookupModel(num_chunks=1, **options)
    model.prepare_store([3])
    return model.sliding_window_lookup([1, 3, 2], 1).lookups


@pytest.mark.parametrize("release", ["0.22.0", "0.23.0", "0.24.0"])
def test_the_fix_of_pr_46363_stays_a_divergence_where_the_release_lacks_it(release):
    options = tiered_lookup_compat.model_semantics(release)
    # What the fixed scan looks up (0.25.0 on): the pending block completes the window.
    assert _pending_window_scan(options) == (2, 3)
    # What these releases' scan looks up (the catalogue's lookup-pending-as-miss): past it.
    assert _pending_window_scan({**options, "pending_as_miss": True}) == (2, 3, 1)
    # Only the API's word is the release's: None (RETRY) where the model means HIT_PENDING.
    model = TieredLookupModel(num_chunks=1, **options)
    model.prepare_store([3])
    assert model.lookup_meant(3) is LookupResult.HIT_PENDING
    assert model.lookup(3) is LookupResult.RETRY


@pytest.mark.parametrize("per_request", [False, True])
def test_a_requests_second_offer_counts_only_before_0_34(per_request):
    """``offers_count_per_request`` (vLLM 0.34.0): one request offering a key twice brings it
    no nearer the threshold, and its second refusal is no second skip; another request's
    offer counts. Before, each offer counted."""
    model = TieredLookupModel(num_chunks=2, store_threshold=2, requests=((1,), (1,)),
                              offers_count_per_request=per_request)
    assert model.prepare_store([1]).keys_to_store == ()
    second = model.prepare_store([1]).keys_to_store
    assert second == (() if per_request else (1,))
    assert model.get_stats().skipped == 1     # the first refusal only, either way
    if per_request:
        model.use_request(1)
        assert model.prepare_store([1]).keys_to_store == (1,)


@pytest.mark.parametrize("marks_present", [False, True])
def test_a_finished_store_answers_a_pending_probe_only_from_0_34(marks_present):
    """The secondary tier's ``store_marks_present`` (vLLM 0.34.0,
    ``secondary_tier_compat.model_semantics``): a store job noticed done makes its key a HIT
    at once, over the probe the first lookup queued; before, the probe still decides."""
    from models.secondary_tier import SecondaryTierModel
    from sim.vllm import secondary_tier_compat
    assert secondary_tier_compat.model_semantics("0.34.0", "fs") == {"store_marks_present": True}
    assert secondary_tier_compat.model_semantics("0.33.0", "fs") == {}
    tier = SecondaryTierModel(2, "fs", store_marks_present=marks_present)
    tier.write_chunk(0, 4)
    tier.submit_store(0, [4], [0])
    assert tier.lookup(4) is LookupResult.RETRY          # the probe is queued
    tier.run_job(0)
    tier.get_finished_jobs()
    assert tier.lookup(4) is (LookupResult.HIT if marks_present else LookupResult.RETRY)
    tier.on_schedule_end()                                # the probe, if still asked, sees it
    assert tier.lookup(4) is LookupResult.HIT
