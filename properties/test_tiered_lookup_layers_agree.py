"""The tiered lookup's two model layers agree where their scopes meet (fast; models only).

``TieredLookupModel`` (the primary's eviction, one secondary tier, the connector's scans) and
``TieringModel`` (the tiering manager's request hooks, several tiers, back-pressure, metrics,
over a primary that never evicts) are one model of vLLM's ``TieringOffloadingManager`` in two
layers, each computing from facts on a ``Timeline``. Where both apply, one request, one
chunk-level tier (holding some keys from an earlier run, not polled off-step, no detector)
and a primary larger than the keys, they state the same manager. So after every call they must
agree on what the primary holds and in which state (a ref count: -1 while written, else the
cascades reading it), what the tier holds, the jobs it has not run, in order, whether the step
has polled, whether promotions are held, and every store's and lookup's answer.

Left out, each one layer's alone: events (the primary's stream against the tiers'), metrics,
LRU order. The protocol is the tiered-lookup machine's: a reset drops the stores in flight (no
``complete_store`` of a flushed cache), ``complete_store`` names what ``prepare_store`` gave.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from models.tiered_lookup import TieredLookupModel
from models.tiered_lookup_tiering import TieringModel
from models.tiered_lookup_values import JobOutcome, TierSpec

KEYS = (0, 1, 2, 3)
REQ = "r"


def _unrun(tiering: TieringModel) -> list:
    return [s for s in tiering.jobs if s.job_id not in tiering.finishes]


def disagreements(lookup: TieredLookupModel, tiering: TieringModel) -> list[str]:
    """Each quantity both layers compute on which they differ, with both values."""
    pairs = {
        "primary (key: ref count)": ({k: lookup.ref_cnt(k) for k in lookup.chunks},
                                     tiering.ref_counts()),
        "tier holds": (lookup.tier_keys, tiering.tier_copies(0)),
        "jobs not run": ([(j.kind, j.keys) for j in lookup.pending_jobs()],
                         [(s.job.kind, s.job.keys) for s in _unrun(tiering)]),
        "polled this step": (lookup.polled_this_step, tiering.polled_this_step),
        "promotions held": (lookup.promotions_held, tiering.promotions_held),
    }
    return [f"{name}: lookup layer {a}, tiering layer {b}" for name, (a, b) in pairs.items()
            if a != b]


def drive(data, tiering_cls: type[TieringModel] = TieringModel) -> None:
    held = tuple(data.draw(st.lists(st.sampled_from(KEYS), unique=True), label="tier holds"))
    lookup = TieredLookupModel(num_chunks=len(KEYS) + 1, secondary="memory", preloaded=held)
    tiering = tiering_cls(len(KEYS) + 1, 1, (TierSpec("tier", request_level=False,
                                                      polled=False, detector=False,
                                                      copies=held),))
    tiering.on_new_request(REQ)
    batches: list[tuple[int, ...]] = []
    for _ in range(data.draw(st.integers(1, 40), label="calls")):
        unrun = lookup.pending_jobs()
        actions = ["prepare_store", "lookup", "on_schedule_end", "reset_cache"]
        actions += ["complete_store"] * bool(batches) + ["run_job"] * bool(unrun)
        actions += ["on_reset_flushed"] * lookup.promotions_held
        action = data.draw(st.sampled_from(actions), label="call")
        if action == "prepare_store":
            keys = tuple(data.draw(st.lists(st.sampled_from(KEYS), min_size=1, max_size=3,
                                            unique=True), label="keys"))
            stored = lookup.prepare_store(keys)
            new = tiering.prepare_store(keys, REQ)
            assert stored is not None and stored.keys_to_store == new, (keys, stored, new)
            batches += [new] if new else []
        elif action == "complete_store":
            keys = batches.pop(data.draw(st.integers(0, len(batches) - 1), label="batch"))
            success = data.draw(st.booleans(), label="success")
            lookup.complete_store(keys, success)
            tiering.complete_store(keys, REQ, success)
        elif action == "lookup":
            key = data.draw(st.sampled_from(KEYS), label="key")
            said = lookup.lookup(key), tiering.lookup(key, REQ)
            assert said[0] == said[1], f"lookup({key}): lookup layer {said[0]}, tiering {said[1]}"
        elif action == "run_job":
            job = unrun[data.draw(st.integers(0, len(unrun) - 1), label="job")]
            job = next(j for j in unrun if (j.kind, j.keys) == (job.kind, job.keys))  # oldest
            failed = tuple(data.draw(st.lists(st.sampled_from(job.keys), unique=True,
                                              max_size=len(job.keys)), label="failed"))
            lookup.complete_job(job.job_id, failed)
            theirs = next(s.job for s in _unrun(tiering) if (s.job.kind, s.job.keys) == (
                job.kind, job.keys))
            tiering.run_job(0, theirs, JobOutcome(
                tuple(k for k in job.keys if k not in failed), not failed))
        elif action == "reset_cache":
            batches.clear()
            lookup.reset_cache()
            tiering.reset_cache()
        else:
            getattr(lookup, action)()
            getattr(tiering, action)()
        assert not (wrong := disagreements(lookup, tiering)), f"after {action}: {wrong}"


@given(st.data())
def test_the_layers_agree_where_both_apply(data):
    drive(data)


class _PollsLateTiering(TieringModel):
    """A tiering layer whose lookups never poll: finished jobs wait for the step's end."""

    def lookup(self, key, req):
        return self._answer(key, req)


def test_a_layer_that_polls_late_disagrees():
    # The check can fail: one layer's lookup no longer notices finished jobs first.
    with pytest.raises(AssertionError, match="polled this step|ref count|lookup"):
        given(st.data())(lambda data: drive(data, _PollsLateTiering))()
