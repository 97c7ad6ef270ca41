"""The ``vllm`` target's tiered lookup: the installed vLLM's real offload managers and the
connector's real ``_maximal_prefix_lookup`` / ``_sliding_window_lookup``, called unbound on a
stub ``self`` (``specs/vllm-drive.md`` sections 2 and 3).

- ``secondary="none"``: ``CPUOffloadingManager`` (LRU) alone.
- ``secondary="memory"`` / ``"probe"``: ``TieringOffloadingManager`` over a
  ``CPUPrimaryTierOffloadingManager`` (an anonymous mmap as its region) and one secondary tier
  that the harness plays, the way ``specs/tiered-lookup.md`` section 3 describes a tier: it
  holds byte copies, its jobs run only when ``complete_job`` says so (the manual job queue),
  and the "probe" variant answers RETRY until its existence probe is flushed at
  ``on_schedule_end``. The real code under test is vLLM's: polling, cascades and their pins,
  promotions, the reset hold, eviction. Every manager call holds ``manager.lock``.

The harness plays the GPU worker: a successful ``complete_store`` writes the key's bytes into
the chunk vLLM chose in ``prepare_store``; ``read_chunk`` reads the chunk the manager reports
for the key. Keys are our small integers; vLLM sees ``make_offload_key(i.to_bytes(8, "big"),
0)``. Private fields read here are tagged ``# vLLM 0.33.0:``.
"""

from __future__ import annotations

import contextlib
import mmap
from collections.abc import Sequence
from types import SimpleNamespace

import numpy as np

from models.tiered_lookup_values import Job, LookupResult, OffloadEvent, Scan, StoreOutput
from sim.errors import HarnessError, TargetUnavailable
from sim.vllm import release

CHUNK_WORDS = 4
CHUNK_BYTES = mmap.PAGESIZE


class _Region:
    """What ``CPUPrimaryTierOffloadingManager`` needs of a ``SharedOffloadRegion``."""

    def __init__(self, num_chunks: int):
        self.mm, self.n = mmap.mmap(-1, num_chunks * CHUNK_BYTES), num_chunks

    def create_kv_memoryview(self) -> memoryview:
        return memoryview(self.mm).cast("B", (self.n, CHUNK_BYTES))

    def cleanup(self) -> None:
        pass


def lookup_api():
    """``vllm.v1.kv_offload.base`` if it has PR #46363's ``LookupResult``; releases before it
    (``lookup -> bool | None``) are a skip with the reason, not a failure."""
    base = release.import_module("vllm.v1.kv_offload.base")
    if not hasattr(base, "LookupResult"):
        raise TargetUnavailable(
            f"vLLM {release.release()} predates LookupResult (PR #46363): the tiered-lookup "
            "adapter drives the 0.33.0 API; use vLLM 0.33.0 or later")
    return base


def _manual_tier_class():
    """A ``SecondaryTierManager`` whose jobs the test completes (defined on first use: the
    base class is vLLM's)."""
    base = release.import_module("vllm.v1.kv_offload.base")
    tiering = release.import_module("vllm.v1.kv_offload.tiering.base")

    class ManualTier(tiering.SecondaryTierManager):
        medium = base.Medium.CPU

        def __init__(self, view: memoryview, probe: bool):
            super().__init__(None, view, "manual")
            self.rows, self.probe = np.asarray(view), probe    # (num_chunks, bytes) uint8
            self.copies: dict[object, np.ndarray] = {}
            self.queued: dict[int, object] = {}           # job id -> TransferJob
            self.finished: list[object] = []
            self.probe_queue: list[object] = []
            self.probe_answer: dict[object, bool] = {}

        def lookup(self, key, req_context):
            if not self.probe:
                return base.LookupResult.HIT if key in self.copies else base.LookupResult.MISS
            if key in self.probe_answer:
                found = self.probe_answer.pop(key)
                return base.LookupResult.HIT if found else base.LookupResult.MISS
            if key not in self.probe_queue:
                self.probe_queue.append(key)
            return base.LookupResult.RETRY

        def submit_store(self, job_metadata) -> None:
            self.queued[job_metadata.job_id] = job_metadata

        def submit_load(self, job_metadata) -> None:
            self.queued[job_metadata.job_id] = job_metadata

        def complete(self, job_id: int) -> None:
            job = self.queued.pop(job_id)
            for key, chunk_id in zip(job.keys, job.chunk_ids, strict=True):
                if job.is_promotion:
                    self.rows[int(chunk_id)] = self.copies[key]
                else:
                    self.copies[key] = self.rows[int(chunk_id)].copy()
            self.finished.append(tiering.JobResult(job_id=job_id, success=True))

        def get_finished_jobs(self):
            done, self.finished = self.finished, []
            return done

        def on_new_request(self, req_context):
            return base.RequestOffloadingContext()

        def drain_jobs(self) -> None:
            for job_id in sorted(self.queued):
                self.complete(job_id)

        def has_pending_work(self) -> bool:
            return bool(self.queued)

        def on_schedule_end(self, context) -> None:
            for key in self.probe_queue:
                self.probe_answer[key] = key in self.copies
            self.probe_queue = []

    return ManualTier


class VllmTieredLookup:
    """The tiered-lookup port over vLLM's ``CPUOffloadingManager`` or
    ``TieringOffloadingManager``."""

    def __init__(self, num_chunks: int, secondary: str = "none"):
        self._base = lookup_api()
        connector = release.import_module(
            "vllm.distributed.kv_transfer.kv_connector.v1.offloading.scheduler")
        self.release = release.release()
        self.num_chunks = num_chunks
        self.secondary = secondary
        self._scheduler_cls = connector.OffloadingConnectorScheduler
        self.tier = None
        if secondary == "none":
            cpu = release.import_module("vllm.v1.kv_offload.cpu.manager")
            self.manager = self.primary = cpu.CPUOffloadingManager(num_chunks=num_chunks,
                                                                 enable_events=True)
            self._chunks = np.zeros((num_chunks, CHUNK_BYTES), dtype=np.uint8)
        elif secondary in ("memory", "probe"):
            manager = release.import_module("vllm.v1.kv_offload.tiering.manager")
            self.primary = manager.CPUPrimaryTierOffloadingManager(
                num_chunks=num_chunks, mmap_region=_Region(num_chunks), enable_events=True)
            view = self.primary.get_kv_memoryview()
            self._chunks = np.asarray(view)               # writable (num_chunks, bytes) uint8
            self.tier = _manual_tier_class()(view, probe=secondary == "probe")
            self.manager = manager.TieringOffloadingManager(self.primary, [self.tier])
        else:
            raise HarnessError(f"unknown secondary tier {secondary!r}")
        self._ctx = self._base.ReqContext(req_id="r0")
        with self._locked():
            self.manager.on_new_request(self._ctx)
        self._keys: dict[int, object] = {}
        self._ints: dict[object, int] = {}
        self._store_chunk: dict[int, int] = {}      # pending key -> chunk id being written

    def _locked(self):
        return self.manager.lock if self.tier is not None else contextlib.nullcontext()

    # -- keys -------------------------------------------------------------------------------

    def _key(self, i: int):
        if i not in self._keys:
            key = self._base.make_offload_key(i.to_bytes(8, "big"), 0)
            self._keys[i], self._ints[key] = key, i
        return self._keys[i]

    def _vkeys(self, keys: Sequence[int]) -> list:
        return [self._key(i) for i in keys]

    def _chunk(self, i: int):
        return self.primary._policy.get(self._key(i))    # vLLM 0.33.0: chunks in the policy

    # -- observables ------------------------------------------------------------------------

    @property
    def num_free_chunks(self) -> int:
        return self.primary._get_num_free_chunks()       # vLLM 0.33.0: private helper

    def ref_cnt(self, key: int) -> int | None:
        chunk = self._chunk(key)
        return None if chunk is None else int(chunk.ref_cnt)

    def read_chunk(self, key: int) -> int | None:
        chunk = self._chunk(key)
        if chunk is None or chunk.ref_cnt < 0:
            return None
        row = _words(self._chunks[int(chunk.chunk_id)])
        owner = (row[0] - 1) // CHUNK_WORDS
        return owner if owner >= 0 and row == _payload(owner) else -1

    def pending_jobs(self) -> tuple[Job, ...]:
        if self.tier is None:
            return ()
        return tuple(Job(j, "promote" if job.is_promotion else "store",
                         tuple(self._ints[k] for k in job.keys))
                     for j, job in sorted(self.tier.queued.items()))

    def secondary_keys(self) -> tuple[int, ...]:
        return () if self.tier is None else tuple(sorted(self._ints[k] for k in self.tier.copies))

    # -- the manager's API ------------------------------------------------------------------

    def prepare_store(self, keys: Sequence[int]) -> StoreOutput | None:
        with self._locked():
            out = self.manager.prepare_store(self._vkeys(keys), self._ctx)
        if out is None:
            return None
        stored = tuple(self._ints[k] for k in out.keys_to_store)
        for i, chunk_id in zip(stored, out.store_spec.block_ids, strict=True):
            self._store_chunk[i] = int(chunk_id)
        return StoreOutput(stored, tuple(self._ints[k] for k in out.evicted_keys))

    def complete_store(self, keys: Sequence[int], success: bool = True) -> None:
        for i in keys:
            chunk_id = self._store_chunk.pop(i, None)
            if success and chunk_id is not None and self.ref_cnt(i) == -1:
                self._chunks[chunk_id, :8 * CHUNK_WORDS] = np.frombuffer(
                    _bytes(_payload(i)), dtype=np.uint8)                       # GPU copy
        with self._locked():
            self.manager.complete_store(self._vkeys(keys), self._ctx, success=success)

    def take_events(self) -> list[OffloadEvent]:
        with self._locked():
            events = list(self.manager.take_events())
        return [OffloadEvent(tuple(self._ints[k] for k in e.keys), bool(e.removed))
                for e in events]

    def prepare_load(self, keys: Sequence[int]) -> None:
        with self._locked():
            self.manager.prepare_load(self._vkeys(keys), self._ctx)

    def complete_load(self, keys: Sequence[int]) -> None:
        with self._locked():
            self.manager.complete_load(self._vkeys(keys), self._ctx)

    def touch(self, keys: Sequence[int]) -> None:
        with self._locked():
            self.manager.touch(self._vkeys(keys), self._ctx)

    def lookup(self, key: int) -> LookupResult:
        with self._locked():
            return LookupResult[self.manager.lookup(self._key(key), self._ctx).name]

    def on_schedule_end(self) -> None:
        with self._locked():
            self.manager.on_schedule_end(
                self._base.ScheduleEndContext(new_req_ids=(), preempted_req_ids=()))

    def complete_job(self, job_id: int) -> None:
        if self.tier is None:
            raise HarnessError("the primary tier alone has no secondary jobs")
        self.tier.complete(job_id)

    def reset_cache(self) -> None:
        self._store_chunk.clear()
        with self._locked():
            self.manager.reset_cache()

    def on_reset_flushed(self) -> None:
        with self._locked():
            self.manager.on_reset_flushed()

    # -- the connector's lookups, vLLM's own code on a stub self ----------------------------

    def _stub(self, made: list[tuple[int, LookupResult]]) -> SimpleNamespace:
        def lookup(key, ctx):
            answer = self.manager.lookup(key, ctx)
            made.append((self._ints[key], LookupResult[answer.name]))
            return answer
        return SimpleNamespace(
            manager=SimpleNamespace(lookup=lookup),
            _events_tracker=SimpleNamespace(record_lookup=lambda req, g, idx, key: None))

    def maximal_prefix_lookup(self, keys: Sequence[int]) -> Scan:
        made: list[tuple[int, LookupResult]] = []
        with self._locked():
            result = self._scheduler_cls._maximal_prefix_lookup(
                self._stub(made), self._vkeys(keys), self._ctx, None, None, 0)
        return _scan(result, made)

    def sliding_window_lookup(self, keys: Sequence[int], window: int,
                              initial_window: int | None = None) -> Scan:
        made: list[tuple[int, LookupResult]] = []
        with self._locked():
            result = self._scheduler_cls._sliding_window_lookup(
                self._stub(made), self._vkeys(keys), window, self._ctx, initial_window)
        return _scan(result, made)


def _payload(key: int) -> list[int]:
    base = key * CHUNK_WORDS + 1
    return list(range(base, base + CHUNK_WORDS))


def _bytes(words: list[int]) -> bytes:
    return b"".join(w.to_bytes(8, "little") for w in words)


def _words(chunk) -> list[int]:
    raw = chunk[:8 * CHUNK_WORDS].tobytes()
    return [int.from_bytes(raw[8 * i:8 * i + 8], "little") for i in range(CHUNK_WORDS)]


def _scan(result: int | None, made: list[tuple[int, LookupResult]]) -> Scan:
    return Scan(result, tuple(k for k, _ in made), tuple(a for _, a in made))


def make_tiered_lookup(num_chunks: int, secondary: str = "none") -> VllmTieredLookup:
    return VllmTieredLookup(num_chunks, secondary)
