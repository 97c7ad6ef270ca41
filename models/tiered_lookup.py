"""Reference model of vLLM 0.33.0's tiered KV-offload lookup (``docs/specs/tiered-lookup.md``).

Scope: the primary tier (``CPUOffloadingManager`` with LRU: chunks write-pending, stored or
pinned; eviction of stored, unpinned chunks, least recent first), one optional secondary tier
as ``TieringOffloadingManager`` drives it (cascaded store jobs, promotions on a secondary hit,
finished jobs polled at most once per step, an asynchronous existence probe for the "probe"
tier, ``reset_cache`` / ``on_reset_flushed``), and the connector's lookups over it
(``models/tiered_lookup_scans.py``). Several requests run at once over the CPU manager alone
(``use_request``), each with its context's key positions; LRU ranks a running request's
blocks by position (``models/tiered_lookup_access.py``). Not modelled: chunk ids, several
secondary tiers, back-pressure, the tiering manager's request hooks (its tiering layer,
``models/tiered_lookup_tiering.py``; the two agree where both apply,
``properties/test_tiered_lookup_layers_agree.py``). Data is "whose bytes a
readable chunk holds": its own.

The model stores facts: the chunks (written or not, loads, last use), every job submitted and
when it finished, when each promotion and probe started, and when the manager last polled,
ended a step, reset and was told the reset flushed, all on one clock (``Timeline``). It
computes the rest: free chunks, ref counts, what is pinned, LRU order, pending jobs, the
secondary's contents, whether this step has polled, which promotions await submission,
whether promotions are held, what a probe answers.

Named options keep older semantics checkable: ``pending_as_miss`` (the sliding-window lookup
before PR #46363 treated HIT_PENDING as a miss) and ``promotion_answers_retry`` (the seed's
version of PR #46363 answered RETRY, not HIT_PENDING, when a promotion started). Releases
before 0.33.0 meant other things on purpose, each an option too (the vllm adapter picks them
per release, ``sim/vllm/tiered_lookup_compat.py: model_semantics``): ``pending_lookup`` (what
a chunk whose write is in flight answers: MISS before 0.22.0, when "not ready" meant "not
offloaded"),
``answer_vocabulary`` (0.15-0.24's ``bool | None`` API says None for HIT_PENDING and RETRY
alike: only the word changes, the scans still act on HIT_PENDING, so the window scan's old
pessimism, fixed by PR #46363, stays a divergence), ``failed_store_events`` (a failed store's
removal is announced as an event: from 0.33.0), ``reset_holds_promotions`` (promotions
wait for ``on_reset_flushed`` after a reset: from 0.33.0) and ``store_poll_gated`` (before
0.33.0 ``prepare_store`` polled only if nothing had polled since the step began: the
connector called it right after ``on_schedule_end``, which began the step; 0.33.0 moved
``on_schedule_end`` to the step's very end and made the poll unconditional).
``request_positions`` (the connector records key positions and LRU ranks by them: from
0.33.0; before, positions are not set and every LRU use ranks as a touch) and
``threshold_counts_lookups`` (the store threshold counted each ``lookup`` of a key, and
``prepare_store`` only filtered by the count: read in 0.22.0-0.26.x; from 0.30.0 offers to
``prepare_store`` count) and ``offers_count_per_request`` (a request's offers of a key
count once toward the threshold: from 0.34.0; through 0.33.0 every offer counts, as its
``store_threshold`` is documented) and ``recency_when_evictable`` (LRU kept only evictable
chunks in its order: a touch of a pinned or write-pending chunk was dropped and the chunk
became the most recent when its store or last load completed; read in 0.24.0, 0.26.0 and
0.30.0; 0.22.0 orders by touches, 0.32.0 moved to request ranks) and ``load_polls``
(``prepare_load`` noticed finished jobs first, the step's first poll as a lookup's is: read
in 0.22.0 and 0.24.0; 0.26.0 polls in lookups, step ends and stores only).
"""

from __future__ import annotations

from collections.abc import Sequence

from attrs import define, field

from models.tiered_lookup_access import RequestAccess, chain_positions
from models.tiered_lookup_admission import StoreAdmission
from models.tiered_lookup_arc import ArcPolicy
from models.tiered_lookup_scans import maximal_prefix_lookup, sliding_window_lookup
from models.tiered_lookup_stats import CacheStats
from models.tiered_lookup_timeline import Timeline
from models.tiered_lookup_values import Job, LookupResult, OffloadEvent, Scan, StoreOutput

HIT, HIT_PENDING, RETRY, MISS = (LookupResult.HIT, LookupResult.HIT_PENDING,
                                 LookupResult.RETRY, LookupResult.MISS)
SECONDARY_KINDS = ("none", "memory", "probe")
EVICTION_POLICIES = ("lru", "arc")


@define
class Chunk:
    written: bool            # False: write pending (a store from the GPU or a promotion)
    used_at: tuple[int, int]  # LRU pair (time, -position): the least is evicted first
    loads: int = 0           # loads to the GPU in flight (prepare_load .. complete_load)


@define
class TieredLookupModel:
    """Chunk lifecycle: 1. offered by ``prepare_store`` (or a promotion): write pending,
    lookup HIT_PENDING; 2. written (``complete_store`` / the promotion noticed by a poll):
    HIT, evictable unless loads or unnoticed store jobs pin it; 3. evicted (LRU) or removed by
    a failed store or ``reset_cache``: MISS in the primary."""

    num_chunks: int
    secondary: str = "none"
    pending_as_miss: bool = False
    promotion_answers_retry: bool = False
    pending_lookup: str = "HIT_PENDING"      # the answer of a chunk whose write is in flight
    # The lookup API's vocabulary: "LookupResult" (vLLM 0.25.0 on) or "bool|None" (0.15.0-
    # 0.24.x), where None says both HIT_PENDING and RETRY. A vocabulary, not a behaviour: the
    # model still *means* HIT_PENDING (its scans count the chunk); ``lookup`` says RETRY.
    answer_vocabulary: str = "LookupResult"
    failed_store_events: bool = True
    reset_holds_promotions: bool = True
    store_poll_gated: bool = False
    request_positions: bool = True           # LRU ranks a running request's keys by position
    threshold_counts_lookups: bool = False   # the store threshold counts lookups, not offers
    offers_count_per_request: bool = False   # a request's offers of a key count once (0.34.0)
    recency_when_evictable: bool = False     # LRU: a chunk is MRU when it becomes evictable
    load_polls: bool = False                 # prepare_load polls first (once per step)
    arc_store_miss_adapts: bool = True       # ARC learns from a ghost offered for a store
    prefix_counts_every_key: bool = False    # the filter counts a prefix lookup's every key
    requests: tuple[tuple[int, ...], ...] = ()   # each request slot's keys (CPU manager alone)
    unpositioned: tuple[int, ...] = ()       # slots whose context records no key positions
    enable_events: bool = True               # False: take_events() yields nothing
    eviction_policy: str = "lru"             # "arc": ``models/tiered_lookup_arc.py``
    store_threshold: int = 1                 # offers before a store: ``tiered_lookup_admission``
    max_tracker_size: int = 64_000
    preloaded: tuple[int, ...] = ()     # keys the secondary holds from an earlier run
    chunks: dict[int, Chunk] = field(factory=dict)
    clock: Timeline = field(factory=Timeline)
    submitted: list[Job] = field(factory=list)          # every job; job_id = position
    finished_at: dict[int, int] = field(factory=dict)   # job_id -> when its copy happened
    failed: dict[int, frozenset[int]] = field(factory=dict)  # job_id -> keys not copied
    promotion_starts: list[tuple[int, int]] = field(factory=list)   # (time, key)
    probes_asked: dict[int, int] = field(factory=dict)  # key -> when; until its answer is used
    events: list[tuple[tuple[int, ...], bool, bool]] = field(factory=list)  # keys, removed, failed
    running: dict[int, RequestAccess] = field(factory=dict)  # slot -> its request's accesses
    current: int = 0                          # the slot whose request makes the calls
    arc: ArcPolicy | None = None
    admission: StoreAdmission = field(init=False)
    allocations: list[int] = field(factory=list)   # store sizes since the last get_stats
    tier_sourced: set[int] = field(factory=set)  # keys the request got by promotion
    touched_in_tier: list[tuple[int, ...]] = field(factory=list)   # touches the tier got

    def __attrs_post_init__(self) -> None:
        if self.secondary not in SECONDARY_KINDS:
            raise ValueError(f"secondary must be one of {SECONDARY_KINDS}")
        if self.preloaded and self.secondary == "none":
            raise ValueError("preloaded keys need a secondary tier to hold them")
        if self.pending_lookup not in ("HIT_PENDING", "RETRY", "MISS"):
            raise ValueError("pending_lookup must be HIT_PENDING, RETRY or MISS")
        if self.eviction_policy not in EVICTION_POLICIES:
            raise ValueError(f"eviction_policy must be one of {EVICTION_POLICIES}")
        if self.eviction_policy == "arc":
            self.arc = ArcPolicy(self.num_chunks)
        self.admission = StoreAdmission(self.store_threshold, self.max_tracker_size)
        if self.requests and self.secondary != "none":
            raise ValueError("request slots are driven over the CPU manager alone")
        for slot in range(max(1, len(self.requests))):
            self.running[slot] = self._new_request(slot)

    def _new_request(self, slot: int) -> RequestAccess:
        chain = self.requests[slot] if slot < len(self.requests) else ()
        positioned = self.request_positions and slot not in self.unpositioned
        return RequestAccess(chain_positions(chain) if positioned else {})

    @property
    def access(self) -> RequestAccess:
        """The accesses of the request that makes the calls now."""
        return self.running[self.current]

    def use_request(self, slot: int) -> None:
        """The calls from now on come from the request in ``slot`` (its own context)."""
        if slot not in self.running:
            raise ValueError(f"use_request: no request slot {slot}")
        self.current = slot

    @property
    def _lru_ranks(self) -> bool:
        return self.arc is None and self.request_positions

    # -- observables, computed -----------------------------------------------------------

    @property
    def num_free_chunks(self) -> int:
        return self.num_chunks - len(self.chunks)

    def ref_cnt(self, key: int) -> int | None:
        """None: absent; -1: write pending; else loads plus store jobs reading the chunk that
        no poll has noticed finishing yet."""
        chunk = self.chunks.get(key)
        if chunk is None:
            return None
        if not chunk.written:
            return -1
        return chunk.loads + sum(key in j.keys for j in self._unnoticed_stores())

    def pinned(self) -> frozenset[int]:
        """The chunks eviction must spare: write pending, or read by a load or a store job.
        The one statement of the rule; ``prepare_store`` and the machine both ask it."""
        return frozenset(k for k in self.chunks if self.ref_cnt(k) != 0)

    def read_chunk(self, key: int) -> int | None:
        """Whose bytes the key's primary chunk holds when readable (its own), else None."""
        return key if self.ref_cnt(key) not in (None, -1) else None

    def pending_jobs(self) -> tuple[Job, ...]:
        return tuple(j for j in self.submitted if j.job_id not in self.finished_at)

    jobs = property(pending_jobs, doc="Jobs submitted and not yet finished, oldest first.")

    @property
    def tier_keys(self) -> frozenset[int]:
        """The secondary holds a copy of every key a finished store job carried."""
        return self._tier_keys_before(self.clock.now + 1)

    def secondary_keys(self) -> tuple[int, ...]:
        return tuple(sorted(self.tier_keys))

    @property
    def polled_this_step(self) -> bool:
        return self.clock.last("poll") > self._step_began()

    @property
    def promotions(self) -> list[int]:
        """Keys whose promotion started this step: their load is submitted, as one job, when
        the step ends; a reset drops them (their chunks are gone)."""
        return [k for t, k in self.promotion_starts if t > self._step_began()]

    @property
    def promotions_held(self) -> bool:
        """From ``reset_cache`` until ``on_reset_flushed`` a late write may still land in a
        freed chunk, so no promotion may take one (vLLM 0.33.0 ``tiering/manager.py``)."""
        return self.secondary != "none" and self.reset_holds_promotions and (
            self.clock.last("reset") > self.clock.last("reset_flushed"))

    def secondary_answer(self, key: int) -> LookupResult:
        """What the secondary tier says of the key now, changing nothing: "memory" answers
        at once; "probe" answers RETRY until the probe asked for the key has been flushed by
        a step's end, then whether the tier held the key at that flush."""
        if self.secondary != "probe":
            return HIT if key in self.tier_keys else MISS       # "none" holds nothing
        asked = self.probes_asked.get(key)
        flushed = None if asked is None else self.clock.first_after("step_end", asked)
        if flushed is None:                    # not asked yet, or not flushed yet
            return RETRY
        return HIT if key in self._tier_keys_before(flushed) else MISS

    def load_source(self, key: int) -> str:
        """Which tier supplied the request's HIT on the key, for its cache-hit metrics: the
        secondary when the request's own lookup promoted it from there (a disk hit stays a
        disk hit after the copy lands in host memory), unless that promotion failed or a
        reset came since; else the primary."""
        return "secondary" if key in self.tier_sourced else "primary"

    def tier_touches(self) -> list[tuple[int, ...]]:
        return list(self.touched_in_tier)

    def has_pending_work(self) -> bool:
        """The engine must keep stepping while a secondary job runs or has finished unnoticed
        (its pins or its promoted chunks wait for a poll)."""
        seen = self.clock.last("poll")
        return any(self.finished_at.get(j.job_id, seen + 1) > seen for j in self.submitted)

    def shutdown(self) -> tuple[str, ...]:
        """What shutting down releases, in order: the secondary tier before the primary's
        memory, which the tier's transfers read and write."""
        return ("secondary", "primary") if self.secondary != "none" else ("primary",)

    def in_flight(self, key: int) -> bool:
        """Something that will change the key's answer is under way: a write into its
        primary chunk, or an existence probe."""
        return self.ref_cnt(key) == -1 or key in self.probes_asked

    def _step_began(self) -> int:
        # vLLM re-arms its once-per-step poll and forgets unsubmitted promotions both when a
        # step ends and at reset_cache: either one begins a step.
        return max(self.clock.last("step_end"), self.clock.last("reset"))

    def _unnoticed_stores(self) -> list[Job]:
        """Store jobs no poll has seen finish (still running, or finished since): each pins
        the chunks it reads."""
        seen = self.clock.last("poll")
        return [j for j in self.submitted
                if j.kind == "store" and self.finished_at.get(j.job_id, seen + 1) > seen]

    def _tier_keys_before(self, time: int) -> frozenset[int]:
        return frozenset(k for j in self.submitted if j.kind == "store"
                         and self.finished_at.get(j.job_id, time) < time for k in j.keys
                         if k not in self.failed.get(j.job_id, ())) | set(self.preloaded)

    # -- the primary tier ----------------------------------------------------------------

    def _primary_prepare_store(self, keys: Sequence[int]) -> StoreOutput | None:
        already = self.access.offered if self.offers_count_per_request else frozenset()
        if not self.threshold_counts_lookups:
            self.admission.offer(keys, self.clock.tick, already)
        to_store = self.admission.admitted([k for k in keys if k not in self.chunks], already)
        self.access.offered.update(keys)
        readable = [k for k in keys if self.read_chunk(k) is not None]
        misses = self.access.first_store_misses(to_store)
        if self.arc is not None and self.arc_store_miss_adapts:
            for key in reversed(misses):       # ARC learns from a ghost before it is stored
                self.arc.adapt(key, self.clock.tick())
        self._observe([k for k in keys if k in to_store or k in readable], readable)
        if to_store:
            self.allocations.append(len(to_store))     # counted even if eviction fails
        need = len(to_store) - self.num_free_chunks
        # Never an offered key (it must stay), never a pinned chunk; oldest use first.
        spare = self.pinned() | set(keys)
        if self.arc is not None:
            victims = self.arc.victims(self.chunks, spare, max(need, 0))
        else:
            by_age = sorted((c.used_at, k) for k, c in self.chunks.items() if k not in spare)
            victims = tuple(k for _, k in by_age[:max(need, 0)])
            victims = victims if len(victims) >= need else None
        if victims is None:
            return None
        self.chunks = {k: c for k, c in self.chunks.items() if k not in victims}
        if victims:
            self.events.append((victims, True, False))
            if self.arc is not None:
                self.arc.evicted(victims, self.clock.tick)
        for key in to_store:
            now = self.clock.tick()
            pair = self.access.recency(key, now) if self._lru_ranks else (now, 0)
            self.chunks[key] = Chunk(written=False, used_at=pair)
        self.access.inserted.update(to_store)
        for key in to_store if self.arc is not None else ():
            self.arc.inserted(key)
        return StoreOutput(to_store, victims)

    def request_policy(self) -> str:
        """How a new request is to be offloaded: the CPU manager alone (one tier that keeps
        chunks) says chunk by chunk."""
        return "chunk"

    def arc_memory(self) -> tuple[tuple[int, ...], tuple[int, ...], float] | None:
        """ARC's memory of what it evicted (B1, B2, least recent first) and T1's target: what
        decides how later misses adapt (None under LRU)."""
        if self.arc is None:
            return None
        return (tuple(self.arc.ghost_list("B1")), tuple(self.arc.ghost_list("B2")),
                self.arc.target)

    def eviction_order(self) -> tuple[int, ...]:
        """The order in which the primary would evict every chunk it may evict now (written,
        nothing reading it), were it asked for all of them at once with no key offered: the
        eviction policy's whole state as later stores see it, one victim at a time."""
        pinned = self.pinned()
        evictable = sum(k not in pinned for k in self.chunks)
        if self.arc is not None:
            return self.arc.victims(self.chunks, pinned, evictable) or ()
        return tuple(k for _, k in sorted((c.used_at, k) for k, c in self.chunks.items()
                                          if k not in pinned))

    def recency_order(self) -> tuple[int, ...]:
        """LRU: the order in which the primary would evict every written chunk were nothing
        reading any (no load, no store job), its recency as a whole. A touch or a request's
        end reorders a chunk while a cascade or a load still reads it, which the eviction
        order shows only once the chunk is unpinned (in a tiering world, often never before
        the chunk is reordered again). ARC's lists: ``eviction_order`` and ``arc_memory``."""
        return tuple(k for _, k in sorted((c.used_at, k) for k, c in self.chunks.items()
                                          if c.written))

    def prepare_store(self, keys: Sequence[int]) -> StoreOutput | None:
        if not (self.store_poll_gated and self.polled_this_step):
            self._poll()             # unconditionally: eviction sees the freshest completions
        return self._primary_prepare_store(keys)

    def complete_store(self, keys: Sequence[int], success: bool = True) -> None:
        self._complete_write(keys, success)
        if success and self.secondary != "none":
            cascaded = tuple(k for k in keys if self.read_chunk(k) is not None)
            if cascaded:
                self._submit("store", cascaded)

    def _complete_write(self, keys: Sequence[int], success: bool) -> None:
        done = tuple(k for k in keys if self.ref_cnt(k) == -1)
        if not done:
            return
        if success or self.failed_store_events:
            self.events.append((done, not success, not success))
        for key in done:
            if success:
                self.chunks[key].written = True
                self._became_evictable(key)
            else:
                del self.chunks[key]
                if self.arc is not None:
                    self.arc.removed(key)

    def get_stats(self) -> CacheStats:
        """The step's metrics (``models/tiered_lookup_stats.py``); sizes and skips reset."""
        used = sum(self.ref_cnt(k) != 0 for k in self.chunks)
        writing = sum(self.ref_cnt(k) == -1 for k in self.chunks)
        skipped = self.admission.skipped if self.admission.filtering else None
        stats = CacheStats(used, writing, used - writing, tuple(self.allocations), skipped)
        self.allocations, self.admission.skipped = [], 0
        return stats

    def take_events(self) -> list[OffloadEvent]:
        """Events in order, then forgotten; a failed store's removal names only the keys
        still absent now (a retry may have stored one again). Those keys are a set, not a
        sequence (vLLM gathers a partly failed job's keys in a set), so they are named in
        key order."""
        taken, self.events = self.events, []
        if not self.enable_events:             # built without events: nothing is recorded
            return []
        named = ((tuple(sorted(k for k in keys if k not in self.chunks)) if failed else keys,
                  removed) for keys, removed, failed in taken)
        return [OffloadEvent(keys, removed) for keys, removed in named if keys]

    def prepare_load(self, keys: Sequence[int]) -> None:
        if self.load_polls and not self.polled_this_step:
            self._poll()
        for key in keys:
            if self.read_chunk(key) is None:
                raise ValueError(f"prepare_load: key {key} is not stored")
            self.chunks[key].loads += 1
        self._observe(keys, reused=keys)

    def _observe(self, keys: Sequence[int], reused: Sequence[int] = ()) -> None:
        """The running request observes ``keys``: a first observation ranks the request
        (LRU) and raises a resident key with a position to the request's pair for it."""
        new = self.access.observe(keys, reused)
        if not new or not self._lru_ranks:
            return
        if self.access.rank is None:
            self.access.rank = self.clock.tick()
        for key in new:
            chunk = self.chunks.get(key)
            if chunk is not None and key in self.access.positions:
                chunk.used_at = max(chunk.used_at, self.access.recency(key, 0))

    def complete_load(self, keys: Sequence[int]) -> None:
        for key in keys:
            chunk = self.chunks.get(key)
            if chunk is None or chunk.loads == 0:
                raise ValueError(f"complete_load: key {key} is not being loaded")
            self.chunks[key].loads -= 1
            self._became_evictable(key)

    def _became_evictable(self, key: int) -> None:
        """``recency_when_evictable``: a chunk that becomes evictable (written, nothing reading
        it: a store, a load or a cascade reading it done) joins the LRU order as its most
        recent entry, whatever touched it while it was pinned. LRU's rule (its evictable
        list); ARC keeps its lists."""
        if self.recency_when_evictable and self.arc is None and self.ref_cnt(key) == 0:
            self.chunks[key].used_at = (self.clock.tick(), 0)

    def touch(self, keys: Sequence[int]) -> None:
        if self.secondary != "none":
            self.touched_in_tier.append(tuple(keys))      # "recently used in all tiers"
        # In reverse, so the first key is the most recent: a request's head outlives its tail.
        for key in reversed(keys):
            chunk = self.chunks.get(key)
            dropped = self.recency_when_evictable and self.arc is None and self.ref_cnt(key)
            if chunk is not None and not dropped:
                chunk.used_at = (self.clock.tick(), 0)
            if self.arc is not None:           # a reuse: T1 -> T2; a ghost adapts the target
                self.arc.touched(key, chunk, self.clock.tick())

    def finish_request(self) -> None:
        """The running request finishes: one access per key it saw, its head the most recent
        (head to tail by position, ``RequestAccess.head_to_tail``); with ARC a key it only
        inserted keeps its list, a chunk it reused joins T2. The next request in its slot
        (same keys, a new context) starts with no accesses."""
        done = self.access
        self.running[self.current] = self._new_request(self.current)
        for key in reversed(done.head_to_tail()):      # ARC too commits head to tail
            chunk = self.chunks.get(key)
            if chunk is None:
                continue
            if self.arc is not None and key not in done.insertion_only:
                if key not in done.reused:
                    continue                   # seen but neither stored nor reused
                self.arc.reused(key)
            chunk.used_at = (self.clock.tick(), 0)

    def refinish_request(self) -> None:
        """The request last finished in the current slot is signalled finished again (a
        duplicate signal, before or after a ``reset_cache``): its accesses were committed
        once, at its first finish; nothing changes."""

    # -- tiering -------------------------------------------------------------------------

    def said(self, answer: LookupResult) -> LookupResult:
        """``answer`` in the words the release's lookup API has (``answer_vocabulary``)."""
        if self.answer_vocabulary == "bool|None" and answer is HIT_PENDING:
            return RETRY
        return answer

    def lookup(self, key: int) -> LookupResult:
        """The answer as the release's API says it (``said``)."""
        return self.said(self.lookup_meant(key))

    def lookup_meant(self, key: int, counted: bool = True) -> LookupResult:
        """The answer the connector's scans must act on: HIT_PENDING for a chunk in flight,
        whatever word the API has for it. ``counted=False``: the store filter already
        counted the key (``count_prefix_keys``)."""
        if self.threshold_counts_lookups and counted:   # before 0.30.0 lookups counted keys
            self.admission.offer([key], self.clock.tick)
        # The first lookup of a step polls, so a promotion that landed answers HIT and chunks
        # its jobs released can take a promotion this lookup starts (vLLM: lookup step 1).
        if not self.polled_this_step:
            self._poll()
        chunk = self.chunks.get(key)
        if chunk is not None:                  # the primary wins, readable or in flight
            return HIT if chunk.written else LookupResult[self.pending_lookup]
        if self.promotions_held:               # MISS, not RETRY: the request recomputes
            return MISS
        answer = self.secondary_answer(key)
        if self.secondary == "probe":
            self._probe_asked_or_used(key, answer)
        return self._start_promotion(key) if answer is HIT else answer

    def _probe_asked_or_used(self, key: int, answer: LookupResult) -> None:
        if answer is RETRY:
            self.probes_asked.setdefault(key, self.clock.tick())    # flushed at step end
        else:
            del self.probes_asked[key]         # a flushed probe's answer is used once

    def _start_promotion(self, key: int) -> LookupResult:
        """Allocate the key's primary chunk now (write pending, may evict); its load is
        submitted with the step's other promotions when the step ends."""
        if self._primary_prepare_store([key]) is None:
            return MISS                        # no room: recompute rather than wait forever
        self.promotion_starts.append((self.clock.tick(), key))
        self.tier_sourced.add(key)
        return RETRY if self.promotion_answers_retry else HIT_PENDING

    def on_schedule_end(self) -> None:
        if not self.polled_this_step:
            self._poll()                       # a step without lookups still notices jobs
        batch = tuple(self.promotions)
        if batch:
            self._submit("promote", batch)
        # Closes the promotion batch, re-arms the poll and flushes every probe asked so far.
        self.clock.mark("step_end")

    def complete_job(self, job_id: int, failed: Sequence[int] = ()) -> None:
        """The job's copy happens now, except for the ``failed`` keys (a tier's I/O error);
        the manager notices at its next poll."""
        if job_id in self.finished_at or not 0 <= job_id < len(self.submitted):
            raise ValueError(f"complete_job: job {job_id} is not pending")
        if not set(failed) <= set(self.submitted[job_id].keys):
            raise ValueError(f"complete_job: job {job_id} carries no key of {list(failed)}")
        self.finished_at[job_id] = self.clock.tick()
        if failed:
            self.failed[job_id] = frozenset(failed)

    def reset_cache(self) -> None:
        # Every tier drains its jobs and the manager notices them before the primary empties;
        # the mark then begins a step (re-armed poll, promotions dropped) and holds promotions.
        for job in self.jobs:
            self.complete_job(job.job_id)
        self._poll()
        self.chunks = {}
        # Running requests' accesses are forgotten: a new cache generation ranks them afresh.
        self.running = {slot: access.fresh() for slot, access in self.running.items()}
        if self.arc is not None:
            self.arc.clear()
        self.tier_sourced = set()
        self.clock.mark("reset")

    def on_reset_flushed(self) -> None:
        self.clock.mark("reset_flushed")

    def _submit(self, kind: str, keys: tuple[int, ...]) -> None:
        self.submitted.append(Job(len(self.submitted), kind, keys))

    def _poll(self) -> None:
        """Notice the jobs finished since the last poll, in the order they finished: a
        store's pins drop (computed, failed or not), a promotion's chunks become written,
        those whose copy failed are removed (as a failed store from the GPU is)."""
        since = self.clock.last("poll")
        landed = sorted((t, j) for j, t in self.finished_at.items() if t > since)
        self.clock.mark("poll")
        for _, job_id in landed:
            job, failed = self.submitted[job_id], self.failed.get(job_id, frozenset())
            if job.kind == "store":            # the cascade read its chunks: pins drop
                for key in job.keys:
                    if key in self.chunks:
                        self._became_evictable(key)
            if job.kind == "promote":
                self._complete_write([k for k in job.keys if k not in failed], True)
                self._complete_write([k for k in job.keys if k in failed], False)
                self.tier_sourced -= failed

    # -- the connector's lookups over this manager --------------------------------------

    def maximal_prefix_lookup(self, keys: Sequence[int]) -> Scan:
        counted = self.count_prefix_keys(keys)
        return self.said_scan(maximal_prefix_lookup(
            lambda key: self.lookup_meant(key, counted=not counted), keys))

    def count_prefix_keys(self, keys: Sequence[int]) -> bool:
        """``prefix_counts_every_key``: the store filter counts every key of a prefix lookup
        up front, one key at a time, reached or not; True when it did (the scan's lookups are
        then not counted again)."""
        if not (self.prefix_counts_every_key and self.threshold_counts_lookups):
            return False
        for key in keys:
            self.admission.offer([key], self.clock.tick)
        return True

    def sliding_window_lookup(self, keys: Sequence[int], window: int,
                              initial_window: int | None = None) -> Scan:
        return self.said_scan(sliding_window_lookup(self.lookup_meant, keys, window,
                                                    initial_window,
                                                    pending_as_miss=self.pending_as_miss))

    def said_scan(self, scan: Scan) -> Scan:
        """A scan decided on the meant answers, its answers as the API says them."""
        return Scan(scan.result, scan.lookups, tuple(map(self.said, scan.answers)))
