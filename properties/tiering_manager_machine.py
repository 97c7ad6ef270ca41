"""TieringManagerMachine: vLLM's real ``TieringOffloadingManager`` against the tiering model
(``models/tiered_lookup_tiering.py``), with the secondary tiers played by the harness
(``sim/vllm/tiering_world.py``) so that what the manager asks of each tier is seen.

Rules are the connector's calls (a request's start and end, ``prepare_store`` /
``complete_store``, ``lookup``, ``touch``, the step's end, ``reset_cache`` /
``on_reset_flushed``, ``get_stats``, ``config_info``), the tier-poll thread's round, and the
tiers' side: a job finishes (whole, failed, a promotion partly), a peer asks a tier for keys.
After every step: each tier's calls since the last step (``tier-calls-agree``), the primary's
ref counts (``ref-counts-agree``), the jobs each tier holds, the peers' answers, whether
work is pending, and that no tier was polled where the manager promises not to poll it
(``tier-polls-allowed``: inside its own serving, or by a round it did not opt in to).
The world (which tier is request-level, polled, back-pressured) is drawn once. vLLM only:
the native manager has no secondary-tier API to record.
"""

from __future__ import annotations

from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from models.tiered_lookup_tiering import TieringModel
from models.tiered_lookup_values import JobOutcome, LookupResult, TierSpec
from properties.harness import PropertyFailed
from sim.errors import HarnessError

NUM_CHUNKS = 8          # more than the keys: the primary never evicts (not this machine's job)
KEYS = tuple(range(5))
BATCHES_MAX = 3
RESET_GAP = 8

# What the machine checks: a failure names one (``PropertyFailed``), as a HarnessMachine's does.
PROPERTIES = {
    "request-policy-agrees": "on_new_request tells the connector the model's offload policy",
    "store-outputs-agree": "prepare_store returns the model's keys to store",
    "lookup-results-agree": "every lookup answers what the model answers",
    "load-source-agrees": "a HIT's load source is the tier that supplied it to the request",
    "events-agree": "take_events() drains the model's events, the primary's then each tier's",
    "stats-agree": "get_stats() reports the model's counters and gauges",
    "config-info-agrees": "config_info() describes the model's tiers",
    "tier-calls-agree": "each tier is asked exactly what the model asks of it, in order",
    "peer-answers-agree": "a tier's peers are told the model's answers",
    "jobs-agree": "each tier holds the model's submitted jobs",
    "tier-polls-allowed": "a round polls only tiers that opted in; a tier's serving never polls",
    "ref-counts-agree": "each key's ref count is the model's (-1 write pending)",
    "pending-work-agrees": "has_pending_work() is the model's",
    "shutdown-releases-all": "shutdown releases every tier, then the primary's memory",
}


def check(property: str, holds: object, detail) -> None:
    """Fail ``property`` (declared in ``PROPERTIES``) unless ``holds``; ``detail`` (or what it
    returns, computed only on failure) says what was seen."""
    if property not in PROPERTIES:
        raise HarnessError(f"TieringManagerMachine checks undeclared property {property!r}: "
                           "add it to PROPERTIES")
    if not holds:
        raise PropertyFailed(property, detail() if callable(detail) else detail)


class TieringManagerMachine(RuleBasedStateMachine):
    make_world = None           # set by the test: (num_chunks, tier specs) -> world

    # Each tier may start with copies an earlier run left (a persistent tier): the primary
    # never evicts here, so without them a promotion needs a reset first.
    @initialize(request_level=st.tuples(st.booleans(), st.booleans()),
                polled=st.booleans(),
                detector=st.tuples(*[st.sampled_from((True, True, False))] * 2),
                preloaded=st.tuples(*[st.sets(st.sampled_from(KEYS), max_size=3)] * 2))
    def setup(self, request_level, polled, detector, preloaded):
        tiers = [TierSpec(f"t{i}", request_level[i], polled and i == 0, detector[i],
                          copies=preloaded[i]) for i in range(2)]
        self.model = TieringModel(NUM_CHUNKS, 0, tiers)
        self.checked_at = self.model.clock.now
        self.world = type(self).make_world(NUM_CHUNKS, tiers)
        self.model.chunk_bytes = self.world.tiers[0].block_size_bytes
        self.live: list[str] = []           # requests not finished
        self.batches: list[tuple[str, tuple[int, ...]]] = []
        self.started = 0
        self.steps_since_reset = 0
        self.closed = False
        self.new_request()                  # a run starts with a request (stores need one)

    # -- requests -------------------------------------------------------------------------

    @precondition(lambda self: len(self.live) < 2)
    @rule()
    def new_request(self, everywhere=True):
        req = f"r{self.started}"
        self.started += 1
        expect = self.model.on_new_request(req, everywhere)
        actual = self.world.on_new_request(req, everywhere)
        check("request-policy-agrees", actual == expect,
              lambda: f"on_new_request({req}) -> {actual} policy, expected {expect}")
        self.live.append(req)

    # A request that may load only from CPU tiers (its load_tier_filter): the storage tier
    # (t1) is not asked on its lookups. A rule of its own, not a drawn flag (the derandomized
    # search would rarely draw the flag's other value).
    @precondition(lambda self: len(self.live) < 2)
    @rule()
    def new_request_loading_from_cpu_only(self):
        self.new_request(everywhere=False)

    @precondition(lambda self: self.live)
    @rule(data=st.data())
    def finish_request(self, data):
        req = data.draw(st.sampled_from(self.live))
        self.live.remove(req)
        self.model.on_request_finished(req)
        self.world.on_request_finished(req)

    @precondition(lambda self: self.live and len(self.batches) < BATCHES_MAX)
    @rule(data=st.data(), keys=st.lists(st.sampled_from(KEYS), min_size=1, max_size=3,
                                        unique=True))
    def prepare_store(self, data, keys):
        req = data.draw(st.sampled_from(self.live))
        expect = self.model.prepare_store(tuple(keys), req)
        actual = self.world.prepare_store(keys, req)
        check("store-outputs-agree", actual == expect,
              lambda: f"prepare_store({keys}) -> {actual}, expected {expect}")
        if expect:
            self.batches.append((req, expect))

    # The worker often finishes a store within the step: prepared and completed at once, so
    # cascades (and their jobs, the tiers' failures and back-pressure) are common.
    @precondition(lambda self: self.live and len(self.batches) < BATCHES_MAX)
    @rule(data=st.data(), keys=st.lists(st.sampled_from(KEYS), min_size=1, max_size=3,
                                        unique=True))
    def store_now(self, data, keys):
        before = len(self.batches)
        self.prepare_store(data, keys)
        if len(self.batches) > before:
            req, stored = self.batches.pop()
            self.model.complete_store(stored, req, True)
            self.world.complete_store(stored, req, True)

    # Offering again keys still being written (another store of the same blocks, as when two
    # requests share a prefix): a request-level request parks them until they are readable.
    @precondition(lambda self: self.live and self.batches and len(self.batches) < BATCHES_MAX)
    @rule(data=st.data())
    def prepare_store_of_written(self, data):
        writing = sorted({k for _, keys in self.batches for k in keys})
        keys = data.draw(st.lists(st.sampled_from(writing), min_size=1, max_size=2,
                                  unique=True))
        extra = data.draw(st.lists(st.sampled_from(KEYS), max_size=1))
        self.prepare_store(data, keys + [k for k in extra if k not in keys])

    @precondition(lambda self: self.batches)
    @rule(data=st.data(), success=st.sampled_from((True, True, False)))
    def complete_store(self, data, success):
        req, keys = data.draw(st.sampled_from(self.batches))
        self.batches.remove((req, keys))
        self.model.complete_store(keys, req, success)
        self.world.complete_store(keys, req, success)

    @precondition(lambda self: self.live)
    @rule(data=st.data())
    def lookup(self, data):
        # Keys a tier holds and the primary lacks are weighted 3:1: looking them up promotes.
        m = self.model
        promotable = [k for k in KEYS if not m.present(k)
                      and any(k in m.tier_copies(i) for i in range(len(m.tiers)))]
        key = data.draw(st.sampled_from(promotable * 3 + list(KEYS)))
        req = data.draw(st.sampled_from(self.live))
        expect = self.model.lookup(key, req)
        actual = self.world.lookup(key, req)
        check("lookup-results-agree", actual == expect,
              lambda: f"lookup({key}) for {req} -> {actual!r}, expected {expect!r}")
        if expect is LookupResult.HIT:
            source = self.world.load_source(key, req)
            want = self.model.load_source(key, req)
            check("load-source-agrees", source == want,
                  lambda: f"get_load_source({key}) for {req}: tier {source}, expected tier "
                          f"{want} (None: the primary)")

    # The scheduler asks for a request's blocks one after another in one pass: promotions of
    # several keys from one tier in one step (one job each per tier and request).
    @precondition(lambda self: self.live)
    @rule(data=st.data())
    def lookup_several(self, data):
        for _ in range(data.draw(st.integers(2, 3))):
            self.lookup(data)

    @precondition(lambda self: self.live)
    @rule(data=st.data(), keys=st.lists(st.sampled_from(KEYS), min_size=1, max_size=2,
                                        unique=True))
    def touch(self, data, keys):
        req = data.draw(st.sampled_from(self.live))
        self.model.touch(tuple(keys), req)
        self.world.touch(keys, req)

    # -- the tiers' side ------------------------------------------------------------------

    # Finishing well, reporting the bytes moved, and failing are three rules (a drawn choice
    # among them would almost always take the first under the derandomized search).
    @precondition(lambda self: self._held_jobs())
    @rule(data=st.data())
    def run_job(self, data):
        i, job = self._pick_job(data)
        self._run(i, job, JobOutcome(job.keys, True))

    @precondition(lambda self: self._held_jobs())
    @rule(data=st.data())
    def run_job_reporting_bytes(self, data):
        i, job = self._pick_job(data)
        self._run(i, job, JobOutcome(job.keys, True, 1000 * len(job.keys)))

    @precondition(lambda self: self._held_jobs())
    @rule(data=st.data())
    def run_job_failed(self, data):
        """The tier's I/O fails: a store copies nothing, a promotion lands nothing."""
        i, job = self._pick_job(data)
        self._run(i, job, JobOutcome((), False))

    @precondition(lambda self: self._promotions_of_several())
    @rule(data=st.data())
    def run_promotion_partly(self, data):
        """A promotion lands some of its keys, not all (a partial failure)."""
        i, job = data.draw(st.sampled_from(self._promotions_of_several()))
        ok = data.draw(st.lists(st.sampled_from(job.keys), min_size=1,
                                max_size=len(job.keys) - 1, unique=True))
        self._run(i, job, JobOutcome(tuple(k for k in job.keys if k in ok), False))

    def _held_jobs(self):
        return [(i, job) for i in range(len(self.model.tiers))
                for job in self.model.tier_jobs(i)]

    def _promotions_of_several(self):
        return [(i, job) for i, job in self._held_jobs()
                if job.kind == "promote" and len(job.keys) > 1]

    def _pick_job(self, data):
        i = data.draw(st.sampled_from(sorted({i for i, _ in self._held_jobs()})))
        return i, data.draw(st.sampled_from(self.model.tier_jobs(i)))

    def _run(self, i, job, outcome):
        self.model.run_job(i, job, outcome)
        self.world.run_job(i, job, outcome)

    @rule(i=st.integers(0, 1), keys=st.lists(st.sampled_from(KEYS), min_size=1, max_size=3,
                                             unique=True))
    def peer_request(self, i, keys):
        """A peer asks tier ``i`` for ``keys``; the tier serves it at its next service."""
        self.model.peer_request(i, tuple(keys))
        self.world.tiers[i].peers.append(tuple(keys))

    # -- the step ---------------------------------------------------------------------------

    @rule()
    def on_schedule_end(self):
        new = self.world.on_schedule_end()
        self.model.on_schedule_end(new)
        # the connector drains the step's events: the primary's, then each tier's own
        actual, expect = self.world.take_events(), self.model.take_events()
        check("events-agree", actual == expect,
              lambda: f"take_events() -> {actual}, expected {expect}")

    @rule()
    def tier_poll_round(self):
        self.model.poll_round()
        self.world.poll_round()

    # What the thread is for: a peer asks between two steps, and a round serves it before the
    # next step's first call. The step's once-per-step poll is still to come then: serving
    # (a lookup per key) must neither run it early, off-thread and over every tier, nor leave
    # it done for the next step. (The step's end serves its own peers first, so a peer
    # queued before it would leave the round nothing to serve.)
    @rule(i=st.integers(0, 1), keys=st.lists(st.sampled_from(KEYS), min_size=1, max_size=3,
                                             unique=True))
    def peer_request_between_steps(self, i, keys):
        self.on_schedule_end()
        self.peer_request(i, keys)
        self.tier_poll_round()

    # A reset holds promotions until the worker's flush: rarely, or most of a run is held.
    @precondition(lambda self: self.steps_since_reset >= RESET_GAP)
    @rule()
    def reset_cache(self):
        self.steps_since_reset = 0
        self.batches.clear()            # the worker's stores in flight are dropped
        self.model.reset_cache()
        self.world.reset_cache()

    @precondition(lambda self: self.model.promotions_held)
    @rule()
    def on_reset_flushed(self):
        self.model.on_reset_flushed()
        self.world.on_reset_flushed()

    @rule()
    def get_stats(self):
        expect = _rounded(self.model.get_stats())
        actual = _rounded(self.world.get_stats())
        check("stats-agree", actual == expect, lambda: _diff(actual, expect))

    @rule()
    def config_info(self):
        expect = self.model.config_info(self.world.primary_info())
        actual = self.world.config_info()
        check("config-info-agrees", actual == expect,
              lambda: f"config_info() -> {actual}, expected {expect}")

    # -- checks ---------------------------------------------------------------------------

    @invariant()
    def agree(self):
        if not hasattr(self, "world"):
            return
        self.steps_since_reset += 1
        m = self.model
        for i, wt in enumerate(self.world.tiers):
            # (details computed only on failure, bound per tier: the loop moves on)
            calls = m.tier_calls(i, self.checked_at)
            check("tier-calls-agree", wt.calls == calls,
                  lambda i=i, wt=wt, calls=calls: f"tier {i} was asked {wt.calls}, expected "
                                                  f"{calls}")
            wt.calls.clear()
            answers = m.peer_answers(i)
            check("peer-answers-agree", wt.answers == answers,
                  lambda i=i, wt=wt, answers=answers: f"tier {i}'s peers were told "
                                                      f"{wt.answers}, expected {answers}")
            check("jobs-agree", self.world.jobs(i) == m.tier_jobs(i),
                  lambda i=i: f"tier {i} holds jobs {self.world.jobs(i)}, expected "
                              f"{m.tier_jobs(i)}")
        self.checked_at = m.clock.now
        check("tier-polls-allowed", not self.world.poll_faults,
              lambda: f"{self.world.poll_faults}: a round polls only the tiers that opted in, "
                      "and a tier's serving must not poll (poll_tiers keeps the step's "
                      "once-per-step poll shut while it serves)")
        # The connector asks a hit's source for its metrics: every readable key, per request.
        for req in self.live:
            for key, ref in self.model.ref_counts().items():
                if ref >= 0:
                    source = self.world.load_source(key, req)
                    want = self.model.load_source(key, req)
                    check("load-source-agrees", source == want,
                          f"get_load_source({key}) for {req}: tier {source}, expected tier "
                          f"{want}")
        check("ref-counts-agree", self.world.ref_counts() == self.model.ref_counts(),
              lambda: f"{self.world.ref_counts()}, expected {self.model.ref_counts()}")
        check("pending-work-agrees", self.world.has_pending_work() == self.model.pending_work(),
              lambda: f"has_pending_work() is {self.world.has_pending_work()}, expected "
                      f"{self.model.pending_work()}")

    def teardown(self):
        if hasattr(self, "world") and not self.closed:
            self.closed = True
            self.world.shutdown()
            check("shutdown-releases-all", self.world.released == ["t0", "t1", "primary"],
                  lambda: f"shutdown released {self.world.released}: every tier, then the "
                          "primary")


def _rounded(stats: dict) -> dict:
    return {k: round(v, 9) if isinstance(v, float) else v for k, v in stats.items()}


def _diff(actual: dict, expect: dict) -> str:
    keys = sorted(set(actual) | set(expect), key=repr)
    return "; ".join(f"{k}: {actual.get(k)} (expected {expect.get(k)})" for k in keys
                     if actual.get(k) != expect.get(k))
