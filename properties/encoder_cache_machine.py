"""EncoderCacheMachine: the encoder cache manager, step by step, against the reference model.

Rules are the manager's API, called the way vLLM's scheduler calls it: ``can_allocate`` only
for an item that is neither resident nor already approved in this pass, with
``num_embeds_to_schedule`` = the embeds the current attempt already got approved; approved
items are ``allocate``d in order; a new attempt (another request, or going back to an earlier
input) abandons the unallocated approvals (as the scheduler does when KV allocation fails);
``get_freed_mm_hashes`` ends the pass. A worker holding real encoder-output tensors applies
the freed list, as the model runner would, so an eviction the list leaves out shows up as a
leaked tensor.

Every call the real scheduler makes is driven, not only the polite ones: it frees inputs it
never recorded and inputs whose entry is gone (vLLM 0.33.0's ``free_encoder_input``: "Always
clean up ... even if the mm_hash was already evicted"), finishes requests that hold nothing,
asks ``get_cached_num_encoder_embeds`` before every lookup (also for entries evicted or reset
away), and resets the cache (a weights update) in the middle of running requests and passes,
then goes on. A resource property bounds the manager's bookkeeping by the live requests.

Each rule only *chooses* (from what is valid now); the ``do_*`` action it calls does the step.
Actions take plain values, so a failing program can be replayed and minimized
(``properties/harness.py``) and emitted as a reproducer.
"""

from __future__ import annotations

from hypothesis import strategies as st
from hypothesis.stateful import initialize, invariant, precondition, rule

from models.encoder_cache import EncoderCacheModel
from models.encoder_cache_values import ReqView
from properties.encoder_cache_shrink import simpler_worlds
from properties.encoder_cache_worlds import encoder_cache_worlds
from properties.harness import HarnessMachine, InvalidAction, draw_integer, pick
from sim import targets
from sim.encoder_worker import EncoderWorker

UNLIMITED_BUDGET = 10**6
BUDGET_SLACK_UNLIMITED = 8       # the largest drawn slack means "no compute limit"

HAZARDS = (
    "can_allocate: evicts",
    "can_allocate: no room",
    "can_allocate: over compute budget",
    "check_and_update_cache: freeable entry reused",
    "evicted then reallocated in one pass",
    "repeated item freed once",
    "approval abandoned",
    "get_freed_mm_hashes: reports evictions",
    "free_encoder_input: input not recorded",
    "free_encoder_input: entry evicted",
    "get_cached_num_encoder_embeds: entry gone",
    "reset: requests running",
    "reset: evictions not yet reported",
    "reset: a running request re-encodes its item",
)


PROPERTIES = {
    "returns-agree": "every call returns what the model returns",
    # The counts' bounds (0 <= free <= freeable <= cache_size) are the model's: counts equal
    # to its counts are within them, so the bounds are no property of their own.
    "slots-agree": "num_free_slots and num_freeable_slots equal the model's",
    "cached-inputs-agree": "get_cached_input_ids(request) is what the request recorded",
    # What makes the worker miss a held input's tensor, or gather a wrong one: a freed list
    # naming a resident hash (the worker here is the harness's, fed only the freed lists).
    "freed-not-resident": "get_freed_mm_hashes() never names a hash resident at the pass end",
    "worker-agrees-with-manager": "after applying the freed list the worker holds a tensor "
                                  "exactly for each resident entry (an unreported eviction "
                                  "leaks its tensor)",
    "bookkeeping-bounded": "the manager keeps state only for requests holding an input "
                           "(nothing for a finished one)",
}


class EncoderCacheMachine(HarnessMachine):
    subsystem = "encoder_cache"
    SUBJECT = "cache"
    PROPERTIES = PROPERTIES
    HAZARDS = HAZARDS
    REPRODUCER_IMPORTS = ("from models.encoder_cache_values import MmItem, ReqView",)
    REPRODUCER_HELPERS = '''

def slots(cache):
    """(num_free_slots, num_freeable_slots): the manager's two counters."""
    return cache.num_free_slots, cache.num_freeable_slots
'''

    STATE_LINES_OF = {"slots-agree": "slots(cache)", "cached-inputs-agree": "get_cached_input_ids",
                      "bookkeeping-bounded": "tracked_request_ids"}

    @staticmethod
    def reproducer_subject(config: dict) -> str:
        return f'cache = make(target, "encoder_cache", cache_size={config["cache_size"]})'

    @initialize(world=encoder_cache_worlds())
    def setup(self, world):
        cache_size, requests = world.cache_size, world.requests
        self.world = world
        self.requests: tuple[ReqView, ...] = requests
        self.model = EncoderCacheModel(cache_size)
        self.cache = targets.make(self.target_name, "encoder_cache", cache_size=cache_size)
        self.worker = EncoderWorker()
        self.approved: list[tuple[ReqView, int]] = []   # the current attempt's approvals
        self.slots_shown = (cache_size, cache_size)      # what the reproducer last asserted
        self.passes_since_reset = 0
        self.seen: set[str] = set()                      # hashes resident at some point
        self.served: set[str] = set()                    # requests that held an input
        self.held_at_reset: set[tuple[int, int]] = set() # (request, input) the last reset took
        self.trace.config.update(cache_size=cache_size, target=self.target_name)
        self.trace.world = world
        self.trace.setup += [f"{r.request_id} = {r!r}" for r in requests]

    # -- rules: choose a valid step, then act ------------------------------------------------

    @rule(data=st.data())
    def check_and_update_cache(self, data):
        # Resident items the request does not hold through this input yet are weighted 4:1
        # (new holders are where reuse, repeat and freeable-queue bugs live); one draw.
        resident = [(r, i) for r, i in self._inputs()
                    if self._resident(r, i) and i not in self._recorded(r)]
        r, i = pick(data, resident * 3 + self._inputs())
        self.act("check_and_update_cache", r, i)

    @precondition(lambda self: self._allocatable())
    @rule(data=st.data())
    def can_allocate(self, data):
        # One argument, so Hypothesis ranks this rule with the other one-argument rules
        # (it prefers rules with fewer arguments); the rest is drawn here.
        # Items evicted earlier in this pass come first, weighted 4:1: re-allocating them is
        # the hazard behind vLLM issue #38551. Then the inputs a reset took from running
        # requests: after a weights update those requests encode their items again (and the
        # cache fills, and evicts, with whatever the reset left behind).
        allocatable = self._allocatable()
        evicted = set(self.model.evicted_this_pass)
        again = [(r, i) for r, i in allocatable if self.requests[r].mm_hash(i) in evicted]
        rerun = [(r, i) for r, i in allocatable if (r, i) in self.held_at_reset]
        r, i = pick(data, again * 3 + rerun * 3 + allocatable)
        # budget slack in -1..8 (8: unlimited) and extra_to_schedule in 0..2, in one draw
        # (each draw costs Hypothesis more than the whole step costs us).
        slack, extra = divmod(draw_integer(data, 0, 29), 3)
        self.act("can_allocate", r, i, slack - 1, extra)

    @precondition(lambda self: getattr(self, "approved", None))
    @rule()
    def allocate(self):
        self.act("allocate")

    @precondition(lambda self: self.model.recorded)
    @rule(data=st.data())
    def free_encoder_input(self, data):
        # Held inputs first (a free that lets go of something is what makes entries freeable),
        # then every input: the scheduler also frees inputs it never recorded and inputs whose
        # entry is gone.
        held = [(r, i) for r, i in self._inputs() if i in self._recorded(r)]
        self.act("free_encoder_input", *pick(data, held * 3 + self._inputs()))

    @precondition(lambda self: self.model.recorded)
    @rule(data=st.data())
    def free(self, data):
        # A request that holds something (finishing an idle one exercises nothing).
        holding = [k for k, r in enumerate(self.requests) if self._recorded(k)]
        self.act("free", pick(data, holding))

    @rule()
    def get_freed_mm_hashes(self):
        self.act("get_freed_mm_hashes")

    # A weights update may come at any point of a pass, with requests running. Rare next to
    # passes (a cache that lived a few passes, so a reset neither dominates the runs nor
    # checks an empty cache), but also allowed while a pass has evictions still unreported
    # (the freed list must not outlive the reset) once its approvals are allocated (so the
    # same-pass re-allocation of an evicted item keeps its chances).
    @precondition(lambda self: getattr(self, "passes_since_reset", 0) >= 3
                  or (getattr(self, "passes_since_reset", 0) >= 1
                      and self.model.evicted_this_pass and not self.approved))
    @rule()
    def reset(self):
        self.act("reset")

    def end_of_run(self):
        # The engine keeps running: the last pass ends too, so an eviction made late in the
        # run is still reported (and checked) rather than dropped with the example.
        if self.trace.steps and self.trace.steps[-1].action[0] != "get_freed_mm_hashes":
            self.act("get_freed_mm_hashes")

    @classmethod
    def simpler_worlds(cls, world, actions):
        return simpler_worlds(world, actions)

    # -- actions: one API call on model and target, compared ---------------------------------

    def do_check_and_update_cache(self, r: int, i: int):
        req = self.requests[r]
        was_freeable = req.mm_hash(i) in self.model.freeable_order()
        expect = self.call("returns-agree", "check_and_update_cache", req, i,
                           shown=f"cache.check_and_update_cache({req.request_id}, {i})",
                           effect=lambda hit: f"hit: {req.request_id} holds {req.mm_hash(i)}"
                           if hit else "miss")
        if expect:
            self.served.add(req.request_id)
        if expect and was_freeable:
            self.hazard("check_and_update_cache: freeable entry reused")

    def do_can_allocate(self, r: int, i: int, budget_slack: int, extra_to_schedule: int):
        req = self.requests[r]
        if (r, i) not in self._allocatable():
            raise InvalidAction("can_allocate: item resident or already approved")
        if self.approved and self._starts_new_attempt(req, i):
            self.approved.clear()
            self.hazard("approval abandoned")
        n = req.num_embeds(i)
        budget = UNLIMITED_BUDGET if budget_slack == BUDGET_SLACK_UNLIMITED else n + budget_slack
        to_schedule = sum(q.num_embeds(j) for q, j in self.approved) + extra_to_schedule
        evicted_before = len(self.model.evicted_this_pass)
        expect = self.call(
            "returns-agree", "can_allocate", req, i, encoder_compute_budget=budget,
            num_embeds_to_schedule=to_schedule,
            shown=f"cache.can_allocate({req.request_id}, {i}, encoder_compute_budget="
                  f"{budget}, num_embeds_to_schedule={to_schedule})",
            effect=lambda ok: _allocation_effect(
                ok, self.model.evicted_this_pass[evicted_before:], n > budget))
        evicted = self.model.evicted_this_pass[evicted_before:]
        if expect:
            self.approved.append((req, i))
        if evicted:
            self.hazard("can_allocate: evicts")
        elif n > budget:
            self.hazard("can_allocate: over compute budget")
        elif not expect:
            self.hazard("can_allocate: no room")

    def do_allocate(self):
        if not self.approved:
            raise InvalidAction("allocate without an approved can_allocate")
        req, i = self.approved.pop(0)
        item = req.items[i]
        if (self.requests.index(req), i) in self.held_at_reset:
            self.held_at_reset.discard((self.requests.index(req), i))
            self.hazard("reset: a running request re-encodes its item")
        if item.mm_hash in self.model.evicted_this_pass:
            self.hazard("evicted then reallocated in one pass")
        self.apply("allocate", req, i, shown=f"cache.allocate({req.request_id}, {i})",
                   effect=f"{item.mm_hash} resident ({item.num_embeds} embeds)")
        self.seen.add(item.mm_hash)
        self.served.add(req.request_id)
        self.worker.encode(item)                     # the scheduled encoder input runs

    def do_free_encoder_input(self, r: int, i: int):
        req = self.requests[r]
        if sum(h == req.mm_hash(i) for h in self._recorded(r).values()) > 1:
            self.hazard("repeated item freed once")
        if i not in self._recorded(r):
            self.hazard("free_encoder_input: input not recorded")
            if req.mm_hash(i) in self._gone():
                self.hazard("free_encoder_input: entry evicted")
        idle_before = set(self.model.freeable_order())
        self.apply("free_encoder_input", req, i,
                   shown=f"cache.free_encoder_input({req.request_id}, {i})",
                   effect=lambda: self._freeing_effect(idle_before))

    def do_free(self, r: int):
        req = self.requests[r]
        if self.approved and self.approved[0][0] == req:
            self.approved.clear()                    # a finished request allocates nothing
        idle_before = set(self.model.freeable_order())
        self.apply("free", req, shown=f"cache.free({req.request_id})",
                   effect=lambda: self._freeing_effect(idle_before))

    def do_get_freed_mm_hashes(self):
        self.approved.clear()                        # the pass ends
        self.passes_since_reset += 1
        expect = self.model.get_freed_mm_hashes()
        self.record("cache.get_freed_mm_hashes()", expect,
                    "ends the pass: the worker deletes these tensors")
        actual = self.cache.get_freed_mm_hashes()
        if expect:
            self.hazard("get_freed_mm_hashes: reports evictions")
        self.worker.free(actual)
        stale = [h for h in actual if self.model.is_resident(h)]
        self.check("freed-not-resident", not stale, f"{stale} reported freed but resident")
        # Before the list is compared: a list that leaves an eviction out is a leak on the
        # worker, the more telling name (an extra, non-resident hash frees nothing).
        held, resident = self.worker.resident_hashes(), set(self.model.entries)
        self.check("worker-agrees-with-manager", held == resident,
                   lambda: f"{sorted(held - resident)} evicted, never reported freed: the "
                           f"worker keeps their tensors (leak); {sorted(resident - held)} "
                           "resident without a tensor (miss)")
        self.check("returns-agree", actual == expect,
                   f"get_freed_mm_hashes returned {actual}, the model expects {expect}")

    def do_reset(self):
        if self.model.recorded:
            self.hazard("reset: requests running")
        if self.model.evicted_this_pass:
            self.hazard("reset: evictions not yet reported")
        self.held_at_reset = {(r, i) for r in range(len(self.requests)) for i in self._recorded(r)}
        self.passes_since_reset = 0
        self.approved.clear()
        self.apply("reset", shown="cache.reset()", effect="empties the cache")
        self.worker.free(list(self.worker.resident_hashes()))   # weights changed: drop all

    # -- going on past an accepted divergence ------------------------------------------------

    def adopt(self, property: str, detail: str) -> str:
        """Re-synchronize what ``property`` compares from the target, so the example goes on
        from the target's state (``HarnessMachine.fail``)."""
        if property == "slots-agree" and hasattr(self.cache, "freeable_order"):
            unfollowed = self.model.adopt_freeable(self.cache.freeable_order())
            self.slots_shown = (self.model.num_free_slots, self.model.num_freeable_slots)
            return ("the model's holders re-synchronized from the target's freeable queue"
                    + (f" (not followed: {sorted(unfollowed)})" if unfollowed else ""))
        if property == "cached-inputs-agree" and self.model.cached_input_ids == "recorded":
            self.model.cached_input_ids = "resident"
            if all(self.cache.get_cached_input_ids(q) == self.model.get_cached_input_ids(q)
                   for q in self.requests):
                return ("get_cached_input_ids read as every input whose item is resident "
                        "(model option cached_input_ids='resident', vLLM before 0.24.0)")
            self.model.cached_input_ids = "recorded"
        if property == "freed-not-resident":
            stale = [h for h in self.worker.resident_hashes() ^ set(self.model.entries)
                     if self.model.is_resident(h)]
            for req in self.requests:
                for item in req.items:
                    if item.mm_hash in stale:
                        self.worker.encode(item)
            return (f"the worker's deleted tensors re-encoded ({sorted(set(stale))}): the "
                    "model keeps them resident")
        return super().adopt(property, detail)

    # -- invariants ---------------------------------------------------------------------------

    @invariant()
    def slots_agree(self):
        if not hasattr(self, "model"):
            return
        free, freeable = self.cache.num_free_slots, self.cache.num_freeable_slots
        self.check("slots-agree", free == self.model.num_free_slots,
                   f"num_free_slots {free} != {self.model.num_free_slots}")
        self.check("slots-agree", freeable == self.model.num_freeable_slots,
                   f"num_freeable_slots {freeable} != {self.model.num_freeable_slots}")
        self.check_valid(self.cache)

    @invariant()
    def cached_inputs_agree(self):
        if not hasattr(self, "model"):
            return
        for req in self.requests:
            actual, expect = self.cache.get_cached_input_ids(req), \
                self.model.get_cached_input_ids(req)
            if actual != expect:
                self.fail("cached-inputs-agree",
                          f"{req.request_id} {sorted(actual)} != {sorted(expect)}")

    @invariant()
    def cached_num_embeds_agree(self):
        """``get_cached_num_encoder_embeds``, which the scheduler asks before every lookup,
        for one input of each hash: the stored count while resident, None once evicted or
        reset away. A query changes nothing, so it is checked after every step, not drawn."""
        if not hasattr(self, "model"):
            return
        if self._gone():
            self.hazard("get_cached_num_encoder_embeds: entry gone")
        for req, i in self._one_input_per_hash():
            actual = self.cache.get_cached_num_encoder_embeds(req, i)
            expect = self.model.get_cached_num_encoder_embeds(req, i)
            if actual != expect:
                self.fail("returns-agree", f"get_cached_num_encoder_embeds({req.request_id}, "
                          f"{i}) returned {actual!r}, the model expects {expect!r}")

    @invariant()
    def bookkeeping_bounded(self):
        """Nothing kept for a request that holds no input: a finished request leaves nothing
        behind, so the manager's state is bounded by the live requests."""
        if not hasattr(self, "model"):
            return
        stale = self.cache.tracked_request_ids() - set(self.model.recorded)
        self.check("bookkeeping-bounded", not stale,
                   lambda: f"state kept for {sorted(stale)}, which hold no input")

    # -- helpers ------------------------------------------------------------------------------

    def record(self, call: str, expect, comment: str) -> None:
        # The reproducer asserts (free, freeable) whenever the model says they changed.
        slots = (self.model.num_free_slots, self.model.num_freeable_slots)
        check = None
        if slots != self.slots_shown:
            check = f"assert slots(cache) == {slots}"
            self.slots_shown = slots
        self.record_step(call, None if expect is None else repr(expect), comment, check)

    def state_checks(self) -> list[str]:
        slots = (self.model.num_free_slots, self.model.num_freeable_slots)
        lines = [f"assert slots(cache) == {slots}"]
        for req in self.requests:
            ids = self.model.get_cached_input_ids(req)
            lines.append(f"assert cache.get_cached_input_ids({req.request_id}) == "
                         f"{ids if ids else 'set()'}")
        for req, i in self._one_input_per_hash():
            if req.mm_hash(i) in self.seen:              # resident once: its count, or None
                lines.append(f"assert cache.get_cached_num_encoder_embeds({req.request_id}, "
                             f"{i}) == {self.model.get_cached_num_encoder_embeds(req, i)}")
        live = set(self.model.recorded)
        if self.served - live:                           # some request let go of everything
            shown = "{" + ", ".join(map(repr, sorted(live))) + "}" if live else "set()"
            lines.append(f"assert cache.tracked_request_ids() <= {shown}"
                         "  # nothing kept for the finished ones")
        return lines

    def _one_input_per_hash(self) -> list[tuple[ReqView, int]]:
        first: dict[str, tuple[ReqView, int]] = {}
        for req in self.requests:
            for i, item in enumerate(req.items):
                first.setdefault(item.mm_hash, (req, i))
        return list(first.values())

    def _gone(self) -> set[str]:
        """Hashes that were resident in this run and are not now (evicted or reset away)."""
        return {h for h in self.seen if not self.model.is_resident(h)}

    def _inputs(self) -> list[tuple[int, int]]:
        return [(r, i) for r, req in enumerate(self.requests) for i in range(len(req.items))]

    def _resident(self, r: int, i: int) -> bool:
        return self.model.is_resident(self.requests[r].mm_hash(i))

    def _recorded(self, r: int) -> dict[int, str]:
        return self.model.recorded.get(self.requests[r].request_id, {})

    def _starts_new_attempt(self, req: ReqView, input_id: int) -> bool:
        """The scheduler scans one request's inputs left to right; asking for another request,
        or for an input at or before the last approved one, is a new attempt, and the old
        attempt's approvals are dropped unallocated (its KV allocation failed)."""
        last_req, last_input = self.approved[-1]
        return req != last_req or input_id <= last_input

    def _allocatable(self) -> list[tuple[int, int]]:
        if not hasattr(self, "model"):
            return []
        approved = {q.mm_hash(j) for q, j in self.approved}
        return [(r, i) for r, i in self._inputs()
                if not self._resident(r, i) and self.requests[r].mm_hash(i) not in approved]

    def _freeing_effect(self, idle_before: set[str]) -> str:
        newly = [h for h in self.model.freeable_order() if h not in idle_before]
        return f"{', '.join(newly)} -> freeable" if newly else "no entry becomes freeable"


def _allocation_effect(ok: bool, evicted: list[str], over_budget: bool) -> str:
    if over_budget:
        return "over the encoder compute budget"
    if not ok:
        return "no room even after evicting every freeable entry"
    return f"evicts {evicted}" if evicted else "fits in free slots"
