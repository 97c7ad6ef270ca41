"""Native tiered KV-offload manager: the bookkeeping an engine keeps, plus a torch data plane.

Written from ``docs/specs/tiered-lookup.md`` the way an engine would write it (ref counts with -1
for a pending write, a running evictable counter, an ``OrderedDict`` for LRU order, a LIFO
free list of chunk ids), so that the model, which recomputes everything, is a different
second opinion. Data is real: the primary tier is a ``[num_chunks, chunk_words]`` tensor on
``pick_device()``, the secondary "memory" tier holds tensor copies, and every copy (the GPU
store, the cascade to the secondary, the promotion back) moves real values.

The test controls time: a secondary job runs only when ``complete_job(job_id)`` is called;
the manager notices finished jobs at its next poll (the first ``lookup`` of a step, every
``prepare_store``, else ``on_schedule_end``).

Bug switches (``native:<bug-id>``):

- ``lookup-pending-as-miss``: the sliding-window lookup treats HIT_PENDING as a miss (vLLM
  before PR #46363): it keeps probing further left, starting promotions it should not.
- ``lookup-promote-when-full``: a secondary hit that the full primary cannot promote answers
  RETRY instead of MISS: nothing is in flight, so the request is deferred forever.

With ``eviction_policy="arc"`` the primary evicts by ARC (``tiered_lookup_arc.py``, and its
switch ``arc-replace-inverted``). A request's accesses reorder the cache when it finishes
(``finish_request``), as vLLM 0.33.0's ``on_request_finished`` does.

Several requests run at once (``use_request`` picks the one making the calls), each with its
keys' positions (end tokens) as the connector records them. LRU order is a list kept sorted
by rank, ``(counter, -position)``: a running request's stores rank by its request rank and
position, tails first (``models/tiered_lookup_access.py`` states the rules). Switch
``lru-tail-after-head``: a stored block ranks by ``+position``, so a request's head is
evicted before its tail. Switch ``finish-replayed``: a duplicate finish signal commits the
request's accesses again (its blocks rise above what was used since it finished).
"""

from __future__ import annotations

from bisect import insort
from collections import OrderedDict
from collections.abc import Sequence

import torch

from models.tiered_lookup_stats import CacheStats
from models.tiered_lookup_values import Job, LookupResult, OffloadEvent, Scan, StoreOutput
from sim.device import pick_device
from sim.native.tiered_lookup_arc import NativeArc

PENDING = -1


class NativeTieredLookup:
    def __init__(self, num_chunks: int, secondary: str = "none", chunk_words: int = 4,
                 bugs: frozenset[str] = frozenset(), eviction_policy: str = "lru",
                 store_threshold: int = 1, max_tracker_size: int = 64_000,
                 preloaded: tuple[int, ...] = (),
                 requests: tuple[tuple[int, ...], ...] = (), enable_events: bool = True,
                 unpositioned: tuple[int, ...] = ()):
        self.num_chunks = num_chunks
        self.store_threshold = store_threshold
        self.max_tracker_size = max_tracker_size
        self._offers: OrderedDict[int, int] = OrderedDict()   # key -> offers, least recent first
        self._skipped = 0
        self._alloc_sizes: list[int] = []
        self.secondary = secondary
        self.chunk_words = chunk_words
        self.bugs = bugs
        self.device = pick_device()
        self.primary = torch.zeros(num_chunks, chunk_words, dtype=torch.int64,
                                   device=self.device)
        self._ref: dict[int, int] = {}              # key -> ref count (-1: write pending)
        self._slot: dict[int, int] = {}             # key -> chunk id
        self._rank: dict[int, tuple[int, int]] = {}  # resident key -> LRU rank
        self._order: list[tuple[tuple[int, int], int]] = []   # (rank, key), least first
        self._counter = 0
        self._free: list[int] = list(range(num_chunks - 1, -1, -1))   # pop() -> 0, 1, ...
        self._num_evictable = 0
        self._tier: dict[int, torch.Tensor] = {}    # the secondary tier's copies
        self._queued: dict[int, tuple[str, tuple[int, ...], tuple[int, ...]]] = {}
        self._done: list[int] = []                  # finished job ids, not yet polled
        self._done_jobs: dict[int, tuple[str, tuple[int, ...], tuple[int, ...]]] = {}
        self._failed: dict[int, frozenset[int]] = {}    # finished job id -> keys not copied
        self._next_job = 0
        self._to_promote: list[int] = []
        self._probe_queue: list[int] = []
        self._probe_answer: dict[int, bool] = {}
        self._polled = False
        self._held = False
        self._events: list[OffloadEvent] = []
        self._metadata_only: set[int] = set()       # indexes of failed-store removals
        self._source: dict[int, str] = {}           # key -> the tier that supplied it
        self._touched: list[tuple[int, ...]] = []   # touches the secondary tier was told of
        if preloaded and secondary == "none":
            raise ValueError("preloaded keys need a secondary tier to hold them")
        for key in preloaded:                       # copies an earlier run left in the tier
            self._tier[key] = self._payload(key)
        self._events_on = enable_events
        self._arc = NativeArc(num_chunks, bugs) if eviction_policy == "arc" else None
        self._chains = requests or ((),)
        self._slots = [_Request(chain, n not in unpositioned)
                       for n, chain in enumerate(self._chains)]
        self._req = self._slots[0]
        self._finished: dict[int, _Request] = {}    # slot -> its last finished request

    def use_request(self, slot: int) -> None:
        self._req = self._slots[slot]

    def _req_observe(self, keys, reused=()) -> None:
        req = self._req
        new = [k for k in dict.fromkeys(keys) if k not in req.seen]
        req.seen.extend(new)
        req.reused.update(k for k in reused if k not in req.inserted)
        if new and self._arc is None:
            rank = self._request_rank()
            for key in new:
                if key in self._rank and key in req.pos:
                    self._set_rank(key, max(self._rank[key], (rank, -req.pos[key])))

    def _request_rank(self) -> int:
        if self._req.rank is None:
            self._counter += 1
            self._req.rank = self._counter
        return self._req.rank

    def _set_rank(self, key: int, rank: tuple[int, int] | None = None) -> None:
        """Move the resident key to ``rank`` (a fresh touch rank when None)."""
        if rank is None:
            self._counter += 1
            rank = (self._counter, 0)
        old = self._rank.get(key)
        if old is not None:
            self._order.remove((old, key))
        self._rank[key] = rank
        insort(self._order, (rank, key))

    # -- data plane ------------------------------------------------------------------------

    def _payload(self, key: int) -> torch.Tensor:
        base = key * self.chunk_words + 1
        return torch.arange(base, base + self.chunk_words, dtype=torch.int64,
                            device=self.device)

    def read_chunk(self, key: int) -> int | None:
        """Whose bytes the key's chunk holds (-1: nobody's) when readable, else None."""
        if self._ref.get(key, PENDING) == PENDING:
            return None
        row = self.primary[self._slot[key]]
        owner = int(row[0].item() - 1) // self.chunk_words
        return owner if owner >= 0 and torch.equal(row, self._payload(owner)) else -1

    # -- observables -----------------------------------------------------------------------

    @property
    def num_free_chunks(self) -> int:
        return len(self._free)

    def ref_cnt(self, key: int) -> int | None:
        return self._ref.get(key)

    def pending_jobs(self) -> tuple[Job, ...]:
        return tuple(Job(j, kind, keys) for j, (kind, keys, _) in sorted(self._queued.items()))

    def secondary_keys(self) -> tuple[int, ...]:
        return tuple(sorted(self._tier))

    def check_valid(self) -> None:
        resident = len(self._ref)
        assert resident + len(self._free) == self.num_chunks, \
            f"chunk-partition: {resident} resident + {len(self._free)} free != {self.num_chunks}"
        assert self._num_evictable == sum(r == 0 for r in self._ref.values()), \
            "evictable-count: the running counter drifted from the ref counts"

    # -- primary tier ----------------------------------------------------------------------

    def _lookup_primary(self, key: int) -> LookupResult:
        ref = self._ref.get(key)
        if ref is None:
            return LookupResult.MISS
        return LookupResult.HIT_PENDING if ref == PENDING else LookupResult.HIT

    def _count_offer(self, keys: Sequence[int]) -> None:
        repeat = [k for k in keys if k in self._offers]
        for key in repeat:
            self._offers[key] += 1
            self._offers.move_to_end(key)
        droppable = len(self._offers) - len(repeat)
        for key in keys:
            if key in self._offers:
                continue
            if len(self._offers) >= self.max_tracker_size:
                if droppable == 0:
                    continue
                self._offers.popitem(last=False)
                droppable -= 1
            self._offers[key] = 1

    def _store_primary(self, keys: Sequence[int]) -> StoreOutput | None:
        new = [k for k in keys if k not in self._ref]
        if self.store_threshold >= 2:
            self._count_offer(keys)
            admitted = [k for k in new if self._offers.get(k, 0) >= self.store_threshold]
            self._skipped += len(new) - len(admitted)
            new = admitted
        ready = [k for k in keys if self._ref.get(k, PENDING) != PENDING]
        missed = [k for k in new if k not in self._req.missed]
        self._req.missed.update(missed)
        if self._arc is not None:
            for key in reversed(missed):
                self._arc.ghost_hit(key)
        self._req_observe([k for k in keys if k in new or k in ready], ready)
        if not new:
            return StoreOutput((), ())
        self._alloc_sizes.append(len(new))
        short = len(new) - len(self._free)
        evicted: list[int] = []
        if short > 0:
            if short > self._num_evictable:
                return None
            offered = set(keys)
            if self._arc is not None:
                evicted = self._arc.choose(
                    short, lambda k: self._ref[k] == 0 and k not in offered) or []
            else:
                for _, key in self._order:
                    if len(evicted) == short:
                        break
                    if self._ref[key] == 0 and key not in offered:
                        evicted.append(key)
            if len(evicted) < short:
                return None
            if self._arc is not None:
                self._arc.evict(evicted)
            for key in evicted:
                self._drop(key)
                self._num_evictable -= 1
            self._events.append(OffloadEvent(tuple(evicted), removed=True))
        for key in new:
            self._slot[key] = self._free.pop()
            self._ref[key] = PENDING
            position = self._req.pos.get(key)
            if position is None or self._arc is not None:
                self._set_rank(key)
            else:
                sign = 1 if "lru-tail-after-head" in self.bugs else -1
                self._set_rank(key, (self._request_rank(), sign * position))
            if self._arc is not None:
                self._arc.insert(key)
        self._req.inserted.update(new)
        return StoreOutput(tuple(new), tuple(evicted))

    def _drop(self, key: int) -> None:
        self._free.append(self._slot.pop(key))
        del self._ref[key]
        self._order.remove((self._rank.pop(key), key))

    def _pin(self, key: int) -> None:
        if self._ref[key] == 0:
            self._num_evictable -= 1
        self._ref[key] += 1

    def _unpin(self, key: int) -> None:
        self._ref[key] -= 1
        if self._ref[key] == 0:
            self._num_evictable += 1

    def _mark_written(self, key: int) -> None:
        self._ref[key] = 0
        self._num_evictable += 1

    def prepare_store(self, keys: Sequence[int]) -> StoreOutput | None:
        if self.secondary != "none":
            self._poll()
        return self._store_primary(keys)

    def complete_store(self, keys: Sequence[int], success: bool = True) -> None:
        touched = []
        for key in keys:
            if self._ref.get(key) != PENDING:
                continue
            touched.append(key)
            if success:
                self.primary[self._slot[key]] = self._payload(key)   # the GPU's copy lands
                self._mark_written(key)
            else:
                self._drop(key)
                if self._arc is not None:
                    self._arc.remove(key)
        if touched:
            if not success:
                self._metadata_only.add(len(self._events))
            self._events.append(OffloadEvent(tuple(touched), removed=not success))
        if success and self.secondary != "none":
            cascade = tuple(k for k in keys if self._ref.get(k, PENDING) != PENDING)
            if cascade:
                for key in cascade:
                    self._pin(key)
                self._queue_job("store", cascade, tuple(self._slot[k] for k in cascade))

    def prepare_load(self, keys: Sequence[int]) -> None:
        for key in keys:
            assert self._ref.get(key, PENDING) != PENDING, f"prepare_load: {key} not stored"
            self._pin(key)
        self._req_observe(keys, reused=keys)

    def complete_load(self, keys: Sequence[int]) -> None:
        for key in keys:
            assert self._ref.get(key, 0) > 0, f"complete_load: {key} not loading"
            self._unpin(key)

    def get_stats(self) -> CacheStats:
        used = sum(r != 0 for r in self._ref.values())
        writing = sum(r == PENDING for r in self._ref.values())
        stats = CacheStats(used, writing, used - writing, tuple(self._alloc_sizes),
                           self._skipped if self.store_threshold >= 2 else None)
        self._alloc_sizes, self._skipped = [], 0
        return stats

    def take_events(self) -> list[OffloadEvent]:
        events, failed = self._events, self._metadata_only
        self._events, self._metadata_only = [], set()
        if not self._events_on:
            return []
        out = []
        for n, event in enumerate(events):
            if n in failed:       # a failed store's keys: a set, named in key order
                keys = tuple(sorted(k for k in event.keys if k not in self._ref))
                if not keys:
                    continue
                event = OffloadEvent(keys, removed=True)
            out.append(event)
        return out

    def touch(self, keys: Sequence[int]) -> None:
        if self.secondary != "none":
            self._touched.append(tuple(keys))
        for key in reversed(keys):
            if key in self._rank:
                self._set_rank(key)
            if self._arc is not None:
                self._arc.touch(key, self._ref.get(key, PENDING) != PENDING)

    def arc_memory(self) -> tuple[tuple[int, ...], tuple[int, ...], float] | None:
        arc = self._arc
        return None if arc is None else (tuple(arc.b1), tuple(arc.b2), arc.p)

    def request_policy(self) -> str:
        return "chunk"              # one tier, offloaded chunk by chunk

    def eviction_order(self) -> tuple[int, ...]:
        """Every chunk it may evict, in the order one call evicting them all would."""
        evictable = [k for k, ref in self._ref.items() if ref == 0]
        if self._arc is not None:
            return tuple(self._arc.choose(len(evictable), lambda k: self._ref[k] == 0) or ())
        return tuple(k for _, k in self._order if self._ref[k] == 0)

    def recency_order(self) -> tuple[int, ...]:
        """LRU: every written chunk, in the order one call evicting them all would take, were
        nothing reading them."""
        return tuple(k for _, k in self._order if self._ref[k] != PENDING)

    def finish_request(self) -> None:
        done = self._req
        slot = self._slots.index(done)
        self._req = self._slots[slot] = _Request(done.chain, done.positioned)
        self._finished[slot] = done
        self._commit(done)

    def refinish_request(self) -> None:
        """A duplicate finish signal: the request's accesses were committed once."""
        done = self._finished.get(self._slots.index(self._req))
        if done is not None and "finish-replayed" in self.bugs:
            self._commit(done)

    def _commit(self, done: _Request) -> None:
        seen, inserted, reused = done.seen, done.inserted, done.reused
        if all(k in done.pos for k in seen):
            seen = sorted(seen, key=done.pos.__getitem__)
        for key in reversed(seen):
            if key not in self._rank:
                continue
            self._set_rank(key)
            if self._arc is None:
                continue
            if key in reused:
                self._arc.reuse(key)
            elif key in inserted:
                self._arc.refresh(key)

    # -- tiering ---------------------------------------------------------------------------

    def lookup(self, key: int) -> LookupResult:
        if self.secondary == "none":
            return self._lookup_primary(key)
        if not self._polled:
            self._poll()
        found = self._lookup_primary(key)
        if found is not LookupResult.MISS or self._held:
            return found
        tier = self._lookup_tier(key)
        if tier is not LookupResult.HIT:
            return tier
        if self._store_primary([key]) is None:
            if "lookup-promote-when-full" in self.bugs:
                return LookupResult.RETRY
            return LookupResult.MISS
        self._to_promote.append(key)
        self._source[key] = "secondary"
        return LookupResult.HIT_PENDING

    def _lookup_tier(self, key: int) -> LookupResult:
        if self.secondary == "memory":
            return LookupResult.HIT if key in self._tier else LookupResult.MISS
        if key in self._probe_answer:
            present = self._probe_answer.pop(key)
            return LookupResult.HIT if present else LookupResult.MISS
        if key not in self._probe_queue:
            self._probe_queue.append(key)
        return LookupResult.RETRY

    def on_schedule_end(self) -> None:
        if self.secondary == "none":
            return
        if not self._polled:
            self._poll()
        self._polled = False
        if self._to_promote:
            keys, self._to_promote = tuple(self._to_promote), []
            self._queue_job("promote", keys, tuple(self._slot[k] for k in keys))
        for key in self._probe_queue:
            self._probe_answer[key] = key in self._tier
        self._probe_queue = []

    def complete_job(self, job_id: int, failed: Sequence[int] = ()) -> None:
        """The tier copies the job's keys, except ``failed`` (an I/O error on those)."""
        kind, keys, slots = self._queued.pop(job_id)
        self._failed[job_id] = frozenset(failed)
        for key, slot in zip(keys, slots, strict=True):
            if key in failed:
                continue
            if kind == "store":
                self._tier[key] = self.primary[slot].clone()
            else:
                self.primary[slot] = self._tier[key]
        self._done.append(job_id)
        self._done_jobs[job_id] = (kind, keys, slots)

    def reset_cache(self) -> None:
        for job_id in sorted(self._queued):
            self.complete_job(job_id)
        self._poll()
        self._to_promote = []
        self._source.clear()
        self._ref.clear()
        self._slot.clear()
        self._rank.clear()
        self._order.clear()
        self._counter = 0
        if self._arc is not None:
            self._arc.clear()
        current = self._slots.index(self._req)
        self._slots = [_Request(r.chain, r.positioned)          # a new cache generation
                       for r in self._slots]
        self._req = self._slots[current]
        self._free = list(range(self.num_chunks - 1, -1, -1))
        self._num_evictable = 0
        self.primary.zero_()
        self._polled = False
        self._held = self.secondary != "none"

    def on_reset_flushed(self) -> None:
        self._held = False

    def load_source(self, key: int) -> str:
        return self._source.get(key, "primary")

    def tier_touches(self) -> list[tuple[int, ...]]:
        return list(self._touched)

    def has_pending_work(self) -> bool:
        return bool(self._queued or self._done)

    def shutdown(self) -> tuple[str, ...]:
        released = ("secondary",) if self.secondary != "none" else ()
        self.primary = None                         # the primary's memory goes last
        return (*released, "primary")

    def _queue_job(self, kind: str, keys: tuple[int, ...], slots: tuple[int, ...]) -> None:
        self._queued[self._next_job] = (kind, keys, slots)
        self._next_job += 1

    def _poll(self) -> None:
        self._polled = True
        for job_id in self._done:
            kind, keys, _ = self._done_jobs.pop(job_id)
            failed = self._failed.pop(job_id)
            landed, lost = [], []
            for key in keys:
                if kind == "store":
                    self._unpin(key)
                elif self._ref.get(key) == PENDING:
                    (lost if key in failed else landed).append(key)
            for key in landed:
                self._mark_written(key)
            for key in lost:
                self._drop(key)         # the promotion failed: its chunk is freed again
                self._source.pop(key, None)
            if landed:
                self._events.append(OffloadEvent(tuple(landed), removed=False))
            if lost:
                self._metadata_only.add(len(self._events))
                self._events.append(OffloadEvent(tuple(lost), removed=True))
        self._done = []

    # -- the connector's lookups -------------------------------------------------------------

    def maximal_prefix_lookup(self, keys: Sequence[int]) -> Scan:
        looked: list[int] = []
        said: list[LookupResult] = []
        count, defer = 0, False
        for key in keys:
            looked.append(key)
            answer = self.lookup(key)
            said.append(answer)
            if answer is LookupResult.MISS:
                break
            defer |= answer in (LookupResult.RETRY, LookupResult.HIT_PENDING)
            count += answer is not LookupResult.RETRY
        return Scan(None if defer else count, tuple(looked), tuple(said))

    def sliding_window_lookup(self, keys: Sequence[int], window: int,
                              initial_window: int | None = None) -> Scan:
        looked: list[int] = []
        said: list[LookupResult] = []
        need = initial_window if initial_window else window
        streak, pending_in_streak, defer = 0, False, False
        idx = len(keys)
        while idx > 0:
            idx -= 1
            looked.append(keys[idx])
            answer = self.lookup(keys[idx])
            said.append(answer)
            pending = answer is LookupResult.HIT_PENDING
            if pending and "lookup-pending-as-miss" in self.bugs:
                answer, pending = LookupResult.MISS, False
            if answer in (LookupResult.HIT, LookupResult.HIT_PENDING):
                streak += 1
                pending_in_streak = pending_in_streak or pending
                if streak == need:
                    done = None if defer or pending_in_streak else idx + need
                    return Scan(done, tuple(looked), tuple(said))
                continue
            defer = defer or answer is LookupResult.RETRY
            streak, pending_in_streak, need = 0, False, window
        return Scan(None if defer or pending_in_streak else streak, tuple(looked),
                    tuple(said))


class _Request:
    """A running request's context: its keys' positions, its LRU rank once observed, and
    what it saw, inserted, reused and missed."""

    def __init__(self, chain: tuple[int, ...], positioned: bool = True):
        self.chain = chain
        self.positioned = positioned
        self.pos = {key: 16 * (i + 1) for i, key in enumerate(chain)} if positioned else {}
        self.rank: int | None = None
        self.seen: list[int] = []
        self.inserted: set[int] = set()
        self.reused: set[int] = set()
        self.missed: set[int] = set()
