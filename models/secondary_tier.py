"""Reference model of one secondary KV-offload tier driven through vLLM 0.33.0's
``SecondaryTierManager`` API (``docs/specs/tiered-lookup.md``): the file-system tier
(``tiering/fs``) and the example in-memory tier (``tiering/example``), with faults armed at
the operating-system boundary and files lost or truncated behind the tier's back.

The model keeps what the world holds (each primary chunk's holder, each file's holder and
whether it is whole, the jobs not yet run, each key's probe) and computes what the tier must
answer. It does *not* model paths, temp-file names or threads: the test runs a job only when
a rule says so, and the existence probe runs inline when the step ends.

File-system tier, as specified:
- a store job writes its keys in order; a key whose file exists is skipped (the name is a
  content hash); otherwise its bytes go to a temp file (``write``) renamed into place
  (``replace``); the first error fails the job, removes the temp file and leaves the keys
  before it stored;
- a load job reads its keys in order (``readv``); a missing file, an error or a short read
  stops it: it fails, reporting the keys loaded before (``successful_keys``); a short read
  also removes the file (a too-short file is corrupt) and fills the chunk's first half only
  (every short read is half a chunk), so the chunk is torn unless its halves agree; the keys
  not loaded get a cached MISS verdict;
- ``lookup`` answers a cached verdict: the first lookup of a key answers RETRY and queues a
  probe, ``on_schedule_end`` sends the queued probes (they see the disk as it is then), and
  the next lookup (or step end) applies the answers. A verdict lives while the current
  request holds it; ``on_request_finished`` drops the request's verdicts, except a probe in
  flight, whose answer is then dropped when it arrives. From vLLM 0.34.0
  (``store_marks_present``) a store job noticed done makes its keys' verdicts HIT at once,
  superseding a probe queued or in flight (its answer is then ignored), and drops such a
  probe no request holds any more.

Example tier: stores and loads finish at once; it keeps presence only, so a load succeeds
without writing the primary chunk (vLLM's ``ExampleSecondaryTierManager`` is a template,
"key -> True (only care about presence)"), and fails at the first absent key.
"""

from __future__ import annotations

from collections.abc import Sequence

from attrs import define, field

from models.secondary_tier_values import FAULT_CALL, GARBAGE, OK, SHORT, JobDone
from models.tiered_lookup_values import LookupResult

TIERS = ("fs", "example")
PRESENT = "present"          # what the example tier holds for a key: presence, no bytes


@define
class Probe:
    phase: str                  # "pending" (queued) | "in_flight" (sent) | "resolved"
    found: bool | None = None
    held: bool = True           # the current request looked it up


@define
class SecondaryTierModel:
    num_chunks: int
    tier: str = "fs"
    # chunk -> (holder of its first half, of its second): a key, or None (zeros). A short
    # read fills the first half alone, so a second one can mend what a first one tore.
    chunks: list = field(init=False)
    files: dict = field(factory=dict)            # key -> (holder key, whole)
    jobs: dict = field(factory=dict)             # job id -> (is_load, keys, chunks), in order
    finished: list = field(factory=list)
    misses: dict = field(factory=dict)           # failed load job -> keys not loaded
    probes: dict = field(factory=dict)           # key -> Probe
    answers: dict = field(factory=dict)          # probe answers sent, not yet applied
    armed: list = field(factory=list)            # faults, consumed in order by their call
    # vLLM 0.34.0's meaning: a finished store is newer news of its keys than any probe.
    store_marks_present: bool = False
    stores_done: dict = field(factory=dict)      # store job id -> its keys, once it succeeded

    def __attrs_post_init__(self):
        self.chunks = [(None, None)] * self.num_chunks

    # -- the harness plays the GPU worker and the world --------------------------------------

    def write_chunk(self, chunk: int, key: int) -> None:
        self.chunks[chunk] = (key, key)

    def arm_fault(self, fault: str) -> None:
        self.armed.append(fault)

    def lose_file(self, key: int) -> None:
        self.files.pop(key, None)

    def truncate_file(self, key: int) -> None:
        if key in self.files:
            self.files[key] = (self.files[key][0], False)

    # -- SecondaryTierManager -----------------------------------------------------------------

    def submit_store(self, job_id: int, keys: Sequence[int], chunks: Sequence[int]) -> None:
        self.jobs[job_id] = (False, tuple(keys), tuple(chunks))
        if self.tier == "example":
            self.run_job(job_id)

    def submit_load(self, job_id: int, keys: Sequence[int], chunks: Sequence[int]) -> None:
        self.jobs[job_id] = (True, tuple(keys), tuple(chunks))
        if self.tier == "example":
            self.run_job(job_id)

    def run_job(self, job_id: int) -> None:
        is_load, keys, chunks = self.jobs.pop(job_id)
        if self.tier == "example":
            absent = [k for k in keys if k not in self.files]
            if not is_load:
                self.files.update((k, ((k, k), True)) for k in keys)
            self.finished.append(JobDone(job_id, not (is_load and absent)))
        elif is_load:
            self._load(job_id, keys, chunks)
        else:
            stored = self._store(keys, chunks)
            if stored:
                self.stores_done[job_id] = keys
            self.finished.append(JobDone(job_id, stored))

    def _store(self, keys, chunks) -> bool:
        for key, chunk in zip(keys, chunks, strict=True):
            if key in self.files:
                continue
            if self._fault("write") or self._fault("replace"):
                return False
            self.files[key] = (self.chunks[chunk], True)
        return True

    def _load(self, job_id: int, keys, chunks) -> None:
        for i, (key, chunk) in enumerate(zip(keys, chunks, strict=True)):
            fault = None if key not in self.files else self._fault("readv")
            if key in self.files and fault is None and self.files[key][1]:
                self.chunks[chunk] = self.files[key][0]
                continue
            if key in self.files and fault != "readv_eio":        # a short read
                self.chunks[chunk] = (self.files[key][0][0], self.chunks[chunk][1])
                del self.files[key]
            self.misses[job_id] = keys[i:]         # marked MISS when polled
            self.finished.append(JobDone(job_id, False, tuple(keys[:i]) or None))
            return
        self.finished.append(JobDone(job_id, True))

    def _fault(self, call: str) -> str | None:
        for fault in self.armed:
            if FAULT_CALL[fault] == call:
                self.armed.remove(fault)
                return fault
        return None

    def get_finished_jobs(self) -> tuple[JobDone, ...]:
        done, self.finished = tuple(self.finished), []
        for job in done:
            self._mark_miss(self.misses.pop(job.job_id, ()))
            stored = self.stores_done.pop(job.job_id, ())
            if self.store_marks_present:
                self._mark_present(stored)
        return done

    def drain_jobs(self) -> None:
        for job_id in list(self.jobs):
            self.run_job(job_id)

    def lookup(self, key: int) -> LookupResult:
        if self.tier == "example":
            return LookupResult.HIT if key in self.files else LookupResult.MISS
        self._drain()          # the answers the last step end sent land at the first lookup
        probe = self.probes.setdefault(key, Probe("pending"))
        probe.held = True
        if probe.found is None:
            return LookupResult.RETRY
        return LookupResult.HIT if probe.found else LookupResult.MISS

    def on_schedule_end(self) -> None:
        if self.tier == "example":
            return
        self._drain()
        for key, probe in self.probes.items():
            if probe.phase == "pending":
                probe.phase = "in_flight"
                self.answers[key] = key in self.files      # the probe sees the disk now

    def on_request_finished(self) -> None:
        """The current request ends (its verdicts go); the next lookups are a new one's."""
        for key, probe in list(self.probes.items()):
            if probe.held:
                probe.held = False
                if probe.phase != "in_flight":
                    del self.probes[key]

    def _drain(self) -> None:
        for key, found in self.answers.items():
            probe = self.probes[key]
            if not probe.held:
                del self.probes[key]
            else:
                probe.phase, probe.found = "resolved", found
        self.answers = {}

    def _mark_present(self, keys) -> None:
        for key in keys:
            probe = self.probes.get(key)
            if probe is None or probe.found is True:
                continue
            self.answers.pop(key, None)      # an answer on its way is older news
            if probe.held:
                probe.phase, probe.found = "resolved", True
            else:                            # in flight for a request that is gone
                del self.probes[key]

    def _mark_miss(self, keys) -> None:
        for key in keys:
            probe = self.probes.get(key)
            if probe is not None and probe.phase == "resolved":
                probe.found = False

    # -- observations ------------------------------------------------------------------------

    def read_chunk(self, chunk: int) -> int | None:
        """The key whose bytes the chunk holds, None for zeros, -1 where its halves differ."""
        head, tail = self.chunks[chunk]
        return head if head == tail else -1

    def pending_jobs(self) -> tuple[int, ...]:
        return tuple(self.jobs)

    def stored_files(self) -> tuple[tuple[int, str], ...]:
        if self.tier == "example":
            return tuple((k, PRESENT) for k in sorted(self.files))
        return tuple((k, (OK if whole else SHORT) if held == (k, k) else GARBAGE)
                     for k, (held, whole) in sorted(self.files.items()))

    def temp_files(self) -> int:
        return 0

    def stored_keys(self) -> frozenset[int]:
        return frozenset(self.files)
