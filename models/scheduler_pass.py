"""Reference model of one scheduling pass on the encoder path (``specs/encoder-cache.md``
sections 2 and 4), first come first served, and of the update that follows the step.

Scope: which tokens and encoder inputs a pass schedules, what it tells the worker to delete,
what the worker then gathers, and how computed tokens, encoder inputs and requests move on
after the step, a preemption (the request starts again from token 0 at the head of the
waiting queue, its inputs freed) and a reset of the encoder cache between passes. Not in
scope: KV blocks (a preemption is a rule, not a consequence of KV pressure), priorities,
sampling (every request samples one token when its computed tokens reach its known tokens).

Items may carry an ``is_embed`` mask: the cache and the compute budget count embeds, the
worker gathers the embeds at the scheduled positions, and an item whose embeds all lie
outside the scheduled range is not encoded that pass (see ``_place`` for what it still costs).

The policy, stated as what each request is granted. Requests are served running first (in
the order they were first scheduled), then waiting ones (in arrival order), as vLLM's V1
scheduler orders them, while token budget is left. A request with ``c`` computed tokens wants
``w = min(tokens left to compute, token budget left)``; with a drafter reading ``s`` tokens
ahead (``read_ahead``: MTP / EAGLE drafters, vLLM issue #38551) the pass judges the window
``[c, c + w + s)`` (``s = 0`` without one). The request is granted:
- the longest prefix ``[c, e)`` of the window whose items (the placeholders overlapping it)
  can all be resident at once: a resident hash is held (``check_and_update_cache``), any
  other is allocated, all of them within the cache (held entries and the range's hashes,
  counted once each, fit ``cache_size``; room comes from evicting freeable entries oldest
  first) and within the compute budget left (the embeds of the hashes not resident when
  reached: one evicted to make room for an earlier item of the range is encoded again). A
  hash placed earlier in the pass is resident by then: a repeated item costs nothing and its
  input holds the entry too (vLLM 0.33.0 ``_allocate_encoder_inputs``); the tokens
  ``[c, c + min(w, e - c))``: a shorter prefix ends right before an item, and one that ends
  inside the lookahead part leaves the tokens whole;
- with ``disable_chunked_mm_input``, the first item of the window starting at or after ``c``
  that ``[c, c + w)`` does not cover whole, when every item before it placed, instead stops
  the tokens ``s`` before its start (its items are those before it);
- a chunk ending within ``s`` of the known tokens' end moves back to ``s`` before it (MTP);
- no token (``k = 0``): the request is skipped (a waiting one stays waiting); the holds
  and evictions reaching its items made stay, nothing is allocated;
- the drafter's read-ahead: the ``s`` tokens past the granted ones, cut at the first embed of
  an input the request does not hold (``models/scheduler_pass_drafter.py``).
``get_freed_mm_hashes()`` ends the pass.

An encoder-cache (EC) connector may hold some items' encoder outputs outside the engine
(``ec_cached_mm_hashes``: another instance encoded them). Such an item, when the pass would
encode it, is loaded instead: it takes room in the cache like an encoded one (it is allocated,
and evictions make room for it) but costs no encoder compute; the pass still admits it only
within the compute budget left, as for an item it would encode (vLLM 0.33.0 asks
``can_allocate`` before it asks the connector). A loaded input is named in the output's
``loaded_encoder_inputs``, not in ``scheduled_encoder_inputs``. The connector hears of every
input the pass allocates, encoded or loaded (``update_state_after_alloc``), and of every input
the update frees once its tokens are computed (``update_state_after_free``); a preemption, a
finish and a reset free inputs without a per-input notice (vLLM 0.33.0 tells the connector of
a finished request through ``request_finished`` instead). ``ec_notifications()`` lists what
it heard since the last call, as ``(verb, request_id, input_id)``.

An identifier reused for different content (a client-provided multimodal UUID sent with
another image: the same ``mm_hash``, another embed count) is refused, not encoded: before a
request is granted, its wanted range is read item by item as far as the pass would get (the
items before one must all be placeable, and with unchunked input the item must not be cut);
the first item whose identifier is then resident (from an earlier pass, an earlier request
of this one, or an earlier item of this range) with another embed count rejects the request.
It gets no token; what reaching that item did to the cache stays (the earlier items' holds
and the evictions made room for them; nothing is allocated), and the update after the step
finishes it with an error, freeing its inputs (vLLM 0.33.0:
``_reject_on_encoder_cache_embed_mismatch``, then ``update_from_output``). Several rejected
in one pass are finished in an order vLLM leaves open (a ``set``): the model frees them by
request id and says which entries turned freeable together (``released_together``), so a
caller can accept any order among those.

An encoder-decoder model (Whisper: ``encoder_decoder``) runs its encoder once, before the
decoder's first token: the pass that starts a request (no computed token) encodes all of its
inputs whole (however long, against a short decoder prompt), and the request gets no token
unless they all fit the compute budget left and the cache's unreserved embeds (nothing is
shared or evicted: the encoder-decoder manager, ``models/encoder_decoder_cache.py``); later
passes schedule decoder tokens only. Its decoder prefill is not chunked (vLLM turns chunked
prefill off for these models): a waiting request whose tokens do not all fit the token
budget left is not started, and no waiting request after it is either. The decoder reads
each encoder output whole in the step that encodes it (its cross-attention keys and values
are kept in the KV cache from then on), so the update frees all of a request's inputs once
it has a computed token, and the worker deletes an output one pass after the pass that
encoded it (``get_freed_mm_hashes``).

The read-ahead is gated: the output says how far each request's drafter may read, and that
range only covers items the pass made resident. The seed says the fix for #38551 left the
drafter able to read an entry evicted in an earlier pass and that the scheduler should gate
it; vLLM 0.33.0 lets the drafter fall back to token embeddings for an input it could not
encode (``_try_schedule_encoder_inputs``), which this output states explicitly. So a correct
scheduler never makes the worker miss.

A hybrid model with Mamba layers whose states are cached per block (``mamba_block_size``,
vLLM's align mode) first cuts each request's wanted tokens to an aligned chunk
(``models/scheduler_pass_mamba.py``); a chunk left with no token judges no item (no hold, no
eviction), passes a running request over and stops the waiting queue.

Async scheduling (``async_scheduling``, vLLM's ``AsyncScheduler``): the engine schedules
step N+1 before it applies step N's output (its batch queue holds two steps), so a pass
starts each running request where its steps in flight end, and counts the tokens they will
sample as known: a request whose pending sample is its last (``max_tokens``) is not
scheduled again. ``step()`` is then one turn of that engine: schedule (and run) a step, then
apply the oldest step in flight once two are; with no request open it applies the oldest
one only. The update of a step frees each input whose positions are all scheduled, as
without async, except one: an input ending at the prompt's end stays held until an update
that begins with a sampled token of the request known. The update runs before it resolves
its own step's sample, and vLLM 0.33.0 treats the newest positions as unsettled while a
sample is pending (``_free_encoder_inputs`` subtracts ``num_output_placeholders``, for a
rejected draft could roll back into them); an item in the prompt is affected only while no
output token is known. A preempted request must have no step in flight (the stale outputs
of vLLM's mid-flight preemption are not modelled).

How the model computes it: candidate ranges are tried longest first (the window's end and
the item offsets below it: between two offsets the items, hence the outcome, do not change); a
range's items are placed on a scratch copy of the cache model in prompt order (held when
resident, allocated when an embed of theirs is in the range, else only given room) and its
encoding is judged against the compute budget as a whole; the first range that qualifies is
kept (its copy becomes the cache). The drafter's rules are positions computed from it. The
pass's facts are then checked (budgets, every item read is resident, no hash encoded twice).
"""

from __future__ import annotations

import copy
from collections import Counter

from attrs import define, field, frozen

from models import scheduler_pass_drafter as drafter
from models import scheduler_pass_mamba as mamba
from models.encoder_cache import EncoderCacheModel
from models.encoder_decoder_cache import EncoderDecoderCacheModel
from models.scheduler_pass_values import Gathered, SchedRequest, SchedulerOutputView, StepView


@frozen
class Flight:
    """A request's share of a step that was scheduled and not yet updated."""

    start: int                     # its first scheduled position
    tokens: int
    samples: bool                  # it reaches the last token known or to come: one is sampled


@define
class RequestState:
    request: SchedRequest
    num_computed_tokens: int = 0        # by steps already updated
    num_output_tokens: int = 0          # sampled, and known to the scheduler
    started_at: int | None = None       # its rank among starts (None: waiting)
    queued_at: int = 0                  # its rank in the waiting queue (lower: nearer the head)
    in_flight: list[Flight] = field(factory=list)   # oldest first

    @property
    def num_tokens(self) -> int:
        """Tokens known so far: the prompt and the sampled tokens."""
        return self.request.prompt_len + self.num_output_tokens

    @property
    def scheduled_upto(self) -> int:
        """Where its next step starts: computed, or scheduled in a step still in flight."""
        return self.num_computed_tokens + sum(f.tokens for f in self.in_flight)

    @property
    def num_tokens_to_come(self) -> int:
        """Known tokens and those the steps in flight will sample."""
        return self.num_tokens + sum(f.samples for f in self.in_flight)


@define
class PassNotes:
    """What happened inside the last pass (for hazard counting, not part of the output)."""

    reallocated: list[str] = field(factory=list)   # evicted then allocated again in the pass
    shared: bool = False                           # a hash two inputs use (see _notes)
    cut: bool = False                              # tokens cut right before an item
    read_ahead_cut: bool = False                   # the read-ahead stopped before an item
    blocked: bool = False                          # a request got no token from its items
    read_ahead_read: bool = False                  # the drafter read an item past its range
    probed: bool = False           # an item with no embed in its window was judged, not encoded
    rejected: tuple[str, ...] = ()  # refused: an identifier resident with another embed count
    loaded: bool = False           # an input loaded through the EC connector, not encoded
    held_for_sample: bool = False  # async: an update kept an input ending at the prompt's end
    unaligned: bool = False        # Mamba: a running request's aligned chunk had no token


@frozen(eq=False)
class Placement:
    """A range's items placed on a scratch copy of the cache: all held, some encoded."""

    cache: EncoderCacheModel
    held: tuple[int, ...]          # input ids of every item in the range, in order
    encoded: tuple[int, ...]       # those that were not resident: the encoder runs them
    compute: int                   # their embeds
    probed: tuple[int, ...] = ()   # not resident, no embed in the range: judged, not encoded
    loaded: tuple[int, ...] = ()   # not resident, held by the EC connector: loaded, not encoded


@frozen(eq=False)
class Grant:
    """What one request got in a pass; the output and the hazard notes are read off these."""

    request: SchedRequest
    computed: int                  # c when the pass started
    wanted: int
    tokens: int
    read_ahead: int
    placement: Placement
    refused_for_room: bool         # the next longer range failed the cache or compute test


@define
class SchedulerPassModel:
    """What a first-come-first-served scheduler and its worker must do, step by step."""

    cache_size: int
    token_budget: int
    encoder_compute_budget: int
    read_ahead: int = 0
    disable_chunked_mm_input: bool = False
    ec_cached_mm_hashes: frozenset[str] = field(default=frozenset(), converter=frozenset)
    encoder_decoder: bool = False
    async_scheduling: bool = False
    mamba_block_size: int = 0      # hybrid Mamba model, states cached per block (0: none)
    cache: EncoderCacheModel | EncoderDecoderCacheModel = field(init=False)
    requests: dict[str, RequestState] = field(factory=dict)   # arrival order
    notes: PassNotes = field(factory=PassNotes)
    passes: int = 0
    starts: int = 0                # requests started (or restarted after a preemption) so far
    arrivals: int = 0
    preemptions: int = 0
    rejected: list[str] = field(factory=list)   # refused since the last update, finished by it
    released_together: set[str] = field(factory=set)   # turned freeable in one unordered go
    heard: list[tuple[str, str, int]] = field(factory=list)   # the EC connector's notices
    pending: list[SchedulerOutputView] = field(factory=list)  # outputs not yet applied

    def __attrs_post_init__(self) -> None:
        if self.async_scheduling and self.encoder_decoder:
            raise ValueError("async_scheduling is modelled for decoder-only worlds: "
                             "pass encoder_decoder=False")
        if self.mamba_block_size and (self.async_scheduling or self.encoder_decoder
                                      or self.disable_chunked_mm_input):
            raise ValueError("mamba_block_size is modelled for synchronous decoder-only worlds "
                             "with chunked multimodal input (models/scheduler_pass_mamba.py)")
        self.cache = (EncoderDecoderCacheModel if self.encoder_decoder
                      else EncoderCacheModel)(self.cache_size)

    # -- the API -----------------------------------------------------------------------------

    def add_request(self, request: SchedRequest) -> None:
        if request.request_id in self.requests:
            raise ValueError(f"request {request.request_id!r} is already open")
        self.arrivals += 1
        self.requests[request.request_id] = RequestState(request, queued_at=self.arrivals)

    def finish_request(self, request_id: str) -> None:
        """Abort (or finish) a request between passes: its encoder inputs are freed."""
        state = self.requests.pop(request_id)
        self.cache.free(state.request)

    def preempt_request(self, request_id: str) -> None:
        """A running request is preempted (KV pressure, between passes): its encoder inputs
        are freed, it forgets every computed token and goes back to the head of the waiting
        queue (vLLM 0.33.0 ``Scheduler._preempt_request``). Its sampled tokens stay: a later
        pass recomputes the prompt and them, re-encoding each item not still resident."""
        state = self.requests[request_id]
        if state.started_at is None:
            raise ValueError(f"request {request_id!r} is waiting: only a running one is preempted")
        if state.in_flight:
            raise ValueError(f"request {request_id!r} has a step in flight: apply its output "
                             "first (a mid-flight preemption's stale outputs are not modelled)")
        self.cache.free(state.request)
        self.preemptions += 1
        state.num_computed_tokens, state.started_at = 0, None
        state.queued_at = -self.preemptions        # ahead of every arrival and earlier preempt

    def reset_encoder_cache(self) -> None:
        """Between passes (weights updated): every entry and every request's hold is dropped;
        the worker drops its tensors. Running requests re-encode what they still need."""
        self.cache.reset()

    def get_num_unfinished_requests(self) -> int:
        return len(self.requests)

    def holds_inputs(self, request_id: str) -> bool:
        """Whether the request holds (or, encoder-decoder, reserves) an encoder input."""
        request = self.requests[request_id].request
        if self.encoder_decoder:
            return any(self.cache.holds(request, i) for i in range(len(request.items)))
        return bool(self.cache.get_cached_input_ids(request))

    def ec_notifications(self) -> list[tuple[str, str, int]]:
        """What the EC connector heard since the last call: ``("alloc", rid, input_id)`` for
        each input a pass allocated, ``("free", rid, input_id)`` for each input an update
        freed. Sorted: which of one step's notices comes first is not promised."""
        heard, self.heard = sorted(self.heard), []
        return heard

    def resident_mm_hashes(self) -> set[str]:
        if self.encoder_decoder:           # encoded and not yet named freed to the worker
            return set(self.cache.allocated_this_pass) | set(self.cache.allocated_last_pass)
        return set(self.cache.entries)

    def worker_mm_hashes(self) -> set[str]:
        """The worker holds exactly the resident entries' outputs."""
        return self.resident_mm_hashes()

    def manager_slots(self) -> tuple[int, int]:
        """(free, freeable) embeds of the encoder cache: what is held shows here first. An
        encoder-decoder cache reserves and releases, it keeps nothing freeable: both free."""
        if self.encoder_decoder:
            return self.cache.num_free_slots, self.cache.num_free_slots
        return self.cache.num_free_slots, self.cache.num_freeable_slots

    def freeable_order(self) -> list[str]:
        """Resident entries no request holds, the first to be evicted first."""
        return self.cache.freeable_order()

    def accept_release_order(self, order: list[str]) -> None:
        """Take ``order``'s arrangement of the entries in ``released_together`` (several
        rejected requests finished at once: their order is unspecified). Their places in the
        queue stay the model's; only who takes which of them changes."""
        group = [h for h in order if h in self.released_together]
        if sorted(group) != sorted(self.released_together):
            raise ValueError(f"{order} does not hold {sorted(self.released_together)}")
        ticks = sorted(self.cache.entries[h].unreferenced_at for h in group)
        for mm_hash, tick in zip(group, ticks, strict=True):
            self.cache.entries[mm_hash].unreferenced_at = tick

    def schedule(self) -> SchedulerOutputView:
        self.passes += 1
        grants: list[Grant] = []
        refused_now = []
        unaligned = []                  # running requests the Mamba alignment left no token
        for state in self._in_order():
            spent = [g for g in grants if g.tokens]
            tokens_left = self.token_budget - sum(g.tokens for g in spent)
            if tokens_left == 0:
                break
            if state.num_output_tokens + sum(f.samples for f in state.in_flight) \
                    >= state.request.max_tokens:
                continue       # its last token is being sampled: nothing more to schedule
            compute_left = self.encoder_compute_budget - sum(g.placement.compute for g in spent)
            left = state.num_tokens_to_come - state.scheduled_upto
            wanted = min(left, tokens_left)
            if self.encoder_decoder and state.started_at is None and wanted < left:
                break          # its prefill is not chunked: the waiting queue stops here
            if self.mamba_block_size:
                wanted = mamba.aligned_chunk(
                    state.scheduled_upto, wanted, num_tokens=state.num_tokens,
                    prompt_len=state.request.prompt_len, block=self.mamba_block_size,
                    token_budget=self.token_budget, lookahead=self.read_ahead)
                if not wanted:          # no chunk: no item judged (scheduler_pass_mamba.py)
                    if state.started_at is None:
                        break
                    unaligned.append(state.request.request_id)
                    continue
            refused = None if self.encoder_decoder else self._refusal(state, wanted, compute_left)
            if refused is not None:
                self.cache = refused
                refused_now.append(state.request.request_id)
                continue
            grant = (self._grant_whole if self.encoder_decoder else self._grant)(
                state, wanted, compute_left)
            grants.append(grant)
            if not grant.tokens and not self.encoder_decoder:
                # Skipped after its items were reached (the drafter's runway or unchunked
                # roll-back left no token): the holds and evictions stay, nothing is
                # allocated (vLLM 0.33.0 allocates only for a scheduled request).
                self.cache = _unallocated(grant.placement, state.request)
            if grant.tokens:
                self.cache = grant.placement.cache
                state.in_flight.append(Flight(grant.computed, grant.tokens,
                                              grant.tokens == left))
                if state.started_at is None:
                    self.starts += 1
                    state.started_at = self.starts
        # Refused since the last update (a request refused again counts once): the next
        # update finishes them, whichever step it applies.
        self.rejected += [rid for rid in refused_now if rid not in self.rejected]
        granted = [g for g in grants if g.tokens]
        if self.ec_cached_mm_hashes:           # an engine with a connector: it hears
            self.heard += [("alloc", g.request.request_id, i) for g in granted
                           for i in (*g.placement.encoded, *g.placement.loaded)]
        self._check_pass(granted)
        self.notes = self._notes(grants)
        self.notes.rejected = tuple(refused_now)
        self.notes.unaligned = bool(unaligned)
        self.notes.blocked |= bool(refused_now)
        output = SchedulerOutputView(
            {g.request.request_id: g.tokens for g in granted},
            {g.request.request_id: g.placement.encoded for g in granted if g.placement.encoded},
            self.cache.get_freed_mm_hashes(),
            {g.request.request_id: g.read_ahead for g in granted} if self.read_ahead else {},
            {g.request.request_id: g.placement.loaded for g in granted if g.placement.loaded})
        self.pending.append(output)
        return output

    def gathered(self, output: SchedulerOutputView) -> tuple[Gathered, ...]:
        """What the worker gathers for ``output`` (call right after the ``schedule`` that made
        it, the worker runs steps in order): each
        item's embeddings (rows of its encoder output) at the positions of the scheduled range
        plus the granted read-ahead; an item with no embed there is not read at all."""
        rows = []
        if self.encoder_decoder:           # cross-attention reads each new output whole
            return tuple(Gathered(rid, self.requests[rid].request.mm_hash(i), 0,
                                  self.requests[rid].request.num_embeds(i))
                         for rid in output.num_scheduled_tokens
                         for i in output.scheduled_encoder_inputs.get(rid, ()))
        for rid, k in output.num_scheduled_tokens.items():
            state = self.requests[rid]
            first = state.in_flight[-1].start
            scheduled_end = first + k
            read_end = scheduled_end + output.num_read_ahead_tokens.get(rid, 0)
            for item in state.request.items:
                lo, hi = item.embeds_before(first), item.embeds_before(read_end)
                if lo < hi:
                    rows.append(Gathered(rid, item.mm_hash, lo, hi))
                    self.notes.read_ahead_read |= hi > item.embeds_before(scheduled_end)
        return tuple(rows)

    execute_model = gathered      # the worker's part of a step, as the model predicts it

    def update_from_output(self, output: SchedulerOutputView) -> tuple[str, ...]:
        """The oldest step in flight ran: advance its computed tokens, free fully computed
        items' inputs, take the token it sampled, finish at max tokens (each request in the
        step's order: a finish frees what its inputs still held). A request aborted while
        the step was in flight is passed over."""
        if not self.pending or self.pending[0] != output:
            raise ValueError("update_from_output applies the oldest output in flight first")
        self.pending.pop(0)
        finished = []
        for rid in output.num_scheduled_tokens:
            state = self.requests.get(rid)
            if state is None:
                continue
            self._advance(state, state.in_flight.pop(0))
            if state.num_output_tokens >= state.request.max_tokens:
                self.finish_request(rid)
                finished.append(rid)
        # Rejected requests finish with an error; which entries that frees does not depend on
        # the order, the freeable queue's order among them does (see the module docstring).
        rejected = sorted(rid for rid in self.rejected if rid in self.requests)
        idle_before = set(self.cache.freeable_order()) if rejected else set()
        for rid in rejected:
            self.finish_request(rid)
        self.released_together = set(self.cache.freeable_order()) - idle_before \
            if len(rejected) > 1 else set()
        self.rejected = []
        # Listed as the target reports them: the step's own requests in its order, then
        # the others by id.
        done = {*finished, *rejected}
        return (*(rid for rid in output.num_scheduled_tokens if rid in done),
                *(rid for rid in rejected if rid not in output.num_scheduled_tokens))

    def step(self) -> StepView:
        """One engine step: schedule, the worker runs the output (gathers before the update,
        arguments are evaluated left to right), update from it. Under async scheduling the
        update applies the oldest step in flight, once two are (or when no request is open
        and nothing is scheduled: the output is then empty)."""
        if not self.async_scheduling:
            output = self.schedule()
            return StepView(output, self.gathered(output), self.update_from_output(output))
        output, gathered = SchedulerOutputView({}, {}, ()), ()
        if self.requests:
            output = self.schedule()
            gathered = self.gathered(output)
            if len(self.pending) < 2:
                return StepView(output, gathered, ())
        return StepView(output, gathered,
                        self.update_from_output(self.pending[0]) if self.pending else ())

    # -- encoder-decoder: the encoder runs once, first ---------------------------------------

    def _grant_whole(self, state: RequestState, wanted: int, compute_left: int) -> Grant:
        """An encoder-decoder request's grant: all its inputs encoded whole when it starts
        (they must fit the compute left and the unreserved embeds together), else no token;
        once started, its decoder tokens need no encoder."""
        request, c = state.request, state.scheduled_upto
        scratch = copy.deepcopy(self.cache)
        inputs = tuple(range(len(request.items))) if c == 0 else ()
        compute = sum(request.num_embeds(i) for i in inputs)
        fits = compute <= min(compute_left, scratch.num_free_slots)
        for i in inputs if fits else ():
            scratch.allocate(request, i)
        placement = Placement(scratch, inputs, inputs if fits else (), compute if fits else 0)
        return Grant(request, c, wanted, wanted if fits else 0, 0, placement, not fits)

    # -- a reused identifier -------------------------------------------------------------------

    def _refusal(self, state: RequestState, wanted: int,
                 compute_left: int) -> EncoderCacheModel | None:
        """The cache after a rejection of ``state``'s request, or None when it is not rejected.

        Each item of the window (the wanted range and the drafter's lookahead past it) is a
        possible point of refusal; it is reached when the range up to its offset places (the
        items before it all fit: a failure there cuts the range before the item) and, with
        unchunked input, the item is not cut. It refuses when its identifier is then resident
        with another embed count."""
        request, c = state.request, state.scheduled_upto
        for j in _overlapping(request, c, c + wanted + self.read_ahead):
            item = request.items[j]
            if self.disable_chunked_mm_input and c <= item.offset and c + wanted < item.end:
                return None
            before = self._place(request, c, max(c, item.offset), compute_left)
            if before is None:
                return None
            cached = before.cache.get_cached_num_encoder_embeds(request, j)
            if cached is not None and cached != item.num_embeds:
                return _unallocated(before, request)
        return None

    # -- one request's grant -----------------------------------------------------------------

    def _grant(self, state: RequestState, wanted: int, compute_left: int) -> Grant:
        """The chunk is the longest prefix of the drafter's window whose items place (cut to
        the tokens wanted), unless the unchunked rule reaches an item first; then it keeps
        the drafter's runway (``models/scheduler_pass_drafter.py``)."""
        request, c, lookahead = state.request, state.scheduled_upto, self.read_ahead
        end, placement, for_room = self._longest(request, c, c + wanted + lookahead, c,
                                                 compute_left)
        tokens = min(wanted, end - c)
        whole = drafter.stop_before_item(request, c, wanted, lookahead) \
            if self.disable_chunked_mm_input else None
        # Reached when every item before it placed: the rule is judged before the item's own
        # placement, so it wins over a refusal of that item.
        if whole is not None and whole.offset <= end:
            tokens, for_room = max(0, whole.offset - c - lookahead), False
            placement = self._place(request, c, whole.offset, compute_left)
            assert placement is not None, f"model: a prefix of {request} stopped placing"
        tokens = drafter.with_runway(c, tokens, state.num_tokens, lookahead)
        held = placement.cache.get_cached_input_ids(request)
        read_ahead = drafter.reach(request, c + tokens, lookahead, held) if tokens else 0
        return Grant(request, c, wanted, tokens, read_ahead, placement, for_room)

    def _longest(self, request: SchedRequest, c: int, top: int, floor: int,
                 compute_left: int) -> tuple[int, Placement, bool]:
        """The longest range ``[c, end)``, ``floor <= end <= top``, that qualifies, its
        placement, and whether the next longer candidate failed for room or compute.

        ``floor`` always qualifies (an empty range, or a range already granted). Only ``top``
        and the item offsets in between are candidates: a shorter range ends before an item.
        """
        candidates = sorted({top, floor} | {x.offset for x in request.items
                                            if floor < x.offset < top}, reverse=True)
        for_room = False
        for end in candidates:
            placement = self._place(request, c, end, compute_left)
            if placement is not None:
                return end, placement, for_room
            for_room = True
        raise AssertionError(f"model: {request.request_id} has no range, not even [{c}, {floor})")

    def _place(self, request: SchedRequest, c: int, end: int,
               compute_left: int) -> Placement | None:
        """Place the items overlapping ``[c, end)`` on a scratch copy of the cache, or None
        when the whole set cannot be resident at once or its encoding exceeds the budget.

        An item resident when reached is held; one with an embed in ``[c, end)`` is encoded
        (allocated on the scratch: it takes room from the next ones), or loaded when the EC
        connector holds its hash (allocated too, but spending no compute). One that is neither
        (its embeds all lie outside the range: only leading, trailing or gap positions are
        scheduled) is not encoded, yet vLLM 0.33.0 still asks the cache for room for its
        embeds and the budget for their compute (``can_allocate`` comes before the embed
        test in ``_try_schedule_encoder_inputs``) and evicts for it: the model judges it
        where it stands, against what the range placed before it. The compute budget is
        charged in embeds, for the encoded set as a whole."""
        scratch, encoded, probed, loaded = copy.deepcopy(self.cache), [], [], []
        for i in _overlapping(request, c, end):
            if scratch.check_and_update_cache(request, i):
                continue
            embeds = request.num_embeds(i)
            needed = _embeds_in(request.items[i], c, end) > 0
            external = needed and request.mm_hash(i) in self.ec_cached_mm_hashes
            spent = sum(request.num_embeds(j) for j in encoded)
            # can_allocate here only tests room (and evicts): compute is judged below for
            # what is encoded, here for what is only judged (probed or loaded): it must fit
            # the budget left though it spends none.
            if ((not needed or external) and embeds > compute_left - spent) \
                    or not scratch.can_allocate(request, i, embeds, 0):
                return None
            if needed:
                scratch.allocate(request, i)
                (loaded if external else encoded).append(i)
            else:
                probed.append(i)
        compute = sum(request.num_embeds(i) for i in encoded)
        if compute > compute_left:
            return None
        return Placement(scratch, tuple(_overlapping(request, c, end)), tuple(encoded), compute,
                         tuple(probed), tuple(loaded))

    # -- facts about the pass ------------------------------------------------------------------

    def _check_pass(self, granted: list[Grant]) -> None:
        """Postconditions the grants must meet (a failure here is a model bug)."""
        assert sum(g.tokens for g in granted) <= self.token_budget, "model: token budget"
        assert sum(g.placement.compute for g in granted) <= self.encoder_compute_budget, \
            "model: compute budget"
        encoded = [g.request.mm_hash(i) for g in granted
                   for i in (*g.placement.encoded, *g.placement.loaded)]
        # Encoder-decoder inputs are never shared: two requests with one audio encode it twice.
        assert self.encoder_decoder or len(encoded) == len(set(encoded)), \
            f"model: {encoded} encodes a hash twice"
        assert self.cache.num_free_slots >= 0, "model: resident embeds exceed the cache"
        for g in granted if not self.encoder_decoder else ():
            read_end = g.computed + g.tokens + g.read_ahead
            read = [i for i in _overlapping(g.request, g.computed, read_end)
                    if _embeds_in(g.request.items[i], g.computed, read_end)]
            held = self.cache.get_cached_input_ids(g.request)
            assert set(read) <= held and all(self.cache.is_resident(g.request.mm_hash(i))
                                             for i in read), f"model: {g} reads a missing item"
            # A cut chunk ends right before an item, the lookahead before one (the unchunked
            # rule), or the lookahead before the known tokens' end (the drafter's runway).
            ends = {x.offset - lag for x in g.request.items for lag in {0, self.read_ahead}}
            ends.add(self.requests[g.request.request_id].num_tokens - self.read_ahead)
            assert g.tokens == g.wanted or g.computed + g.tokens in ends, \
                f"model: {g} is cut but not right before an item"

    def _notes(self, grants: list[Grant]) -> PassNotes:
        granted = [g for g in grants if g.tokens]
        # Shared: two requests hold one hash, or a repeated item is encoded once for both of
        # its inputs (the duplicate path); a repeat that only hits a resident entry is not.
        holders = Counter(h for g in granted for h in {g.request.mm_hash(i)
                                                       for i in g.placement.held})
        uses = Counter(g.request.mm_hash(i) for g in granted for i in g.placement.held)
        encoded = {g.request.mm_hash(i) for g in granted for i in g.placement.encoded}
        return PassNotes(
            reallocated=[] if self.encoder_decoder else
            [h for h in self.cache.evicted_this_pass if self.cache.is_resident(h)],
            shared=any(n > 1 for n in holders.values()) or any(uses[h] > 1 for h in encoded),
            cut=any(g.refused_for_room and g.tokens < g.wanted for g in granted),
            read_ahead_cut=any(g.tokens == g.wanted and g.read_ahead < self.read_ahead
                               for g in granted),
            blocked=len(granted) < len(grants),
            probed=any(g.placement.probed for g in granted),
            loaded=any(g.placement.loaded for g in granted))

    def _advance(self, state: RequestState, flight: Flight) -> None:
        state.num_computed_tokens += flight.tokens
        items = state.request.items
        computed = {i for i, x in enumerate(items)
                    if x.end <= state.scheduled_upto or self.encoder_decoder}
        if self.async_scheduling and not state.num_output_tokens:
            # No sample is known yet: the last prompt position is not settled (module
            # docstring), so an input ending there waits for a later update.
            held = {i for i in computed if items[i].end == state.request.prompt_len}
            self.notes.held_for_sample |= bool(held & self.cache.get_cached_input_ids(
                state.request))
            computed -= held
        # In prompt order: the order entries turn freeable is the order they are evicted.
        for input_id in sorted(computed & self.cache.get_cached_input_ids(state.request)):
            self.cache.free_encoder_input(state.request, input_id)
            if self.ec_cached_mm_hashes:
                self.heard.append(("free", state.request.request_id, input_id))
        if flight.samples:
            state.num_output_tokens += 1       # the step completed the known tokens: sample

    def _in_order(self) -> list[RequestState]:
        """Running requests in the order they started, then waiting ones by their place in
        the queue (arrival order, a preempted request at the head)."""
        return sorted(self.requests.values(),
                      key=lambda s: (s.started_at is None, s.started_at or s.queued_at))


def _unallocated(placement: Placement, request: SchedRequest) -> EncoderCacheModel:
    """``placement``'s cache without what it allocated: a refused request allocates nothing
    (neither what it would encode nor what it would load), yet keeps its holds on resident
    items and the evictions made while placing."""
    cache = placement.cache
    encoded = {request.mm_hash(i) for i in (*placement.encoded, *placement.loaded)}
    for mm_hash in encoded:
        del cache.entries[mm_hash]
    inputs = cache.recorded.get(request.request_id, {})
    for input_id in [i for i, h in inputs.items() if h in encoded]:
        del inputs[input_id]
    if not inputs:
        cache.recorded.pop(request.request_id, None)
    return cache


def _overlapping(request: SchedRequest, lo: int, hi: int) -> list[int]:
    """Input ids of the items with a position in ``[lo, hi)`` (none when it is empty).
    Placeholders are prompt tokens: a position past the prompt has no item."""
    return [i for i, x in enumerate(request.items)
            if x.offset < request.prompt_len and max(x.offset, lo) < min(x.end, hi)]


def _embeds_in(item, lo: int, hi: int) -> int:
    """How many of ``item``'s embeds sit at token positions in ``[lo, hi)``."""
    return item.embeds_before(hi) - item.embeds_before(lo)
