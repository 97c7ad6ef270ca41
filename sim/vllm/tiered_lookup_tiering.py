"""The tiered lookup's tiering layer on vLLM: the real ``TieringOffloadingManager`` (0.33.0 on)
over a real ``CPUPrimaryTierOffloadingManager`` and two secondary tiers the harness plays
(``harness_tier``, recording), for the tiering machine
(``properties/tiered_lookup_tiering_machine.py``). What differs between releases is asked of
``tiered_lookup_compat`` (hit sources, media, a chunk's record).

A recording tier (``host=``) holds byte-less copies (bare keys), runs a job only when the test says
(``run_job``), records every call the manager makes on it, serves the peer requests the test
queues through the ``ParentManager`` it is handed, answers ``on_new_request`` with its
policy, reports its own stats (lookups asked) and config facts, and may carry a back-pressure
detector: a real ``BackpressureDetector`` subclass whose pressure follows the stores the
manager feeds it (a failed store: under pressure; a completed one: not), with vLLM's real
``DropStorePolicy`` dropping every cascade while under pressure. The tier-poll thread is
off (interval 0): the machine runs a round itself, as the thread would, holding the lock.

A tier also notes each poll (``get_finished_jobs``) that breaks what the manager promises
its tiers (``poll_faults``): a poll from inside the tier's own ``serve_external_requests``,
or a poll during a tier-poll round of a tier that did not opt in to off-thread polling
(``tolerates_off_thread_polling``); the round stands for the thread.
"""

from __future__ import annotations

import mmap
from collections.abc import Sequence

from models.tiered_lookup_values import JobOutcome, LookupResult, TierJob
from sim.vllm import harness_tier, release, tiered_lookup_compat
from sim.vllm.harness_tier import TIER_LOOKUPS
from sim.vllm.tiered_lookup import _Region

CHUNK_BYTES = mmap.PAGESIZE
# Our metric names for vLLM's (the model's vocabulary).
_TIERING_NAMES = {
    "LOOKUP_SYNC_DELAY": "lookup_sync_delay", "READ_BYTES": "read_bytes",
    "WRITE_BYTES": "write_bytes", "PROMOTION_JOB_FAILURES": "promotion_failures",
    "CASCADE_JOB_FAILURES": "cascade_failures", "CHUNK_QUERIES": "queries",
    "CHUNK_HITS": "hits", "PRIMARY_WRITE_USAGE_PERC": "primary_write_usage",
    "PRIMARY_READ_USAGE_PERC": "primary_read_usage",
    "PROMOTION_ALLOCATION_FAILURES": "allocation_failures",
    "ACTIVE_PROMOTION_JOBS": "active_promotions", "ACTIVE_CASCADE_JOBS": "active_cascades",
    "BACKPRESSURE_STORE_LATENCY_EMA": "bp_ema",
    "BACKPRESSURE_STORES_DROPPED": "bp_stores_dropped",
    "BACKPRESSURE_BLOCKS_DROPPED": "bp_blocks_dropped",
    "PROMOTION_LATENCY": "promotion_latency",
    # vLLM >=0.34.0: chunks of failed promotions whose release a tier deferred, and how long.
    "DEFERRED_RELEASE_CHUNKS": "deferred_release_chunks",
    "DEFERRED_RELEASE_HOLD": "deferred_release_hold"}
_CPU_NAMES = {"CPU_CACHE_USAGE_PERC": "usage", "CPU_CACHE_WRITE_USAGE_PERC": "write",
              "CPU_CACHE_READ_USAGE_PERC": "read", "CPU_ALLOCATION_SIZE": "allocation"}
# Histograms whose samples are durations: compared by count, each sample checked to be one.
DURATIONS = ("lookup_sync_delay", "promotion_latency", "deferred_release_hold")
DURATION_MAX_S = 60.0


class VllmTieringWorld:
    """The manager, its primary and two recording tiers; keys are our small integers."""

    def __init__(self, num_chunks: int, tiers: Sequence, tier_poll_interval_s: float = 0):
        manager = tiered_lookup_compat.tier_facing_manager_module()
        self._base = tiered_lookup_compat.offload_base()
        self._tiering = tiered_lookup_compat.tiering_base()
        self.num_chunks = num_chunks
        self.released: list[str] = []
        self.poll_faults: list[str] = []      # tier polls the manager must not make
        self.in_round = False                 # inside poll_round (the thread's stand-in)
        self._keys: dict[int, object] = {}
        self._ints: dict[object, int] = {}
        self._peers = 0
        self.primary = manager.CPUPrimaryTierOffloadingManager(
            num_chunks=num_chunks, mmap_region=_Region(num_chunks, self.released),
            enable_events=False)
        view = self.primary.get_kv_memoryview()
        cls = harness_tier.tier_class()
        # Distinct sources: a hit's source tells which tier supplied it.
        self.tiers = [cls(view, spec.name, released=self.released, keep_bytes=False,
                          host=self, source=tiered_lookup_compat.tier_hit_source(source),
                          medium=tiered_lookup_compat.tier_medium(medium),
                          copies=[self.key(k) for k in sorted(spec.copies)], polled=spec.polled,
                          request_level=spec.request_level, detector=spec.detector,
                          stats_when_empty=i == 1)
                      for i, (spec, source, medium)
                      in enumerate(zip(tiers, ("DISK", "P2P"), ("CPU", "STORAGE"),
                                       strict=False))]
        self.manager = tiered_lookup_compat.polled_tiering_manager(
            manager, self.primary, self.tiers, tier_poll_interval_s)
        self.model_options = tiered_lookup_compat.tiering_semantics(release.release())
        # Calls the machine may make that this release lacks: name -> reason.
        self.missing_calls = tiered_lookup_compat.missing_touch(self.manager)
        self._contexts: dict[str, object] = {}
        self.new_reqs: list[str] = []
        self.last_evicted: tuple[int, ...] = ()     # what the last prepare_store evicted

    # -- keys and ids ---------------------------------------------------------------------

    def key(self, i: int):
        if i not in self._keys:
            self._keys[i] = self._base.make_offload_key(i.to_bytes(8, "big"), 0)
            self._ints[self._keys[i]] = i
        return self._keys[i]

    def int(self, key) -> int:
        return self._ints[key]

    def ints(self, keys) -> tuple[int, ...]:
        return tuple(self._ints[k] for k in keys)

    def peer_id(self) -> str:
        self._peers += 1
        return f"p{self._peers - 1}"

    # -- the manager's API, as the connector calls it (holding the lock) -------------------

    def on_new_request(self, req: str, everywhere: bool = True) -> str:
        ctx = self._base.ReqContext(req_id=req)
        if not everywhere:      # loads from CPU tiers only: tier 0 (CPU), not 1 (STORAGE)
            ctx.load_tier_filter = self._base.TierFilter(
                matchers=(self._base.TierMatcher(medium=self._base.Medium.CPU),))
        self._contexts[req] = ctx
        self.new_reqs.append(req)
        with self.manager.lock:
            policy = self.manager.on_new_request(ctx).policy
        return "request" if policy == self._base.OffloadPolicy.REQUEST_LEVEL else "chunk"

    def prepare_store(self, keys, req: str) -> tuple[int, ...] | None:
        with self.manager.lock:
            out = self.manager.prepare_store([self.key(k) for k in keys], self._contexts[req])
        if out is None:
            return None
        self.last_evicted = self.ints(out.evicted_keys)
        return self.ints(out.keys_to_store)

    def complete_store(self, keys, req: str, success: bool) -> None:
        with self.manager.lock:
            self.manager.complete_store([self.key(k) for k in keys], self._contexts[req],
                                        success)

    def lookup(self, key: int, req: str) -> LookupResult:
        with self.manager.lock:
            return LookupResult[self.manager.lookup(self.key(key), self._contexts[req]).name]

    def load_source(self, key: int, req: str) -> int | None:
        with self.manager.lock:
            source = self.manager.get_load_source(self.key(key), self._contexts[req])
        for i, tier in enumerate(self.tiers):
            if source == tier.source:
                return i
        return None

    def touch(self, keys, req: str) -> None:
        with self.manager.lock:
            self.manager.touch([self.key(k) for k in keys], self._contexts[req])

    def on_request_finished(self, req: str) -> None:
        with self.manager.lock:
            self.manager.on_request_finished(self._contexts[req])

    def on_schedule_end(self) -> tuple[str, ...]:
        new, self.new_reqs = tuple(self.new_reqs), []
        context = self._base.ScheduleEndContext(new_req_ids=new, preempted_req_ids=())
        with self.manager.lock:
            self.manager.on_schedule_end(context)
        return new

    def take_events(self) -> list[tuple[str, tuple[int, ...]]]:
        with self.manager.lock:
            events = list(self.manager.take_events())
        return [(e.ownership, self.ints(e.keys)) for e in events]

    def poll_round(self) -> None:
        """One round of the tier-poll thread: ``poll_tiers`` under the lock."""
        with self.manager.lock:
            self.in_round = True
            try:
                self.manager.poll_tiers()
            finally:
                self.in_round = False

    def reset_cache(self) -> None:
        with self.manager.lock:
            self.manager.reset_cache()

    def on_reset_flushed(self) -> None:
        with self.manager.lock:
            self.manager.on_reset_flushed()

    def has_pending_work(self) -> bool:
        with self.manager.lock:
            return bool(self.manager.has_pending_work())

    def shutdown(self) -> None:
        self.manager.shutdown()

    # -- the tiers ------------------------------------------------------------------------

    def run_job(self, i: int, job: TierJob, outcome: JobOutcome) -> None:
        tier = self.tiers[i]
        for job_id, real in sorted(tier.queued.items()):
            if self._job(real) == job:
                with self.manager.lock:
                    tier.finish(job_id, {self.key(k) for k in outcome.ok_keys},
                                outcome.success, outcome.transfer_bytes)
                return
        raise AssertionError(f"tier {i} holds no job {job}")

    def peer_request(self, i: int, keys) -> None:
        """A peer asks tier ``i`` for ``keys``: the tier serves it at its next service."""
        self.tiers[i].peers.append(tuple(keys))

    def jobs(self, i: int) -> list[TierJob]:
        return sorted(self._job(j) for j in self.tiers[i].queued.values())

    def _job(self, job) -> TierJob:
        return TierJob("promote" if job.is_promotion else "store", self.ints(job.keys),
                       job.req_context.req_id)

    def ref_counts(self) -> dict[int, int]:
        out = {}
        for i, key in sorted(self._keys.items()):
            chunk = tiered_lookup_compat.chunk_status(self.primary, key)
            if chunk is not None:
                out[i] = int(chunk.ref_cnt)
        return out

    # -- reports --------------------------------------------------------------------------

    def get_stats(self) -> dict[tuple, object]:
        """The payload in the model's vocabulary; duration samples are checked to be durations
        (non-negative, under a minute) and counted."""
        cpu = release.import_module("vllm.v1.kv_offload.cpu.common").CPUOffloadingMetrics
        metrics = self._tiering.TieringOffloadingMetrics
        # A release without a metric (0.33.0: no deferred release) reports none of it.
        names = {getattr(metrics, n): ours for n, ours in _TIERING_NAMES.items()
                 if hasattr(metrics, n)}
        names.update({getattr(cpu, n): ours for n, ours in _CPU_NAMES.items()})
        names[TIER_LOOKUPS] = "tier_lookups"
        with self.manager.lock:
            stats = self.manager.get_stats()
        if stats is None:
            return {}
        _, values = stats.metric_sections()
        out: dict[tuple, object] = {}
        for name, series in values.items():
            ours = names.get(name, name)
            for labels, value in series.items():
                if ours in DURATIONS:
                    bad = [v for v in value if not 0 <= v < DURATION_MAX_S]
                    assert not bad, f"{ours}{labels}: samples {bad} are not durations"
                    value = len(value)
                elif isinstance(value, list):
                    value = tuple(value)
                out[(ours, *labels)] = value
        return out

    def config_info(self) -> list[dict]:
        with self.manager.lock:
            return [dict(m) for m in self.manager.config_info()]

    def primary_info(self) -> dict:
        (info,) = self.primary.config_info()
        return dict(info)
