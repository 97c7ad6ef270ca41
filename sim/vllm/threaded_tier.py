"""vLLM 0.33.0's real ``FileSystemTierManager`` with its real ``DualQueueThreadPool`` (I/O
threads) and its real async-lookup thread, called from several caller threads (the
linearizability test). Callers hold one lock around every manager call, as
``TieringOffloadingManager`` requires of its callers; the I/O runs on the pool's threads,
concurrently with the callers and with each other.

``store(key)`` writes the key's bytes into a free primary chunk, submits a store job and
waits until a poll reports it; ``load(key)`` submits a load into a zeroed free chunk and
returns whose bytes arrived (None when the job failed: no such file).
"""

from __future__ import annotations

import mmap
import os
import shutil
import tempfile
import threading

import numpy as np

from models.secondary_tier_values import CHUNK_BYTES, holder, payload
from sim.vllm import release
from sim.vllm.secondary_tier import _spec

POLL_S = 0.0005


class VllmThreadedTier:
    def __init__(self, num_chunks: int = 8, io_threads: int = 2):
        self._base = release.import_module("vllm.v1.kv_offload.base")
        self._tiering = release.import_module("vllm.v1.kv_offload.tiering.base")
        fs = release.import_module("vllm.v1.kv_offload.tiering.fs.manager")
        io = release.import_module("vllm.v1.kv_offload.tiering.fs.io")
        io.os = os                             # no faults here (the machine may have set one)
        self._mm = mmap.mmap(-1, num_chunks * CHUNK_BYTES)
        view = memoryview(self._mm).cast("B", (num_chunks, CHUNK_BYTES))
        self._rows = np.asarray(view)
        self.root = tempfile.mkdtemp(prefix="lch-vllm-threads-")
        self.mgr = fs.FileSystemTierManager(_spec(), view, "fs", root_dir=self.root,
                                            n_read_threads=io_threads,
                                            n_write_threads=io_threads)
        self._ctx = self._base.ReqContext(req_id="r0")
        self._cv = threading.Condition(threading.Lock())
        self._free = list(range(num_chunks))
        self._done: dict[int, bool] = {}
        self._next_job = 0
        with self._cv:
            self.mgr.on_new_request(self._ctx)

    def _chunk(self) -> int:
        with self._cv:
            self._cv.wait_for(lambda: self._free)
            return self._free.pop()

    def _release(self, chunk: int) -> None:
        with self._cv:
            self._free.append(chunk)
            self._cv.notify_all()

    def _run(self, key: int, chunk: int, promotion: bool) -> bool:
        with self._cv:
            job_id, self._next_job = self._next_job, self._next_job + 1
            job = self._tiering.TransferJob(
                job_id=job_id, keys=[self._base.make_offload_key(key.to_bytes(8, "big"), 0)],
                chunk_ids=np.asarray([chunk], dtype=np.int64), is_promotion=promotion,
                req_context=self._ctx)
            (self.mgr.submit_load if promotion else self.mgr.submit_store)(job)
            while job_id not in self._done:
                for result in self.mgr.get_finished_jobs():   # the sole popper: lock held
                    self._done[int(result.job_id)] = bool(result.success)
                    self._cv.notify_all()
                if job_id not in self._done:
                    self._cv.wait(POLL_S)
            return self._done.pop(job_id)

    def store(self, key: int) -> bool:
        chunk = self._chunk()
        try:
            self._rows[chunk] = np.frombuffer(payload(key), dtype=np.uint8)
            return self._run(key, chunk, promotion=False)
        finally:
            self._release(chunk)

    def load(self, key: int) -> int | None:
        chunk = self._chunk()
        try:
            self._rows[chunk] = 0
            ok = self._run(key, chunk, promotion=True)
            return holder(self._rows[chunk].tobytes()) if ok else None
        finally:
            self._release(chunk)

    def close(self) -> None:
        self.mgr.shutdown()
        shutil.rmtree(self.root, ignore_errors=True)
