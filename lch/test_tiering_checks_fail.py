"""The tiering checks can fail: each runs against vLLM 0.33.0's ``TieringOffloadingManager``
(or, for what it changed, 0.34.0's) with one planted bug (a mutant of the real class,
applied in memory by ``lch.mutate``) and must report it. The checks are vLLM-only, so the
native catalogue (``fixtures/known_bugs.py``) cannot plant these; this list is their ``bad
machines``. It lives in ``lch/`` because it plants the bugs with ``lch.mutate``
(``properties`` sits below ``lch`` in the layers).

Each bug is a plausible slip, and each names the check it must trip: a tier never told a
request finished, a tier's own stats dropped, a finished cascade that never unpins its
chunks, the tiers' events lost, a failure count that never restarts, the stall warning
gone, a failed tier shutdown swallowed, a promotion with no room left uncounted, a request's
end not passed on to the primary, a tier-poll round that lets its serving run the step's
poll (over every tier, re-entering the serving one), a touch not passed on to the primary,
a peer's lookup that asks the tier serving it too, a tier's config left without its label,
a peer told nothing by the parent it is served through.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from lch import mutate

BAD_MANAGERS = [
    ("_maybe_finalize_request L1077: tier.on_request_finished(state.req_context)  ->  pass",
     "machine", "tier-calls-agree"),
    ("get_stats L1226: stats.aggregate(tier_stats)  ->  pass", "machine", "stats-agree"),
    ("_process_finished_jobs L546: self.primary_tier.complete_read( ...  ->  pass",
     "machine", "agree"),
    ("take_events L1138: yield from tier.take_events()  ->  pass", "machine",
     "events-agree: take_events"),
    ("_tier_poll_loop L369: failing_since = None  ->  pass",
     "test_a_success_restarts_the_failure_count", "tier-poll-give-up: two runs"),
    ("_tier_poll_loop L357: elif now - stalled_since > _TIER_POLL_STALL_WARN_S: ...  ->  pass",
     "test_an_unavailable_lock_warns_and_polls_nothing", "tier-poll-locking: warned at"),
    ("_shutdown_tiers L1293: shutdown_error = exc  ->  pass",
     "test_a_failing_tier_shutdown_keeps_the_primary",
     "tier-poll-shutdown: a tier's failed shutdown must reach the caller"),
    ("_initiate_promotion L718: self._metrics.on_promotion_allocation_failure()  ->  pass",
     "test_a_promotion_the_full_primary_cannot_take_is_a_counted_miss",
     "stats-agree: the promotion that found no room is counted once"),
    ("on_request_finished L1051: self.primary_tier.on_request_finished(req_context)  ->  pass",
     "test_a_finished_request_commits_its_blocks_as_most_recent",
     "store-outputs-agree: evicted (0,)"),
    ("poll_tiers L422: self._processed_jobs_this_step = True  ->  pass",
     "machine", "tier-polls-allowed"),
    ("touch L796: self.primary_tier.touch(keys, req_context)  ->  pass",
     "tiered_lookup", "recency-order-agrees"),
    # A peer's lookup (request p0) asked of the tier serving it: tier 0 or 1, as the draws
    # fall (tier-calls-agree is the only check that says "was asked").
    ("lookup L645: if i == exclude_tier_idx: ...  ->  pass", "machine",
     "was asked [('lookup', 'p"),
    ("config_info L1245: tier_info[TIER_LABEL] = self._metrics.tier_label(self._tier_index[tier])"
     "[0]  ->  pass", "machine", "config-info-agrees"),
    # The parent a tier serves its peers through (``_SecondaryTierFacingParent``).
    ("lookup L194: return self._m.lookup(key, req_context, exclude_tier_idx=self._origin_idx)"
     "  ->  pass", "machine", "peer-answers-agree"),
]
# vLLM 0.34.0's manager, for what it changed: the tier-poll thread backs off instead of
# giving up (a count that never restarts, a back-off announced every round, one round late),
# and a polled tier's work that only a step can finish reported as none.
BAD_MANAGERS_034 = [
    ("_tier_poll_loop L431: failing_since = None  ->  pass",
     "test_a_success_restarts_the_failure_count", "tier-poll-back-off: two runs"),
    ("_tier_poll_loop L467: backing_off = True  ->  pass",
     "test_failing_rounds_back_off_and_keep_polling", "tier-poll-back-off"),
    ("_tier_poll_loop L456: and time.monotonic() - failing_since >= _TIER_POLL_BACK_OFF_AFTER_S"
     "  ->  and time.monotonic() - failing_since > _TIER_POLL_BACK_OFF_AFTER_S",
     "test_failing_rounds_back_off_and_keep_polling", "tier-poll-back-off"),
    ("has_pending_work L1225: return True  ->  return False", "machine",
     "pending-work-agrees"),
]
# The planted bugs are lines of one release's manager each.
BY_RELEASE = {"0.33.0": BAD_MANAGERS, "0.34.0": BAD_MANAGERS_034}
# The class each planted bug is a line of (the manager's, unless named here).
PARENT_CLASS = "_SecondaryTierFacingParent"
CLASS_OF = {"lookup L194": PARENT_CLASS}


@pytest.mark.parametrize(("line_of", "diff", "check", "message"),
                         [(r, *bug) for r, bugs in BY_RELEASE.items() for bug in bugs],
                         ids=[f"{r}-{d.split(':')[0]}" for r, bugs in BY_RELEASE.items()
                              for d, _, _ in bugs])
def test_a_planted_bug_is_reported(target, monkeypatch, tmp_path, line_of, diff, check,
                                   message):
    if target != "vllm":
        pytest.skip("the tiering checks drive vLLM's manager")
    from sim.vllm import release
    if release.release() != line_of:
        pytest.skip(f"n/a: a line of vLLM {line_of}'s manager, not {release.release()}'s")
    module = release.import_module("vllm.v1.kv_offload.tiering.manager")
    cls = getattr(module, CLASS_OF.get(diff.split(":")[0], "TieringOffloadingManager"))
    found = [m for m in mutate.mutants(Path(module.__file__).read_text(), cls.__name__)
             if m.diff == diff]
    assert found, f"no mutant {diff!r} in vLLM {line_of}'s {cls.__name__}"
    original = cls.__dict__[found[0].method]
    mutate.apply(found[0], module, cls)
    try:
        with pytest.raises(BaseException) as caught:   # noqa: PT011 - any failure, named below
            _run(check, target, monkeypatch, str(tmp_path))
    finally:
        setattr(cls, found[0].method, original)
    assert message in str(caught.value), (
        f"with {diff!r} the check failed, but not as it should ({message!r}): {caught.value}")


def _run(check: str, target: str, monkeypatch, reproducer_dir: str) -> None:
    from properties import test_tier_poll_loop, test_tiered_lookup, test_tiered_lookup_tiering
    if check == "machine":
        test_tiered_lookup_tiering.test_tiered_lookup_tiering_machine(target, reproducer_dir)
    elif check == "tiered_lookup":      # the tiered-lookup machine, over the manager's primary
        test_tiered_lookup.test_tiered_lookup_machine(target, reproducer_dir)
    elif hasattr(test_tiered_lookup_tiering, check):
        getattr(test_tiered_lookup_tiering, check)(target)
    else:
        with monkeypatch.context() as patch:
            getattr(test_tier_poll_loop, check)(target, patch)
