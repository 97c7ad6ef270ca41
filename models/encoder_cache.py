"""Reference model of vLLM's encoder cache manager (``docs/specs/encoder-cache.md``).

Scope: the bookkeeping of one ``EncoderCacheManager``: which items are resident, who holds
them, what eviction removes and what a pass reports as freed. Not in scope: tensors (the
worker holds those), the scheduler's choice of items, budgets other than the compute budget
handed to ``can_allocate``.

The model stores only facts: resident entries (with the tick at which each last became
unreferenced), the inputs each request has recorded, and the evictions of the current pass.
Everything an implementation keeps as a counter (free slots, freeable slots, the freeable
queue, per-request reference counts) is computed from those facts on demand.
"""

from __future__ import annotations

from itertools import accumulate

from attrs import define, field

from models.encoder_cache_values import ReqView


@define
class Entry:
    """A resident encoder output. ``unreferenced_at`` is the tick at which the last holder let
    go (None while some request holds it): the freeable queue is these entries by that tick."""

    num_embeds: int
    unreferenced_at: int | None = None


@define
class EncoderCacheModel:
    """What an encoder cache of ``cache_size`` embeddings must answer.

    Entry lifecycle: 1. allocated (held by the allocating request); 2. held by every request
    that recorded an input with its hash; 3. freeable once no request holds it (queued by the
    moment it became so); 4. evicted by ``can_allocate`` oldest-freeable-first, reported once by
    the pass's ``get_freed_mm_hashes`` unless it became resident again in the same pass.
    """

    cache_size: int
    entries: dict[str, Entry] = field(factory=dict)
    # request_id -> {input_id: mm_hash}: the inputs a request holds (scheduler view).
    recorded: dict[str, dict[int, str]] = field(factory=dict)
    evicted_this_pass: list[str] = field(factory=list)
    tick: int = 0
    # (request_id, mm_hash) references the implementation under test was seen to drop while
    # the request still records an input with that hash: a hunt that accepted a divergence
    # of the freeable count goes on with the target's holders (``adopt_freeable``). Empty
    # unless a hunt adopted one; a new record of the hash by that request restores it.
    released: set[tuple[str, str]] = field(factory=set)
    # What ``get_cached_input_ids`` means: "recorded" (the inputs the request recorded, vLLM
    # 0.24.0 on) or "resident" (every input whose item is resident, before 0.24.0): a named
    # option a hunt switches to once it accepted that divergence.
    cached_input_ids: str = "recorded"

    def __attrs_post_init__(self) -> None:
        if self.cache_size < 1:
            raise ValueError(f"cache_size must be at least 1 embedding, got {self.cache_size}")

    # -- computed views (what the implementation counts) ------------------------------------

    def holders(self, mm_hash: str) -> set[str]:
        return {rid for rid, inputs in self.recorded.items()
                if mm_hash in inputs.values() and (rid, mm_hash) not in self.released}

    @property
    def num_free_slots(self) -> int:
        return self.cache_size - sum(e.num_embeds for e in self.entries.values())

    @property
    def num_freeable_slots(self) -> int:
        held = sum(e.num_embeds for h, e in self.entries.items() if self.holders(h))
        return self.cache_size - held

    def freeable_order(self) -> list[str]:
        """Unreferenced resident hashes, the one that became unreferenced first at the front."""
        idle = [h for h, e in self.entries.items() if e.unreferenced_at is not None]
        return sorted(idle, key=lambda h: self.entries[h].unreferenced_at)

    def is_resident(self, mm_hash: str) -> bool:
        return mm_hash in self.entries

    # -- the API -----------------------------------------------------------------------------

    def check_and_update_cache(self, request: ReqView, input_id: int) -> bool:
        # A hit is exactly residency; recording the input is the hit's side effect.
        hit = self.is_resident(request.mm_hash(input_id))
        if hit:
            self._record(request, input_id)
        return hit

    def can_allocate(self, request: ReqView, input_id: int, encoder_compute_budget: int,
                     num_embeds_to_schedule: int) -> bool:
        needed = request.num_embeds(input_id)
        # Refused: the input alone is over the pass's compute budget, or it and what the pass
        # already scheduled need more than freeing every freeable entry would leave.
        if max(needed - encoder_compute_budget,
               needed + num_embeds_to_schedule - self.num_freeable_slots) > 0:
            return False
        # Accepted: the oldest freeable entries go, as few as leave free slots for the input
        # and for what the pass already scheduled.
        shortfall = needed + num_embeds_to_schedule - self.num_free_slots
        order = self.freeable_order()
        freed = accumulate(self.entries[h].num_embeds for h in order)
        covered = (n for n, total in enumerate(freed, 1) if total >= shortfall)
        victims = order[:next(covered, 0)] if shortfall > 0 else []
        for mm_hash in victims:
            del self.entries[mm_hash]
        self.evicted_this_pass.extend(victims)
        return True

    def allocate(self, request: ReqView, input_id: int) -> None:
        mm_hash, num_embeds = request.mm_hash(input_id), request.num_embeds(input_id)
        if mm_hash in self.entries:
            raise ValueError(f"allocate({mm_hash!r}): already resident; the scheduler "
                             "allocates only after check_and_update_cache returned False")
        if num_embeds > self.num_free_slots:
            raise ValueError(f"allocate({mm_hash!r}): {num_embeds} embeds but only "
                             f"{self.num_free_slots} free; call can_allocate first")
        self.entries[mm_hash] = Entry(num_embeds)
        self._record(request, input_id)

    def free_encoder_input(self, request: ReqView, input_id: int) -> None:
        inputs = self.recorded.get(request.request_id, {})
        mm_hash = inputs.pop(input_id, None)
        if not inputs:
            self.recorded.pop(request.request_id, None)
        if mm_hash is not None and mm_hash not in inputs.values():
            self.released.discard((request.request_id, mm_hash))
        if mm_hash is not None:
            self._note_if_unreferenced(mm_hash)

    def free(self, request: ReqView) -> None:
        for input_id in sorted(self.recorded.get(request.request_id, {})):
            self.free_encoder_input(request, input_id)

    def get_freed_mm_hashes(self) -> list[str]:
        # Evicted-then-reallocated in the same pass is not reported: the worker must keep the
        # tensor (vLLM issue #38551, the fix in seed 000).
        freed = [h for h in self.evicted_this_pass if h not in self.entries]
        self.evicted_this_pass = []
        return freed

    def get_cached_input_ids(self, request: ReqView) -> set[int]:
        if self.cached_input_ids == "resident":
            return {i for i, item in enumerate(request.items) if item.mm_hash in self.entries}
        return set(self.recorded.get(request.request_id, {}))

    def adopt_freeable(self, order: list[str]) -> list[str]:
        """Re-synchronize who holds what from an implementation's freeable queue ``order``
        (oldest first): an entry it has let go of is unreferenced here too (its holders'
        references dropped, ``released``), in its order. Returns the hashes it could not
        follow (resident here and held there, or not resident here)."""
        unfollowed = [h for h in order if h not in self.entries]
        unfollowed += [h for h in self.freeable_order() if h not in order]
        for mm_hash in order:
            if mm_hash not in self.entries:
                continue
            self.released |= {(rid, mm_hash) for rid in self.holders(mm_hash)}
            self.tick += 1
            self.entries[mm_hash].unreferenced_at = self.tick
        return unfollowed

    def get_cached_num_encoder_embeds(self, request: ReqView, input_id: int) -> int | None:
        entry = self.entries.get(request.mm_hash(input_id))
        return None if entry is None else entry.num_embeds

    def tracked_request_ids(self) -> set[str]:
        """The requests the cache must keep state for: those holding an input. A request
        that freed its last input (a finished one) leaves nothing behind, so the state an
        implementation keeps is bounded by the live requests, not by every request served."""
        return set(self.recorded)

    def reset(self) -> None:
        self.entries.clear()
        self.recorded.clear()
        self.evicted_this_pass.clear()
        self.released.clear()

    # -- helpers -----------------------------------------------------------------------------

    def _record(self, req: ReqView, input_id: int) -> None:
        self.recorded.setdefault(req.request_id, {})[input_id] = req.mm_hash(input_id)
        self.released.discard((req.request_id, req.mm_hash(input_id)))
        self.entries[req.mm_hash(input_id)].unreferenced_at = None

    def _note_if_unreferenced(self, mm_hash: str) -> None:
        entry = self.entries.get(mm_hash)
        if entry is None or self.holders(mm_hash) or entry.unreferenced_at is not None:
            return
        self.tick += 1
        entry.unreferenced_at = self.tick
