"""Reference model of one scheduling pass on the encoder path (``specs/encoder-cache.md``
sections 2 and 4), first come first served, and of the update that follows the step.

Scope: which tokens and encoder inputs a pass schedules, what it tells the worker to delete,
what the worker then gathers, and how computed tokens, encoder inputs and requests move on
after the step. Not in scope: KV blocks, preemption, priorities, sampling (every request
samples one token when its computed tokens reach its known tokens).

The pass (one ``schedule()`` call), for each open request while tokens are left, running
requests first (in the order they were first scheduled), then waiting ones (in arrival order),
as vLLM's V1 scheduler orders them: ``k = min(tokens left to compute, token budget left)``;
the items overlapping the window ``[c, c + k + r)`` are considered in order, where ``r`` is
the drafter's read-ahead (MTP / EAGLE drafters read a few positions past the scheduled range,
vLLM issue #38551):
- an item entirely before ``c`` is done; one starting at or past the window end stops the scan;
- with ``disable_chunked_mm_input``, a scheduled range starting at or before an item and
  ending inside it is rolled back to before it (and the drafter reads nothing past it);
- a hash already chosen for this request in this pass is a duplicate: nothing to encode, and
  once the request is scheduled the duplicate input holds the entry too (vLLM 0.33.0
  ``_allocate_encoder_inputs``);
- a resident hash is held (``check_and_update_cache``);
- an item ``can_allocate`` refuses (compute budget or cache space) stops the scan: inside the
  scheduled range, ``k`` is cut to end right before the item (no token if ``c`` is past its
  start) and the drafter reads nothing further; inside the read-ahead only, the read-ahead is
  cut to end before it (the scheduled range stays: the drafter proposes fewer tokens);
- otherwise the item is chosen: compute budget and ``num_embeds_to_schedule`` grow by it.
A request left with no token is skipped (its approvals lapse; a waiting one stays waiting);
otherwise its chosen items are ``allocate``d, its duplicates recorded, and it is running.
``get_freed_mm_hashes()`` ends the pass.

The read-ahead is gated: the output says how far each request's drafter may read, and that
range only covers items the pass made resident. The seed says the fix for #38551 left the
drafter able to read an entry evicted in an earlier pass and that the scheduler should gate
it; vLLM 0.33.0 lets the drafter fall back to token embeddings for an input it could not
encode (``_try_schedule_encoder_inputs``), which this output states explicitly. So a correct
scheduler never makes the worker miss.
"""

from __future__ import annotations

from attrs import define, field

from models.encoder_cache import EncoderCacheModel
from models.scheduler_pass_values import Gathered, SchedRequest, SchedulerOutputView, StepView


@define
class RequestState:
    request: SchedRequest
    num_computed_tokens: int = 0
    num_output_tokens: int = 0
    started_at: int | None = None       # the pass that first scheduled it (None: waiting)

    @property
    def num_tokens(self) -> int:
        """Tokens known so far: the prompt and the sampled tokens."""
        return self.request.prompt_len + self.num_output_tokens


@define
class PassNotes:
    """What happened inside the last pass (for hazard counting, not part of the output)."""

    reallocated: list[str] = field(factory=list)   # evicted then allocated again in the pass
    shared: bool = False                           # a hash used by two inputs in the pass
    cut: bool = False                              # tokens cut right before an item
    read_ahead_cut: bool = False                   # the read-ahead stopped before an item
    blocked: bool = False                          # a request got no token from its items
    read_ahead_read: bool = False                  # the drafter read an item past its range


@define
class SchedulerPassModel:
    """What a first-come-first-served scheduler and its worker must do, step by step."""

    cache_size: int
    token_budget: int
    encoder_compute_budget: int
    read_ahead: int = 0
    disable_chunked_mm_input: bool = False
    cache: EncoderCacheModel = field(init=False)
    requests: dict[str, RequestState] = field(factory=dict)   # arrival order
    notes: PassNotes = field(factory=PassNotes)
    passes: int = 0

    def __attrs_post_init__(self) -> None:
        self.cache = EncoderCacheModel(self.cache_size)

    # -- the API -----------------------------------------------------------------------------

    def add_request(self, request: SchedRequest) -> None:
        if request.request_id in self.requests:
            raise ValueError(f"request {request.request_id!r} is already open")
        self.requests[request.request_id] = RequestState(request)

    def finish_request(self, request_id: str) -> None:
        """Abort (or finish) a request between passes: its encoder inputs are freed."""
        state = self.requests.pop(request_id)
        self.cache.free(state.request)

    def schedule(self) -> SchedulerOutputView:
        self.notes = PassNotes()
        tokens_left, compute_left = self.token_budget, self.encoder_compute_budget
        num_tokens: dict[str, int] = {}
        encoder_inputs: dict[str, tuple[int, ...]] = {}
        read_ahead: dict[str, int] = {}
        users: dict[str, set[str]] = {}
        self.passes += 1
        for rid, state in self._in_order():
            if tokens_left == 0:
                break
            k = min(state.num_tokens - state.num_computed_tokens, tokens_left)
            k, r, chosen, duplicates, compute = self._encoder_inputs(state, k, compute_left,
                                                                     users)
            if k == 0:
                self.notes.blocked = True
                continue
            if state.started_at is None:
                state.started_at = self.passes
            compute_left = compute
            for input_id in chosen:
                self.cache.allocate(state.request, input_id)
            for input_id in duplicates:
                self.cache.check_and_update_cache(state.request, input_id)
            num_tokens[rid] = k
            tokens_left -= k
            if chosen:
                encoder_inputs[rid] = tuple(chosen)
            if self.read_ahead:
                read_ahead[rid] = r
        evicted = list(self.cache.evicted_this_pass)
        self.notes.reallocated = [h for h in evicted if self.cache.is_resident(h)]
        self.notes.shared = any(len(rids) > 1 for rids in users.values())
        freed = self.cache.get_freed_mm_hashes()
        return SchedulerOutputView(num_tokens, encoder_inputs, freed, read_ahead)

    def gathered(self, output: SchedulerOutputView) -> tuple[Gathered, ...]:
        """What the worker gathers for ``output`` (call before ``update_from_output``)."""
        rows = []
        for rid, k in output.num_scheduled_tokens.items():
            c = self.requests[rid].num_computed_tokens
            end = c + k + output.num_read_ahead_tokens.get(rid, 0)
            for item in self.requests[rid].request.items:
                if item.offset < end and item.end > c:
                    self.notes.read_ahead_read |= item.end > c + k and end > c + k
                    rows.append(Gathered(rid, item.mm_hash, max(c, item.offset) - item.offset,
                                         min(end, item.end) - item.offset))
        return tuple(rows)

    execute_model = gathered      # the worker's part of a step, as the model predicts it

    def update_from_output(self, output: SchedulerOutputView) -> tuple[str, ...]:
        """The step ran: advance computed tokens, free fully computed items' inputs, sample
        one token where the known tokens are all computed, finish at max tokens."""
        finished = []
        for rid, k in output.num_scheduled_tokens.items():
            state = self.requests[rid]
            state.num_computed_tokens += k
            request = state.request
            for input_id in sorted(self.cache.get_cached_input_ids(request)):
                if request.items[input_id].end <= state.num_computed_tokens:
                    self.cache.free_encoder_input(request, input_id)
            if state.num_computed_tokens == state.num_tokens:
                state.num_output_tokens += 1
            if state.num_output_tokens >= request.max_tokens:
                finished.append(rid)
                self.finish_request(rid)
        return tuple(finished)

    def step(self) -> StepView:
        """One engine step: schedule, the worker runs the output, update from it."""
        output = self.schedule()
        gathered = self.gathered(output)
        return StepView(output, gathered, self.update_from_output(output))

    def resident_mm_hashes(self) -> set[str]:
        return set(self.cache.entries)

    def get_num_unfinished_requests(self) -> int:
        return len(self.requests)

    def _in_order(self) -> list[tuple[str, RequestState]]:
        """Running requests by the pass that started them, then waiting ones; arrival order
        within each (``sorted`` is stable and ``requests`` is in arrival order)."""
        return sorted(self.requests.items(),
                      key=lambda kv: (kv[1].started_at is None, kv[1].started_at or 0))

    # -- the encoder path of one request ---------------------------------------------------

    def _encoder_inputs(self, state: RequestState, k: int, compute_left: int,
                        users: dict[str, set[str]]
                        ) -> tuple[int, int, list[int], list[int], int]:
        """(tokens, read-ahead, chosen input ids, duplicate input ids, compute budget left)
        for one request."""
        request, c = state.request, state.num_computed_tokens
        r = self.read_ahead
        chosen: list[int] = []
        duplicates: list[int] = []
        chosen_hashes: set[str] = set()
        embeds_to_schedule = 0
        for input_id, item in enumerate(request.items):
            if item.offset >= min(c + k + r, request.prompt_len):
                break
            if item.end <= c:
                continue
            in_range = item.offset < c + k
            if in_range and self.disable_chunked_mm_input and c <= item.offset \
                    and c + k < item.end:
                k, r = item.offset - c, 0
                break
            users.setdefault(item.mm_hash, set()).add(request.request_id)
            if item.mm_hash in chosen_hashes:
                self.notes.shared = True
                duplicates.append(input_id)
                continue
            if self.cache.check_and_update_cache(request, input_id):
                continue
            if not self.cache.can_allocate(request, input_id, compute_left,
                                           embeds_to_schedule):
                if not in_range:
                    r = item.offset - (c + k)
                    self.notes.read_ahead_cut = True
                else:
                    k, r = max(0, item.offset - c), 0
                    self.notes.cut = self.notes.cut or k > 0
                break
            chosen.append(input_id)
            chosen_hashes.add(item.mm_hash)
            embeds_to_schedule += item.length
            compute_left -= item.length
        return k, r, chosen, duplicates, compute_left
