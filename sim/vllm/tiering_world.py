"""vLLM 0.33.0's real ``TieringOffloadingManager`` over a real ``CPUPrimaryTierOffloadingManager``
and two secondary tiers the harness plays (``RecordingTier``), for the tiering machine.

A recording tier holds byte-less copies (a set of keys), runs a job only when the test says
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

from models.tiered_lookup_values import LookupResult
from models.tiering_manager import JobOutcome, TierJob
from sim.vllm import release, tiered_lookup_compat
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
    "PROMOTION_LATENCY": "promotion_latency"}
_CPU_NAMES = {"CPU_CACHE_USAGE_PERC": "usage", "CPU_CACHE_WRITE_USAGE_PERC": "write",
              "CPU_CACHE_READ_USAGE_PERC": "read", "CPU_ALLOCATION_SIZE": "allocation"}
TIER_LOOKUPS = "lch:tier_lookups"
# Histograms whose samples are durations: compared by count, each sample checked to be one.
DURATIONS = ("lookup_sync_delay", "promotion_latency")
DURATION_MAX_S = 60.0


def _classes(world):
    base = release.import_module("vllm.v1.kv_offload.base")
    tiering = release.import_module("vllm.v1.kv_offload.tiering.base")
    bp = release.import_module("vllm.v1.kv_offload.tiering.backpressure")
    metrics = release.import_module(
        "vllm.distributed.kv_transfer.kv_connector.v1.offloading.metrics")
    sources = release.import_module("vllm.v1.metrics.cache_hit_source").CacheHitSource

    class FollowingDetector(bp.BackpressureDetector):
        """Under pressure from a failed store until a store completes; its 'EMA' is the bytes
        fed to it, so the manager's feeding shows in the stats."""

        def __init__(self):
            super().__init__(bp.DropStorePolicy())
            self.pressure, self.fed = False, 0

        def on_store_completed(self, elapsed_s, num_bytes):
            self.pressure, self.fed = False, self.fed + num_bytes

        def on_store_failed(self):
            self.pressure = True

        def is_under_pressure(self):
            return self.pressure

        def reset(self):
            self.pressure, self.fed = False, 0

        @property
        def stats(self):
            return {"store_latency_ema": float(self.fed)}

    class RecordingTier(tiering.SecondaryTierManager):
        def __init__(self, view, i, spec):
            super().__init__(None, view, spec.name,
                             FollowingDetector() if spec.detector else None)
            self.i, self.spec, self.world = i, spec, world
            # distinct sources: a hit's source tells which tier supplied it
            self.source = (sources.DISK, sources.P2P)[i]
            self.medium = (base.Medium.CPU, base.Medium.STORAGE)[i]
            self.tolerates_off_thread_polling = spec.polled
            self.copies: set = {world.key(k) for k in spec.copies}
            self.queued: dict[int, object] = {}
            self.finished: list = []
            self.calls: list[tuple] = []
            self.peers: list[tuple[int, ...]] = []
            self.answers: list[tuple] = []
            self.lookups = 0
            self.events: list = []
            self.poll_error: Exception | None = None
            self.on_poll = None         # called at each poll (the loop tests hook it)
            self.polls = 0
            self.serving = False        # inside serve_external_requests
            self.shutdown_error: Exception | None = None
            self.on_shutdown = None

        @property
        def cache_hit_source(self):
            return self.source

        def lookup(self, key, req_context):
            self.calls.append(("lookup", req_context.req_id, world.int(key)))
            self.lookups += 1
            return base.LookupResult.HIT if key in self.copies else base.LookupResult.MISS

        def submit_store(self, job):
            self.calls.append(("submit_store", job.req_context.req_id, world.ints(job.keys)))
            self.queued[job.job_id] = job

        def submit_load(self, job):
            self.calls.append(("submit_load", job.req_context.req_id, world.ints(job.keys)))
            self.queued[job.job_id] = job

        def run(self, job_id, outcome: JobOutcome):
            job = self.queued.pop(job_id)
            ok = {world.key(k) for k in outcome.ok_keys}
            if not job.is_promotion:
                self.copies |= ok
                stored = [k for k in job.keys if k in ok]
                if stored:
                    self.events.append(base.OffloadingEvent(
                        keys=stored, medium=self.medium, removed=False,
                        ownership=self.spec.name))
            successful = None if outcome.success else [k for k in job.keys if k in ok]
            self.finished.append(tiering.JobResult(
                job_id=job_id, success=outcome.success, successful_keys=successful,
                transfer_bytes=outcome.transfer_bytes))

        def get_finished_jobs(self):
            self.polls += 1
            if self.serving:
                world.poll_faults.append(f"{self.spec.name} polled from inside its own "
                                         "serve_external_requests")
            if world.in_round and not self.tolerates_off_thread_polling:
                world.poll_faults.append(f"{self.spec.name} polled by a tier-poll round, "
                                         "off the scheduler thread, without opting in")
            if self.on_poll is not None:
                self.on_poll(self)
            if self.poll_error is not None:
                raise self.poll_error
            done, self.finished = self.finished, []
            return done

        def touch(self, keys, req_context):
            self.calls.append(("touch", req_context.req_id, world.ints(keys)))

        def on_new_request(self, req_context):
            self.calls.append(("on_new_request", req_context.req_id))
            policy = (base.OffloadPolicy.REQUEST_LEVEL if self.spec.request_level
                      else base.OffloadPolicy.CHUNK_LEVEL)
            return base.RequestOffloadingContext(policy=policy)

        def on_request_finished(self, req_context):
            self.calls.append(("on_request_finished", req_context.req_id))

        def serve_external_requests(self, parent):
            self.serving = True
            try:
                self._serve(parent)
            finally:
                self.serving = False

        def _serve(self, parent):
            peers, self.peers = self.peers, []
            for keys in peers:
                ctx = base.ReqContext(req_id=world.peer_id())
                parent.on_new_request(ctx)
                vkeys = [world.key(k) for k in keys]
                answers = [parent.lookup(k, ctx) for k in vkeys]
                hits = [k for k, a in zip(vkeys, answers, strict=True)
                        if a is base.LookupResult.HIT]
                if hits:
                    job = parent.create_store_job(hits, ctx)
                    self.queued[job.job_id] = job
                self.answers.append((ctx.req_id, tuple(LookupResult[a.name] for a in answers)))
                parent.on_request_finished(ctx)

        def on_schedule_end(self, context):
            self.calls.append(("on_schedule_end",))

        def drain_jobs(self):
            for job_id in sorted(self.queued):
                job = self.queued[job_id]
                self.run(job_id, JobOutcome(world.ints(job.keys), True))

        def has_pending_work(self):
            return bool(self.queued)

        def take_events(self):
            done, self.events = self.events, []
            return done

        def get_stats(self):
            stats = metrics.OffloadingConnectorStats()
            if self.lookups:
                stats.increase_counter(TIER_LOOKUPS, self.lookups, (self.spec.name,))
            self.lookups = 0
            # An empty payload from one tier, None from the other: both mean nothing to add.
            return stats if self.i == 1 or not stats.is_empty() else None

        def config_info(self):
            return {"lch_tier": self.spec.name}

        def shutdown(self):
            if self.on_shutdown is not None:
                self.on_shutdown(self)
            world.released.append(self.spec.name)
            if self.shutdown_error is not None:
                raise self.shutdown_error

    return RecordingTier


class VllmTieringWorld:
    """The manager, its primary and two recording tiers; keys are our small integers."""

    def __init__(self, num_chunks: int, tiers: Sequence, tier_poll_interval_s: float = 0):
        self._base = release.import_module("vllm.v1.kv_offload.base")
        self._tiering = release.import_module("vllm.v1.kv_offload.tiering.base")
        manager = release.import_module("vllm.v1.kv_offload.tiering.manager")
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
        cls = _classes(self)
        self.tiers = [cls(view, i, spec) for i, spec in enumerate(tiers)]
        self.manager = manager.TieringOffloadingManager(
            self.primary, self.tiers, tier_poll_interval_s=tier_poll_interval_s)
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
        for tier in self.tiers:
            if source == tier.source:
                return tier.i
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
                    tier.run(job_id, outcome)
                return
        raise AssertionError(f"tier {i} holds no job {job}")

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
        names = {getattr(self._tiering.TieringOffloadingMetrics, n): ours
                 for n, ours in _TIERING_NAMES.items()}
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
