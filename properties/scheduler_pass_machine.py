"""SchedulerPassMachine: whole scheduling passes and the worker applying them, against the
first-come-first-served reference model (``docs/specs/scheduler-pass.md``).

Rules: ``add_request`` (a template of the world, given a fresh id ``r<n>``; templates share a
small pool of hashes, so items are shared across requests and repeated inside one), ``step``
(one engine step: the pass, the worker deleting the freed hashes, encoding the scheduled
inputs and gathering every scheduled range plus the drafter's read-ahead, then the update
from the output), ``finish_request`` (an abort between passes), ``preempt_request`` (a
running request loses its computed tokens and its encoder inputs and waits at the head of the
queue, as under KV pressure; under async scheduling only one with no step in flight) and
``reset_encoder_cache`` (weights updated while requests run:
the manager and the worker forget every encoder output). Items may carry an ``is_embed``
mask (fewer embeds than placeholder tokens). After every step: the pass
named no resident hash as freed, kept its budgets and the promises every pass makes
(``models/scheduler_pass.py``: ``broken_promises``, each a property of its own), its output
equals the model's (the FCFS policy those promises leave open), the worker did not miss,
the gathered rows are the encoder's output, and the worker's tensors are exactly the
manager's resident entries. A run ends by stepping until
every request finished (liveness: the cache and compute budget fit the largest item).

In async-scheduling worlds (``AsyncSchedulerPassMachine``) a ``step`` is one turn of an
engine with a two-step batch queue (vLLM's ``step_with_batch_queue``): it schedules the next
step, which the worker runs at once (the worker runs steps in order), and applies the oldest
step's output once two are in flight, the order vLLM's engine drives ``AsyncScheduler`` in.
Aborts and resets fall between turns, with a step in flight, as the engine's input queue
delivers them.

In KV-pressure worlds (``KvPressureSchedulerPassMachine``) the KV pool runs out: the pass
itself preempts, or holds a waiting request back (``models/scheduler_pass_kv.py``), and after
every step each request's blocks and the pool's free blocks are the model's
(``kv-blocks-agree``). In ``PrefixKvSchedulerPassMachine``'s worlds the pool caches
prefixes: a waiting request starts at its longest cached prefix, an input whose embeds lie
behind it is never encoded, and a hit on a free cached block takes it from the free blocks.
"""

from __future__ import annotations

import copy
from collections import Counter

import attrs
from attrs import evolve
from hypothesis import reject
from hypothesis import strategies as st
from hypothesis.stateful import initialize, precondition, rule

from models.encoder_cache_values import MmItem
from models.scheduler_pass import SchedulerPassModel, broken_promises
from models.scheduler_pass_values import Gathered, SchedRequest, SchedulerOutputView, StepView
from properties.harness import HarnessMachine, InvalidAction, draw_integer, pick
from properties.scheduler_pass_shrink import simpler_worlds
from properties.scheduler_pass_worlds import (
    SchedWorld,
    async_scheduler_worlds,
    encoder_decoder_worlds,
    kv_pressure_worlds,
    mamba_mtp_worlds,
    mamba_worlds,
    prefix_kv_worlds,
    scheduler_worlds,
)
from sim import targets
from sim.encoder_worker import EncoderCacheMiss, misread_rows

MAX_OPEN_REQUESTS = 4

HAZARDS = (
    "evicted then reallocated in one pass",
    "item shared within a pass",
    "tokens cut before an item",
    "read-ahead past the scheduled range",
    "read-ahead cut before an item",
    "request blocked for a pass",
    "pass frees hashes",
    "aborted while holding an input",
    "item with no embed in its window",
    "masked item encoded",
    "preempted while holding an input",
    "preempted request rescheduled",
    "encoder cache reset while requests hold inputs",
    "request refused for a reused identifier",
    "text-only request scheduled beside a multimodal one",
    "input loaded through the EC connector",
)

ASYNC_HAZARDS = (*HAZARDS, "input held for a pending sample")

MAMBA_HAZARDS = (*HAZARDS, "running request left no aligned chunk")

# Not among them: a victim holding an encoder input. Items span at most 6 tokens of prompts
# that span blocks of 16, so a victim's chunk rarely ends inside one (beyond the seeded
# search's bound in ``properties/test_hazards.py``): the harness's preemption rule drives the
# same ``_preempt_request`` with inputs held.
KV_HAZARDS = (*HAZARDS, "preempted for KV blocks", "preempted itself for KV blocks",
              "waiting request held back for KV blocks",
              "preempted where admission takes a first chunk",
              "waiting request held back under a watermark")
PREFIX_KV_HAZARDS = (*KV_HAZARDS, "prefix hit skipped an encoder input",
                     "prefix hit on a free cached block")

ENCODER_DECODER_HAZARDS = (
    "encoder-decoder input encoded whole at the start",
    "encoder-decoder pass after the start, within the input's span",
    "request blocked for a pass",
    "pass frees hashes",
    "preempted request rescheduled",
)


# On the vllm target the worker is the harness's (``sim/encoder_worker.py`` plays vLLM's GPU
# runner) and the drafter's read-ahead is the adapter's arithmetic over vLLM's output: a
# failure that rests on either says so ("judged on the harness's worker", "computed by the
# harness"; the target's HARNESS_WORKER and HARNESS_COMPUTED).
PROPERTIES = {
    "freed-not-resident": "free_encoder_mm_hashes names no hash resident after the pass",
    "budgets-hold": "token, encoder-compute and cache budgets hold for every pass",
    "encoded-input-needed": "every input a pass encodes or loads has an embed in its window",
    "prefix-hit-agrees": "a request the pass starts from waiting starts where the model's "
                         "does: at its longest cached prefix (0 without prefix caching)",
    "reads-held": "every embed position read is an item resident after the pass and held",
    "cut-before-refused": "a chunk cut short ends right before an item or at a chunk rule's end",
    "pass-maximal": "no request gets fewer tokens than the rules admit after those before it",
    "scheduler-output-agrees": "the pass's output and the step equal the FCFS prediction "
                               "(the read-ahead and the gathered rows compared on their own, "
                               "labelled where the harness computes them)",
    "no-encoder-cache-miss": "the worker finds every embedding a scheduled token needs "
                             "(on vllm: judged on the harness's worker)",
    "gathered-equals-encoded": "gathered rows are the encoder's output for the item "
                               "(on vllm: judged on the harness's worker)",
    "worker-agrees-with-manager": "the manager's resident entries are the model's, and the "
                                  "worker's tensors are exactly them",
    "liveness": "with the cache fitting the largest item, every request finishes",
    "slots-agree": "the manager's free and freeable embeds equal the model's after each call",
    "ec-connector-agrees": "the EC connector hears of each allocated and each freed input once",
    "kv-blocks-agree": "each request holds the KV blocks the model's passes gave it, the "
                       "pool's free blocks are the model's, and no more than the pool's blocks "
                       "are held (KV-pressure worlds)",
}


class SchedulerPassMachine(HarnessMachine):
    subsystem = "scheduler_pass"
    SUBJECT = "sched"
    PROPERTIES = PROPERTIES
    HAZARDS = HAZARDS
    REPRODUCER_IMPORTS = ("from models.encoder_cache_values import MmItem",
                          "from models.scheduler_pass_values import (Gathered, PlacedItem, "
                          "SchedRequest, SchedulerOutputView, StepView)",
                          "from sim.encoder_worker import misread_rows")
    REPRODUCER_HELPERS = ""

    @staticmethod
    def reproducer_subject(config: dict) -> str:
        options = ", ".join(f"{k}={v!r}" for k, v in config.items() if k != "target")
        return f'sched = make(target, "scheduler_pass", {options})'

    @initialize(world=scheduler_worlds())
    def setup(self, world: SchedWorld):
        self.sched = targets.make(self.target_name, "scheduler_pass", **world.config())
        if world.read_ahead and not getattr(self.sched, "drives_read_ahead", True):
            # A release whose drafter shift follows other rules (or that has none): the
            # target runs without a drafter, and so does the model.
            world = evolve(world, read_ahead=0)
            self.recorder.note_missing("no drafter prefill lookahead of vLLM 0.33.0's rules")
        if world.reuses_identifier and not getattr(self.sched, "refuses_reused_identifier",
                                                   True):
            # A release that takes the resident entry as the item's: not the spec's pass.
            self.recorder.note_missing("no refusal of a reused multimodal identifier")
            reject()
        if world.masked and not getattr(self.sched, "counts_embeds", True):
            # A release that charges an item's whole placeholder (break tokens included), by
            # design before embeddings were counted: not the spec's budget for masked items.
            self.recorder.note_missing("no embed-counting encoder budget for is_embed masks")
            reject()
        if world.ec_cached and not getattr(self.sched, "drives_ec_connector", True):
            # A release whose connector is asked per request, or never told of a free.
            world = evolve(world, ec_cached=())
            self.recorder.note_missing("no per-item EC connector (has_cache_item and "
                                       "update_state_after_free)")
        if world.encoder_decoder and not getattr(self.sched, "drives_encoder_decoder", True):
            # Could not run: the offline build failed (the reason names what the release's
            # Scheduler asked that the stub registry or the tiny Whisper config lacks).
            why = getattr(self.sched, "why_no_encoder_decoder", "")
            self.recorder.note_missing(f"no offline encoder-decoder Scheduler ({why[:120]})")
            reject()
        if world.async_scheduling and not getattr(self.sched, "drives_async_scheduling", True):
            # A release whose async scheduler frees an input as soon as its tokens are
            # scheduled (see scheduler_pass_compat.async_scheduler_cls): not the spec's.
            self.recorder.note_missing("no AsyncScheduler holding inputs for pending samples")
            reject()
        if world.mamba_block_size and not getattr(self.sched, "drives_mamba", True):
            # A release whose Mamba split follows other rules (see
            # scheduler_pass_compat.mamba_align_split).
            self.recorder.note_missing("no Mamba align-mode split of vLLM 0.33.0's rules")
            reject()
        if not getattr(self.sched, "can_preempt", True):
            world = evolve(world, preempts=False)   # a release that preempts only inline
            self.recorder.note_missing("no Scheduler._preempt_request (preempts only inline)")
        if world.enable_prefix_caching and not getattr(self.sched, "drives_prefix_caching", True):
            # A release whose block hashes do not tell items apart as the model's keys do:
            # the target was built without prefix caching, and so is the model.
            world = evolve(world, enable_prefix_caching=False)
            self.recorder.note_missing(self.sched.why_no_prefix_caching.removeprefix("absent: "))
        if world.kv_blocks and world.reserve_full_isl and \
                not getattr(self.sched, "drives_reserve_full_isl", True):
            # A release that admits a waiting request when its first chunk fits (it has no
            # whole-sequence gate): the model admits so too, and the run says so.
            world = evolve(world, reserve_full_isl=False)
            self.recorder.note_missing("no whole-sequence admission gate "
                                       "(scheduler_reserve_full_isl): admitted by first chunk")
        if world.watermark and not getattr(self.sched, "drives_watermark", True):
            # A release with no watermark keeps no block free at admissions: nor does the model.
            world = evolve(world, watermark=0.0)
            self.recorder.note_missing("no KV watermark (SchedulerConfig.watermark)")
        self.world = world
        # The reasons this world is outside what vLLM builds, as the target finds them (a
        # list it extends as requests arrive): failures, outcomes and reproducers carry them.
        self.trace.outside = getattr(self.sched, "outside_vllm", [])
        self.model = SchedulerPassModel(**world.config())
        self.open: list[str] = []                 # request ids in arrival order
        self.next_id = 0
        self.history: dict[str, SchedRequest] = {}
        self.preempted: set[str] = set()          # preempted and not yet scheduled again
        self.ec_heard: list = []                  # the connector's notices checked so far
        self.in_flight: list = []                 # the target's outputs not yet applied
        self.trace.config.update(world.config(), target=self.target_name)
        self.trace.world = world

    @property
    def max_open(self) -> int:
        """Requests open at once: ``MAX_OPEN_REQUESTS``, or fewer where the target's
        ``max_num_seqs`` is (vLLM requires it no larger than the token budget): the nearest
        world vLLM builds, which caps running requests where the model caps none."""
        return min(MAX_OPEN_REQUESTS, getattr(getattr(self, "sched", None), "max_num_seqs",
                                              MAX_OPEN_REQUESTS))

    # -- rules: choose, then act -------------------------------------------------------------

    @precondition(lambda self: len(getattr(self, "open", ())) < self.max_open)
    @rule(data=st.data())
    def add_request(self, data):
        # The id travels with the action, so a replay with steps deleted keeps every other
        # request's id (and the aborts that name it).
        self.act("add_request", draw_integer(data, 0, len(self.world.templates) - 1),
                 self.next_id)

    @precondition(lambda self: getattr(self, "open", None))
    @rule()
    def step(self):
        self.act("step")

    @precondition(lambda self: len(getattr(self, "open", ())) >= 2)
    @rule(data=st.data())
    def finish_request(self, data):
        rid = pick(data, self.open)
        self.act("finish_request", int(rid[1:]))

    @precondition(lambda self: getattr(self, "open", None) and self.world.preempts
                  and self._preemptible())
    @rule(data=st.data())
    def preempt_request(self, data):
        rid = pick(data, self._preemptible())
        self.act("preempt_request", int(rid[1:]))

    @precondition(lambda self: getattr(self, "open", None) and self.world.resets)
    @rule()
    def reset_encoder_cache(self):
        self.act("reset_encoder_cache")

    def end_of_run(self):
        # Liveness: every open request finishes within the passes its tokens need (each pass
        # gives some request at least one token while the cache fits the largest item).
        # Under async scheduling a turn may only apply the step before it (every open
        # request's last sample in flight), and the last step in flight is applied after.
        bound = sum(s.request.prompt_len - s.num_computed_tokens + s.request.max_tokens
                    for s in self.model.requests.values()) + 1 + 2 * self.world.async_scheduling
        if self.world.kv_blocks:
            # A request preempted for blocks computes its tokens again, while one started
            # before it runs: at most once per request ahead of it.
            bound *= len(self.model.requests) + 1
        for _ in range(bound):
            if not self.open and not self.model.pending:
                break
            self.act("step")
        self.check("liveness", not self.open, f"{self.open} unfinished after {bound} more passes")
        self.check("liveness", self.sched.get_num_unfinished_requests() == 0,
                   "the target still has unfinished requests")

    # -- actions -----------------------------------------------------------------------------

    def do_add_request(self, t: int, n: int):
        if t >= len(self.world.templates) or len(self.open) >= self.max_open \
                or f"r{n}" in self.history:
            raise InvalidAction("add_request: no such template, too many open or id used")
        request = evolve(self.world.templates[t], request_id=f"r{n}")
        self.next_id = max(self.next_id, n + 1)
        self.model.add_request(request)
        self.open.append(request.request_id)
        self.history[request.request_id] = request
        self.record_step(f"sched.add_request({request!r})", None, _describe(request))
        self.sched.add_request(request)     # after its step: a raise ends the program there

    def do_finish_request(self, n: int):
        rid = f"r{n}"
        if rid not in self.open:
            raise InvalidAction("finish_request: no such open request")
        self.open.remove(rid)
        if self._holds_inputs(rid):
            self.hazard("aborted while holding an input")
        self.model.finish_request(rid)
        self.record_step(f"sched.finish_request({rid!r})", None,
                         f"{rid} aborted: its encoder inputs are freed")
        self.sched.finish_request(rid)
        self._check_slots()

    def do_preempt_request(self, n: int):
        rid = f"r{n}"
        if rid not in self._preemptible():
            raise InvalidAction("preempt_request: no such running request with no step in "
                                "flight")
        if self._holds_inputs(rid):
            self.hazard("preempted while holding an input")
        self.preempted.add(rid)
        self.model.preempt_request(rid)
        self.record_step(f"sched.preempt_request({rid!r})", None,
                         f"{rid} preempted: inputs freed, computed 0, head of the waiting queue")
        self.sched.preempt_request(rid)
        self._check_slots()

    def do_reset_encoder_cache(self):
        if any(self._holds_inputs(rid) for rid in self.model.requests):
            self.hazard("encoder cache reset while requests hold inputs")
        self.model.reset_encoder_cache()
        self.record_step("sched.reset_encoder_cache()", None,
                         "every encoder output forgotten, by the manager and the worker")
        self.sched.reset_encoder_cache()
        self._check_slots()
        self._check_worker()

    def _holds_inputs(self, rid: str) -> bool:
        """Whether the request holds (encoder-decoder: reserves) an encoder input."""
        cache, request = self.model.cache, self.model.requests[rid].request
        if self.world.encoder_decoder:
            return any(cache.holds(request, i) for i in range(len(request.items)))
        return bool(cache.get_cached_input_ids(request))

    def _preemptible(self) -> list[str]:
        """Running requests with no step in flight (a mid-flight preemption's stale outputs
        are not modelled)."""
        return [rid for rid in self.open if self.model.requests[rid].started_at is not None
                and not self.model.requests[rid].in_flight]

    def do_step(self):
        self._computed_before = {rid: st.scheduled_upto
                                 for rid, st in self.model.requests.items()}
        self._resident_before = self.model.resident_mm_hashes()
        pipelined = self.world.async_scheduling
        # The engine's turn (see the module docstring): schedule while a request is open,
        # apply the oldest output in flight once two are (at once when not pipelined).
        schedules = bool(self.model.requests) or not pipelined
        output, gathered = SchedulerOutputView({}, {}, ()), ()
        waiting = {rid for rid, st in self.model.requests.items() if st.started_at is None}
        self._hits, self._first_starts = {}, {}
        if schedules:
            output = self.model.schedule()
            self._passed = copy.deepcopy(self.model)    # as the pass left it: its promises
            # A waiting request the pass started at a prefix hit starts there, not at 0.
            self._hits = {g.request.request_id: g for g in self.model.grants
                          if g.request.request_id in waiting and g.tokens and g.start}
            self._computed_before.update({rid: g.start for rid, g in self._hits.items()})
            self._first_starts = {g.request.request_id: g.start for g in self.model.grants
                                  if g.request.request_id in waiting and g.tokens}
            gathered = self.model.execute_model(output)
        applies = bool(self.model.pending) and (
            not pipelined or len(self.model.pending) >= 2 or not schedules)
        self._updated = set(self.model.pending[0].num_scheduled_tokens) if applies else set()
        expect = StepView(output, gathered, self.model.update_from_output(
            self.model.pending[0]) if applies else ())
        for rid in expect.finished:
            self.open.remove(rid)
        self.record_step("sched.step()", repr(expect), _step_effect(expect),
                         self._gathered_check(expect))
        self._count_hazards(expect)
        # What ``sched.step()`` does, call by call, so the pass's output is checked before the
        # worker runs it: every property then has one meaning and a bug is always reported by
        # the same one (a wrong output that would make the worker miss is a wrong output).
        out, gathered = output, ()
        if schedules:
            out, gathered = self._schedule_and_run(expect)
        actual = StepView(out, gathered,
                          self.sched.update_from_output(self.in_flight.pop(0)) if applies else ())
        self._accept_release_order()
        self._check_step(actual, expect)
        if self.world.ec_cached:
            heard, want = self.sched.ec_notifications(), self.model.ec_notifications()
            self.ec_heard += want
            self.check("ec-connector-agrees", heard == want,
                       lambda: f"the EC connector heard {heard}, expected {want}")

    def _schedule_and_run(self, expect: StepView):
        """The target's pass, checked before its worker runs it; returns the output and what
        the worker gathered."""
        out = self.sched.schedule()
        self.in_flight.append(out)
        resident = self.sched.resident_mm_hashes()
        # An encoder-decoder pass names the outputs the previous pass encoded, even one this
        # pass encodes again for another request (nothing is shared): the worker deletes it
        # before it encodes it anew, and the decoder reads it only after. The model predicts
        # that list (scheduler-output-agrees).
        stale = [h for h in out.free_encoder_mm_hashes
                 if h in resident and not self.world.encoder_decoder]
        self.check("freed-not-resident", not stale,
                   f"{stale} in free_encoder_mm_hashes but resident")
        self._check_budgets(out)
        # Before the promises below, which are judged from the model's starts: a request the
        # target started elsewhere (a wrong prefix hit) breaks them all, and this names why.
        starts = getattr(self.sched, "chunk_starts", None)
        if starts is not None:
            got = starts()
            wrong = {rid: (got.get(rid), s) for rid, s in self._first_starts.items()
                     if rid in out.num_scheduled_tokens and got.get(rid) != s}
            self.check("prefix-hit-agrees", not wrong, lambda: "started (at, model's): "
                       + ", ".join(f"{rid} {g}, {s}" for rid, (g, s) in wrong.items()))
        # What every pass promises, judged on the target's output before it is compared with
        # the model's: a failure names the promise (models/scheduler_pass.py).
        for name, detail in broken_promises(self._passed, out, resident):
            self.fail(name, detail)
        # vLLM's fields first; then the read-ahead, which the vllm target's adapter derives.
        own = attrs.evolve(out, num_read_ahead_tokens={})
        want = attrs.evolve(expect.output, num_read_ahead_tokens={})
        self.check("scheduler-output-agrees", own == want,
                   lambda: f"{own!r} != FCFS prediction {want!r}")
        self.check("scheduler-output-agrees",
                   out.num_read_ahead_tokens == expect.output.num_read_ahead_tokens,
                   lambda: f"num_read_ahead_tokens {dict(out.num_read_ahead_tokens)} != FCFS "
                   f"prediction {dict(expect.output.num_read_ahead_tokens)}"
                   f"{self._computed('num_read_ahead_tokens')}")
        try:
            return out, self.sched.execute_model(out)
        except EncoderCacheMiss as miss:
            self.fail("no-encoder-cache-miss", f"{miss}{self._on_worker()}")

    def _computed(self, field: str) -> str:
        """" (computed by the harness: how)" where the target's ``field`` is not vLLM's."""
        how = getattr(self.sched, "HARNESS_COMPUTED", {}).get(field)
        return f" (computed by the harness: {how})" if how else ""

    def _on_worker(self) -> str:
        """" (judged on the harness's worker: ...)" where the worker plays vLLM's runner."""
        worker = getattr(self.sched, "HARNESS_WORKER", None)
        return f" (judged on the harness's worker: {worker})" if worker else ""

    # -- checks ------------------------------------------------------------------------------

    def _check_step(self, actual: StepView, expect: StepView) -> None:
        self._check_gathered(actual)
        self.check("scheduler-output-agrees", actual.output == expect.output
                   and actual.finished == expect.finished,
                   lambda: f"step {actual!r} != {expect!r}")
        self.check("scheduler-output-agrees", actual.gathered == expect.gathered,
                   lambda: f"gathered {actual.gathered!r} != {expect.gathered!r}"
                   f"{self._on_worker()}")
        resident = self.sched.resident_mm_hashes()
        self.check("worker-agrees-with-manager", resident == self.model.resident_mm_hashes(),
                   lambda: f"manager resident {sorted(resident)} != "
                   f"{sorted(self.model.resident_mm_hashes())}")
        self._check_worker()
        self._check_slots()
        if self.world.kv_blocks:
            # Requests that hit one prefix share its blocks: the sum bounds an uncached pool.
            held, want = self.sched.kv_blocks_held(), self.model.kv_blocks_held()
            self.check("kv-blocks-agree", held == want and (
                sum(held.values()) <= self.world.kv_blocks or self.world.enable_prefix_caching),
                       lambda: f"KV blocks held {held} != {want} (pool {self.world.kv_blocks})")
            # A cached block is free until a hit takes it, though a request computed it.
            free, want = self.sched.kv_free_blocks(), self.model.kv_free_blocks()
            self.check("kv-blocks-agree", free == want,
                       lambda: f"kv_free_blocks() {free} != {want} (pool {self.world.kv_blocks})")
        self.check_valid(self.sched)

    def _accept_release_order(self) -> None:
        # Several requests refused in one pass are finished in a set's order (vLLM 0.33.0),
        # so the order in which their entries join the freeable queue is unspecified: the
        # same entries must join, in any order, and the model follows the target's.
        if not self.model.released_together:
            return
        order = getattr(self.sched, "freeable_order", None)
        if order is None:
            return
        got, want = order(), self.model.freeable_order()
        self.check("slots-agree", sorted(got) == sorted(want),
                   lambda: f"freeable entries {got} != {want} (in any order)")
        # The released entries keep the model's places in the queue; which takes which
        # follows the target.
        entries = self.model.cache.entries
        group = [h for h in got if h in self.model.released_together]
        ticks = sorted(entries[h].unreferenced_at for h in group)
        for mm_hash, tick in zip(group, ticks, strict=True):
            entries[mm_hash].unreferenced_at = tick

    def _check_worker(self) -> None:
        resident = self.sched.resident_mm_hashes()
        worker = getattr(self.sched, "worker_mm_hashes", None)
        if worker is not None:
            self.check("worker-agrees-with-manager", worker() == resident,
                       lambda: f"worker tensors {sorted(worker())} != resident entries "
                       f"{sorted(resident)} (leak or lost tensor){self._on_worker()}")

    def _check_slots(self) -> None:
        # What is held (not just resident) shows only here: a request that keeps an input it
        # should have let go of leaves the entry resident either way. Not in encoder-decoder
        # worlds: vLLM's encoder-decoder manager releases an input's embeds each time it is
        # freed, held or not, and the Scheduler frees every input after each decoding step
        # (issue #55733, all releases to 0.33.0: the encoder-decoder cache machine's
        # divergence); its free count only grows past the cache there. The worlds keep the
        # cache at least the compute budget, so no pass's output depends on that count.
        slots = getattr(self.sched, "manager_slots", None)
        if slots is not None and not self.world.encoder_decoder:
            self.check("slots-agree", slots() == self.model.manager_slots(),
                       lambda: f"(free, freeable) embeds {slots()} != "
                       f"{self.model.manager_slots()}: an input held or freed out of turn")

    def _check_budgets(self, out) -> None:
        world = self.world
        tokens = sum(out.num_scheduled_tokens.values())
        self.check("budgets-hold", tokens <= world.token_budget,
                   lambda: f"{tokens} tokens > {world.token_budget}")
        # Budgets count embeds: a masked item costs its True positions, not its span.
        # A reused identifier names two counts: the resident one is the model's entry's.
        sizes = {it.mm_hash: it.num_embeds for t in world.templates for it in t.items}
        sizes.update({h: e.num_embeds
                      for h, e in getattr(self.model.cache, "entries", {}).items()})
        compute = sum(self.history[rid].items[i].num_embeds
                      for rid, ids in out.scheduled_encoder_inputs.items() for i in ids)
        self.check("budgets-hold", compute <= world.encoder_compute_budget,
                   lambda: f"encoder compute {compute} > {world.encoder_compute_budget}")
        held = sum(sizes[h] for h in self.sched.resident_mm_hashes())
        self.check("budgets-hold", held <= world.cache_size, f"{held} resident embeds > cache")

    def _check_gathered(self, actual: StepView) -> None:
        if getattr(self.sched, "last_gathered_tensors", None) is None:
            return
        reads = self._reads(actual.gathered)
        lost = [g for g, (item, _, _) in zip(actual.gathered, reads, strict=True) if item is None]
        self.check("gathered-equals-encoded", not lost,
                   lambda: f"gathered {lost} name no item with an embed left to read")
        if lost:                           # accepted and gone on past: nothing to compare
            return
        bad = misread_rows(self.sched, reads)
        self.check("gathered-equals-encoded", not bad,
                   lambda: f"{bad[0]} (gathered {actual.gathered}){self._on_worker()}")

    def _reads(self, gathered: tuple[Gathered, ...]) -> list[tuple[MmItem | None, int, int]]:
        """The item and rows each gathered range reads (None: no such item). Rows come item
        by item in prompt order from the scheduled range: a request's next item there with
        the hash is the one read (a reused identifier names two contents), the next with an
        embed left to read: one whose last positions in the range take none (a mask's tail)
        is read no more."""
        after: dict[str, int] = {}
        reads = []
        for g in gathered:
            items = self.history[g.request_id].items
            start = self._computed_before[g.request_id]
            k = next((k for k in range(after.get(g.request_id, 0), len(items))
                      if items[k].mm_hash == g.mm_hash and items[k].has_embed_in(start,
                                                                                 items[k].end)),
                     None)
            if k is not None:
                after[g.request_id] = k + 1
            reads.append((None if k is None else items[k].mm_item(), g.start, g.end))
        return reads

    def _gathered_check(self, expect: StepView) -> str | None:
        """The reproducer's line after a step that gathers: the tensors are the rows read."""
        reads = self._reads(expect.gathered)
        if not reads or any(item is None for item, _, _ in reads):
            return None
        return f"assert misread_rows(sched, {reads!r}) == []"

    def state_checks(self) -> list[str]:
        resident = sorted(self.model.resident_mm_hashes())     # sorted: a stable file
        shown = "{" + ", ".join(map(repr, resident)) + "}" if resident else "set()"
        return [f"assert sched.resident_mm_hashes() == {shown}",
                f"assert sched.worker_mm_hashes() == {shown}",
                *([] if self.world.encoder_decoder else          # see _check_slots
                  [f"assert sched.manager_slots() == {self.model.manager_slots()}"]),
                f"assert sched.get_num_unfinished_requests() == {len(self.model.requests)}",
                *([f"assert sched.kv_blocks_held() == {self.model.kv_blocks_held()}",
                   f"assert sched.kv_free_blocks() == {self.model.kv_free_blocks()}"]
                  if self.world.kv_blocks else [])] \
            + ([f"assert sched.ec_notifications() == "            # all since the start
                f"{sorted(self.ec_heard + self.model.heard)}"] if self.world.ec_cached else [])

    # -- helpers -----------------------------------------------------------------------------

    def _count_hazards(self, expect: StepView) -> None:
        # Read off the model's grants (models/scheduler_pass_grant.py): whom the pass served,
        # what each wanted, got and judged, and what kept it from more.
        if self.world.encoder_decoder:
            self._count_encoder_decoder_hazards(expect)
            return
        out, s = expect.output, self.world.read_ahead
        grants = self.model.grants
        given = [g for g in grants if g.tokens]
        # The items of each window (the read-ahead's included), as the pass judged them.
        hashes = [[g.request.mm_hash(i) for i in g.request.inputs_in(
            g.start, g.start + g.tokens + g.read_ahead)] for g in given]
        encoded = {g.request.mm_hash(i) for g in given for i in g.encoded}
        holders = Counter(h for hs in hashes for h in set(hs))
        uses = Counter(h for hs in hashes for h in hs)
        made = {self.history[rid].mm_hash(i)
                for part in (out.scheduled_encoder_inputs, out.loaded_encoder_inputs)
                for rid, ids in part.items() for i in ids}
        for flag, name in (
                # A hash resident when the pass began is encoded again only if the pass
                # evicted it first.
                (made & self._resident_before, "evicted then reallocated in one pass"),
                (any(n > 1 for n in holders.values()) or any(uses[h] > 1 for h in encoded),
                 "item shared within a pass"),
                (any(g.limit == "room" and g.tokens < g.wanted for g in given),
                 "tokens cut before an item"),
                (self._read_past(out), "read-ahead past the scheduled range"),
                (any(g.tokens == g.wanted and g.read_ahead < s for g in given),
                 "read-ahead cut before an item"),
                (any(g.wanted and not g.tokens for g in grants), "request blocked for a pass"),
                (out.free_encoder_mm_hashes, "pass frees hashes"),
                (any(map(self._embedless_in_window, given)), "item with no embed in its window"),
                (self._held_for_sample(), "input held for a pending sample"),
                (any(g.limit == "aligned" for g in grants),
                 "running request left no aligned chunk"),
                (any(g.limit == "refused" for g in grants),
                 "request refused for a reused identifier"),
                (out.loaded_encoder_inputs, "input loaded through the EC connector")):
            if flag:
                self.hazard(name)
        if any(self.history[rid].items[i].is_embed is not None
               for rid, ids in out.scheduled_encoder_inputs.items() for i in ids):
            self.hazard("masked item encoded")
        scheduled = [self.history[rid] for rid in out.num_scheduled_tokens]
        if any(not r.items for r in scheduled) and any(r.items for r in scheduled):
            self.hazard("text-only request scheduled beside a multimodal one")
        victims = set(self.model.preempted)
        hits = self._hits.values()
        for flag, name in ((victims, "preempted for KV blocks"),
                           (any(g.limit == "preempted" for g in grants),
                            "preempted itself for KV blocks"),
                           (any(g.limit == "kv" for g in grants),
                            "waiting request held back for KV blocks"),
                           # What the whole-sequence gate exists to spare (vLLM's default).
                           (victims and not self.world.reserve_full_isl,
                            "preempted where admission takes a first chunk"),
                           (self.world.watermark and any(g.limit == "kv" for g in grants),
                            "waiting request held back under a watermark"),
                           # An input whose every embed lies behind the hit: never encoded.
                           (any(x.embed_positions[-1] < g.start for g in hits
                                for x in g.request.items), "prefix hit skipped an encoder input"),
                           (any(g.revived for g in hits), "prefix hit on a free cached block")):
            if flag:
                self.hazard(name)
        self.preempted |= victims
        if self.preempted & set(out.num_scheduled_tokens):
            self.hazard("preempted request rescheduled")
        self.preempted -= set(out.num_scheduled_tokens)

    def _read_past(self, out) -> bool:
        """Whether a drafter read an embed past its request's scheduled range."""
        for rid, k in out.num_scheduled_tokens.items():
            end = self._computed_before[rid] + k
            stop = end + out.num_read_ahead_tokens.get(rid, 0)
            if any(end <= p < stop for x in self.history[rid].items for p in x.embed_positions):
                return True
        return False

    def _embedless_in_window(self, g) -> bool:
        """Whether an item reaches into the encoder's window of ``g`` with no embed in it (the
        encoder judges it for room, and must not encode it)."""
        lo, hi = g.start, g.start + g.tokens + self.model.read_ahead
        return any(not g.request.items[i].has_embed_in(lo, hi)
                   for i in g.request.inputs_in(lo, hi))

    def _held_for_sample(self) -> bool:
        """Whether this step's update kept an input whose positions are all scheduled: one
        ending at the prompt's end while the request's first sample was pending (async
        scheduling; an update frees every other such input)."""
        requests, cache = self.model.requests, self.model.cache
        return any(requests[rid].request.items[i].end <= requests[rid].scheduled_upto
                   for rid in self._updated & set(requests)
                   for i in cache.get_cached_input_ids(requests[rid].request))

    def _count_encoder_decoder_hazards(self, expect: StepView) -> None:
        out = expect.output
        for flag, name in ((out.scheduled_encoder_inputs,
                            "encoder-decoder input encoded whole at the start"),
                           # A decoder pass while its computed tokens are inside the input's
                           # span: a scheduler that judged it by position would encode again.
                           (any(0 < self._computed_before[rid] < self.history[rid].items[0].end
                                for rid in out.num_scheduled_tokens),
                            "encoder-decoder pass after the start, within the input's span"),
                           (any(g.wanted and not g.tokens for g in self.model.grants),
                            "request blocked for a pass"),
                           (out.free_encoder_mm_hashes, "pass frees hashes"),
                           (self.preempted & set(out.num_scheduled_tokens),
                            "preempted request rescheduled")):
            if flag:
                self.hazard(name)
        self.preempted -= set(out.num_scheduled_tokens)

    @classmethod
    def simpler_worlds(cls, world: SchedWorld, actions):
        return simpler_worlds(world, actions)


class EncoderDecoderSchedulerPassMachine(SchedulerPassMachine):
    """The same rules and checks on an encoder-decoder model's worlds (Whisper): a request's
    one input is encoded whole when it starts and freed after its first step (see
    ``models/scheduler_pass.py``). A machine of its own, so the decoder-only worlds keep the
    draws their hazards and the catalogue's finds were pinned at."""

    HAZARDS = ENCODER_DECODER_HAZARDS

    @initialize(world=encoder_decoder_worlds())
    def setup(self, world: SchedWorld):
        SchedulerPassMachine.setup(self, world)


class AsyncSchedulerPassMachine(SchedulerPassMachine):
    """The same rules and checks under an engine that schedules asynchronously (vLLM's
    ``AsyncScheduler``, pipelined as the module docstring says). A machine of its own, so the
    synchronous worlds keep the draws their hazards and the catalogue's finds were pinned at."""

    HAZARDS = ASYNC_HAZARDS

    @initialize(world=async_scheduler_worlds())
    def setup(self, world: SchedWorld):
        SchedulerPassMachine.setup(self, world)


class MambaSchedulerPassMachine(SchedulerPassMachine):
    """The same rules and checks on a hybrid Mamba model's worlds (prefill chunks aligned to
    blocks, ``models/scheduler_pass_mamba.py``). A machine of its own, so the other worlds
    keep the draws their hazards and the catalogue's finds were pinned at."""

    HAZARDS = MAMBA_HAZARDS

    @initialize(world=mamba_worlds())
    def setup(self, world: SchedWorld):
        SchedulerPassMachine.setup(self, world)


class KvPressureSchedulerPassMachine(SchedulerPassMachine):
    """The same rules and checks where the KV pool runs out (``kv_pressure_worlds``): the
    pass preempts and holds waiting requests back on its own (``models/scheduler_pass_kv.py``).
    A machine of its own, so the other worlds keep the draws their finds were pinned at."""

    HAZARDS = KV_HAZARDS

    @initialize(world=kv_pressure_worlds())
    def setup(self, world: SchedWorld):
        SchedulerPassMachine.setup(self, world)


class PrefixKvSchedulerPassMachine(SchedulerPassMachine):
    """The KV-pressure machine where the pool caches prefixes (``prefix_kv_worlds``): a
    waiting request starts at its longest cached prefix, which may skip its encoder inputs,
    and a hit may take cached blocks back from the free ones."""

    HAZARDS = PREFIX_KV_HAZARDS

    @initialize(world=prefix_kv_worlds())
    def setup(self, world: SchedWorld):
        SchedulerPassMachine.setup(self, world)


class MambaMtpSchedulerPassMachine(MambaSchedulerPassMachine):
    """The Mamba machine under an MTP drafter (``mamba_mtp_worlds``): the known-bug
    catalogue's machine for ``sched-mamba-mtp-stall``. Against vLLM (0.33.0 on) it meets that
    stall, in worlds vLLM would not build: its test expects the failure there (the reproducer
    records the stall in the world vLLM builds)."""

    @initialize(world=mamba_mtp_worlds())
    def setup(self, world: SchedWorld):
        SchedulerPassMachine.setup(self, world)


def _describe(request: SchedRequest) -> str:
    items = ", ".join(f"{it.mm_hash}@[{it.offset},{it.end})"
                      + (f" {it.num_embeds} embeds" if it.is_embed is not None else "")
                      for it in request.items)
    return f"{request.request_id}: {request.prompt_len} prompt tokens, max " \
           f"{request.max_tokens} new" + (f"; {items}" if items else "")


def _step_effect(step: StepView) -> str:
    out = step.output
    parts = [" ".join(f"{r}:{k}" for r, k in out.num_scheduled_tokens.items()) or "nothing"]
    if out.scheduled_encoder_inputs:
        parts.append(f"encode {dict(out.scheduled_encoder_inputs)}")
    if out.free_encoder_mm_hashes:
        parts.append(f"worker deletes {list(out.free_encoder_mm_hashes)}")
    if step.finished:
        parts.append(f"{', '.join(step.finished)} finished")
    return "; ".join(parts)
