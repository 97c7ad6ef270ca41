"""Reference model of vLLM V1's scheduling pass on the encoder path and the update after it
(``docs/specs/scheduler-pass.md``): what every pass promises (``broken_promises``, checked on
every pass, the target's and the model's own) and, computed, only what those leave open, the
policy: first come first served (running requests as they started, then waiting ones in
arrival order, a preempted one at the head), each the longest chunk its variant's statement
admits after those before it (``models/scheduler_pass_grant.py``, ``_mamba.py``). Also: the
EC connector, preemption, encoder-cache resets, async scheduling (a pass starts where steps in
flight end, counting their samples; ``step()`` applies the oldest once two are in flight), and
alone, a KV pool that runs out, prefix caching on or off (``kv_blocks``, ``_kv.py``; else it
never does). Not modelled: priorities."""

from __future__ import annotations

import itertools

from attrs import define, evolve, field

from models import scheduler_pass_kv as kv
from models.encoder_cache import EncoderCacheModel
from models.encoder_decoder_cache import EncoderDecoderCacheModel
from models.scheduler_pass_grant import DecoderOnly, EncoderDecoder, Grant
from models.scheduler_pass_mamba import Mamba
from models.scheduler_pass_values import Gathered, SchedRequest, SchedulerOutputView, StepView


@define
class RequestState:
    request: SchedRequest
    num_computed_tokens: int = 0   # by steps updated
    num_output_tokens: int = 0     # sampled and known
    started_at: int | None = None  # its rank among starts (None: waiting)
    queued_at: int = 0             # its place in the waiting queue (lower: nearer the head)
    in_flight: list[Grant] = field(factory=list)    # its steps not yet updated, oldest first

    @property
    def num_tokens(self) -> int:
        return self.request.prompt_len + self.num_output_tokens

    @property
    def scheduled_upto(self) -> int:
        return self.num_computed_tokens + sum(f.tokens for f in self.in_flight)

    @property
    def num_tokens_left(self) -> int:       # none once its last sample is in flight
        samples = sum(f.samples for f in self.in_flight)
        done = self.num_output_tokens + samples >= self.request.max_tokens
        return 0 if done else self.num_tokens + samples - self.scheduled_upto


@define
class SchedulerPassModel:
    cache_size: int
    token_budget: int
    encoder_compute_budget: int
    read_ahead: int = 0
    disable_chunked_mm_input: bool = False
    ec_cached_mm_hashes: frozenset[str] = field(default=frozenset(), converter=frozenset)
    encoder_decoder: bool = False
    async_scheduling: bool = False
    mamba_block_size: int = 0
    kv_blocks: int = 0                 # the KV pool's blocks (0: it never runs out)
    kv_block_size: int = 16
    enable_prefix_caching: bool = False    # in the KV pool (with kv_blocks only)
    reserve_full_isl: bool = True          # admission when the whole sequence fits (rule 3)
    watermark: float = 0.0                 # the pool's share an admission leaves (rule 3)
    requests: dict[str, RequestState] = field(factory=dict)   # arrival order
    grants: tuple[Grant, ...] = ()                # the last pass's, in serving order
    preempted: tuple[str, ...] = ()               # the last pass's, for KV blocks, in order
    rejected: set[str] = field(factory=set)       # refused since the last update
    released_together: set[str] = field(factory=set)
    heard: list[tuple[str, str, int]] = field(factory=list)   # the EC connector's notices
    pending: list[SchedulerOutputView] = field(factory=list)  # outputs not yet applied
    ranks: tuple = field(factory=lambda: tuple(itertools.count(1) for _ in "sap"))  # starts,
    variant: DecoderOnly | EncoderDecoder = field(init=False)     # arrivals, preemptions
    cache: EncoderCacheModel | EncoderDecoderCacheModel = field(init=False)
    pool: kv.PrefixCacheModel | None = field(init=False, default=None)

    def __attrs_post_init__(self) -> None:
        alone = (self.async_scheduling, self.encoder_decoder, self.mamba_block_size, self.kv_blocks)
        if sum(map(bool, alone)) > 1 or self.mamba_block_size and self.disable_chunked_mm_input \
                or self.enable_prefix_caching and not self.kv_blocks:
            raise ValueError("keep one of async_scheduling, encoder_decoder, mamba_block_size, "
                             "kv_blocks (mamba: with chunked input; prefix caching: kv_blocks)")
        self.pool = kv.pool(self) if self.kv_blocks else None
        self.variant = EncoderDecoder() if self.encoder_decoder else \
            Mamba(self.mamba_block_size) if self.mamba_block_size else DecoderOnly()
        self.cache = (EncoderDecoderCacheModel if self.encoder_decoder
                      else EncoderCacheModel)(self.cache_size)

    def add_request(self, request: SchedRequest) -> None:
        if request.request_id in self.requests:
            raise ValueError(f"request {request.request_id!r} is already open")
        self.requests[request.request_id] = RequestState(request, queued_at=next(self.ranks[1]))
        self.pool and self.pool.add_request(kv.request(request))

    def finish_request(self, request_id: str) -> None:
        self.cache.free(self.requests.pop(request_id).request)
        self.pool and self.pool.free(request_id)

    def preempt_request(self, request_id: str) -> None:
        """KV pressure: inputs freed, computed tokens (not samples) lost, back at the head."""
        state = self.requests[request_id]
        if state.started_at is None or state.in_flight:
            raise ValueError(f"{request_id!r} is waiting or has a step in flight (apply it)")
        self.cache.free(state.request)
        state.num_computed_tokens, state.started_at, state.queued_at = 0, None, -next(self.ranks[2])
        self.pool and self.pool.preempt(request_id)

    def reset_encoder_cache(self) -> None:
        self.cache.reset()

    def schedule(self) -> SchedulerOutputView:
        grants, preempted = [], []         # Grants in serving order; KV victims, in order
        for state in sorted(self.requests.values(),
                            key=lambda s: (s.started_at is None, s.started_at or s.queued_at)):
            if preempted and state.started_at is None:
                break    # victims are the last started, so the rest are victims or wait
            hit = kv.look_up(self, state) if self.pool and state.started_at is None else None
            grant = self.variant.grant(self, state, self.token_budget - sum(  # a grant with
                g.tokens for g in grants), self.encoder_compute_budget - sum(   # no token
                g.request.num_embeds(i) for g in grants for i in g.encoded))   # encodes none
            if grant.limit == "stopped":
                break
            if grant.tokens and self.kv_blocks:
                grant, victims = kv.admit(self, state, grant, hit)
                preempted += victims
            grants.append(grant := evolve(grant, samples=grant.tokens == state.num_tokens_left))
            self.cache = self.cache if grant.cache is None else grant.cache
            if grant.limit in kv.HELD:         # held back, or preempted itself: no one after
                break
            rid = state.request.request_id
            self.rejected |= {rid} if grant.limit == "refused" else set()
            if grant.tokens:
                state.in_flight.append(grant)
                state.started_at = state.started_at or next(self.ranks[0])
                self.heard += [("alloc", rid, i) for i in (*grant.encoded, *grant.loaded)]
        self.grants, self.preempted = tuple(grants), tuple(preempted)
        for state in self.requests.values():       # a hit not admitted is not kept
            state.num_computed_tokens *= state.started_at is not None
        given = {g.request.request_id: g for g in grants if g.tokens}
        output = SchedulerOutputView(
            {rid: g.tokens for rid, g in given.items()},
            {rid: g.encoded for rid, g in given.items() if g.encoded},
            self.cache.get_freed_mm_hashes(),
            {rid: g.read_ahead for rid, g in given.items()} if self.read_ahead else {},
            {rid: g.loaded for rid, g in given.items() if g.loaded})
        assert not (broken := broken_promises(self, output, self.resident_mm_hashes())), broken
        self.pending.append(output)
        return output

    def execute_model(self, output: SchedulerOutputView) -> tuple[Gathered, ...]:
        """The rows read: embeds in the range and read-ahead (encoder-decoder: new outputs)."""
        rows = []
        for rid, k in output.num_scheduled_tokens.items():
            request, start = self.requests[rid].request, self.requests[rid].in_flight[-1].start
            end = start + k + output.num_read_ahead_tokens.get(rid, 0)
            for i, x in enumerate(request.items):
                lo, hi = (0, x.num_embeds * (i in output.scheduled_encoder_inputs.get(rid, ()))) \
                    if self.encoder_decoder else (sum(p < start for p in x.embed_positions),
                                                sum(p < end for p in x.embed_positions))
                rows += [Gathered(rid, x.mm_hash, lo, hi)] if lo < hi else []
        return tuple(rows)

    def update_from_output(self, output: SchedulerOutputView) -> tuple[str, ...]:
        """The oldest step in flight ran: its open requests advance, free the inputs whose
        positions are all scheduled (encoder-decoder: all; async: one ending the prompt waits
        for a sample known, vLLM 0.33.0 ``_free_encoder_inputs``), sample, finish at max
        tokens. The refused are finished in a ``set``'s order in vLLM: what they release
        (``released_together``) joins the freeable queue in any order."""
        if not self.pending or self.pending[0] != output:
            raise ValueError("update_from_output applies the oldest output in flight first")
        self.pending.pop(0)
        done = []
        for state in [self.requests[r] for r in output.num_scheduled_tokens if r in self.requests]:
            rid, request, flight = state.request.request_id, state.request, state.in_flight.pop(0)
            state.num_computed_tokens += flight.tokens
            for i in sorted(i for i in self.cache.get_cached_input_ids(request)   # in order:
                            if self.encoder_decoder or request.items[i].end <= state.scheduled_upto
                            and not (self.async_scheduling and not state.num_output_tokens
                                     and request.items[i].end == request.prompt_len)):
                self.cache.free_encoder_input(request, i)   # the order entries turn freeable
                self.heard.append(("free", rid, i))
            state.num_output_tokens += flight.samples
            self.pool and self.pool.append_token_ids(rid, (kv.SAMPLED,) * flight.samples)
            if state.num_output_tokens >= request.max_tokens:
                self.finish_request(rid)
                done.append(rid)
        rejected, self.rejected = sorted(r for r in self.rejected if r in self.requests), set()
        idle = set(self.freeable_order()) if rejected else set()
        for rid in rejected:
            self.finish_request(rid)
        self.released_together = set(self.freeable_order()) - idle if rejected[1:] else set()
        return (*(r for r in output.num_scheduled_tokens if r in {*done, *rejected}),
                *(r for r in rejected if r not in output.num_scheduled_tokens))

    def step(self) -> StepView:
        """One engine turn: schedule and run a step, apply the oldest (async: see the top)."""
        schedules = bool(self.requests) or not self.async_scheduling
        output = self.schedule() if schedules else SchedulerOutputView({}, {}, ())
        gathered = self.execute_model(output) if schedules else ()
        applies = self.pending and (not self.async_scheduling or len(self.pending) > 1
                                    or not schedules)
        return StepView(output, gathered,
                        self.update_from_output(self.pending[0]) if applies else ())

    def get_num_unfinished_requests(self) -> int:
        return len(self.requests)

    def ec_notifications(self) -> list[tuple[str, str, int]]:
        heard, self.heard = sorted(self.heard), []     # a step's order is not promised
        return heard if self.ec_cached_mm_hashes else []

    def resident_mm_hashes(self) -> set[str]:
        if self.encoder_decoder:           # encoded and not yet named freed to the worker
            return {*self.cache.allocated_this_pass, *self.cache.allocated_last_pass}
        return set(self.cache.entries)

    worker_mm_hashes = resident_mm_hashes

    def manager_slots(self) -> tuple[int, int]:
        free = self.cache.num_free_slots   # an encoder-decoder cache keeps nothing freeable
        return free, free if self.encoder_decoder else self.cache.num_freeable_slots

    def freeable_order(self) -> list[str]:
        return self.cache.freeable_order()

    def kv_blocks_held(self) -> dict[str, int]:
        """The KV blocks each request holds, where it holds any (``scheduler_pass_kv``)."""
        return {rid: len(ids) for rid in self.requests if (ids := self.pool.get_block_ids(rid))}

    def kv_free_blocks(self) -> int:
        return self.pool.num_free_blocks

    def chunk_starts(self) -> dict[str, int]:     # a started request's: its prefix hit
        return {g.request.request_id: g.start for g in self.grants if g.tokens}


def broken_promises(model, output, resident: set[str]) -> list[tuple[str, str]]:
    """(property, detail) per promise ``output`` breaks, ``model`` as its last pass left it:
    for a grant of ``k`` tokens its model's statement names three ranges (``windows``):
    ``encoded-input-needed``, each input encoded or loaded has an embed in the first;
    ``reads-held``, each embed read (in the second) is an item's resident and held;
    ``cut-before-refused``, a chunk cut short ends at one of the third; ``pass-maximal``, none
    gets fewer tokens than the rules admit after those before it. Judged to the first grant
    unlike the model's (past it the state is not). The machine checks budgets and the rest."""
    broken = []
    for g in model.grants:
        rid, c, request = g.request.request_id, g.start, g.request
        k, held = output.num_scheduled_tokens.get(rid, 0), model.cache.get_cached_input_ids(request)
        made = (*output.scheduled_encoder_inputs.get(rid, ()),
                *output.loaded_encoder_inputs.get(rid, ()))
        (lo, hi), (start, end), ends = model.variant.windows(
            model, g, k, output.num_read_ahead_tokens.get(rid, 0))
        needless = [i for i in made if not request.items[i].has_embed_in(lo, hi)]
        unread = [i for i in request.inputs_in(start, end) if request.items[i].has_embed_in(
            start, end) and (i not in held or request.mm_hash(i) not in resident)]
        for name, failed, why in (
                ("encoded-input-needed", needless, f"encodes {needless}, no embed in [{lo}, {hi})"),
                ("reads-held", unread, f"reads inputs {unread}, not held by it or not resident"),
                ("cut-before-refused", 0 < k < g.wanted and c + k not in ends,
                 f"gets {k} of {g.wanted}, cut at {c + k}: no item's start, no rule's end"),
                ("pass-maximal", k < g.tokens, f"gets {k} tokens, the rules admit {g.tokens}")):
            if failed:
                broken.append((name, f"{rid} (from {c}) {why}"))
        if (k, made) != (g.tokens, (*g.encoded, *g.loaded)):
            break
    return broken
