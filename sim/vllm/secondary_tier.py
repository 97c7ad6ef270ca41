"""The ``vllm`` target's secondary tier: vLLM's real ``FileSystemTierManager`` writing real
files in a temporary directory, and its ``ExampleSecondaryTierManager``, driven through the
``SecondaryTierManager`` API (``docs/specs/tiered-lookup.md``, "How the vllm target drives vLLM").

Made deterministic without changing vLLM's code paths:

- the tier is built with no I/O threads and its ``DualQueueThreadPool`` is replaced by
  ``ManualPool``, which holds each job's closures (vLLM's own ``batch_store_block`` /
  ``load_task``) until ``run_job`` runs them, catching an exception as a failed job the way
  the pool's worker does;
- the ``AsyncLookupManager``'s thread is stopped and its queue replaced by one that runs
  vLLM's own ``_worker`` body inline when ``flush()`` posts a batch;
- ``tiering/fs/io.py`` gets a ``FaultyOS`` as its ``os``: ``os.write`` / ``os.replace`` /
  ``os.readv`` fail when the machine armed a fault, and behave otherwise.

The harness plays the GPU worker (it writes a key's bytes into a primary chunk) and the rest
of the world (it deletes or truncates files behind the tier's back). Keys are our small
integers; vLLM sees ``make_offload_key(i.to_bytes(8, "big"), 0)``, so a file's name says its
key. The private fields it reaches go through ``secondary_tier_compat``.
"""

from __future__ import annotations

import mmap
import os
import queue
import shutil
import tempfile
import weakref
from collections.abc import Sequence

import numpy as np

from models.secondary_tier_values import (
    CHUNK_BYTES,
    JobDone,
    file_state,
    holder,
    payload,
)
from models.tiered_lookup_values import LookupResult
from sim.errors import HarnessError
from sim.faults import FaultyOS
from sim.vllm import release, secondary_tier_compat

PRESENT = "present"


class ManualPool:
    """A drop-in for ``DualQueueThreadPool`` whose jobs run when the test says."""

    def __init__(self) -> None:
        self.pending: dict[int, list] = {}
        self.finished: list[tuple[int, bool, float]] = []

    def enqueue_load(self, job_id, n_tasks, tasks) -> None:
        self.pending[job_id] = list(tasks)

    def enqueue_store(self, job_id, n_tasks, tasks) -> None:
        self.pending[job_id] = list(tasks)

    def run(self, job_id: int) -> None:
        ok = True
        for task in self.pending.pop(job_id):
            try:
                task()
            except Exception:   # noqa: BLE001 - the real pool's worker catches Exception too
                ok = False
        self.finished.append((job_id, ok, 0.0))

    def get_finished(self):
        done, self.finished = self.finished, []
        return done

    def wait_idle(self) -> None:
        for job_id in list(self.pending):
            self.run(job_id)

    def shutdown(self, wait: bool = True) -> None:
        self.pending.clear()


class _InlineQueue:
    """The lookup manager's queue: a posted batch is probed at once by vLLM's ``_worker``."""

    def __init__(self, lookups) -> None:
        self.lookups = lookups

    def put(self, batch) -> None:
        if batch is None:
            return
        feed = queue.SimpleQueue()
        feed.put(batch)
        feed.put(None)
        secondary_tier_compat.run_lookup_worker(self.lookups, feed, restore=self)

    put_nowait = put


def _spec():
    base = release.import_module("vllm.v1.kv_offload.base")
    config = release.import_module("vllm.v1.kv_offload.config")

    class MiniSpec(base.OffloadingSpec):
        def get_manager(self):
            raise NotImplementedError

        def get_worker(self, kv_caches):
            raise NotImplementedError

    return MiniSpec(config.OffloadingConfig(
        groups=(config.OffloadingGroupConfig(tokens_per_block=16, layer_names=("l0",),
                                             group_id=0),),
        worker_kv_bytes_per_block=CHUNK_BYTES, enable_kv_cache_events=False,
        extra_config={}, engine_id="e0",
        model=config.OffloadingModelConfig(name="tiny", dtype="float16"),
        cache=config.OffloadingCacheConfig(tokens_per_hash=16, blocks_per_chunk=1),
        parallel=config.OffloadingParallelConfig(
            rank=0, world_size=1, tp_size=1, pp_size=1, pcp_size=1, dcp_size=1,
            data_parallel_index=0, data_parallel_size=1, data_parallel_rank_local=None,
            is_parallelism_agnostic=True)))


class VllmSecondaryTier:
    """The secondary-tier port over vLLM's ``FileSystemTierManager`` or
    ``ExampleSecondaryTierManager``."""

    def __init__(self, num_chunks: int, tier: str = "fs", root: str | None = None):
        self._base = release.import_module("vllm.v1.kv_offload.base")
        self._tiering = release.import_module("vllm.v1.kv_offload.tiering.base")
        self.num_chunks, self.tier = num_chunks, tier
        # What this release meant where it changed on purpose: the model's options.
        self.model_options = secondary_tier_compat.model_semantics(release.release(), tier)
        self._mm = mmap.mmap(-1, num_chunks * CHUNK_BYTES)      # page-aligned: O_DIRECT
        view = memoryview(self._mm).cast("B", (num_chunks, CHUNK_BYTES))
        self._rows = np.asarray(view)
        self.os = FaultyOS()
        # ``root``: an existing directory (a restart after a crash), kept; else a fresh one.
        self.root = root or tempfile.mkdtemp(prefix="lch-vllm-fs-")
        self._cleanup = weakref.finalize(self, shutil.rmtree, self.root, True) if root is None \
            else weakref.finalize(self, lambda: None)
        if tier == "fs":
            io = release.import_module("vllm.v1.kv_offload.tiering.fs.io")
            fs = release.import_module("vllm.v1.kv_offload.tiering.fs.manager")
            io.os = self.os                        # the tier's I/O sees the faults
            self.mgr = fs.FileSystemTierManager(_spec(), view, "fs", root_dir=self.root,
                                                n_read_threads=0, n_write_threads=0)
            self.pool = secondary_tier_compat.replace_io_pool(self.mgr, ManualPool())
            lookups = secondary_tier_compat.lookup_manager(self.mgr)
            secondary_tier_compat.stop_lookup_thread(lookups, _InlineQueue(lookups))
        elif tier == "example":
            example = release.import_module("vllm.v1.kv_offload.tiering.example.manager")
            self.mgr = example.ExampleSecondaryTierManager(_spec(), view, "example")
            self.pool = None
        else:
            raise HarnessError(f"unknown tier {tier!r}; known: fs, example")
        self._requests = 0
        self._ctx = self._base.ReqContext(req_id="r0")
        self.mgr.on_new_request(self._ctx)

    def _key(self, i: int):
        return self._base.make_offload_key(i.to_bytes(8, "big"), 0)

    def _int(self, key) -> int:
        return int.from_bytes(self._base.get_offload_block_hash(key), "big")

    def _path(self, i: int) -> str:
        return self.mgr.file_mapper.get_file_name(self._key(i))

    # -- the harness plays the GPU worker and the world --------------------------------------

    def write_chunk(self, chunk: int, key: int) -> None:
        self._rows[chunk] = np.frombuffer(payload(key), dtype=np.uint8)

    def arm_fault(self, fault: str) -> None:
        self.os.arm(fault)

    def lose_file(self, key: int) -> None:
        if self.tier == "fs" and os.path.exists(self._path(key)):
            os.remove(self._path(key))

    def truncate_file(self, key: int) -> None:
        if self.tier == "fs" and os.path.exists(self._path(key)):
            os.truncate(self._path(key), CHUNK_BYTES // 2)

    # -- SecondaryTierManager -----------------------------------------------------------------

    def _job(self, job_id: int, keys: Sequence[int], chunks: Sequence[int], promotion: bool):
        return self._tiering.TransferJob(
            job_id=job_id, keys=[self._key(k) for k in keys],
            chunk_ids=np.asarray(chunks, dtype=np.int64), is_promotion=promotion,
            req_context=self._ctx)

    def submit_store(self, job_id: int, keys: Sequence[int], chunks: Sequence[int]) -> None:
        self.mgr.submit_store(self._job(job_id, keys, chunks, False))

    def submit_load(self, job_id: int, keys: Sequence[int], chunks: Sequence[int]) -> None:
        self.mgr.submit_load(self._job(job_id, keys, chunks, True))

    def run_job(self, job_id: int) -> None:
        if self.pool is None:
            raise HarnessError("the example tier runs its jobs when they are submitted")
        self.pool.run(job_id)

    def get_finished_jobs(self) -> tuple[JobDone, ...]:
        return tuple(JobDone(int(r.job_id), bool(r.success),
                             None if r.successful_keys is None
                             else tuple(self._int(k) for k in r.successful_keys))
                     for r in self.mgr.get_finished_jobs())

    def drain_jobs(self) -> None:
        self.mgr.drain_jobs()

    def lookup(self, key: int) -> LookupResult:
        return LookupResult[self.mgr.lookup(self._key(key), self._ctx).name]

    def on_schedule_end(self) -> None:
        self.mgr.on_schedule_end(self._base.ScheduleEndContext(new_req_ids=(),
                                                               preempted_req_ids=()))

    def on_request_finished(self) -> None:
        self.mgr.on_request_finished(self._ctx)
        self._requests += 1
        self._ctx = self._base.ReqContext(req_id=f"r{self._requests}")
        self.mgr.on_new_request(self._ctx)

    # -- observations ------------------------------------------------------------------------

    def read_chunk(self, chunk: int) -> int | None:
        return holder(self._rows[chunk].tobytes())

    def pending_jobs(self) -> tuple[int, ...]:
        return () if self.pool is None else tuple(self.pool.pending)

    def _walk(self):
        for folder, _, names in sorted(os.walk(self.root)):
            for name in sorted(names):
                yield os.path.join(folder, name), name

    def stored_files(self) -> tuple[tuple[int, str], ...]:
        if self.tier == "example":
            return tuple(sorted((self._int(k), PRESENT) for k in self.mgr.chunks))
        found = []
        for path, name in self._walk():
            if name.endswith(".bin"):
                key = int(name[:-4], 16)
                with open(path, "rb") as f:
                    found.append((key, file_state(key, f.read())))
        return tuple(sorted(found))

    def temp_files(self) -> int:
        return sum(not (name.endswith(".bin") or name == "config.json")
                   for _, name in self._walk())

    def close(self) -> None:
        if self.tier == "fs":
            self.mgr.shutdown()
        self._cleanup()


def make_secondary_tier(num_chunks: int, tier: str = "fs",
                        root: str | None = None) -> VllmSecondaryTier:
    return VllmSecondaryTier(num_chunks, tier, root)


def forget_temp_name() -> None:
    """Drop this thread's temp-file suffix in ``tiering/fs/io.py`` (vLLM 0.33.0: a
    thread-local ``_{random 63-bit}.tmp`` drawn once per thread), as a freshly started
    process has none: a forked child otherwise inherits its parent's suffix."""
    io = release.import_module("vllm.v1.kv_offload.tiering.fs.io")
    secondary_tier_compat.forget_temp_suffix(io)
