"""TieredLookupTieringMachine: the tiered lookup's tiering layer, vLLM's real
``TieringOffloadingManager``, against its model (``models/tiered_lookup_tiering.py``), with the
secondary tiers played by the harness (``sim/vllm/tiered_lookup_tiering.py``) so that what the
manager asks of each tier is seen.

Rules are the connector's calls (a request's start and end, ``prepare_store`` /
``complete_store``, ``lookup``, ``touch``, the step's end, ``reset_cache`` /
``on_reset_flushed``, ``get_stats``, ``config_info``), the tier-poll thread's round, and the
tiers' side: a job finishes (whole, failed, a promotion partly), a peer asks a tier for keys.
Each rule picks plain values through the harness's draw helpers (``pick``, ``draw_integer``:
the explorer, ``properties/explore.py``, feeds them straight from its Random) and acts
(``do_<name>``), so a failing program is replayed,
minimized and written as a reproducer like the tiered-lookup machine's. After every step:
each tier's calls since the last step (``tier-calls-agree``), the primary's ref counts
(``ref-counts-agree``), the jobs each tier holds, the peers' answers, whether work is
pending, and that no tier was polled where the manager promises not to poll it
(``tier-polls-allowed``: inside its own serving, or by a round it did not opt in to).
The world (which tier is request-level, polled, back-pressured, what each holds) is drawn
once (``properties/tiered_lookup_tiering_worlds.py``). vLLM only: the native manager has no
secondary-tier API to record; elsewhere every world is missing (could not run).
"""

from __future__ import annotations

from hypothesis import reject
from hypothesis import strategies as st
from hypothesis.stateful import initialize, invariant, precondition, rule

from models.tiered_lookup_tiering import TieringModel
from models.tiered_lookup_timeline import NEVER
from models.tiered_lookup_values import JobOutcome, LookupResult, TierJob
from properties.harness import HarnessMachine, InvalidAction, draw_bool, draw_integer, pick
from properties.tiered_lookup_tiering_worlds import (
    KEYS,
    TieringWorld,
    simpler_worlds,
    tiering_worlds,
)
from sim.errors import CapabilityMissing

BATCHES_MAX = 3
RESET_GAP = 8
RELEASED = ["t0", "t1", "primary"]      # shutdown: every tier, then the primary's memory

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
HAZARDS = ("promotion submitted", "cascade dropped under back-pressure", "cascade parked",
           "peer served", "job failed", "promotion partly failed", "lookup while held")


class TieredLookupTieringMachine(HarnessMachine):
    subsystem = "tiered_lookup"
    TARGET_BASES = ("vllm",)                # see _build
    SUBJECT = "tiering"
    PROPERTIES = PROPERTIES
    HAZARDS = HAZARDS
    REPRODUCER_IMPORTS = ("from models.tiered_lookup_values import JobOutcome, LookupResult, "
                          "TierJob, TierSpec",)
    REPRODUCER_HELPERS = '''

def make_tiering(target, num_chunks, tiers):
    """vLLM's tiering layer over harness-played tiers: its tier-facing API is vLLM's alone."""
    if target != "vllm":
        pytest.skip("the tiering layer's tier-facing API is vLLM's: replayed on vllm only")
    from sim.vllm.tiered_lookup_tiering import VllmTieringWorld
    return VllmTieringWorld(num_chunks, list(tiers))
'''

    @staticmethod
    def reproducer_subject(config: dict) -> str:
        return (f"tiering = make_tiering(target, {config['num_chunks']}, "
                f"{tuple(config['tiers'])!r})")

    @initialize(world=tiering_worlds())
    def setup(self, world: TieringWorld):
        try:
            self.tiering = _build(self.target_name, world)
        except CapabilityMissing as why:
            self.recorder.note_missing(str(why))
            reject()
        # What the target's release meant where it changed on purpose (``model_options``),
        # and the calls it lacks (not made: ``missing_calls``, name -> reason).
        options = getattr(self.tiering, "model_options", {})
        self.missing_calls: dict[str, str] = getattr(self.tiering, "missing_calls", {})
        for reason in self.missing_calls.values():
            self.recorder.note_missing(reason)
        self.model = TieringModel(world.num_chunks, self.tiering.tiers[0].block_size_bytes,
                                  world.tiers, **options)
        self.checked_at = self.model.clock.now
        self.live: list[str] = []           # requests not finished
        self.batches: list[tuple[str, tuple[int, ...]]] = []
        self.started = 0
        self.steps_since_reset = 0
        self.closed = False
        self.trace.config.update(world.config(), target=self.target_name)
        self.trace.world = world
        # A run starts with a request (stores need one): part of the setup, which a replay
        # repeats, so not an action of the program.
        self.started, req = 1, "r0"
        self.live.append(req)
        expect = self.model.on_new_request(req)
        self.trace.setup.append(f"assert tiering.on_new_request({req!r}, True) == {expect!r}")
        actual = self.tiering.on_new_request(req)
        self.check("request-policy-agrees", actual == expect,
                   lambda: f"on_new_request({req}) -> {actual} policy, expected {expect}")

    @classmethod
    def simpler_worlds(cls, world: TieringWorld, actions):
        return simpler_worlds(world, actions)

    # -- rules: choose a valid step, then act ------------------------------------------------

    @precondition(lambda self: len(getattr(self, "live", ())) < 2)
    @rule()
    def new_request(self):
        self.act("new_request", True)

    # A request that may load only from CPU tiers (its load_tier_filter): the storage tier
    # (t1) is not asked on its lookups. A rule of its own, not a drawn flag (the derandomized
    # search would rarely draw the flag's other value).
    @precondition(lambda self: len(getattr(self, "live", ())) < 2)
    @rule()
    def new_request_loading_from_cpu_only(self):
        self.act("new_request", False)

    @precondition(lambda self: getattr(self, "live", None))
    @rule(data=st.data())
    def finish_request(self, data):
        self.act("finish_request", pick(data, self.live))

    @precondition(lambda self: self._may_store())
    @rule(data=st.data())
    def prepare_store(self, data):
        keys = _distinct(data, KEYS, 1, 3)
        self.act("prepare_store", pick(data, self.live), keys)

    # The worker often finishes a store within the step: prepared and completed at once, so
    # cascades (and their jobs, the tiers' failures and back-pressure) are common.
    @precondition(lambda self: self._may_store())
    @rule(data=st.data())
    def store_now(self, data):
        keys = _distinct(data, KEYS, 1, 3)
        self.act("store_now", pick(data, self.live), keys)

    # Offering again keys still being written (another store of the same blocks, as when two
    # requests share a prefix): a request-level request parks them until they are readable.
    @precondition(lambda self: self._may_store() and self.batches)
    @rule(data=st.data())
    def prepare_store_of_written(self, data):
        writing = sorted({k for _, keys in self.batches for k in keys})
        keys = _distinct(data, writing, 1, 2)
        extra = _distinct(data, KEYS, 0, 1)
        req = pick(data, self.live)
        self.act("prepare_store", req, keys + tuple(k for k in extra if k not in keys))

    @precondition(lambda self: getattr(self, "batches", None))
    @rule(data=st.data())
    def complete_store(self, data):
        success = pick(data, [True, True, False])
        req, keys = pick(data, self.batches)
        self.act("complete_store", req, keys, success)

    @precondition(lambda self: getattr(self, "live", None))
    @rule(data=st.data())
    def lookup(self, data):
        # Keys a tier holds and the primary lacks are weighted 3:1: looking them up promotes.
        m = self.model
        promotable = [k for k in KEYS if not m.present(k)
                      and any(k in m.tier_copies(i) for i in range(len(m.tiers)))]
        key = pick(data, promotable * 3 + list(KEYS))
        self.act("lookup", pick(data, self.live), key)

    # The scheduler asks for a request's blocks one after another in one pass: promotions of
    # several keys from one tier in one step (one job each per tier and request).
    @precondition(lambda self: getattr(self, "live", None))
    @rule(data=st.data())
    def lookup_several(self, data):
        for _ in range(draw_integer(data, 2, 3)):
            self.lookup(data)

    @precondition(lambda self: getattr(self, "live", None)
                  and "touch" not in self.missing_calls)
    @rule(data=st.data())
    def touch(self, data):
        keys = _distinct(data, KEYS, 1, 2)
        self.act("touch", pick(data, self.live), keys)

    # -- the tiers' side: finishing well, reporting the bytes moved and failing are three
    # rules (a drawn choice among them would almost always take the first under the
    # derandomized search).

    @precondition(lambda self: self._held_jobs())
    @rule(data=st.data())
    def run_job(self, data):
        i, job = self._pick_job(data)
        self.act("run_job", i, job, JobOutcome(job.keys, True))

    @precondition(lambda self: self._held_jobs())
    @rule(data=st.data())
    def run_job_reporting_bytes(self, data):
        i, job = self._pick_job(data)
        self.act("run_job", i, job, JobOutcome(job.keys, True, 1000 * len(job.keys)))

    @precondition(lambda self: self._held_jobs())
    @rule(data=st.data())
    def run_job_failed(self, data):
        """The tier's I/O fails: a store copies nothing, a promotion lands nothing."""
        i, job = self._pick_job(data)
        self.act("run_job", i, job, JobOutcome((), False))

    @precondition(lambda self: self._promotions_of_several())
    @rule(data=st.data())
    def run_promotion_partly(self, data):
        """A promotion lands some of its keys, not all (a partial failure)."""
        i, job = pick(data, self._promotions_of_several())
        ok = _distinct(data, job.keys, 1, len(job.keys) - 1)
        self.act("run_job", i, job, JobOutcome(tuple(k for k in job.keys if k in ok), False))

    @precondition(lambda self: hasattr(self, "model"))
    @rule(data=st.data())
    def peer_request(self, data):
        i = draw_integer(data, 0, 1)
        self.act("peer_request", i, _distinct(data, KEYS, 1, 3))

    # -- the step ---------------------------------------------------------------------------

    @precondition(lambda self: hasattr(self, "model"))
    @rule()
    def on_schedule_end(self):
        self.act("on_schedule_end")

    @precondition(lambda self: hasattr(self, "model"))
    @rule()
    def tier_poll_round(self):
        self.act("poll_round")

    # What the thread is for: a peer asks between two steps, and a round serves it before the
    # next step's first call. The step's once-per-step poll is still to come then: serving
    # (a lookup per key) must neither run it early, off-thread and over every tier, nor leave
    # it done for the next step. (The step's end serves its own peers first, so a peer
    # queued before it would leave the round nothing to serve.)
    @precondition(lambda self: hasattr(self, "model"))
    @rule(data=st.data())
    def peer_request_between_steps(self, data):
        i = draw_integer(data, 0, 1)
        keys = _distinct(data, KEYS, 1, 3)
        self.act("on_schedule_end")
        self.act("peer_request", i, keys)
        self.act("poll_round")

    # A reset holds promotions until the worker's flush: rarely, or most of a run is held.
    @precondition(lambda self: getattr(self, "steps_since_reset", 0) >= RESET_GAP)
    @rule()
    def reset_cache(self):
        self.act("reset_cache")

    @precondition(lambda self: hasattr(self, "model") and self.model.promotions_held)
    @rule()
    def on_reset_flushed(self):
        self.act("on_reset_flushed")

    @precondition(lambda self: hasattr(self, "model"))
    @rule()
    def get_stats(self):
        self.act("get_stats")

    @precondition(lambda self: hasattr(self, "model"))
    @rule()
    def config_info(self):
        self.act("config_info")

    def end_of_run(self):
        if not self.closed:
            self.act("shutdown")

    def teardown(self):
        super().teardown()
        # After a failure too: the manager's memory and tiers go back (no check then).
        if hasattr(self, "tiering") and not self.closed:
            self.closed = True
            self.tiering.shutdown()

    def act(self, name: str, *args) -> None:
        if getattr(self, "closed", False):          # a replayed program past its shutdown
            raise InvalidAction(f"{name}: the manager is shut down")
        super().act(name, *args)

    # -- actions: API calls on model and target, compared ----------------------------------

    def do_new_request(self, everywhere: bool):
        req = f"r{self.started}"
        self.started += 1
        self.live.append(req)
        self.call("request-policy-agrees", "on_new_request", req, everywhere,
                  shown=f"tiering.on_new_request({req!r}, {everywhere})",
                  effect="loads from every tier" if everywhere else "loads from t0 only")

    def do_finish_request(self, req: str):
        self._live(req)
        self.live.remove(req)
        self.apply("on_request_finished", req, shown=f"tiering.on_request_finished({req!r})",
                   effect="its tiers hear it once its stores and parked cascades are done")

    def do_prepare_store(self, req: str, keys: tuple[int, ...]):
        self._live(req)
        parked = len(self.model.parks)
        expect = self.call("store-outputs-agree", "prepare_store", keys, req,
                           shown=f"tiering.prepare_store({keys!r}, {req!r})",
                           effect="polls first; the absent keys are to store")
        if expect:
            self.batches.append((req, expect))
        if len(self.model.parks) > parked:
            self.hazard("cascade parked")

    def do_store_now(self, req: str, keys: tuple[int, ...]):
        before = len(self.batches)
        self.do_prepare_store(req, keys)
        if len(self.batches) > before:
            self.do_complete_store(*self.batches[-1], True)

    def do_complete_store(self, req: str, keys: tuple[int, ...], success: bool):
        if (req, keys) not in self.batches:
            raise InvalidAction("complete_store: not a prepared store")
        self.batches.remove((req, keys))
        dropped = len(self.model.drops)
        self.apply("complete_store", keys, req, success,
                   shown=f"tiering.complete_store({keys!r}, {req!r}, {success})",
                   effect="written and cascaded" if success else "the store failed: removed")
        if len(self.model.drops) > dropped:
            self.hazard("cascade dropped under back-pressure")

    def do_lookup(self, req: str, key: int):
        self._live(req)
        held = self.model.promotions_held
        expect = self.call("lookup-results-agree", "lookup", key, req,
                           shown=f"tiering.lookup({key}, {req!r})", effect=_lookup_effect)
        if held:
            self.hazard("lookup while held")
        if expect is LookupResult.HIT:
            self.call("load-source-agrees", "load_source", key, req,
                      shown=f"tiering.load_source({key}, {req!r})",
                      effect="the tier that supplied the hit (None: the primary)")

    def do_touch(self, req: str, keys: tuple[int, ...]):
        self._live(req)
        self.apply("touch", keys, req, shown=f"tiering.touch({keys!r}, {req!r})",
                   effect="recently used in every tier")

    def do_run_job(self, i: int, job: TierJob, outcome: JobOutcome):
        if job not in self.model.tier_jobs(i):
            raise InvalidAction(f"run_job: tier {i} holds no job {job}")
        self.apply("run_job", i, job, outcome,
                   shown=f"tiering.run_job({i}, {job!r}, {outcome!r})",
                   effect="the tier finishes it; the manager notices at a later poll")
        if not outcome.success:
            self.hazard("promotion partly failed" if outcome.ok_keys else "job failed")

    def do_peer_request(self, i: int, keys: tuple[int, ...]):
        self.apply("peer_request", i, keys, shown=f"tiering.peer_request({i}, {keys!r})",
                   effect="served at the tier's next service")

    def do_on_schedule_end(self):
        jobs, served = len(self.model.jobs), len(self.model.served)
        self.apply("on_schedule_end", shown="tiering.on_schedule_end()",
                   effect="peers served, promotions submitted, parked cascades looked at")
        if any(s.job.kind == "promote" for s in self.model.jobs[jobs:]):
            self.hazard("promotion submitted")
        if len(self.model.served) > served:
            self.hazard("peer served")
        # The connector drains the step's events: the primary's, then each tier's own.
        self.call("events-agree", "take_events", shown="tiering.take_events()",
                  effect="each tier's stores finished since the last take")

    def do_poll_round(self):
        served = len(self.model.served)
        self.apply("poll_round", shown="tiering.poll_round()",
                   effect="the polled tiers' finished jobs, then their peers")
        if len(self.model.served) > served:
            self.hazard("peer served")

    def do_reset_cache(self):
        self.steps_since_reset = 0
        self.batches.clear()            # the worker's stores in flight are dropped
        self.apply("reset_cache", shown="tiering.reset_cache()",
                   effect="tiers drained and polled, primary emptied, promotions held")

    def do_on_reset_flushed(self):
        self.apply("on_reset_flushed", shown="tiering.on_reset_flushed()",
                   effect="promotions allowed again")

    def do_get_stats(self):
        expect = _rounded(self.model.get_stats())
        self.record("tiering.get_stats()", expect, "counts since the last call, gauges now")
        actual = _rounded(self.tiering.get_stats())
        self.check("stats-agree", actual == expect, lambda: _diff(actual, expect))

    def do_config_info(self):
        expect = self.model.config_info(self.tiering.primary_info())
        self.record("tiering.config_info()", expect, "the primary, then each tier")
        actual = self.tiering.config_info()
        self.check("config-info-agrees", actual == expect,
                   lambda: f"config_info() -> {actual}, expected {expect}")

    def do_shutdown(self):
        self.closed = True
        self.record_step("tiering.shutdown()", None, "every tier, then the primary's memory",
                         check=f"assert tiering.released == {RELEASED!r}")
        self.tiering.shutdown()
        released = self.tiering.released
        self.check("shutdown-releases-all", released == RELEASED,
                   lambda: f"shutdown released {released}: every tier, then the primary")

    # -- checks ---------------------------------------------------------------------------

    @invariant()
    def agree(self):
        if not hasattr(self, "model"):
            return
        self.steps_since_reset += 1
        m, t = self.model, self.tiering
        # Every tier's peers' answers first: they are what serving returns, and the calls
        # it made on the other tiers explain them (a wrong answer is the finding, not the
        # lookup call behind it).
        for i, tier in enumerate(t.tiers):
            answers = m.peer_answers(i)
            self.check("peer-answers-agree", tier.answers == answers,
                       lambda i=i, tier=tier, answers=answers:
                       f"tier {i}'s peers were told {tier.answers}, expected {answers}")
        for i, tier in enumerate(t.tiers):
            # (details computed only on failure, bound per tier: the loop moves on)
            calls = m.tier_calls(i, self.checked_at)
            self.check("tier-calls-agree", tier.calls == calls,
                       lambda i=i, tier=tier, calls=calls:
                       f"tier {i} was asked {tier.calls}, expected {calls}")
            tier.calls.clear()
            self.check("jobs-agree", t.jobs(i) == m.tier_jobs(i),
                       lambda i=i: f"tier {i} holds jobs {t.jobs(i)}, expected "
                                   f"{m.tier_jobs(i)}")
        self.checked_at = m.clock.now
        self.check("tier-polls-allowed", not t.poll_faults,
                   lambda: f"{t.poll_faults}: a round polls only the tiers that opted in, "
                           "and a tier's serving must not poll (poll_tiers keeps the step's "
                           "once-per-step poll shut while it serves)")
        # The connector asks a hit's source for its metrics: every readable key, per request.
        refs = m.ref_counts()
        for req in self.live:
            for key, ref in refs.items():
                if ref >= 0:
                    source, want = t.load_source(key, req), m.load_source(key, req)
                    self.check("load-source-agrees", source == want,
                               f"get_load_source({key}) for {req}: tier {source}, expected "
                               f"tier {want}")
        actual = t.ref_counts()
        self.check("ref-counts-agree", actual == refs, lambda: f"{actual}, expected {refs}")
        pending, want = t.has_pending_work(), m.pending_work()
        self.check("pending-work-agrees", pending == want,
                   lambda: f"has_pending_work() is {pending}, expected {want}")

    def state_checks(self) -> list[str]:
        m = self.model
        lines = [f"assert tiering.ref_counts() == {m.ref_counts()!r}",
                 f"assert tiering.has_pending_work() is {m.pending_work()}"]
        for i in range(len(m.tiers)):
            lines += [f"assert tiering.jobs({i}) == {m.tier_jobs(i)!r}",
                      # the reproducer never clears a tier's record: every call since setup
                      f"assert tiering.tiers[{i}].calls == {m.tier_calls(i, NEVER)!r}",
                      f"assert tiering.tiers[{i}].answers == {m.peer_answers(i)!r}"]
        refs = m.ref_counts()          # every readable key's source, per live request
        lines += [f"assert tiering.load_source({key}, {req!r}) == {m.load_source(key, req)!r}"
                  for req in self.live for key, ref in refs.items() if ref >= 0]
        return [*lines, "assert tiering.poll_faults == []"]

    # -- helpers ------------------------------------------------------------------------------

    def _live(self, req: str) -> None:
        if req not in self.live:
            raise InvalidAction(f"{req} is not a running request")

    def _may_store(self) -> bool:
        return bool(getattr(self, "live", None)) and len(self.batches) < BATCHES_MAX

    def _held_jobs(self) -> list[tuple[int, TierJob]]:
        if not hasattr(self, "model"):
            return []
        return [(i, job) for i in range(len(self.model.tiers))
                for job in self.model.tier_jobs(i)]

    def _promotions_of_several(self) -> list[tuple[int, TierJob]]:
        return [(i, job) for i, job in self._held_jobs()
                if job.kind == "promote" and len(job.keys) > 1]

    def _pick_job(self, data) -> tuple[int, TierJob]:
        i = pick(data, sorted({i for i, _ in self._held_jobs()}))
        return i, pick(data, self.model.tier_jobs(i))


def _distinct(data, choices, low: int, high: int) -> tuple:
    """``low`` to ``high`` distinct ``choices`` in the order drawn, as
    ``st.lists(st.sampled_from(choices), unique=True)`` gives them, but through the harness's
    draw helpers: each further one is drawn on a coin (Hypothesis's lists grow the same way,
    a coin per element), from those not yet taken."""
    left, taken = list(choices), []
    while left and len(taken) < high and (len(taken) < low or draw_bool(data)):
        taken.append(left.pop(draw_integer(data, 0, len(left) - 1)))
    return tuple(taken)


def _build(target: str, world: TieringWorld):
    """The target's tiering layer over harness-played tiers: vLLM's alone (from 0.33.0: an
    older release raises ``CapabilityMissing``, ``tiered_lookup_compat``)."""
    if target != "vllm":
        raise CapabilityMissing(f"{target}: the tiering layer's tier-facing API (request-level "
                                "tiers, peers, the tier-poll round) is vLLM's")
    from sim.vllm.tiered_lookup_tiering import VllmTieringWorld
    return VllmTieringWorld(world.num_chunks, list(world.tiers))


def _lookup_effect(answer: LookupResult) -> str:
    return {LookupResult.HIT: "readable in the primary",
            LookupResult.HIT_PENDING: "a write or promotion in flight",
            LookupResult.MISS: "in no tier it may load from (or promotions held)"}.get(
                answer, "")


def _rounded(stats: dict) -> dict:
    return {k: round(v, 9) if isinstance(v, float) else v for k, v in stats.items()}


def _diff(actual: dict, expect: dict) -> str:
    keys = sorted(set(actual) | set(expect), key=repr)
    return "; ".join(f"{k}: {actual.get(k)} (expected {expect.get(k)})" for k in keys
                     if actual.get(k) != expect.get(k))
