"""EncoderDecoderCacheMachine: vLLM's ``EncoderDecoderCacheManager`` against its model.

Encoder-decoder models (Whisper) schedule their encoder inputs with this manager: a budget of
encoder embeddings, nothing shared, nothing evicted (``models/encoder_decoder_cache.py``).
Its worlds are the encoder cache's (``encoder_cache_worlds``, manager ``encoder_decoder``):
items shared across requests and repeated inside one, sizes that rarely fit together.

Calls follow what vLLM's scheduler does for an encoder-decoder request: ``can_allocate`` for
each input it does not hold, the approvals ``allocate``d in order (or abandoned when its KV
allocation fails); then, because ``get_cached_input_ids`` names every input, a free of every
input after each decoding step, held or not, and ``free`` of a request that may hold nothing
(KV allocation failed, preemption, finish). ``get_freed_mm_hashes`` ends the pass; the worker
then does what the model runner does in ``execute_model``: it deletes the freed tensors first,
then encodes the pass's inputs, and the decoder reads them. A weights update (``reset``)
comes between passes. The worker is the harness's and encodes after it deletes, so the freed
list cannot make it miss or misread a tensor of the pass: what a wrong list does there is
leak (``worker-agrees-with-manager``).

Of the encoder cache's properties, these do not apply (the class keeps none of it, and the
scheduler never asks): ``num_freeable_slots`` (nothing is evicted), entries and their reuse
(``check_and_update_cache`` never hits; checked by ``returns-agree``), ``freed-not-resident``
(the freed list may name a hash encoded again in the same pass: the runner deletes before it
encodes), ``get_cached_num_encoder_embeds`` and ``bookkeeping-bounded`` (no per-hash or
per-request state; the base class's fields do not exist on this class).
"""

from __future__ import annotations

from hypothesis import strategies as st
from hypothesis.stateful import initialize, invariant, precondition, rule

from models.encoder_cache_values import MmItem, ReqView
from models.encoder_decoder_cache import EncoderDecoderCacheModel
from properties.encoder_cache_shrink import simpler_worlds
from properties.encoder_cache_worlds import encoder_cache_worlds
from properties.harness import HarnessMachine, InvalidAction, draw_integer, pick
from sim import targets
from sim.encoder_worker import EncoderWorker

UNLIMITED_BUDGET = 10**6
BUDGET_SLACK_UNLIMITED = 8       # the largest drawn slack means "no compute limit"

HAZARDS = (
    "can_allocate: no room",
    "can_allocate: over compute budget",
    "approval abandoned",
    "one hash encoded for two requests",
    "allocated again after a free",
    "free_encoder_input: input not held",
    "free: request holds nothing",
    "reset: requests running",
)

PROPERTIES = {
    "returns-agree": "every call returns what the model returns",
    # Its bound (0 <= num_free_slots <= cache_size) is the model's: no property of its own.
    "slots-agree": "num_free_slots equals the model's (cache_size minus what is held)",
    "cached-inputs-agree": "get_cached_input_ids(request) names every input of the request",
    "worker-agrees-with-manager": "after a pass the worker holds a tensor exactly for each "
                                  "input encoded in it (the freed list leaks none)",
}


class EncoderDecoderCacheMachine(HarnessMachine):
    subsystem = "encoder_decoder_cache"
    SUBJECT = "cache"
    PROPERTIES = PROPERTIES
    HAZARDS = HAZARDS
    REPRODUCER_IMPORTS = ("from models.encoder_cache_values import MmItem, ReqView",)
    REPRODUCER_HELPERS = ""
    # False: frees as vLLM's scheduler makes them (every input after each decoding step, held
    # or not; requests holding nothing). True: each held input freed once, only requests that
    # hold all their inputs finished: a caller that never frees what it does not hold, which
    # takes the unheld-release bug (encdec-unheld-release, every release to 0.33.0) out of
    # reach, so the rest of the class is still checked against those releases.
    FREES_ONLY_HELD = False

    @staticmethod
    def reproducer_subject(config: dict) -> str:
        return f'cache = make(target, "encoder_decoder_cache", cache_size={config["cache_size"]})'

    @initialize(world=encoder_cache_worlds(managers=("encoder_decoder",)))
    def setup(self, world):
        self.world = world
        self.requests: tuple[ReqView, ...] = world.requests
        self.model = EncoderDecoderCacheModel(world.cache_size)
        self.cache = targets.make(self.target_name, "encoder_decoder_cache",
                                  cache_size=world.cache_size)
        self.worker = EncoderWorker()
        self.approved: list[tuple[ReqView, int]] = []   # the current attempt's approvals
        self.encoding: list[MmItem] = []                 # allocated in this pass
        self.freed_once: set[tuple[int, int]] = set()    # (request, input) held, then freed
        self.free_shown = world.cache_size               # what the reproducer last asserted
        self.trace.config.update(cache_size=world.cache_size, target=self.target_name)
        self.trace.world = world
        self.trace.setup += [f"{r.request_id} = {r!r}" for r in world.requests]

    # -- rules: choose a valid step, then act ------------------------------------------------

    @rule(data=st.data())
    def check_and_update_cache(self, data):
        self.act("check_and_update_cache", *pick(data, self._inputs()))

    @precondition(lambda self: self._allocatable())
    @rule(data=st.data())
    def can_allocate(self, data):
        r, i = pick(data, self._allocatable())
        # budget slack in -1..8 (8: unlimited) and extra_to_schedule in 0..2, in one draw.
        slack, extra = divmod(draw_integer(data, 0, 29), 3)
        self.act("can_allocate", r, i, slack - 1, extra)

    @precondition(lambda self: getattr(self, "approved", None))
    @rule()
    def allocate(self):
        self.act("allocate")

    @precondition(lambda self: self._freeable_inputs())
    @rule(data=st.data())
    def free_encoder_input(self, data):
        # Held inputs weighted 3:1; the scheduler frees every input after each decoding step.
        held = [(r, i) for r, i in self._inputs() if self.model.holds(self.requests[r], i)]
        self.act("free_encoder_input", *pick(data, held * 3 + self._freeable_inputs()))

    @precondition(lambda self: self._freeable_requests())
    @rule(data=st.data())
    def free(self, data):
        freeable = self._freeable_requests()
        holding = [r for r, i in self._inputs()
                   if self.model.holds(self.requests[r], i) and r in freeable]
        self.act("free", pick(data, holding * 3 + freeable))

    @rule()
    def get_freed_mm_hashes(self):
        self.act("get_freed_mm_hashes")

    # A weights update arrives between engine steps: after a pass, before the next allocates.
    @precondition(lambda self: hasattr(self, "model") and not self.approved
                  and not self.encoding)
    @rule()
    def reset(self):
        self.act("reset")

    def end_of_run(self):
        # The engine keeps running: the last pass ends, and the one after it reports it.
        for _ in range(2):
            self.act("get_freed_mm_hashes")

    @classmethod
    def simpler_worlds(cls, world, actions):
        return simpler_worlds(world, actions)

    # -- actions: one API call on model and target, compared ---------------------------------

    def do_check_and_update_cache(self, r: int, i: int):
        req = self.requests[r]
        self.call("returns-agree", "check_and_update_cache", req, i,
                  shown=f"cache.check_and_update_cache({req.request_id}, {i})",
                  effect="never a hit: nothing is shared")

    def do_can_allocate(self, r: int, i: int, budget_slack: int, extra_to_schedule: int):
        req = self.requests[r]
        if (r, i) not in self._allocatable():
            raise InvalidAction("can_allocate: input held or already approved")
        if self.approved and (self.approved[-1][0] != req or i <= self.approved[-1][1]):
            self.approved.clear()                    # a new attempt: the old one's KV failed
            self.hazard("approval abandoned")
        n = req.num_embeds(i)
        budget = UNLIMITED_BUDGET if budget_slack == BUDGET_SLACK_UNLIMITED else n + budget_slack
        to_schedule = sum(q.num_embeds(j) for q, j in self.approved) + extra_to_schedule
        ok = self.call(
            "returns-agree", "can_allocate", req, i, encoder_compute_budget=budget,
            num_embeds_to_schedule=to_schedule,
            shown=f"cache.can_allocate({req.request_id}, {i}, encoder_compute_budget="
                  f"{budget}, num_embeds_to_schedule={to_schedule})",
            effect=lambda ok: "over the encoder compute budget" if n > budget
            else "fits in free slots" if ok else "no room: nothing is evicted")
        if ok:
            self.approved.append((req, i))
        elif n > budget:
            self.hazard("can_allocate: over compute budget")
        else:
            self.hazard("can_allocate: no room")

    def do_allocate(self):
        if not self.approved:
            raise InvalidAction("allocate without an approved can_allocate")
        req, i = self.approved.pop(0)
        r, item = self.requests.index(req), req.items[i]
        if (r, i) in self.freed_once:
            self.hazard("allocated again after a free")
        if any(x.mm_hash == item.mm_hash for x in self.encoding) or \
                item.mm_hash in self.worker.encoder_cache:
            self.hazard("one hash encoded for two requests")
        self.apply("allocate", req, i, shown=f"cache.allocate({req.request_id}, {i})",
                   effect=f"{item.num_embeds} embeds reserved for {item.mm_hash}")
        self.encoding.append(item)

    def do_free_encoder_input(self, r: int, i: int):
        if (r, i) not in self._freeable_inputs():
            raise InvalidAction("this world frees only held inputs")
        req = self.requests[r]
        held = self.model.holds(req, i)
        if held:
            self.freed_once.add((r, i))
        else:
            self.hazard("free_encoder_input: input not held")
        self.apply("free_encoder_input", req, i,
                   shown=f"cache.free_encoder_input({req.request_id}, {i})",
                   effect=f"releases {req.num_embeds(i)} embeds" if held
                   else "not held: releases nothing")

    def do_free(self, r: int):
        if r not in self._freeable_requests():
            raise InvalidAction("this world frees only requests holding every input")
        req = self.requests[r]
        held = [i for i in range(len(req.items)) if self.model.holds(req, i)]
        if not held:
            self.hazard("free: request holds nothing")
        if self.approved and self.approved[0][0] == req:
            self.approved.clear()                    # a finished request allocates nothing
        self.freed_once.update((r, i) for i in held)
        self.apply("free", req, shown=f"cache.free({req.request_id})",
                   effect=f"releases inputs {held}" if held else "holds nothing: releases "
                   "nothing")

    def do_get_freed_mm_hashes(self):
        self.approved.clear()                        # the pass ends
        expect = self.model.get_freed_mm_hashes()
        self.record("cache.get_freed_mm_hashes()", expect,
                    "ends the pass: the worker deletes these, then encodes the pass's inputs")
        actual = self.cache.get_freed_mm_hashes()
        # The model runner's order in execute_model: delete the freed tensors, encode the
        # scheduled inputs, run the decoder (which reads them).
        self.worker.free(actual)
        encoded, self.encoding = self.encoding, []
        for item in encoded:
            self.worker.encode(item)
        leaked = self.worker.resident_hashes() - {item.mm_hash for item in encoded}
        self.check("worker-agrees-with-manager", not leaked,
                   lambda: f"{sorted(leaked)} still on the worker after the pass that used "
                           "them ended: no freed list names them (leak)")
        self.check("returns-agree", actual == expect,
                   f"get_freed_mm_hashes returned {actual}, the model expects {expect}")

    def do_reset(self):
        if self.model.reserved:
            self.hazard("reset: requests running")
        if self.encoding or self.approved:
            raise InvalidAction("reset comes between passes")
        self.apply("reset", shown="cache.reset()", effect="forgets every reservation")
        self.worker.free(list(self.worker.resident_hashes()))   # weights changed: drop all

    # -- invariants ---------------------------------------------------------------------------

    @invariant()
    def slots_agree(self):
        if not hasattr(self, "model"):
            return
        free = self.cache.num_free_slots
        self.check("slots-agree", free == self.model.num_free_slots,
                   f"num_free_slots {free} != {self.model.num_free_slots}")
        self.check_valid(self.cache)

    @invariant()
    def cached_inputs_agree(self):
        if not hasattr(self, "model"):
            return
        for req in self.requests:
            actual = self.cache.get_cached_input_ids(req)
            expect = self.model.get_cached_input_ids(req)
            if actual != expect:
                self.fail("cached-inputs-agree",
                          f"{req.request_id} {sorted(actual)} != {sorted(expect)}")

    # -- helpers ------------------------------------------------------------------------------

    def record(self, call: str, expect, comment: str) -> None:
        # The reproducer asserts num_free_slots whenever the model says it changed.
        check = None
        if self.model.num_free_slots != self.free_shown:
            self.free_shown = self.model.num_free_slots
            check = f"assert cache.num_free_slots == {self.free_shown}"
        self.record_step(call, None if expect is None else repr(expect), comment, check)

    def state_checks(self) -> list[str]:
        lines = [f"assert cache.num_free_slots == {self.model.num_free_slots}"]
        for req in self.requests:
            lines.append(f"assert cache.get_cached_input_ids({req.request_id}) == "
                         f"{self.model.get_cached_input_ids(req)}")
        return lines

    def _inputs(self) -> list[tuple[int, int]]:
        return [(r, i) for r, req in enumerate(self.requests) for i in range(len(req.items))]

    def _freeable_inputs(self) -> list[tuple[int, int]]:
        """What a free may name: any input (the scheduler's pattern), or, with
        ``FREES_ONLY_HELD``, the held ones."""
        if not hasattr(self, "model"):
            return []
        if not self.FREES_ONLY_HELD:
            return self._inputs()
        return [(r, i) for r, i in self._inputs() if self.model.holds(self.requests[r], i)]

    def _freeable_requests(self) -> list[int]:
        if not hasattr(self, "model"):
            return []
        everyone = list(range(len(self.requests)))
        if not self.FREES_ONLY_HELD:
            return everyone
        return [r for r in everyone if all(self.model.holds(self.requests[r], i)
                                           for i in range(len(self.requests[r].items)))]

    def _allocatable(self) -> list[tuple[int, int]]:
        if not hasattr(self, "model"):
            return []
        approved = {(self.requests.index(q), j) for q, j in self.approved}
        return [(r, i) for r, i in self._inputs()
                if not self.model.holds(self.requests[r], i) and (r, i) not in approved]


class EncoderDecoderCacheFreesOnceMachine(EncoderDecoderCacheMachine):
    """The same machine, freeing only what is held (``FREES_ONLY_HELD``)."""

    FREES_ONLY_HELD = True
