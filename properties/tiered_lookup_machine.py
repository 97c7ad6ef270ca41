"""TieredLookupMachine: the tiered KV-offload manager and the connector's lookups, step by
step, against the reference model (``docs/specs/tiered-lookup.md``).

Rules are the manager's API (``prepare_store``, ``complete_store`` with success or failure,
``prepare_load`` / ``complete_load``, ``touch``, ``lookup``, ``on_schedule_end``,
``reset_cache`` / ``on_reset_flushed``), the connector's two scans over a request's keys, and
``complete_job``: the test controls time, a secondary job runs only when this rule draws it.
Keys come from a pool a little larger than the primary, so stores evict, evicted keys come
back by promotion and lookups of one request see the other's chunks.

Checked at every lookup: the answer (``lookup-results-agree``), and for a scan also the keys
looked up (a wrong scan starts promotions and probes) and its result (``scan-agrees``).
A deferral (RETRY / HIT_PENDING) with nothing in flight for the key can never resolve
(``deferred-lookup-resolves``); the run ends by completing everything and checking that every
deferred key resolves. After every step: ref counts, free chunks, pending jobs, the secondary
tier's keys and the bytes of every readable chunk (``data-roundtrip``).
"""

from __future__ import annotations

from hypothesis import reject
from hypothesis import strategies as st
from hypothesis.stateful import initialize, precondition, rule

from models.tiered_lookup import TieredLookupModel
from models.tiered_lookup_scans import maximal_prefix_lookup, sliding_window_lookup
from models.tiered_lookup_values import LookupResult
from properties.harness import HarnessMachine, InvalidAction, draw_integer, meant_subject, pick
from properties.tiered_lookup_checks import (
    HAZARDS,
    PROPERTIES,
    RESOLVE_ROUNDS,
    TieredLookupChecks,
)
from properties.tiered_lookup_shrink import simpler_worlds
from properties.tiered_lookup_worlds import (
    TieredWorld,
    long_prompt_worlds,
    policy_worlds,
    tiered_worlds,
)
from sim import targets
from sim.errors import CapabilityMissing


class TieredLookupMachine(TieredLookupChecks, HarnessMachine):
    subsystem = "tiered_lookup"
    SUBJECT = "mgr"
    PROPERTIES = PROPERTIES
    HAZARDS = HAZARDS
    REPRODUCER_IMPORTS = ("from models.tiered_lookup_stats import CacheStats",
                          "from models.tiered_lookup_values import Job, LookupResult, "
                          "OffloadEvent, Scan, StoreOutput",)
    REPRODUCER_HELPERS = '''

def end_step(mgr):
    """The scheduler step ends: ``on_schedule_end``, then the connector drains the events."""
    mgr.on_schedule_end()
    return mgr.take_events()
'''

    @staticmethod
    def reproducer_subject(config: dict) -> str:
        options = "".join(f", {name}={config[name]!r}" for name, default in (
            ("eviction_policy", "lru"), ("store_threshold", 1), ("max_tracker_size", 64_000),
            ("enable_events", True))
            if config.get(name, default) != default).replace("'", '"')
        if config.get("preloaded"):
            options += f', preloaded={tuple(config["preloaded"])}'
        if config.get("requests"):
            options += f', requests={tuple(tuple(r) for r in config["requests"])}'
        if config.get("unpositioned"):
            options += f', unpositioned={tuple(config["unpositioned"])}'
        subject = (f'mgr = make(target, "tiered_lookup", num_chunks={config["num_chunks"]}, '
                   f'secondary="{config["secondary"]}"{options}')
        return meant_subject(subject, config.get("model_options"),
                             "sim/vllm/tiered_lookup_compat.py model_semantics")

    @initialize(world=tiered_worlds())
    def setup(self, world: TieredWorld):
        self.world = world
        self.keys = world.keys
        try:
            self.mgr = targets.make(self.target_name, "tiered_lookup", **world.config())
        except CapabilityMissing as why:    # e.g. no secondary tiers in this release
            self.recorder.note_missing(str(why))
            reject()
        # Calls the target's release lacks (``missing_calls``: name -> reason) are not made;
        # the model follows the semantics the release meant (``model_options``).
        self.missing_calls: dict[str, str] = getattr(self.mgr, "missing_calls", {})
        for reason in self.missing_calls.values():
            self.recorder.note_missing(reason)
        self.model_options = getattr(self.mgr, "model_options", {})
        self.model = TieredLookupModel(**world.config(), **self.model_options)
        self.batches: list[tuple[int, ...]] = []    # prepared stores not yet completed
        self.loads: list[tuple[int, ...]] = []      # prepared loads not yet completed
        self.deferred: set[int] = set()             # keys whose last answer was a deferral
        self.steps_since_reset = 0
        self.seen_before_reset: set[int] = set()  # running requests that saw keys before it
        self.finished_slots: set[int] = set()     # slots with a finished request to re-signal
        self.closed = False
        self.trace.config.update(world.config(), target=self.target_name)
        if self.model_options:
            self.trace.config["model_options"] = dict(sorted(self.model_options.items()))
        self.trace.world = world

    # -- rules: choose a valid step, then act ------------------------------------------------

    # At most two stores in flight: more and the primary is all write-pending, every store
    # finds no room, and LRU order (what eviction and touch decide) is never exercised.
    @precondition(lambda self: len(getattr(self, "batches", ())) < 2)
    @rule(data=st.data())
    def prepare_store(self, data):
        # Slices with an absent key are weighted 3:1: offering only resident keys stores
        # nothing, and a store that must evict is where the LRU and pinning rules live.
        own = self._own_slices()
        fresh = [s for s in own if any(k not in self.model.chunks for k in s[1])]
        self._act_for("prepare_store", pick(data, fresh * 3 + own))

    # A store that must and can evict, as its own rule: eviction is where the policies (LRU,
    # ARC's T1 / T2 / target) decide, and a random slice rarely finds the primary both full
    # and holding enough unpinned chunks. Over the CPU manager alone (the tiering worlds keep
    # their own mix: their promotions already fill the primary).
    @precondition(lambda self: len(getattr(self, "batches", ())) < 2 and self._cpu_alone()
                  and self._evicting_slices())
    @rule(data=st.data())
    def evicting_store(self, data):
        # Stores that evict two or more chunks are weighted 3:1: the connector stores a
        # step's new blocks in one call, and a policy picks its later victims of one call
        # from what its earlier ones left (ARC's T1 count, LRU's heap).
        slices = self._evicting_slices()
        several = [s for s in slices if self._must_evict(s[1]) >= 2]
        self._act_for("prepare_store", pick(data, several * 3 + slices))

    # Success and failure are two rules: completing stores is what makes chunks evictable,
    # so it gets the weight of two rules against the many lookup rules.
    @precondition(lambda self: getattr(self, "batches", None))
    @rule(data=st.data())
    def complete_store(self, data):
        self.act("complete_store", pick(data, self.batches), False)

    # The worker often reports every store in flight done in one step: a third completion
    # rule, so written (evictable, reusable) chunks are common enough for eviction policies.
    @precondition(lambda self: getattr(self, "batches", None) and self._cpu_alone())
    @rule()
    def complete_all_stores(self):
        for keys in list(self.batches):
            self.act("complete_store", keys, False)

    @precondition(lambda self: getattr(self, "batches", None))
    @rule(data=st.data())
    def complete_store_failed(self, data):
        self.act("complete_store", pick(data, self.batches), True)

    @precondition(lambda self: hasattr(self, "model") and self._readable_slices())
    @rule(data=st.data())
    def prepare_load(self, data):
        self._act_for("prepare_load", pick(data, self._readable_slices()))

    @precondition(lambda self: getattr(self, "loads", None))
    @rule(data=st.data())
    def complete_load(self, data):
        self.act("complete_load", pick(data, self.loads))

    @precondition(lambda self: "touch" not in self.missing_calls)
    @rule(data=st.data())
    def touch(self, data):
        # Slices of two or more resident keys are weighted 3:1: touching reorders LRU only
        # between chunks that are there.
        m = self.model
        resident = [s for s in self._slices() if len(s) > 1 and all(k in m.chunks for k in s)]
        self.act("touch", pick(data, resident * 3 + self._slices()))

    @rule(data=st.data())
    def lookup(self, data):
        # Keys the secondary holds and the primary lacks are weighted 3:1: looking them up
        # starts a promotion, or finds the primary unable to take one.
        m = self.model
        promotable = [k for k in self.keys if k in m.tier_keys and k not in m.chunks]
        self.act("lookup", pick(data, promotable * 3 + list(self.keys)))

    @rule(data=st.data())
    def connector_lookup(self, data):
        """The scheduler's scan over a request's keys: the maximal prefix (full attention) or
        a sliding window of 1-3 keys, the rightmost run possibly one key longer."""
        windows = (0,) if "sliding_window_lookup" in self.missing_calls else (0, 1, 2, 3)
        larger = (False,) if "initial_window" in self.missing_calls else (False, True)
        choice = pick(data, [(r, w, f) for r in range(2) for w in windows for f in larger])
        r, window, larger_first = choice
        keys = self.world.requests[r]
        if window == 0:
            self.act("maximal_prefix_lookup", keys)
        else:
            self.act("sliding_window_lookup", keys, window, window + 1 if larger_first else None)

    @precondition(lambda self: hasattr(self, "model") and self.model.jobs)
    @rule(data=st.data())
    def complete_job(self, data):
        # By position among the pending jobs, not by id: a program with steps deleted then
        # still completes "the oldest pending job" (the minimizer deletes steps).
        self.act("complete_job", draw_integer(data, 0, len(self.model.jobs) - 1))

    # The connector finishes a request (its stores and loads done or not) and the next one
    # starts: the finished request's accesses reorder the cache (LRU recency, ARC's T1 -> T2).
    # Only over the CPU manager alone: the tiering manager's request hooks are not modelled.
    # Also a request that saw keys only before a ``reset_cache``: its accesses belong to a
    # cache generation that is gone.
    @precondition(lambda self: self._cpu_alone() and self._finishable()
                  and "finish_request" not in self.missing_calls)
    @rule(data=st.data())
    def finish_request(self, data):
        slot = pick(data, self._finishable())
        self._as_request(slot)
        self.act("finish_request")

    # A request's finish signalled again, later (after other requests' accesses, or a reset):
    # the cache must not commit its accesses twice.
    @precondition(lambda self: getattr(self, "finished_slots", None)
                  and "refinish_request" not in self.missing_calls)
    @rule(data=st.data())
    def refinish_request(self, data):
        self._as_request(pick(data, sorted(self.finished_slots)))
        self.act("refinish_request")
    @precondition(lambda self: hasattr(self, "model") and self.model.jobs)
    @rule(data=st.data())
    def complete_job_failed(self, data):
        """A tier's I/O fails on some of a job's keys (a store copies nothing of them, a
        promotion leaves their chunks unwritten)."""
        self._fail_job(data, range(len(self.model.jobs)))

    # A rule of its own for promotions: they are the rarer jobs (a lookup must find the key
    # in the tier only, and a step end submit it), and the ones whose failure changes the
    # primary, so a failure among all jobs alone would almost never reach one.
    @precondition(lambda self: hasattr(self, "model")
                  and any(job.kind == "promote" for job in self.model.jobs))
    @rule(data=st.data())
    def promotion_failed(self, data):
        self._fail_job(data, [n for n, job in enumerate(self.model.jobs)
                              if job.kind == "promote"])

    def _fail_job(self, data, positions) -> None:
        """Complete one of the pending jobs at ``positions`` with some of its keys failed,
        named by position in the job's keys (all of them where the release's tier can only
        report a job's success whole)."""
        position = pick(data, list(positions))
        size = len(self.model.jobs[position].keys)
        failed = tuple(range(size))
        if size > 1 and "partial_job_result" not in self.missing_calls:
            failed = pick(data, [f for f in _subsets(size) if f])
        self.act("complete_job", position, failed)

    @rule()
    def on_schedule_end(self):
        self.act("on_schedule_end")
        # The connector reports the CPU manager's metrics every step (cache usage, allocation
        # sizes, stores the threshold skipped) and its static facts: part of the step's end,
        # not a rule of its own (a rule more reshuffles every world's derandomized search).
        if self._cpu_alone() and "get_stats" not in self.missing_calls:
            self.act("get_stats")

    @precondition(lambda self: getattr(self, "steps_since_reset", 0) >= 15
                  and "reset_cache" not in self.missing_calls)
    @rule()
    def reset_cache(self):
        self.act("reset_cache")

    @precondition(lambda self: hasattr(self, "model") and self.model.promotions_held)
    @rule()
    def on_reset_flushed(self):
        self.act("on_reset_flushed")

    def end_of_run(self):
        """Liveness (every deferred key resolves once all work completes), then the server
        stops: ``shutdown`` must release the secondary tier, then the primary's memory."""
        if self.deferred:
            self._resolve_deferred()
        if self.model.secondary != "none" and not self.closed:
            self.act("shutdown")

    def act(self, name: str, *args) -> None:
        if getattr(self, "closed", False):          # a replayed program past its shutdown
            raise InvalidAction(f"{name}: the manager is shut down")
        super().act(name, *args)

    def _resolve_deferred(self):
        """Complete every store, load and job and end steps; every key that last answered
        RETRY or HIT_PENDING must then answer HIT or MISS."""
        for keys in list(self.batches):
            self.act("complete_store", keys, False)
        for keys in list(self.loads):
            self.act("complete_load", keys)
        # Each deferred key resolves within RESOLVE_ROUNDS steps once it is the only one
        # asking; keys asking together compete for a small primary (one's promotion landing
        # can evict another's in the same step, which then promotes again), so the bound is
        # per key. A key that never resolves fails whatever the bound.
        rounds = RESOLVE_ROUNDS * max(1, len(self.deferred))
        for _ in range(rounds):
            while self.model.jobs:
                self.act("complete_job", 0)
            self.act("on_schedule_end")
            for key in sorted(self.deferred):
                self.act("lookup", key)
            if not self.deferred:
                return
        self.fail("deferred-lookup-resolves", f"keys {sorted(self.deferred)} still deferred "
                  f"after {rounds} steps with every job complete")

    @classmethod
    def simpler_worlds(cls, world: TieredWorld, actions):
        return simpler_worlds(world, actions)

    # -- actions: API calls on model and target, compared ----------------------------------

    def do_prepare_store(self, keys: tuple[int, ...]):
        self._step()
        before = self._policy_facts(keys)
        expect = self.model.prepare_store(keys)
        # Asked after the model's prepare_store: its poll has run (finished jobs dropped their
        # pins), eviction changed no other chunk's pin, and what it stored was offered.
        pinned = self.model.pinned()
        self.record_step(f"mgr.prepare_store({list(keys)})", repr(expect),
                         _store_effect(expect))
        actual = self.mgr.prepare_store(keys)
        if actual is not None:
            bad = [k for k in actual.evicted_keys if k in pinned or k in keys]
            self.check("pinned-never-evicted", not bad, f"prepare_store({list(keys)}) evicted "
                       f"{bad} (pinned, write-pending or offered)")
        self.check("store-outputs-agree", actual == expect,
                   lambda: f"prepare_store({list(keys)}) -> {actual!r}, expected {expect!r}")
        if expect is None:
            self.hazard("prepare_store: no room")
        elif expect.keys_to_store:
            self.batches.append(expect.keys_to_store)
            if expect.evicted_keys:
                self.hazard("prepare_store: evicts")
                self._policy_hazards(before, expect.evicted_keys)

    def _policy_facts(self, keys: tuple[int, ...]) -> dict:
        """What the policy knew before a store: ghosts offered, the target, ranked chunks."""
        m = self.model
        if m.arc is not None:
            return {"ghost": any(k in m.arc.ghosts and k not in m.chunks for k in keys),
                    "target": m.arc.target, "t2": bool(m.arc.frequent)}
        return {"ranked": {k for k, c in m.chunks.items() if c.used_at[1]}}

    def _policy_hazards(self, before: dict, evicted: tuple[int, ...]) -> None:
        """Policy hazards, declared by the policy machines only (``POLICY_HAZARDS``)."""
        if "policy: ghost offered" not in self.HAZARDS:
            return
        if before.get("ghost"):
            self.hazard("policy: ghost offered")
        if self.model.arc is not None and before["t2"] and 0 < before["target"]:
            self.hazard("policy: eviction under an adapted target")
        if any(k in before.get("ranked", ()) for k in evicted):
            self.hazard("policy: a request's positioned block evicted")

    def do_complete_store(self, keys: tuple[int, ...], failed: bool):
        if keys not in self.batches:
            raise InvalidAction("complete_store: not a prepared store")
        self._step()
        self.batches.remove(keys)
        cascade = " and cascaded to the secondary" if self.model.secondary != "none" else ""
        self.apply("complete_store", keys, success=not failed,
                   shown=f"mgr.complete_store({list(keys)}, success={not failed})",
                   effect="removed: the store failed" if failed else f"stored{cascade}")
        if failed:
            self.hazard("complete_store: failed store removed")

    def do_prepare_load(self, keys: tuple[int, ...]):
        if any(self.model.read_chunk(k) is None for k in keys):
            raise InvalidAction("prepare_load: a key is not readable")
        self._step()
        self.loads.append(keys)
        self.apply("prepare_load", keys, shown=f"mgr.prepare_load({list(keys)})",
                   effect="pinned by a load")

    def do_complete_load(self, keys: tuple[int, ...]):
        if keys not in self.loads:
            raise InvalidAction("complete_load: not a prepared load")
        self._step()
        self.loads.remove(keys)
        self.apply("complete_load", keys, shown=f"mgr.complete_load({list(keys)})",
                   effect="unpinned")

    def do_touch(self, keys: tuple[int, ...]):
        self._step()
        older = self._older_ghosts(keys)
        self.apply("touch", keys, shown=f"mgr.touch({list(keys)})",
                   effect=f"{keys[0]} most recent")
        if older and "policy: an older ghost touched" in self.HAZARDS:
            self.hazard("policy: an older ghost touched")

    def _older_ghosts(self, keys: tuple[int, ...]) -> list[int]:
        """Keys ARC remembers in a ghost list, not as its newest: a touch makes them so."""
        arc = self.model.arc
        if arc is None:
            return []
        newest = {name: arc.ghost_list(name)[-1:] for name in ("B1", "B2")}
        return [k for k in keys if k in arc.ghosts and [k] != newest[arc.ghosts[k][0]]]

    def do_lookup(self, key: int):
        self._step()
        live: list[bool] = []
        expect = self.model.said(self._model_lookup(key, live))
        self.record_step(f"mgr.lookup({key})", repr(expect), _lookup_effect(expect))
        actual = self.mgr.lookup(key)
        self._check_answer(key, expect, actual, live[0], "lookup")
        # The connector asks a HIT's source for its cache-hit metrics (a disk hit promoted to
        # host memory must still count as a disk hit; the CPU manager alone answers HOST).
        if expect is LookupResult.HIT and "load_source" not in self.missing_calls:
            self.call("load-source-agrees", "load_source", key,
                      shown=f"mgr.load_source({key})", effect="the tier that supplied the hit")

    def do_maximal_prefix_lookup(self, keys: tuple[int, ...]):
        self._step()
        live: list[bool] = []
        counted = self.model.count_prefix_keys(keys)      # 0.18-0.19's filter: every key
        expect = self.model.said_scan(maximal_prefix_lookup(
            lambda k: self._model_lookup(k, live, not counted), keys))
        self.record_step(f"mgr.maximal_prefix_lookup({list(keys)})", repr(expect),
                         f"{len(expect.lookups)} lookups")
        actual = self.mgr.maximal_prefix_lookup(keys)
        self._check_scan("maximal_prefix_lookup", expect, actual, live)

    def do_sliding_window_lookup(self, keys: tuple[int, ...], window: int,
                                 initial_window: int | None):
        self._step()
        live: list[bool] = []
        expect = self.model.said_scan(sliding_window_lookup(
            lambda k: self._model_lookup(k, live), keys, window, initial_window,
            self.model.pending_as_miss))
        self.record_step(f"mgr.sliding_window_lookup({list(keys)}, {window}, "
                         f"{initial_window})", repr(expect), f"{len(expect.lookups)} lookups")
        actual = self.mgr.sliding_window_lookup(keys, window, initial_window)
        self._check_scan("sliding_window_lookup", expect, actual, live)

    def do_complete_job(self, position: int, failed: tuple[int, ...] = ()):
        if position >= len(self.model.jobs):
            raise InvalidAction("complete_job: fewer pending jobs")
        self._step()
        job = self.model.jobs[position]
        lost = tuple(job.keys[i] for i in failed if i < len(job.keys))
        if not lost:
            self.apply("complete_job", job.job_id, shown=f"mgr.complete_job({job.job_id})",
                       effect="copied; noticed at next poll")
            return
        self.apply("complete_job", job.job_id, lost,
                   shown=f"mgr.complete_job({job.job_id}, {list(lost)})",
                   effect=f"copy of {list(lost)} failed; noticed at next poll")
        self.hazard(f"{job.kind} job failed")

    def do_use_request(self, slot: int):
        if not 0 <= slot < len(self.world.requests) or self.model.secondary != "none":
            raise InvalidAction("use_request: no such request slot")
        self.apply("use_request", slot, shown=f"mgr.use_request({slot})",
                   effect=f"calls from request {slot}: {list(self.world.requests[slot])}")

    def do_finish_request(self):
        self._step()
        if self.model.access.seen or self.model.current in self.seen_before_reset:
            self.finished_slots.add(self.model.current)
        self.seen_before_reset.discard(self.model.current)
        self.apply("finish_request", shown="mgr.finish_request()",
                   effect="its accesses reorder the cache; a new request starts")

    def do_refinish_request(self):
        if self.model.current not in self.finished_slots:
            raise InvalidAction("refinish_request: no request of this slot has finished")
        self._step()
        self.apply("refinish_request", shown="mgr.refinish_request()",
                   effect="a duplicate finish signal: nothing changes")

    def do_get_stats(self):
        self._step()
        self.call("stats-agree", "get_stats", shown="mgr.get_stats()",
                  effect="chunks in use, writing, reading; store sizes and skips since last")

    def do_on_schedule_end(self):
        self._step()
        # One recorded step per action (the minimizer replays steps' actions): the step's end
        # and the connector draining the events it produced, as ``end_step`` in reproducers.
        self.model.on_schedule_end()
        self.mgr.on_schedule_end()
        self.call("events-agree", "take_events", shown="end_step(mgr)",
                  effect="on_schedule_end (promotions submitted, probes flushed), take_events")

    def do_reset_cache(self):
        self.seen_before_reset |= set(self._seeing_requests())
        self.steps_since_reset = 0
        self.batches.clear()        # no complete_store / complete_load for pre-reset jobs
        self.loads.clear()
        self.apply("reset_cache", shown="mgr.reset_cache()",
                   effect="jobs drained, primary emptied, promotions held")

    def do_shutdown(self):
        self.closed = True
        self.call("shutdown-releases-all", "shutdown", shown="mgr.shutdown()",
                  effect="the secondary tier, then the primary's memory")

    def do_on_reset_flushed(self):
        self._step()
        self.apply("on_reset_flushed", shown="mgr.on_reset_flushed()",
                   effect="promotions allowed again")

    # -- helpers ------------------------------------------------------------------------------

    def _step(self) -> None:
        self.steps_since_reset += 1

    def _slices(self) -> list[tuple[int, ...]]:
        return sorted({r[i:j] for r in self.world.requests for i in range(len(r))
                       for j in range(i + 1, len(r) + 1)})

    def _cpu_alone(self) -> bool:
        return hasattr(self, "model") and self.model.secondary == "none"

    def _own_slices(self) -> list[tuple[int, tuple[int, ...]]]:
        """(request slot, slice of its keys): over the CPU manager alone the world's requests
        run at once and the connector stores and loads each request's own keys, through its
        context; in the tiering worlds one request makes every call, over every slice."""
        if not self._cpu_alone():
            return [(self.model.current, s) for s in self._slices()]
        return [(r, chain[i:j]) for r, chain in enumerate(self.world.requests)
                for i in range(len(chain)) for j in range(i + 1, len(chain) + 1)]

    def _finishable(self) -> list[int]:
        """Running requests that saw keys, in this cache generation or before its reset."""
        stale = getattr(self, "seen_before_reset", set())
        return sorted(set(self._seeing_requests()) | stale) if hasattr(self, "model") else []

    def _seeing_requests(self) -> list[int]:
        return [r for r, access in sorted(self.model.running.items()) if access.seen]

    def _as_request(self, slot: int) -> None:
        """The next call comes from the request in ``slot``: switch contexts if needed."""
        if slot != self.model.current:
            self.act("use_request", slot)

    def _act_for(self, name: str, choice: tuple[int, tuple[int, ...]]) -> None:
        slot, keys = choice
        self._as_request(slot)
        self.act(name, keys)

    def _evicting_slices(self) -> list[tuple[int, ...]]:
        if not hasattr(self, "model"):
            return []
        m = self.model
        pinned = m.pinned()

        def must_and_can_evict(keys: tuple[int, ...]) -> bool:
            spare = sum(k not in pinned and k not in keys for k in m.chunks)
            return 0 < self._must_evict(keys) <= spare
        return [s for s in self._own_slices() if must_and_can_evict(s[1])]

    def _must_evict(self, keys: tuple[int, ...]) -> int:
        m = self.model
        return sum(k not in m.chunks for k in keys) - m.num_free_chunks

    def _readable_slices(self) -> list[tuple[int, tuple[int, ...]]]:
        return [s for s in self._own_slices()
                if all(self.model.read_chunk(k) is not None for k in s[1])]


def _subsets(size: int) -> list[tuple[int, ...]]:
    return [tuple(i for i in range(size) if mask >> i & 1) for mask in range(1 << size)]


def _store_effect(out) -> str:
    if out is None:
        return "no room: nothing evictable enough"
    if not out.keys_to_store:
        return "all present already"
    return f"evicts {list(out.evicted_keys)}" if out.evicted_keys else "fits in free chunks"


def _lookup_effect(answer: LookupResult) -> str:
    return {LookupResult.HIT: "readable in the primary",
            LookupResult.HIT_PENDING: "write or promotion in flight",
            LookupResult.RETRY: "probe in flight: ask again",
            LookupResult.MISS: "in no tier (or no room to promote)"}[answer]


# What the policy machines' larger worlds exist to reach: a store miss on an ARC ghost (the
# target adapts), an eviction that a target above zero decides between T1 and T2, and an LRU
# eviction among chunks a running request ranked by position.
POLICY_HAZARDS = ("policy: ghost offered", "policy: eviction under an adapted target",
                  "policy: a request's positioned block evicted",
                  "policy: an older ghost touched")


def policy_machine(policy: str, max_chunks: int = 8, name: str = "",
                   min_chunks: int = 1, overflow: bool = False) -> type[TieredLookupMachine]:
    """The same machine over the CPU manager alone evicting by ``policy``: its worlds only.
    An eviction policy's rules (LRU recency, ARC's T1 / T2 split, ghost lists and adaptive
    target) show only after several stores, completions, reuses and an evicting store,
    which the mixed worlds give each policy a sixth of the time."""
    class PolicyMachine(TieredLookupMachine):
        HAZARDS = HAZARDS + POLICY_HAZARDS
        # A policy's long rules (a request ranked, its blocks evicted tail first; a ghost
        # offered, then an eviction the adapted target decides) need longer programs than
        # the ci profile's 40 steps (the ci run takes about 10 s per policy on native).
        MIN_STATEFUL_STEPS = 100

        # ARC's ghost lists change its behaviour only when a request offers a ghost again (a
        # store miss adapts the target): a rule of its own, as the evicting store is, since
        # a random slice of the running request rarely holds one.
        @precondition(lambda self: len(getattr(self, "batches", ())) < 2
                      and self._ghost_slices())
        @rule(data=st.data())
        def ghost_store(self, data):
            self._act_for("prepare_store", pick(data, self._ghost_slices()))

        def _ghost_slices(self) -> list[tuple[int, tuple[int, ...]]]:
            arc = getattr(getattr(self, "model", None), "arc", None)
            if arc is None:
                return []
            return [s for s in self._own_slices()
                    if any(k in arc.ghosts and k not in self.model.chunks for k in s[1])]

        @initialize(world=policy_worlds(policy, max_chunks, min_chunks, overflow))
        def setup(self, world: TieredWorld):
            super().setup(world)

    PolicyMachine.__name__ = PolicyMachine.__qualname__ = (
        f"TieredLookup{policy.upper()}{name}Machine")
    return PolicyMachine


TieredLookupLRUMachine = policy_machine("lru")
TieredLookupARCMachine = policy_machine("arc")
# The catalogue's ARC adaptation entry: the same machine in primaries of 1-3 chunks, where a
# ghost offered again and an eviction the target decides come in most programs, so the
# derandomized search and the minimizer do not depend on where a large world's draws fall
# (in the 1-8 chunk worlds seeds 0-9 found it at 4-17 calls, once 79, once not in 500).
TieredLookupARCSmallMachine = policy_machine("arc", max_chunks=3, name="Small")


class TieredLookupARCChurnMachine(policy_machine("arc", name="Churn", overflow=True)):
    """ARC under churn: worlds whose requests outnumber the chunks, and only the rules that
    move chunks between T1, T2 and the ghost lists (stores, completions, loads, touches,
    finishes, resets). ARC's longer rules need several of those in a row: a frequent chunk
    evicted into B2 twice, then the older ghost hit (its recency in B2). Measured over 150
    native examples (seed 0): the ARC machine made 179 evictions and never hit an older B2
    ghost (its lookups and step ends took more than half the steps); this one made 568 and
    hit one 8 times. Still seldom reached (once in those 150): a reused chunk evicted,
    stored again and promoted to T2 by its request's finish while being written, then its
    store failing (a T2 chunk removed)."""
    lookup = connector_lookup = on_schedule_end = complete_job = complete_job_failed = None
    promotion_failed = on_reset_flushed = None


TieredLookupARCChurnMachine.__name__ = TieredLookupARCChurnMachine.__qualname__ = (
    "TieredLookupARCChurnMachine")
# A CPU manager with no chunks (what CPUOffloadingSpec builds when cpu_bytes_to_use is under
# one chunk): every store refused, every lookup a miss, its metrics over zero chunks.
TieredLookupNoChunksMachine = policy_machine("lru", max_chunks=0, name="NoChunks",
                                             min_chunks=0)


class TieredLookupLongPromptMachine(TieredLookupLRUMachine):
    """LRU over a prompt of 64 or more blocks (``long_prompt_worlds``): the connector stores
    and looks up runs of a request's blocks, so the rules draw a chain's prefixes and
    suffixes (every slice of a 70-block chain would make each step quadratic). Its rules are
    the ones that move blocks and recency (stores, completions, loads, touches, finishes,
    resets): lookups, scans and step ends, which the short worlds already cover, would leave
    a 40-step program too few stores to fill 64 chunks."""
    MIN_STATEFUL_STEPS = 40
    # Not rules here (a name bound to something other than a rule hides the inherited one).
    lookup = connector_lookup = on_schedule_end = complete_job = complete_job_failed = None
    promotion_failed = on_reset_flushed = ghost_store = None

    @initialize(world=long_prompt_worlds())
    def setup(self, world: TieredWorld):
        TieredLookupMachine.setup(self, world)

    def _slices(self) -> list[tuple[int, ...]]:
        return sorted({s for _, s in self._own_slices()})

    def _own_slices(self) -> list[tuple[int, tuple[int, ...]]]:
        # Runs cut every 8 blocks (a step's worth of a chunked prefill) and the whole chain:
        # a store or touch of 64 blocks at once comes often enough for the heap's rebuild.
        return [(r, run) for r, chain in enumerate(self.world.requests)
                for run in dict.fromkeys([chain] + [chain[:j] for j in range(8, len(chain), 8)]
                                         + [chain[i:] for i in range(0, len(chain), 8)]
                                         + [chain[-1:]])]
