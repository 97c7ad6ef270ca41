"""Native secondary KV-offload tiers: a file-system tier writing real files in a temporary
directory, and an in-memory example tier, written from ``docs/specs/tiered-lookup.md``
the way an engine would write them (a deque of queued jobs, a verdict cache keyed by key,
``os.write`` / ``os.replace`` / ``os.readv`` through an injectable ``os``).

The primary tier is a CPU ``uint8`` tensor ``[num_chunks, CHUNK_BYTES]`` (CPU memory is what
a primary offload tier is); the file-system tier moves its bytes to and from disk through a
numpy view of it. The test controls time: a job runs only when ``run_job`` says, and the
existence probe of a step runs at ``on_schedule_end``, its answers applied at the next
lookup.

Bug switches (``native:<bug-id>``):

- ``fs-rename-before-write``: the temp file is renamed into place before its bytes are
  written, so a failed write leaves a short file under the key's name;
- ``fs-failed-store-visible``: a failed write still publishes the partial temp file;
- ``fs-probe-after-reset``: a probe answer that arrives after its request finished is kept
  as a verdict, so the next request is answered from a stale probe;
- ``fs-dropped-store-counted``: a store whose write or rename failed is reported stored.
"""

from __future__ import annotations

import errno
import os
import shutil
import tempfile
import weakref
from collections import deque
from collections.abc import Sequence

import torch

from models.secondary_tier_values import (
    CHUNK_BYTES,
    JobDone,
    file_state,
    holder,
    payload,
)
from models.tiered_lookup_values import LookupResult
from sim.faults import FaultyOS

PRESENT = "present"


class NativeSecondaryTier:
    def __init__(self, num_chunks: int, tier: str = "fs", bugs: frozenset[str] = frozenset(),
                 root: str | None = None):
        self.num_chunks, self.tier, self.bugs = num_chunks, tier, bugs
        self.primary = torch.zeros(num_chunks, CHUNK_BYTES, dtype=torch.uint8)
        self._rows = self.primary.numpy()             # shares memory with the tensor
        self.os = FaultyOS()
        # ``root``: an existing directory (a restart after a crash), kept; else a fresh one,
        # removed with the tier.
        self.root = root or tempfile.mkdtemp(prefix="lch-fs-")
        self._cleanup = weakref.finalize(self, shutil.rmtree, self.root, True) if root is None \
            else weakref.finalize(self, lambda: None)
        # Per process, as a temp name must be: a crashed process's leftover temp file must
        # not block (O_EXCL) the next process's store of the same key.
        self._tmp_suffix = f".{os.getpid()}.tmp"
        self._queue: deque[tuple[int, bool, tuple[int, ...], tuple[int, ...]]] = deque()
        self._finished: list[JobDone] = []
        self._misses: dict[int, tuple[int, ...]] = {}  # failed load -> keys not loaded
        self._present: set[int] = set()               # example tier: keys held
        self._verdict: dict[int, bool | None] = {}    # key -> probe answer (None: not yet)
        self._queued_probes: list[int] = []
        self._sent_probes: set[int] = set()
        self._held: set[int] = set()                  # keys the current request looked up
        self._answers: list[tuple[int, bool]] = []
        self._apply_answers = False

    # -- the harness plays the GPU worker and the world --------------------------------------

    def write_chunk(self, chunk: int, key: int) -> None:
        self.primary[chunk] = torch.frombuffer(bytearray(payload(key)), dtype=torch.uint8)

    def arm_fault(self, fault: str) -> None:
        self.os.arm(fault)

    def lose_file(self, key: int) -> None:
        if os.path.exists(self._path(key)):
            os.remove(self._path(key))

    def truncate_file(self, key: int) -> None:
        if os.path.exists(self._path(key)):
            os.truncate(self._path(key), CHUNK_BYTES // 2)

    # -- the tier ------------------------------------------------------------------------------

    def _path(self, key: int) -> str:
        name = key.to_bytes(8, "big").hex()
        return os.path.join(self.root, name[:3], name[3:5], name + ".bin")

    def submit_store(self, job_id: int, keys: Sequence[int], chunks: Sequence[int]) -> None:
        self._queue.append((job_id, False, tuple(keys), tuple(chunks)))
        if self.tier == "example":
            self.run_job(job_id)

    def submit_load(self, job_id: int, keys: Sequence[int], chunks: Sequence[int]) -> None:
        self._queue.append((job_id, True, tuple(keys), tuple(chunks)))
        if self.tier == "example":
            self.run_job(job_id)

    def run_job(self, job_id: int) -> None:
        job = next(j for j in self._queue if j[0] == job_id)
        self._queue.remove(job)
        _, is_load, keys, chunks = job
        if self.tier == "example":
            if not is_load:
                self._present.update(keys)
            self._finished.append(JobDone(job_id, not is_load or self._present >= set(keys)))
            return
        if is_load:
            self._finished.append(self._load(job_id, keys, chunks))
            return
        try:
            for key, chunk in zip(keys, chunks, strict=True):
                self._write(key, chunk)
        except OSError:
            self._finished.append(JobDone(job_id, "fs-dropped-store-counted" in self.bugs))
            return
        self._finished.append(JobDone(job_id, True))

    def _load(self, job_id: int, keys: tuple[int, ...], chunks: tuple[int, ...]) -> JobDone:
        for i, (key, chunk) in enumerate(zip(keys, chunks, strict=True)):
            try:
                self._read(key, chunk)
            except OSError:
                self._misses[job_id] = keys[i:]       # marked MISS when polled
                return JobDone(job_id, False, keys[:i] or None)
        return JobDone(job_id, True)

    def _write(self, key: int, chunk: int) -> None:
        dest = self._path(key)
        if os.path.exists(dest):
            return                                    # a content hash: already stored
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        tmp = dest + self._tmp_suffix
        data = memoryview(self._rows[chunk]).cast("B")
        early = "fs-rename-before-write" in self.bugs
        fd = os.open(tmp, os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_TRUNC, 0o644)
        try:
            if early:
                self.os.replace(tmp, dest)
            written = self.os.write(fd, data)
            if written < len(data):
                raise OSError(errno.EIO, f"short write: {written} of {len(data)} bytes")
            os.close(fd)
            fd = -1
            if not early:
                self.os.replace(tmp, dest)
        except OSError:
            if fd >= 0:
                os.close(fd)
            if "fs-failed-store-visible" in self.bugs and os.path.exists(tmp):
                os.replace(tmp, dest)
            if os.path.exists(tmp):
                os.remove(tmp)
            raise

    def _read(self, key: int, chunk: int) -> None:
        path = self._path(key)
        fd = os.open(path, os.O_RDONLY)
        try:
            got = self.os.readv(fd, [memoryview(self._rows[chunk]).cast("B")])
        finally:
            os.close(fd)
        if got < CHUNK_BYTES:
            os.remove(path)                           # a too-short file is corrupt
            raise OSError(errno.EIO, f"short read: {got} of {CHUNK_BYTES} bytes")

    def get_finished_jobs(self) -> tuple[JobDone, ...]:
        done, self._finished = tuple(self._finished), []
        for job in done:
            for lost in self._misses.pop(job.job_id, ()):    # no promotion retried forever
                if self._verdict.get(lost) is not None:
                    self._verdict[lost] = False
        return done

    def drain_jobs(self) -> None:
        while self._queue:
            self.run_job(self._queue[0][0])

    # -- lookups: a verdict per key, probed when the step ends --------------------------------

    def lookup(self, key: int) -> LookupResult:
        if self.tier == "example":
            return LookupResult.HIT if key in self._present else LookupResult.MISS
        if self._apply_answers:
            self._apply()
            self._apply_answers = False
        if key not in self._verdict:
            self._verdict[key] = None
            self._queued_probes.append(key)
        self._held.add(key)
        found = self._verdict[key]
        return LookupResult.RETRY if found is None else (
            LookupResult.HIT if found else LookupResult.MISS)

    def on_schedule_end(self) -> None:
        if self.tier == "example":
            return
        self._apply()
        self._apply_answers = True
        # The probe runs inline: it sees the disk as it is when the step ends.
        self._answers = [(k, os.path.exists(self._path(k))) for k in self._queued_probes]
        self._sent_probes.update(self._queued_probes)
        self._queued_probes = []

    def _apply(self) -> None:
        for key, found in self._answers:
            self._sent_probes.discard(key)
            if key in self._held or "fs-probe-after-reset" in self.bugs:
                self._verdict[key] = found
            else:
                self._verdict.pop(key, None)
        self._answers = []

    def on_request_finished(self) -> None:
        for key in self._held:
            if key not in self._sent_probes:
                self._verdict.pop(key, None)
                if key in self._queued_probes:
                    self._queued_probes.remove(key)
        self._held = set()

    # -- observations ------------------------------------------------------------------------

    def read_chunk(self, chunk: int) -> int | None:
        return holder(self._rows[chunk].tobytes())

    def pending_jobs(self) -> tuple[int, ...]:
        return tuple(j[0] for j in self._queue)

    def _walk(self):
        for folder, _, names in sorted(os.walk(self.root)):
            for name in sorted(names):
                yield os.path.join(folder, name), name

    def stored_files(self) -> tuple[tuple[int, str], ...]:
        if self.tier == "example":
            return tuple((k, PRESENT) for k in sorted(self._present))
        found = []
        for path, name in self._walk():
            if name.endswith(".bin"):
                key = int(name[:-4], 16)
                with open(path, "rb") as f:
                    found.append((key, file_state(key, f.read())))
        return tuple(sorted(found))

    def temp_files(self) -> int:
        return sum(not name.endswith(".bin") for _, name in self._walk())

    def close(self) -> None:
        self._cleanup()
