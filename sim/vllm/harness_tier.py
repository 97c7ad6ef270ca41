"""The one secondary tier the harness plays under vLLM's ``TieringOffloadingManager``
(``docs/specs/tiered-lookup.md``, "How the vllm target drives vLLM"), for the tiered-lookup
target (``tiered_lookup.py``) and the tiered lookup's tiering layer
(``tiered_lookup_tiering.py``).

It holds copies (byte rows when it keeps bytes, bare keys otherwise) and runs a job only when
the harness says (``finish``). Options: ``probe`` (lookups answer RETRY until the probe is
flushed at ``on_schedule_end``), ``host`` (records each call in the host's key numbers,
counts lookups into its stats, serves the peers queued in ``peers`` through the
``ParentManager``, notes polls the manager must not make in ``host.poll_faults``),
``request_level`` (its ``on_new_request`` policy), ``detector`` (a back-pressure detector
that follows the stores fed to it). The class is built on first use and cached: its base is
vLLM's, whose abstract method names changed across releases.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from models.tiered_lookup_values import LookupResult
from sim.vllm import tiered_lookup_compat

TIER_LOOKUPS = "lch:tier_lookups"     # the counter of lookups a recording tier was asked


class _Tier:
    """The methods of the harness's tier; ``tier_class`` puts vLLM's base under them."""

    def __init__(self, view: memoryview, name: str, *, released: list[str],
                 released_as: str | None = None, keep_bytes: bool = True, probe: bool = False,
                 host: Any = None, source: Any = None, medium: Any = None, copies=(),
                 polled: bool = False, request_level: bool = False, detector: bool = False,
                 stats_when_empty: bool = False):
        detectors = (_detector_class()(),) if detector else ()
        super().__init__(None, view, name, *detectors)
        self.name, self.released, self.released_as = name, released, released_as or name
        self.host, self.probe, self.request_level = host, probe, request_level
        self.source, self.medium = source, medium
        self.tolerates_off_thread_polling = polled
        self.stats_when_empty = stats_when_empty   # an empty payload, not None (both: nothing)
        self.rows = np.asarray(view) if keep_bytes else None   # (num_chunks, bytes) uint8
        self.copies: dict[object, np.ndarray | None] = dict.fromkeys(copies)
        self.queued: dict[int, object] = {}           # job id -> TransferJob
        self.finished: list[object] = []
        self.probe_queue: list[object] = []
        self.probe_answer: dict[object, bool] = {}
        self.touches: list[list] = []
        self.calls: list[tuple] = []
        self.peers: list[tuple[int, ...]] = []
        self.answers: list[tuple] = []
        self.events: list = []
        self.lookups = self.polls = 0
        self.serving = False                          # inside serve_external_requests
        self.on_poll = self.on_shutdown = None        # hooks (the poll-loop tests)
        self.poll_error: Exception | None = None
        self.shutdown_error: Exception | None = None

    @property
    def cache_hit_source(self):
        return self.source

    def _record(self, *call) -> None:
        if self.host is not None:
            self.calls.append(call)

    def lookup(self, key, req_context):
        base = tiered_lookup_compat.offload_base()
        if self.host is not None:
            self._record("lookup", req_context.req_id, self.host.int(key))
            self.lookups += 1
        if not self.probe:
            return tiered_lookup_compat.tier_answer(base, key in self.copies)
        if key in self.probe_answer:
            return tiered_lookup_compat.tier_answer(base, self.probe_answer.pop(key))
        if key not in self.probe_queue:
            self.probe_queue.append(key)
        return tiered_lookup_compat.tier_answer(base, None)

    def _submit(self, kind: str, job) -> None:
        if self.host is not None:
            self._record(kind, job.req_context.req_id, self.host.ints(job.keys))
        self.queued[job.job_id] = job

    def submit_store(self, job_metadata) -> None:
        self._submit("submit_store", job_metadata)

    def submit_load(self, job_metadata) -> None:
        self._submit("submit_load", job_metadata)

    def finish(self, job_id: int, ok, success: bool | None = None,
               transfer_bytes: int | None = None) -> None:
        """Run the job: copy its keys in ``ok``; ``success`` None: the job succeeds when all
        its keys copied (else as told, with ``transfer_bytes``)."""
        job = self.queued.pop(job_id)
        copied = [key for key in job.keys if key in ok]
        if self.rows is not None:
            chunk_ids = tiered_lookup_compat.job_chunk_ids(job)
            for key, chunk_id in zip(job.keys, chunk_ids, strict=True):
                if key not in ok:
                    continue
                if job.is_promotion:
                    self.rows[int(chunk_id)] = self.copies[key]
                else:
                    self.copies[key] = self.rows[int(chunk_id)].copy()
        elif not job.is_promotion:
            self.copies.update(dict.fromkeys(copied))
        if self.host is not None and copied and not job.is_promotion:
            self.events.append(tiered_lookup_compat.tier_event(copied, self.medium, self.name))
        tiering = tiered_lookup_compat.tiering_base()
        self.finished.append(
            tiered_lookup_compat.job_result(tiering, job_id, copied, len(job.keys))
            if success is None else
            tiered_lookup_compat.told_job_result(tiering, job_id, success, copied,
                                                 transfer_bytes))

    def complete(self, job_id: int, failed=()) -> None:
        """Copy the job's keys, except those in ``failed`` (an I/O error on them)."""
        self.finish(job_id, [k for k in self.queued[job_id].keys if k not in failed])

    def get_finished_jobs(self):
        self.polls += 1
        host = self.host
        if host is not None and self.serving:
            host.poll_faults.append(f"{self.name} polled from inside its own "
                                    "serve_external_requests")
        if host is not None and host.in_round and not self.tolerates_off_thread_polling:
            host.poll_faults.append(f"{self.name} polled by a tier-poll round, "
                                    "off the scheduler thread, without opting in")
        if self.on_poll is not None:
            self.on_poll(self)
        if self.poll_error is not None:
            raise self.poll_error
        done, self.finished = self.finished, []
        return done

    get_finished = get_finished_jobs      # vLLM 0.22.x: the poll's name

    def touch(self, keys, req_context) -> None:
        self.touches.append(list(keys))
        if self.host is not None:
            self._record("touch", req_context.req_id, self.host.ints(keys))

    def on_new_request(self, req_context):
        self._record("on_new_request", req_context.req_id)
        return tiered_lookup_compat.request_offloading_context(self.request_level)

    def on_request_finished(self, req_context) -> None:
        self._record("on_request_finished", req_context.req_id)

    def serve_external_requests(self, parent) -> None:
        self.serving = True
        try:
            self._serve(parent)
        finally:
            self.serving = False

    def _serve(self, parent) -> None:
        base = tiered_lookup_compat.offload_base()
        peers, self.peers = self.peers, []
        for keys in peers:
            ctx = base.ReqContext(req_id=self.host.peer_id())
            parent.on_new_request(ctx)
            vkeys = [self.host.key(k) for k in keys]
            answers = [parent.lookup(k, ctx) for k in vkeys]
            hits = [k for k, a in zip(vkeys, answers, strict=True)
                    if a is base.LookupResult.HIT]
            if hits:
                job = parent.create_store_job(hits, ctx)
                self.queued[job.job_id] = job
            # As told: an answer that is no LookupResult is recorded raw, for the check to name.
            self.answers.append((ctx.req_id, tuple(
                LookupResult[a.name] if hasattr(a, "name") else a for a in answers)))
            parent.on_request_finished(ctx)

    def on_schedule_end(self, context=None) -> None:
        self._record("on_schedule_end")
        for key in self.probe_queue:
            self.probe_answer[key] = key in self.copies
        self.probe_queue = []

    def drain_jobs(self) -> None:
        for job_id in sorted(self.queued):
            self.finish(job_id, self.queued[job_id].keys,
                        None if self.host is None else True)

    def has_pending_work(self) -> bool:
        return bool(self.queued)

    def take_events(self):
        done, self.events = self.events, []
        return done

    def get_stats(self):
        if self.host is None:
            return super().get_stats()
        stats = tiered_lookup_compat.connector_stats()
        if self.lookups:
            stats.increase_counter(TIER_LOOKUPS, self.lookups, (self.name,))
        self.lookups = 0
        return stats if self.stats_when_empty or not stats.is_empty() else None

    def config_info(self):
        return {"lch_tier": self.name} if self.host is not None else super().config_info()

    def shutdown(self) -> None:
        if self.on_shutdown is not None:
            self.on_shutdown(self)
        self.released.append(self.released_as)
        if self.shutdown_error is not None:
            raise self.shutdown_error


@functools.cache
def tier_class() -> type:
    """The harness's ``SecondaryTierManager`` for the installed vLLM (built once)."""
    base = tiered_lookup_compat.tiering_base().SecondaryTierManager
    return type("HarnessTier", (_Tier, base), {"__doc__": _Tier.__doc__})


class _Following:
    """Under pressure from a failed store until a store completes; its 'EMA' is the bytes
    fed to it, so the manager's feeding shows in the stats."""

    def __init__(self):
        super().__init__(tiered_lookup_compat.backpressure_module().DropStorePolicy())
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


@functools.cache
def _detector_class() -> type:
    base = tiered_lookup_compat.backpressure_module().BackpressureDetector
    return type("FollowingDetector", (_Following, base), {"__doc__": _Following.__doc__})
