"""SecondaryTierMachine: one secondary KV-offload tier (vLLM's file-system tier on real files
in a temporary directory, or its example in-memory tier) step by step against the reference
model (``models/secondary_tier.py``).

Rules are the tier's API (``submit_store``, ``submit_load``, ``get_finished_jobs``,
``lookup``, ``on_schedule_end``, ``on_request_finished``, ``drain_jobs``), ``run_job`` (the
test controls time: the pool runs the job this rule draws), the GPU worker writing a key's
bytes into a primary chunk, and the world: a fault armed at the operating-system boundary
(``os.write`` short / ENOSPC / EIO, ``os.replace`` EIO, ``os.readv`` short / EIO), a file
deleted or truncated behind the tier's back.

Checked: every answer against the model's; bytes loaded equal bytes stored for every key a
finished load reports loaded (``no-wrong-bytes-served``: the tier's own report against the
chunk, before the report is compared with the model's); a RETRY once the model holds the
key's verdict (its probe answered: ``deferred-lookup-resolves``); after every step the
primary chunks, the files on disk (whole, short, foreign), leftover temp files and the
pending jobs. The run ends by running every job and checking that every deferred lookup
resolves and that every key reported stored, unless a fault destroyed its file, is found by
a fresh request (``stored-survives``, before its answer is compared with the model's) and
loads back byte for byte.
"""

from __future__ import annotations

from hypothesis import strategies as st
from hypothesis.stateful import initialize, invariant, precondition, rule

from models.secondary_tier import SecondaryTierModel
from models.secondary_tier_values import FAULTS
from models.tiered_lookup_values import LookupResult
from properties.harness import HarnessMachine, InvalidAction, meant_subject, pick
from properties.secondary_tier_shrink import simpler_worlds
from properties.secondary_tier_worlds import TierWorld, tier_worlds
from sim import targets

PROPERTIES = {
    "finished-jobs-agree": "get_finished_jobs reports the model's jobs, successes and the "
                           "keys a failed load loaded",
    "lookup-results-agree": "every lookup answers what the model answers",
    "no-wrong-bytes-served": "a key a finished load reports loaded holds its own bytes",
    "chunks-agree": "every primary chunk holds the model's bytes (a failed load may tear one)",
    "files-agree": "the files on disk are the model's: whole, short or foreign, per key",
    "no-temp-left": "no temp file is left behind after a step",
    "jobs-agree": "the pending jobs are the model's",
    "deferred-lookup-resolves": "a RETRY answers HIT or MISS once the step ends (never "
                                "RETRY after the key's probe was answered)",
    "stored-survives": "a key reported stored and not destroyed by a fault is found by a "
                       "fresh request (RETRY while probed, then HIT; never MISS)",
}

HAZARDS = (
    "store failed: fault",
    "store skipped: file exists",
    "load failed: missing file",
    "load failed: short read removed the file",
    "load failed: keys loaded before the failure",
    "file lost behind the tier",
    "stale HIT verdict: file gone",
    "probe answer dropped: request finished",
    "deferred lookup resolved",
)


class SecondaryTierMachine(HarnessMachine):
    subsystem = "secondary_tier"
    SUBJECT = "tier"
    PROPERTIES = PROPERTIES
    HAZARDS = HAZARDS
    REPRODUCER_IMPORTS = ("from models.secondary_tier_values import JobDone",
                          "from models.tiered_lookup_values import LookupResult")
    REPRODUCER_HELPERS = ""

    @staticmethod
    def reproducer_subject(config: dict) -> str:
        subject = (f'tier = make(target, "secondary_tier", num_chunks={config["num_chunks"]}, '
                   f'tier="{config["tier"]}"')
        return meant_subject(subject, config.get("model_options"),
                             "sim/vllm/secondary_tier_compat.py model_semantics")

    @initialize(world=tier_worlds())
    def setup(self, world: TierWorld):
        self.world = world
        self.tier = targets.make(self.target_name, "secondary_tier", **world.config())
        # What the target's release meant where it changed on purpose (vLLM's: by release).
        options = getattr(self.tier, "model_options", {})
        self.model = SecondaryTierModel(**world.config(), **options)
        self.jobs: dict[int, tuple[bool, tuple[int, ...], tuple[int, ...]]] = {}
        self.next_job = 0
        self.deferred: set[int] = set()
        self.reported_stored: set[int] = set()
        self.trace.config.update(world.config(), faults=world.faults, target=self.target_name)
        if options:
            self.trace.config["model_options"] = dict(sorted(options.items()))
        self.trace.world = world

    def teardown(self) -> None:
        try:
            super().teardown()
        finally:
            close = getattr(getattr(self, "tier", None), "close", None)
            if close is not None:
                close()

    # -- rules --------------------------------------------------------------------------------

    # The GPU worker's write into a free chunk is no rule of its own but comes before a store
    # when drawn (two steps, one rule): as a separate rule it mostly rewrote chunks nobody
    # stored, and stores were too rare for anything to be on disk to fault or lose.
    # ``drain_jobs`` runs at the end of every run (a rule, it ran every job in one order).
    @precondition(lambda self: hasattr(self, "model") and len(self.jobs) < 3
                  and (self._held_chunks() or self._free_chunks()))
    @rule(data=st.data(), write_first=st.booleans())
    def submit_store(self, data, write_first):
        if (write_first or not self._held_chunks()) and self._free_chunks():
            self.act("write_chunk", pick(data, self._free_chunks()),
                     pick(data, list(self.world.keys)))
        held = self._held_chunks()
        chunks = tuple(sorted({pick(data, held), pick(data, held)}))
        keys = tuple(self.model.read_chunk(c) for c in chunks)
        self.act("submit_store", keys, chunks)

    @precondition(lambda self: hasattr(self, "model") and len(self.jobs) < 3
                  and self._free_chunks())
    @rule(data=st.data())
    def submit_load(self, data):
        free = self._free_chunks()
        chunks = tuple(sorted({pick(data, free), pick(data, free)}))
        # The first key is mostly one the tier answered HIT for (what a manager promotes) or
        # holds, so a two-key load can fail half-way and a lost file is found stale.
        stored = self._hits() * 4 + sorted(self.model.files) * 2 + list(self.world.keys)
        keys = tuple(dict.fromkeys([pick(data, stored), pick(data, list(self.world.keys))]
                                   [:len(chunks)]))
        self.act("submit_load", keys, chunks[:len(keys)])

    @precondition(lambda self: hasattr(self, "model") and self.model.jobs)
    @rule(data=st.data())
    def run_job(self, data):
        self.act("run_job", data.draw(st.integers(0, len(self.model.jobs) - 1)))

    @precondition(lambda self: hasattr(self, "model") and self.model.finished)
    @rule()
    def get_finished_jobs(self):
        self.act("get_finished_jobs")

    # A manager looks up a request's keys together: half the time every key on disk (or
    # with a HIT verdict) is looked up in one rule, one step each, so probes find files and
    # a file lost behind the tier meets its stale verdict.
    @precondition(lambda self: hasattr(self, "model"))
    @rule(data=st.data(), many=st.booleans())
    def lookup(self, data, many):
        keys = sorted(set(self.model.files) | set(self._hits()))
        if many and keys:
            for key in keys:
                self.act("lookup", key)
        else:
            self.act("lookup", pick(data, keys * 2 + list(self.world.keys)))

    @precondition(lambda self: hasattr(self, "model"))
    @rule()
    def on_schedule_end(self):
        self.act("on_schedule_end")

    @precondition(lambda self: hasattr(self, "model") and self.model.probes)
    @rule()
    def on_request_finished(self):
        self.act("on_request_finished")

    @precondition(lambda self: hasattr(self, "model") and self.world.faults
                  and len(self.model.armed) < 2)
    @rule(data=st.data())
    def arm_fault(self, data):
        self.act("arm_fault", pick(data, list(FAULTS)))

    @precondition(lambda self: hasattr(self, "model") and self.world.faults
                  and self.model.files)
    @rule(data=st.data(), truncate=st.booleans())
    def damage_file(self, data, truncate):
        self.act("truncate_file" if truncate else "lose_file",
                 pick(data, [k for k in self._hits() if k in self.model.files] * 3
                      + sorted(self.model.files)))

    # -- actions ------------------------------------------------------------------------------

    def do_write_chunk(self, chunk: int, key: int):
        if chunk in self._busy() or chunk >= self.world.num_chunks:
            raise InvalidAction("write_chunk: the chunk is in a pending job")
        self.apply("write_chunk", chunk, key, shown=f"tier.write_chunk({chunk}, {key})",
                   effect=f"the GPU worker writes key {key}'s bytes into chunk {chunk}")

    def do_submit_store(self, keys: tuple[int, ...], chunks: tuple[int, ...]):
        if any(c >= self.world.num_chunks or c in self._loading() or self.model.read_chunk(c) != k
               for k, c in zip(keys, chunks, strict=True)):
            raise InvalidAction("submit_store: a chunk does not hold its key")
        job_id = self._submit(False, keys, chunks)
        self.apply("submit_store", job_id, keys, chunks,
                   shown=f"tier.submit_store({job_id}, {list(keys)}, {list(chunks)})",
                   effect="queued" if self.world.tier == "fs" else "stored at once")

    def do_submit_load(self, keys: tuple[int, ...], chunks: tuple[int, ...]):
        if any(c in self._busy() or c >= self.world.num_chunks for c in chunks):
            raise InvalidAction("submit_load: a chunk is in a pending job")
        job_id = self._submit(True, keys, chunks)
        self.apply("submit_load", job_id, keys, chunks,
                   shown=f"tier.submit_load({job_id}, {list(keys)}, {list(chunks)})",
                   effect="queued" if self.world.tier == "fs" else "loaded at once")

    def do_run_job(self, position: int):
        if position >= len(self.model.jobs):
            raise InvalidAction("run_job: fewer pending jobs")
        job_id = list(self.model.jobs)[position]
        is_load, keys, _ = self.model.jobs[job_id]
        before = dict(self.model.files)
        self.apply("run_job", job_id, shown=f"tier.run_job({job_id})",
                   effect="the pool runs it")
        if not is_load and any(k in before for k in keys):
            self.hazard("store skipped: file exists")
        if is_load and any(k in before and k not in self.model.files for k in keys):
            self.hazard("load failed: short read removed the file")

    def do_get_finished_jobs(self):
        done = self.model.get_finished_jobs()
        self.record("tier.get_finished_jobs()", done, "polled")
        actual = self.tier.get_finished_jobs()
        # What the tier reports loaded is checked against the chunk first: a load reported
        # whole over other bytes serves wrong data, whatever the model says of the job.
        for job in actual:
            if job.job_id in self.jobs and self.jobs[job.job_id][0]:
                _, keys, chunks = self.jobs[job.job_id]
                loaded = keys if job.success else (job.successful_keys or ())
                self._check_loaded(job.job_id, keys, chunks, loaded)
        self.check("finished-jobs-agree", actual == done,
                   lambda: f"get_finished_jobs returned {actual!r}, the model expects {done!r}")
        for job in done:
            is_load, keys, chunks = self.jobs.pop(job.job_id)
            if not is_load:
                if job.success:
                    self.reported_stored.update(keys)
                else:
                    self.hazard("store failed: fault")
                continue
            loaded = keys if job.success else (job.successful_keys or ())
            if not job.success:
                self.hazard("load failed: keys loaded before the failure" if loaded
                            else "load failed: missing file")

    def do_lookup(self, key: int):
        held_before = {k for k, p in self.model.probes.items() if not p.held}
        expect = self.model.lookup(key)
        self.record(f"tier.lookup({key})", expect, _lookup_effect(expect))
        actual = self.tier.lookup(key)
        # The model answers a verdict once the key's probe came back: a RETRY then waits for
        # an answer that is not coming (the probe is not queued again), forever.
        self.check("deferred-lookup-resolves",
                   actual is not LookupResult.RETRY or expect is LookupResult.RETRY,
                   lambda: f"lookup({key}) answered RETRY after its probe was answered (the "
                           f"model answers {expect!r}): the request waits forever")
        self.check("lookup-results-agree", actual == expect,
                   lambda: f"lookup returned {actual!r}, the model expects {expect!r}")
        if expect is LookupResult.RETRY:
            self.deferred.add(key)
        elif key in self.deferred:
            self.deferred.discard(key)
            self.hazard("deferred lookup resolved")
        if expect is LookupResult.HIT and key not in self.model.files:
            self.hazard("stale HIT verdict: file gone")
        if held_before - set(self.model.probes):
            self.hazard("probe answer dropped: request finished")

    def do_lookup_stored(self, key: int):
        """A fresh request's lookup of a key reported stored whose file is whole: RETRY while
        its probe is out, then HIT, never MISS (checked before the answer is compared with
        the model's, which says the same)."""
        if key not in self.reported_stored or self.model.files.get(key) != ((key, key), True):
            raise InvalidAction("lookup_stored: the key was not reported stored, or its file "
                                "is not whole")
        expect = self.model.lookup(key)
        self.record(f"tier.lookup({key})", expect, _lookup_effect(expect))
        actual = self.tier.lookup(key)
        lost = actual is LookupResult.MISS or (
            expect is LookupResult.HIT and actual is not LookupResult.HIT)
        self.check("stored-survives", not lost,
                   lambda: f"key {key} was reported stored and its file is whole, yet a fresh "
                           f"request's lookup answers {actual!r}")
        self.check("lookup-results-agree", actual == expect,
                   lambda: f"lookup returned {actual!r}, the model expects {expect!r}")

    def do_on_schedule_end(self):
        self.apply("on_schedule_end", shown="tier.on_schedule_end()",
                   effect="probes of this step sent (they see the disk now)")

    def do_on_request_finished(self):
        self.apply("on_request_finished", shown="tier.on_request_finished()",
                   effect="the request's verdicts dropped; a new request starts")

    def do_drain_jobs(self):
        self.apply("drain_jobs", shown="tier.drain_jobs()", effect="every pending job runs")

    def do_arm_fault(self, fault: str):
        self.apply("arm_fault", fault, shown=f"tier.arm_fault({fault!r})",
                   effect="the next matching os call fails")

    def do_lose_file(self, key: int):
        self.apply("lose_file", key, shown=f"tier.lose_file({key})",
                   effect="deleted behind the tier's back")
        self.hazard("file lost behind the tier")

    def do_truncate_file(self, key: int):
        self.apply("truncate_file", key, shown=f"tier.truncate_file({key})",
                   effect="truncated to half behind the tier's back")
        self.hazard("file lost behind the tier")

    # -- the end of a run: liveness --------------------------------------------------------------

    def end_of_run(self):
        """Every job runs; every RETRY resolves; a fresh request finds every key reported
        stored whose file no fault destroyed, and loads it back byte for byte."""
        if self.world.tier == "fs":
            self.act("drain_jobs")
        self.act("get_finished_jobs")
        for _ in range(2):
            self.act("on_schedule_end")
            for key in sorted(self.deferred):
                self.act("lookup", key)
        if self.deferred:
            self.fail("deferred-lookup-resolves", f"keys {sorted(self.deferred)} still "
                      "answer RETRY after two step ends with every job run")
        survivors = sorted(k for k in self.reported_stored if k in self.model.files
                           and self.model.files[k] == ((k, k), True))
        if not survivors or self.model.armed:
            return
        self.act("on_request_finished")
        for key in survivors:
            self.act("lookup_stored", key)
        self.act("on_schedule_end")
        for key in survivors:
            self.act("lookup_stored", key)
        for key in survivors:
            self.act("submit_load", (key,), (0,))
            if self.world.tier == "fs":
                self.act("run_job", 0)
            self.act("get_finished_jobs")

    # -- checks -------------------------------------------------------------------------------

    def _check_loaded(self, job_id, keys, chunks, loaded) -> None:
        if self.world.tier == "example":
            return              # a presence-only tier: a load writes no bytes
        for key, chunk in zip(keys, chunks, strict=True):
            if key in loaded and self.tier.read_chunk(chunk) != key:
                self.fail("no-wrong-bytes-served",
                          f"job {job_id} reports key {key} loaded into chunk {chunk}, which "
                          f"holds {self.tier.read_chunk(chunk)}'s bytes (-1: torn)")

    @invariant()
    def state_agrees(self):
        if not hasattr(self, "model"):
            return
        m, t = self.model, self.tier
        for chunk in range(self.world.num_chunks):
            got, want = t.read_chunk(chunk), m.read_chunk(chunk)
            if got != want:
                self.fail("chunks-agree", f"chunk {chunk} holds {got}'s bytes, expected "
                          f"{want}'s (-1: torn, None: zeros)")
        self.check("files-agree", t.stored_files() == m.stored_files(),
                   lambda: f"files on disk {t.stored_files()}, expected {m.stored_files()}")
        self.check("no-temp-left", t.temp_files() == 0,
                   lambda: f"{t.temp_files()} temp file(s) left in the tier's directory")
        self.check("jobs-agree", t.pending_jobs() == m.pending_jobs(),
                   lambda: f"pending jobs {t.pending_jobs()}, expected {m.pending_jobs()}")

    def state_checks(self) -> list[str]:
        m = self.model
        chunks = list(range(self.world.num_chunks))
        return [f"assert [tier.read_chunk(c) for c in {chunks}] == "
                f"{[m.read_chunk(c) for c in chunks]}",
                f"assert tier.stored_files() == {m.stored_files()!r}",
                "assert tier.temp_files() == 0",
                f"assert tier.pending_jobs() == {m.pending_jobs()!r}"]

    @classmethod
    def simpler_worlds(cls, world: TierWorld, actions):
        return simpler_worlds(world, actions)

    # -- helpers ------------------------------------------------------------------------------

    def _submit(self, is_load: bool, keys, chunks) -> int:
        job_id, self.next_job = self.next_job, self.next_job + 1
        self.jobs[job_id] = (is_load, keys, chunks)
        return job_id

    def _hits(self) -> list[int]:
        """Keys whose cached verdict is HIT."""
        return sorted(k for k, p in self.model.probes.items() if p.found)

    def _held_chunks(self) -> list[int]:
        """Chunks holding a key's whole bytes, not being loaded into: what a store reads."""
        loading = self._loading()
        return [c for c in range(self.world.num_chunks)
                if (k := self.model.read_chunk(c)) is not None and k >= 0 and c not in loading]

    # A job's chunks stay taken until the job is polled: until then the manager keeps them
    # pinned (a store's source) or write-pending (a load's destination).
    def _loading(self) -> set[int]:
        return {c for is_load, _, cs in self.jobs.values() if is_load for c in cs}

    def _busy(self) -> set[int]:
        return {c for _, _, cs in self.jobs.values() for c in cs}

    def _free_chunks(self) -> list[int]:
        return [c for c in range(self.world.num_chunks) if c not in self._busy()]


def _lookup_effect(answer: LookupResult) -> str:
    return {LookupResult.HIT: "found in the tier",
            LookupResult.RETRY: "probe queued or in flight: ask again",
            LookupResult.MISS: "not in the tier"}.get(answer, str(answer))
