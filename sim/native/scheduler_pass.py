"""Native scheduler pass: a small engine-style FCFS scheduler and the worker it drives.

Written from ``docs/specs/scheduler-pass.md`` the way an engine loop is written (a
running list, per-request counters, one pass building a ``SchedulerOutputView``), on top of
``NativeEncoderCache``, so the encoder-cache bug switches (``enc-stale-freed``,
``enc-repeat-item``) act here too. The worker (``EncoderWorker``, real tensors on
``pick_device()``) applies each output in the spec's order: (1) delete the freed hashes,
(2) encode the scheduled inputs, (3) gather the embeddings overlapping every scheduled range
plus the drafter's read-ahead; a missing hash raises ``EncoderCacheMiss`` ("Encoder cache
miss"), as vLLM's model runner does.

The read-ahead is gated by the scheduler (the drafter may read only items the pass made
resident); see ``models/scheduler_pass.py`` for the policy both follow. Bug switch
``sched-read-ahead-ungated``: the worker's drafter reads its whole lookahead whatever the
output allows, so it reads an item the pass could not encode (the part of vLLM issue #38551
that the fix in seed 000 left open): "Encoder cache miss".

Items with an ``is_embed`` mask: the scheduler charges the encoder budget in embeds and skips
an input with no embed inside the window; the worker maps token positions to rows of the
encoder output through the mask's prefix sums. Bug switches: ``sched-budget-in-tokens`` (the
pass charges the compute budget, and the embeds it has pending, by token span: masked items
starve the budget), ``sched-encode-embedless`` (an input whose window holds no embed is
encoded anyway, a pass early), ``sched-preempt-keeps-inputs`` (a preempted request keeps its
encoder inputs held: the entries cannot be evicted while it waits) and
``sched-reset-worker-kept`` (a reset of the encoder cache leaves the worker's tensors: stale
outputs of the old weights stay on the device).

A request whose item's identifier is resident (or encoded earlier in the same walk) with
another embed count, an identifier reused for other content, is refused for the pass and
finished with an error by the update. Bug switches: ``sched-mismatch-scheduled`` (the counts
are not compared: the request is scheduled on the other content's embeddings) and
``sched-mismatch-kept`` (refused but never finished: it is refused again every pass).

An encoder-cache connector (``ec_cached_mm_hashes``: the hashes another instance encoded) is
asked after the embeds test: an input it holds is loaded, not encoded (allocated, no compute
spent), and named in the output's ``loaded_encoder_inputs``; the worker loads it. The
connector hears of each allocation and of each input freed after its tokens are computed
(``ec_notifications()``). Bug switches: ``sched-ec-charged`` (a loaded input is charged to the
encoder compute budget as if encoded: later items are cut or blocked) and
``sched-ec-free-silent`` (the update frees inputs without telling the connector).

Encoder-decoder mode (``encoder_decoder``, Whisper) runs on ``NativeEncoderDecoderCache``: a
request's inputs are all encoded whole in the pass that starts it (or it gets no token),
its prefill is not chunked (a waiting request that does not fit stops the queue), later
passes schedule decoder tokens only, the update frees its inputs once it has a computed
token, and the worker's decoder reads each new output whole. Bug switches:
``sched-encdec-reencode`` (every pass of a request with an input in its window encodes it
again, as for a decoder-only model) and ``sched-encdec-held`` (the inputs stay reserved
until the request finishes: requests behind it wait for the cache).

A KV pool (``kv_blocks`` blocks of ``KV_BLOCK_SIZE`` tokens; 0: it never runs out), in
synchronous decoder-only worlds, is a ``NativePrefixCache`` driven as an engine drives its
block manager: a scheduled chunk takes the blocks its tokens reach; a running request the
pool cannot serve preempts the last of the running list (itself last: then the pass ends); a
waiting request is admitted only if its whole sequence fits, and not at all in a pass that
preempted. With ``enable_prefix_caching`` a waiting request first looks up its longest cached
prefix and starts there (the encoder walk then skips the items behind it, and the pool holds
the hit's blocks); a block's key names the multimodal items in it. Prompt tokens are 0, a
sample is ``SAMPLED_TOKEN``. Bug switches: ``sched-kv-preempts-self`` (a running request
short of blocks gives its own place up instead of the last one's), ``sched-kv-admits-chunk``
(a waiting request is admitted when its first chunk fits: the pool fills with half-done
prefills that preempt one another) and ``sched-prefix-ignores-mm`` (blocks are keyed by
their tokens alone: a request hits a block computed for another image at the same place, and
skips encoding its own).

Async scheduling (``async_scheduling``), as an engine with a two-step batch queue runs it:
``schedule()`` advances each request's computed tokens at once and counts a sample it
leaves pending (``pending_samples``), the next pass starts where that left off (a request
whose pending sample is its last gets nothing more), and ``update_from_output`` applies
the oldest step in flight: it frees inputs behind ``computed - pending_samples`` (the
pending samples' positions are not settled yet), then takes the sampled token. ``step()``
schedules one step and applies the oldest once two are in flight. Bug switch
``sched-async-free-early``: the update frees behind ``computed`` alone, as the synchronous
scheduler does (vLLM before 0.30.0): an input ending at the prompt's end turns freeable
while the request's first sample is still pending.

A hybrid Mamba model (``mamba_block_size``) cuts each prefill chunk at block boundaries
first (``_block_aligned``); a request left with no token is passed over (running) or stops
the waiting queue, and judges no item. Where an MTP drafter's runway would take back the
aligned chunk of a whole budget too, the runway gives way, so every prefill finishes. Bug
switch ``sched-mamba-mtp-stall``: it does not (vLLM 0.33.0's stall): the prefill gets no
token, pass after pass, though its budget allows one.

Text-only requests (no item) take tokens only. Bug switch ``sched-text-charged``: the pass
charges a text-only request's tokens to the encoder budget, so multimodal requests after it
in the pass are cut or blocked (and it is itself capped by the budget left).
"""

from __future__ import annotations

from collections import deque

import torch

from models.prefix_cache_values import PrefixRequest
from models.scheduler_pass_values import Gathered, SchedRequest, SchedulerOutputView, StepView
from sim.encoder_worker import EncoderCacheMiss, EncoderWorker
from sim.engine_turn import engine_turn
from sim.native.encoder_cache import NativeEncoderCache
from sim.native.encoder_decoder_cache import NativeEncoderDecoderCache
from sim.native.prefix_cache import NativePrefixCache

KV_BLOCK_SIZE = 16                         # tokens per KV block, as vLLM's default
SAMPLED_TOKEN = 7                          # what every sample is (prompt tokens are 0)

__all__ = ["EncoderCacheMiss", "NativeSchedulerPass"]


class _Running:
    __slots__ = ("req", "computed", "generated", "pending_samples", "embeds_upto")

    def __init__(self, req: SchedRequest):
        self.req = req
        self.computed = 0
        self.generated = 0
        self.pending_samples = 0               # async: scheduled steps' samples not yet in
        # Per input: embeds_upto[i][t] = embeds among the item's first t positions (the
        # mask's prefix sums, as vLLM's PlaceholderRange.embeds_cumsum keeps them).
        self.embeds_upto = []
        for item in req.items:
            mask = item.is_embed or (True,) * item.length
            sums = [0]
            for flag in mask:
                sums.append(sums[-1] + int(flag))
            self.embeds_upto.append(sums)

    def embed_rows(self, input_id: int, lo: int, hi: int) -> tuple[int, int]:
        """Rows of input ``input_id``'s encoder output at token positions ``[lo, hi)``."""
        item, sums = self.req.items[input_id], self.embeds_upto[input_id]
        clamp = lambda t: min(max(t - item.offset, 0), item.length)  # noqa: E731
        return sums[clamp(lo)], sums[clamp(hi)]

    def remaining(self) -> int:
        return self.req.prompt_len + self.generated + self.pending_samples - self.computed


class NativeSchedulerPass:
    def __init__(self, cache_size: int, token_budget: int, encoder_compute_budget: int,
                 read_ahead: int = 0, disable_chunked_mm_input: bool = False,
                 ec_cached_mm_hashes: frozenset[str] = frozenset(),
                 encoder_decoder: bool = False, async_scheduling: bool = False,
                 mamba_block_size: int = 0, kv_blocks: int = 0,
                 enable_prefix_caching: bool = False, reserve_full_isl: bool = True,
                 watermark: float = 0.0,
                 bugs: frozenset[str] = frozenset(), device: torch.device | None = None):
        self.cache_size = cache_size
        self.kv_blocks = kv_blocks
        # The null block beside the pool's; no request is longer than the pool holds.
        self.block_manager = NativePrefixCache(
            kv_blocks + 1, KV_BLOCK_SIZE, kv_blocks * KV_BLOCK_SIZE,
            enable_caching=enable_prefix_caching, enable_kv_cache_events=False,
            reserve_full_isl=reserve_full_isl and "sched-kv-admits-chunk" not in bugs,
            watermark=watermark,
        ) if kv_blocks else None
        self.mamba_block_size = mamba_block_size
        self.max_num_batched_tokens = token_budget
        self.max_num_encoder_input_tokens = encoder_compute_budget
        self.num_lookahead_tokens = read_ahead
        self.disable_chunked_mm_input = disable_chunked_mm_input
        self.external = frozenset(ec_cached_mm_hashes)    # what the EC connector holds
        self.notices: list[tuple[str, str, int]] = []     # what the EC connector heard
        self.bugs = bugs
        self.encoder_decoder = encoder_decoder
        self.async_scheduling = async_scheduling
        # Steps scheduled and not yet applied, oldest first: (output, where each request's
        # tokens start, which requests sample).
        self._in_flight: deque[tuple[SchedulerOutputView, dict[str, int], set[str]]] = deque()
        self.encoder_cache_manager = (NativeEncoderDecoderCache if encoder_decoder
                                      else NativeEncoderCache)(cache_size, bugs=bugs)
        self.worker = EncoderWorker(device)
        self.running: list[_Running] = []        # scheduled at least once, in that order
        self.waiting: list[_Running] = []        # never scheduled yet, in arrival order
        self.last_gathered_tensors: list[torch.Tensor] = []
        self._rejected: list[str] = []           # refused since the last update (reused id)

    # -- scheduler -----------------------------------------------------------------------

    def add_request(self, request: SchedRequest) -> None:
        if any(r.req.request_id == request.request_id for r in self.running + self.waiting):
            raise ValueError(f"request {request.request_id!r} is already open")
        self.waiting.append(_Running(request))
        if self.block_manager is not None:
            images = () if "sched-prefix-ignores-mm" in self.bugs else \
                tuple((item.mm_hash, item.offset) for item in request.items)
            self.block_manager.add_request(PrefixRequest(
                request.request_id, (0,) * request.prompt_len, mm_items=images))

    def finish_request(self, request_id: str) -> None:
        entry = self._find(request_id)
        (self.running if entry in self.running else self.waiting).remove(entry)
        self.encoder_cache_manager.free(entry.req)
        if self.block_manager is not None:
            self.block_manager.free(request_id)

    def preempt_request(self, request_id: str) -> None:
        """Preempt a running request: free its encoder inputs, forget its computed tokens,
        put it at the head of the waiting queue (what vLLM does to the last running request
        when a pass runs out of KV blocks)."""
        entry = self._find(request_id)
        if entry not in self.running:
            raise ValueError(f"request {request_id!r} is not running")
        self.running.remove(entry)
        if "sched-preempt-keeps-inputs" not in self.bugs:
            self.encoder_cache_manager.free(entry.req)
        if self.block_manager is not None:
            self.block_manager.preempt(request_id)
        entry.computed = 0
        self.waiting.insert(0, entry)

    def reset_encoder_cache(self) -> None:
        """Weights were updated: the manager forgets every entry and hold, and the worker
        drops every encoder output (they are stale)."""
        self.encoder_cache_manager.reset()
        if "sched-reset-worker-kept" not in self.bugs:
            self.worker.encoder_cache.clear()

    def schedule(self) -> SchedulerOutputView:
        token_budget = self.max_num_batched_tokens
        encoder_budget = self.max_num_encoder_input_tokens
        num_scheduled: dict[str, int] = {}
        encoder_inputs: dict[str, tuple[int, ...]] = {}
        loaded: dict[str, tuple[int, ...]] = {}
        lookahead: dict[str, int] = {}
        started: list[_Running] = []
        starts: dict[str, int] = {}
        samples: set[str] = set()
        preempted: list[_Running] = []
        hits = {}                              # waiting request -> its prefix-cache hit
        for entry in self.running + self.waiting:
            if entry in preempted:
                continue
            if token_budget <= 0 or preempted and entry in self.waiting:
                break
            if self.block_manager is not None and entry in self.waiting:
                hit = hits[entry] = self.block_manager.get_computed_blocks(entry.req.request_id)
                entry.computed = hit.num_computed_tokens       # the walk starts past it
            if entry.pending_samples and \
                    entry.generated + entry.pending_samples >= entry.req.max_tokens:
                continue                       # its last token is on its way
            want = min(entry.remaining(), token_budget)
            if self.encoder_decoder and entry in self.waiting and want < entry.remaining():
                break                          # no chunked prefill: the queue waits here
            if self.mamba_block_size:
                want = self._block_aligned(entry, want)
                if want <= 0 and entry in self.waiting:
                    break                      # the queue waits for a pass with room
                if want <= 0:
                    continue                   # no chunk this pass: nothing is judged
            plan = self._plan_encoder(entry, want, encoder_budget)
            new_tokens, reads, inputs, duplicates, budget_after, loads = plan
            if new_tokens <= 0:
                continue                       # approvals lapse: nothing allocated
            if self.kv_blocks and not self._take_blocks(entry, new_tokens, preempted,
                                                        hits.get(entry)):
                break
            if entry in self.waiting:
                started.append(entry)
            for input_id in (*inputs, *loads):
                self.encoder_cache_manager.allocate(entry.req, input_id)
                if self.external:              # an engine with a connector: it hears
                    self.notices.append(("alloc", entry.req.request_id, input_id))
            for input_id in duplicates:        # the duplicate input holds the entry too
                self.encoder_cache_manager.check_and_update_cache(entry.req, input_id)
            encoder_budget = budget_after
            token_budget -= new_tokens
            rid = entry.req.request_id
            num_scheduled[rid] = new_tokens
            starts[rid] = entry.computed
            if self.async_scheduling:          # computed at once; the sample comes later
                entry.computed += new_tokens
                if entry.remaining() == 0:
                    entry.pending_samples += 1
                    samples.add(rid)
            if inputs:
                encoder_inputs[rid] = tuple(inputs)
            if loads:
                loaded[rid] = tuple(loads)
            if self.num_lookahead_tokens > 0:
                lookahead[rid] = reads
        for entry in started:
            self.waiting.remove(entry)
            self.running.append(entry)
        for entry in self.waiting:             # a hit it was not admitted with is forgotten
            entry.computed = 0
        freed = self.encoder_cache_manager.get_freed_mm_hashes()
        output = SchedulerOutputView(num_scheduled_tokens=num_scheduled,
                                     scheduled_encoder_inputs=encoder_inputs,
                                     free_encoder_mm_hashes=tuple(freed),
                                     num_read_ahead_tokens=lookahead,
                                     loaded_encoder_inputs=loaded)
        self._in_flight.append((output, starts, samples))
        return output

    def _take_blocks(self, entry: _Running, new_tokens: int, preempted: list, hit) -> bool:
        """Allocate the KV blocks ``new_tokens`` reach past the hit (a waiting request's; the
        manager admits one whose whole sequence fits), preempting for a running request;
        False: not scheduled (the pass ends here)."""
        rid = entry.req.request_id
        while self.block_manager.allocate_slots(rid, new_tokens, hit) is None:
            if entry in self.waiting:
                self.encoder_cache_manager.free(entry.req)    # its holds are given up
                return False
            victim = entry if "sched-kv-preempts-self" in self.bugs else self.running[-1]
            self.preempt_request(victim.req.request_id)
            preempted.append(victim)
            if victim is entry:
                return False
        return True

    def kv_blocks_held(self) -> dict[str, int]:
        manager = self.block_manager
        return {rid: n for rid in manager.table if (n := len(manager.get_block_ids(rid)))}

    def kv_free_blocks(self) -> int:
        return self.block_manager.num_free_blocks

    def chunk_starts(self) -> dict[str, int]:
        return dict(self._in_flight[-1][1]) if self._in_flight else {}

    def update_from_output(self, output: SchedulerOutputView) -> tuple[str, ...]:
        if not self._in_flight or self._in_flight[0][0] != output:
            raise ValueError("update_from_output applies the oldest output in flight first")
        _, _, samples = self._in_flight.popleft()
        done = []
        for rid, n in output.num_scheduled_tokens.items():
            entry = self._find_open(rid)
            if entry is None:
                continue                       # aborted while the step was in flight
            if not self.async_scheduling:
                entry.computed += n
                if entry.remaining() == 0:
                    samples.add(rid)
            settled = entry.computed - entry.pending_samples
            if "sched-async-free-early" in self.bugs:
                settled = entry.computed       # BUG: a pending sample's position counts
            for input_id in sorted(self.encoder_cache_manager.get_cached_input_ids(entry.req)):
                # Encoder-decoder: the first step computed the cross-attention KV from them.
                computed = entry.computed > 0 and "sched-encdec-held" not in self.bugs \
                    if self.encoder_decoder else entry.req.items[input_id].end <= settled
                if computed:
                    self.encoder_cache_manager.free_encoder_input(entry.req, input_id)
                    if self.external and "sched-ec-free-silent" not in self.bugs:
                        self.notices.append(("free", rid, input_id))
            if rid in samples:
                entry.generated += 1           # one token sampled
                if self.block_manager is not None:
                    self.block_manager.append_token_ids(rid, (SAMPLED_TOKEN,))
                if self.async_scheduling:
                    entry.pending_samples -= 1
            if entry.generated >= entry.req.max_tokens:
                self.finish_request(rid)
                done.append(rid)
        rejected = [] if "sched-mismatch-kept" in self.bugs else \
            sorted(rid for rid in self._rejected if self._find_open(rid) is not None)
        for rid in rejected:                   # finished with an error
            self.finish_request(rid)
        self._rejected = []
        return (*(rid for rid in output.num_scheduled_tokens if rid in done or rid in rejected),
                *(rid for rid in rejected if rid not in output.num_scheduled_tokens))

    # -- worker --------------------------------------------------------------------------

    def execute_model(self, output: SchedulerOutputView) -> tuple[Gathered, ...]:
        """The worker's part of a step (call before ``update_from_output``)."""
        self.worker.free(list(output.free_encoder_mm_hashes))                     # (1)
        for rid, input_ids in output.scheduled_encoder_inputs.items():            # (2)
            req = self._find(rid).req
            for input_id in input_ids:
                self.worker.encode(req.items[input_id].mm_item())
        for rid, input_ids in output.loaded_encoder_inputs.items():       # (2) by the connector
            req = self._find(rid).req
            for input_id in input_ids:
                self.worker.load(req.items[input_id].mm_item())
        gathered, tensors = [], []
        if self.encoder_decoder:               # (3) the decoder's cross-attention
            for rid in output.num_scheduled_tokens:
                req = self._find(rid).req
                for input_id in output.scheduled_encoder_inputs.get(rid, ()):
                    item = req.items[input_id].mm_item()
                    tensors.append(self.worker.gather(item))
                    gathered.append(Gathered(rid, item.mm_hash, 0, item.num_embeds))
            self.last_gathered_tensors = tensors
            return tuple(gathered)
        starts = self._in_flight[-1][1]        # the newest step's: the worker runs it now
        for rid, n in output.num_scheduled_tokens.items():                        # (3)
            entry = self._find(rid)
            start = starts[rid]
            stop = start + n + output.num_read_ahead_tokens.get(rid, 0)
            drafter_stop = stop
            if "sched-read-ahead-ungated" in self.bugs and rid in output.num_read_ahead_tokens:
                drafter_stop = start + n + self.num_lookahead_tokens   # BUG: ignores the cut
            for input_id, item in enumerate(entry.req.items):
                if item.end <= start or item.offset >= drafter_stop:
                    continue
                lo, hi = entry.embed_rows(input_id, start, drafter_stop)
                if lo == hi:
                    continue                   # only non-embed positions: nothing to read
                if item.mm_hash not in self.worker.encoder_cache:
                    raise EncoderCacheMiss(f"Encoder cache miss for {item.mm_hash} "
                                           f"(request {rid}, rows {lo}:{hi})")
                lo, hi = entry.embed_rows(input_id, start, stop)
                if lo == hi:
                    continue                   # read by the drafter only: not gathered
                tensors.append(self.worker.gather(item.mm_item(), lo, hi))
                gathered.append(Gathered(rid, item.mm_hash, lo, hi))
        self.last_gathered_tensors = tensors
        return tuple(gathered)

    def step(self) -> StepView:
        """One engine turn, in the engine's order (``sim/engine_turn.py``)."""
        return engine_turn(self, open_requests=bool(self.running or self.waiting),
                           async_scheduling=self.async_scheduling,
                           in_flight=lambda: len(self._in_flight),
                           apply_oldest=lambda: self.update_from_output(self._in_flight[0][0]))

    # -- views ---------------------------------------------------------------------------

    def resident_mm_hashes(self) -> set[str]:
        manager = self.encoder_cache_manager
        if self.encoder_decoder:               # encoded, not yet named freed to the worker
            return set(manager._encoding) | set(manager._to_free)
        return manager.resident_hashes()

    def get_num_unfinished_requests(self) -> int:
        return len(self.running) + len(self.waiting)

    def ec_notifications(self) -> list[tuple[str, str, int]]:
        heard, self.notices = sorted(self.notices), []
        return heard

    def manager_slots(self) -> tuple[int, int]:
        manager = self.encoder_cache_manager
        if self.encoder_decoder:               # reserved or free, nothing freeable
            return manager.num_free_slots, manager.num_free_slots
        return manager.num_free_slots, manager.num_freeable_slots

    def freeable_order(self) -> list[str]:
        """Resident entries no request holds, oldest first (the next evicted first)."""
        return list(self.encoder_cache_manager._idle)

    def worker_mm_hashes(self) -> set[str]:
        return self.worker.resident_hashes()

    def check_valid(self) -> None:
        self.encoder_cache_manager.check_valid()
        if self.block_manager is not None:
            self.block_manager.check_valid()

    # -- helpers -------------------------------------------------------------------------

    def _find_open(self, request_id: str) -> _Running | None:
        return next((e for e in self.running + self.waiting if e.req.request_id == request_id),
                    None)

    def _find(self, request_id: str) -> _Running:
        for entry in self.running + self.waiting:
            if entry.req.request_id == request_id:
                return entry
        raise KeyError(f"no running request {request_id!r}")

    def _plan_whole(self, entry: _Running, new_tokens: int,
                    budget: int) -> tuple[int, int, list[int], list[int], int, list[int]]:
        """Encoder-decoder: every input when the request starts (all or no token), none
        after; with ``sched-encdec-reencode`` also after, for inputs in the window."""
        req, manager = entry.req, self.encoder_cache_manager
        reencode = "sched-encdec-reencode" in self.bugs
        if entry.computed > 0 and not reencode:
            return new_tokens, 0, [], [], budget, []
        inputs, pending = [], 0
        for input_id, item in enumerate(req.items):
            if entry.computed > 0 and item.end <= entry.computed:
                continue                       # (the bug's window test, a decoder model's)
            if not manager.can_allocate(req, input_id, encoder_compute_budget=budget,
                                        num_embeds_to_schedule=pending):
                return 0, 0, [], [], budget, []
            inputs.append(input_id)
            pending += item.num_embeds
            budget -= item.num_embeds
        return new_tokens, 0, inputs, [], budget, []

    def _plan_encoder(self, entry: _Running, new_tokens: int,
                      budget: int) -> tuple[int, int, list[int], list[int], int, list[int]]:
        """(new tokens, read-ahead tokens, encoder inputs to run, duplicate inputs, encoder
        budget after, inputs the EC connector loads).

        The drafter reads ``num_lookahead_tokens`` past the chunk, so the walk covers that
        much more (items only the drafter reaches are encoded in the same pass); a refused
        item cuts the chunk right before it, and the drafter's read before its first embed."""
        req, start = entry.req, entry.computed
        lookahead = self.num_lookahead_tokens
        inputs: list[int] = []
        duplicates: list[int] = []
        loads: list[int] = []
        seen: dict[str, int] = {}             # hash -> embeds, encoded earlier in this walk
        pending = 0
        manager = self.encoder_cache_manager
        window_end = start + new_tokens + lookahead    # fixed for the pass
        refused_at = None                     # first embed of the item the walk refused
        if self.encoder_decoder and req.items:
            return self._plan_whole(entry, new_tokens, budget)
        if not req.items and "sched-text-charged" in self.bugs:
            # BUG: a text-only request's tokens are charged to the encoder budget as if each
            # were an embed (and it gets no more tokens than the budget has left).
            new_tokens = min(new_tokens, budget)
            return new_tokens, lookahead, inputs, duplicates, budget - new_tokens, loads
        for input_id, item in enumerate(req.items):
            if item.offset >= min(window_end, req.prompt_len):
                break
            if item.end <= start:
                continue
            if (self.disable_chunked_mm_input and item.offset >= start
                    and item.end > start + new_tokens):
                # Not covered whole (or only the drafter reaches it): stop the chunk early
                # enough that the drafter's read ends at the item as well.
                new_tokens = max(0, item.offset - start - lookahead)
                break
            known = seen.get(item.mm_hash,
                             manager.get_cached_num_encoder_embeds(req, input_id))
            if known is not None and known != item.num_embeds \
                    and "sched-mismatch-scheduled" not in self.bugs:
                # The identifier was reused for other content: refuse the request (it is
                # finished with an error after the step), allocating nothing.
                if req.request_id not in self._rejected:   # refused again before an update
                    self._rejected.append(req.request_id)
                return 0, 0, [], [], self.max_num_encoder_input_tokens, []
            if item.mm_hash in seen:
                duplicates.append(input_id)
                continue
            if manager.check_and_update_cache(req, input_id):
                continue
            if not manager.can_allocate(req, input_id, encoder_compute_budget=budget,
                                        num_embeds_to_schedule=pending):
                new_tokens = min(new_tokens, item.offset - start) if item.offset > start else 0
                refused_at = item.offset + _leading_non_embeds(item)
                break
            lo, hi = entry.embed_rows(input_id, start, window_end)
            if lo == hi and "sched-encode-embedless" not in self.bugs:
                continue                       # no embed in the window: encode it later
            if item.mm_hash in self.external:  # another instance encoded it: load it
                loads.append(input_id)
                seen[item.mm_hash] = item.num_embeds
                pending += item.num_embeds
                if "sched-ec-charged" in self.bugs:
                    budget -= item.num_embeds      # BUG: a load spends encoder compute
                continue
            inputs.append(input_id)
            seen[item.mm_hash] = item.num_embeds
            cost = item.length if "sched-budget-in-tokens" in self.bugs else item.num_embeds
            pending += cost
            budget -= cost
        kept = self._keep_runway(entry, new_tokens)
        if not kept and self.mamba_block_size and "sched-mamba-mtp-stall" not in self.bugs \
                and not self._keep_runway(entry, self._block_aligned(
                    entry, min(entry.remaining(), self.max_num_batched_tokens))):
            kept = new_tokens                  # a runway that would stall the prefill gives way
        new_tokens = kept
        reads = lookahead if refused_at is None \
            else max(0, min(lookahead, refused_at - (start + new_tokens)))
        return new_tokens, reads, inputs, duplicates, budget, loads

    def _block_aligned(self, entry: _Running, new_tokens: int) -> int:
        """A hybrid Mamba model caches a request's state only at a chunk's end, so a prefill
        chunk ends on a block boundary (unless it finishes the prefill), re-aligns when it
        starts off one, and stops at the last boundary that still leaves the logits' token
        and the drafter's lookahead after it."""
        block, start = self.mamba_block_size, entry.computed
        known = entry.req.prompt_len + entry.generated
        prefill_end = max(entry.req.prompt_len, known - 1)
        if start >= prefill_end:
            return new_tokens
        end = start + new_tokens
        floor_end = end // block * block
        if end < prefill_end and (floor_end > start or block <= self.max_num_batched_tokens):
            end = floor_end
        stops = [(known - max(1, self.num_lookahead_tokens)) // block * block]
        if start % block:
            stops.append((start // block + 1) * block)
        for stop in stops:
            if start < stop < end:
                end = stop
        return max(end - start, 0)

    def _keep_runway(self, entry: _Running, new_tokens: int) -> int:
        """A multi-token drafter (MTP) needs its whole lookahead at a chunk boundary: a chunk
        that would leave fewer known tokens than that (but some) gives the difference back."""
        left = entry.remaining() - new_tokens
        if 0 < left < self.num_lookahead_tokens:
            new_tokens -= self.num_lookahead_tokens - left
        return max(new_tokens, 0)


def _leading_non_embeds(item) -> int:
    """Positions of ``item`` before its first embed (0 without a mask)."""
    return 0 if item.is_embed is None else item.is_embed.index(True)
