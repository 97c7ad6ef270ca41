"""Reference model of vLLM 0.33.0's tiered KV-offload lookup (``specs/tiered-lookup.md``).

Scope: the primary tier (``CPUOffloadingManager`` with LRU: chunks write-pending, stored or
pinned; eviction of stored, unpinned chunks, least recent first), one optional secondary tier
as ``TieringOffloadingManager`` drives it (cascaded store jobs, promotions on a secondary hit,
finished jobs polled at most once per step, an asynchronous existence probe for the "probe"
tier, ``reset_cache`` / ``on_reset_flushed``), and the connector's two lookups
(``maximal_prefix_lookup``, ``sliding_window_lookup``) as pure functions of a lookup callable.
Not modelled: chunk ids (where a key is stored is the target's business), ARC,
request-position recency, several secondary tiers, back-pressure. Data is modelled as "whose
bytes a readable chunk holds": always its own key.

The model stores facts (which chunks exist, whether written, how many loads pin them, which
jobs are in flight) and computes the rest: free chunks, ref counts (loads plus the unpolled
store jobs reading the chunk), evictable chunks.

Named options keep older semantics checkable: ``pending_as_miss`` (the sliding-window lookup
before PR #46363 treated HIT_PENDING as a miss) and ``promotion_answers_retry`` (the seed's
version of PR #46363 answered RETRY, not HIT_PENDING, when a promotion started). Releases
before 0.33.0 meant other things on purpose, each an option too (the vllm adapter picks
them per release, ``sim/vllm/compat.py: lookup_semantics``): ``pending_lookup`` (what a
chunk whose write is in flight answers: MISS before 0.22.0, when "not ready" meant "not
offloaded"; RETRY in 0.22-0.24, when the manager said "retry"), ``failed_store_events``
(a failed store's removal is announced as an event: from 0.33.0) and
``reset_holds_promotions`` (promotions wait for ``on_reset_flushed`` after a reset: from
0.33.0).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from attrs import define, field

from models.lookup_values import Job, LookupResult, OffloadEvent, Scan, StoreOutput

HIT, HIT_PENDING, RETRY, MISS = (LookupResult.HIT, LookupResult.HIT_PENDING,
                                 LookupResult.RETRY, LookupResult.MISS)
SECONDARY_KINDS = ("none", "memory", "probe")


# -- the connector's lookups (spec section 4) ------------------------------------------------

def maximal_prefix_lookup(lookup: Callable[[int], LookupResult], keys: Sequence[int]) -> Scan:
    """Scan from the start: HIT counts, HIT_PENDING counts and defers, RETRY defers and the
    scan goes on (later probes start now), MISS stops. The hit count, or None if deferred."""
    made: list[int] = []
    answers: list[LookupResult] = []
    hits, deferred = 0, False
    for key in keys:
        result = lookup(key)
        made.append(key)
        answers.append(result)
        if result is MISS:
            break
        if result is RETRY:
            deferred = True
            continue
        hits += 1
        deferred = deferred or result is HIT_PENDING
    return Scan(None if deferred else hits, tuple(made), tuple(answers))


def sliding_window_lookup(lookup: Callable[[int], LookupResult], keys: Sequence[int],
                          window: int, initial_window: int | None = None,
                          pending_as_miss: bool = False) -> Scan:
    """Scan from the end for a run of hits as long as the required window (``initial_window``
    for the rightmost run, ``window`` after a gap). The end index of the first complete run,
    or the run length reaching index 0; None if any RETRY was seen or the winning run holds a
    HIT_PENDING. A gap (MISS or RETRY) resets the run and forgets its pending mark."""
    required = initial_window or window
    made: list[int] = []
    answers: list[LookupResult] = []
    run, pending, deferred = 0, False, False
    for idx in range(len(keys) - 1, -1, -1):
        result = lookup(keys[idx])
        made.append(keys[idx])
        answers.append(result)
        if pending_as_miss and result is HIT_PENDING:
            result = MISS            # before PR #46363: a pending block ended the run
        if result is HIT or result is HIT_PENDING:
            run += 1
            pending = pending or result is HIT_PENDING
        else:
            run, pending, required = 0, False, window
            deferred = deferred or result is RETRY
        if run == required:
            return Scan(None if deferred or pending else idx + required, tuple(made),
                        tuple(answers))
    return Scan(None if deferred or pending else run, tuple(made), tuple(answers))


# -- the tiers ------------------------------------------------------------------------------

@define
class Chunk:
    written: bool            # False: write pending (a store from the GPU or a promotion)
    loads: int = 0           # loads to the GPU in flight (prepare_load .. complete_load)


@define
class TieredLookupModel:
    """Chunk lifecycle: 1. offered by ``prepare_store`` (or a promotion): write pending,
    lookup HIT_PENDING; 2. written (``complete_store`` / the promotion polled): HIT,
    evictable unless loads or unpolled store jobs pin it; 3. evicted (LRU) or removed by a
    failed store or ``reset_cache``: MISS in the primary."""

    num_chunks: int
    secondary: str = "none"
    pending_as_miss: bool = False
    promotion_answers_retry: bool = False
    pending_lookup: str = "HIT_PENDING"      # the answer of a chunk whose write is in flight
    failed_store_events: bool = True
    reset_holds_promotions: bool = True
    chunks: dict[int, Chunk] = field(factory=dict)
    recency: list[int] = field(factory=list)       # least recently used first
    jobs: list[Job] = field(factory=list)          # submitted, not yet complete
    finished: list[Job] = field(factory=list)      # complete, not yet polled
    tier_keys: set[int] = field(factory=set)       # keys the secondary tier holds a copy of
    promotions: list[int] = field(factory=list)    # allocated, submitted at on_schedule_end
    probes: dict[int, LookupResult | None] = field(factory=dict)   # None: not flushed yet
    polled_this_step: bool = False
    promotions_held: bool = False
    jobs_submitted: int = 0
    events: list[tuple[tuple[int, ...], bool, bool]] = field(factory=list)  # keys, removed, failed

    def __attrs_post_init__(self) -> None:
        if self.secondary not in SECONDARY_KINDS:
            raise ValueError(f"secondary must be one of {SECONDARY_KINDS}")
        if self.pending_lookup not in ("HIT_PENDING", "RETRY", "MISS"):
            raise ValueError("pending_lookup must be HIT_PENDING, RETRY or MISS")

    # -- observables, computed -----------------------------------------------------------

    @property
    def num_free_chunks(self) -> int:
        return self.num_chunks - len(self.chunks)

    def ref_cnt(self, key: int) -> int | None:
        """None: absent; -1: write pending; else loads plus unpolled store jobs reading it."""
        chunk = self.chunks.get(key)
        if chunk is None:
            return None
        if not chunk.written:
            return -1
        readers = [j for j in self.jobs + self.finished if j.kind == "store" and key in j.keys]
        return chunk.loads + len(readers)

    def evictable(self, key: int) -> bool:
        return self.ref_cnt(key) == 0

    def read_chunk(self, key: int) -> int | None:
        """Whose bytes the key's primary chunk holds when readable (its own), else None."""
        return key if self.ref_cnt(key) not in (None, -1) else None

    def pending_jobs(self) -> tuple[Job, ...]:
        return tuple(self.jobs)

    def secondary_keys(self) -> tuple[int, ...]:
        return tuple(sorted(self.tier_keys))

    def in_flight(self, key: int) -> bool:
        """Something that will change the key's answer is under way: a write into its
        primary chunk, or an existence probe."""
        return self.ref_cnt(key) == -1 or key in self.probes

    # -- the primary tier ----------------------------------------------------------------

    def _primary_lookup(self, key: int) -> LookupResult:
        chunk = self.chunks.get(key)
        return MISS if chunk is None else HIT if chunk.written else \
            LookupResult[self.pending_lookup]

    def _primary_prepare_store(self, keys: Sequence[int]) -> StoreOutput | None:
        to_store = tuple(k for k in keys if k not in self.chunks)
        need = len(to_store) - self.num_free_chunks
        victims: list[int] = []
        if need > 0:
            # Never an offered key (it must stay), never a pinned or pending chunk.
            victims = [k for k in self.recency if self.evictable(k) and k not in keys][:need]
            if len(victims) < need:
                return None
        for key in victims:
            self._remove(key)
        if victims:
            self.events.append((tuple(victims), True, False))
        for key in to_store:
            self.chunks[key] = Chunk(written=False)
            self.recency.append(key)
        return StoreOutput(to_store, tuple(victims))

    def _remove(self, key: int) -> None:
        del self.chunks[key]
        self.recency.remove(key)

    def prepare_store(self, keys: Sequence[int]) -> StoreOutput | None:
        if self.secondary != "none":
            self._poll()             # unconditionally: eviction sees the freshest completions
        return self._primary_prepare_store(keys)

    def complete_store(self, keys: Sequence[int], success: bool = True) -> None:
        self._complete_write(keys, success)
        if success and self.secondary != "none":
            cascaded = tuple(k for k in keys if self.ref_cnt(k) not in (None, -1))
            if cascaded:
                self._submit("store", cascaded)

    def _complete_write(self, keys: Sequence[int], success: bool) -> None:
        done = [k for k in keys if k in self.chunks and not self.chunks[k].written]
        for key in done:
            if success:
                self.chunks[key].written = True
            else:
                self._remove(key)
        if done and (success or self.failed_store_events):
            self.events.append((tuple(done), not success, not success))

    def take_events(self) -> list[OffloadEvent]:
        """Events in order, then forgotten; a failed store's removal names only the keys
        still absent now (a retry may have stored one again)."""
        taken, self.events = self.events, []
        out = []
        for keys, removed, failed in taken:
            keys = tuple(k for k in keys if not failed or k not in self.chunks)
            if keys:
                out.append(OffloadEvent(keys, removed))
        return out

    def prepare_load(self, keys: Sequence[int]) -> None:
        for key in keys:
            if self.ref_cnt(key) in (None, -1):
                raise ValueError(f"prepare_load: key {key} is not stored")
            self.chunks[key].loads += 1

    def complete_load(self, keys: Sequence[int]) -> None:
        for key in keys:
            if key not in self.chunks or self.chunks[key].loads == 0:
                raise ValueError(f"complete_load: key {key} is not being loaded")
            self.chunks[key].loads -= 1

    def touch(self, keys: Sequence[int]) -> None:
        # The first key ends up most recent: a request's head outlives its tail.
        for key in reversed(keys):
            if key in self.chunks:
                self.recency.remove(key)
                self.recency.append(key)

    # -- tiering -------------------------------------------------------------------------

    def lookup(self, key: int) -> LookupResult:
        if self.secondary == "none":
            return self._primary_lookup(key)
        if not self.polled_this_step:
            self._poll()
        primary = self._primary_lookup(key)
        if key in self.chunks:
            return primary
        if self.promotions_held:
            return MISS
        answer = self._tier_lookup(key)
        if answer is HIT:
            if self._primary_prepare_store([key]) is None:
                return MISS          # the primary cannot take it: recompute, don't wait
            self.promotions.append(key)
            return RETRY if self.promotion_answers_retry else HIT_PENDING
        return answer

    def _tier_lookup(self, key: int) -> LookupResult:
        if self.secondary == "memory":
            return HIT if key in self.tier_keys else MISS
        if self.probes.get(key) is not None:
            return self.probes.pop(key)      # a flushed probe's answer is used once
        self.probes.setdefault(key, None)    # queued; flushed at on_schedule_end
        return RETRY

    def on_schedule_end(self) -> None:
        if self.secondary == "none":
            return
        if not self.polled_this_step:
            self._poll()
        self.polled_this_step = False
        if self.promotions:
            self._submit("promote", tuple(self.promotions))
            self.promotions = []
        for key, answer in self.probes.items():
            if answer is None:
                self.probes[key] = HIT if key in self.tier_keys else MISS

    def complete_job(self, job_id: int) -> None:
        """The job's copy happens now; the manager notices at its next poll."""
        job = next(j for j in self.jobs if j.job_id == job_id)
        self.jobs.remove(job)
        self.finished.append(job)
        if job.kind == "store":
            self.tier_keys.update(job.keys)

    def reset_cache(self) -> None:
        for job in list(self.jobs):           # every tier drains its jobs first
            self.complete_job(job.job_id)
        self._poll()
        self.promotions = []
        self.chunks.clear()
        self.recency.clear()
        self.polled_this_step = False
        self.promotions_held = self.secondary != "none" and self.reset_holds_promotions

    def on_reset_flushed(self) -> None:
        self.promotions_held = False

    def _submit(self, kind: str, keys: tuple[int, ...]) -> None:
        self.jobs.append(Job(self.jobs_submitted, kind, keys))
        self.jobs_submitted += 1

    def _poll(self) -> None:
        self.polled_this_step = True
        done, self.finished = self.finished, []
        for job in done:
            if job.kind == "promote":
                self._complete_write(job.keys, True)

    # -- the connector's lookups over this manager --------------------------------------

    def maximal_prefix_lookup(self, keys: Sequence[int]) -> Scan:
        return maximal_prefix_lookup(self.lookup, keys)

    def sliding_window_lookup(self, keys: Sequence[int], window: int,
                              initial_window: int | None = None) -> Scan:
        return sliding_window_lookup(self.lookup, keys, window, initial_window,
                                     pending_as_miss=self.pending_as_miss)
