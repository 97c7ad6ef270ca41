"""The tiered lookup's tiering layer: a reference model of what vLLM 0.33.0's
``TieringOffloadingManager`` asks of its secondary tiers and reports, for the tiering machine
(``properties/tiered_lookup_tiering_machine.py``).

Scope: a primary large enough never to evict (the pool of keys is smaller than it), secondary
tiers the harness plays, each chunk-level or request-level, polled between steps or not, with
a back-pressure detector or not; requests (ours, and peers' that a tier serves through its
``ParentManager``), store cascades, parked request-level cascades, promotions, the
once-per-step poll, the reset hold and the metrics payload.
Not in scope: eviction and its order (``models/tiered_lookup.py``), RETRY probes, timing
(histograms are compared by their number of samples). Where the two layers' scopes meet (one
request, one chunk-level tier) they must agree: ``properties/test_tiered_lookup_layers_agree.py``.

What the manager promises, as modelled here:
- every tier hears ``on_new_request`` for every request (but the one whose peer asked); a
  request is request-level when any of them asked for it;
- a stored chunk is cascaded to every tier whose back-pressure allows it, and while a cascade
  is in flight the chunk is pinned (its ref count counts the cascades);
- a request-level request's offer of chunks already in the primary cascades the readable ones
  to its request-level tiers at once and parks those still being written until a step end
  finds them readable (or gone);
- a tier hears ``on_request_finished`` once, only when the request finished, its stores
  completed and no cascade is parked (immediately for a finished request at a reset);
- finished jobs are noticed at a step's first lookup, at every ``prepare_store``, at the
  step's end if nothing polled in the step, in a tier-poll round (polled tiers only) and at
  a reset (after every tier drained); a tier's serving of its peers never polls;
- the metrics count each request's first resolved answer per tier and key until the
  request is allocated (a step end names it new), bytes moved, failures and drops, and show
  the jobs in flight; ``get_stats`` adds the primary's and each tier's own payload.

The model stores facts, all stamped on one clock (``Timeline``): each request's start, end,
allocation and finalization; each primary chunk allocated (by a store or a promotion); each
store completed; each job submitted and when it finished, how; each park and when a step end
resolved it; each back-pressure drop; each call made on a tier; each answer a lookup
resolved; each peer's ask and its answers; and when each tier was polled or served, steps
ended, stats and events were taken, resets came and flushed. Polling only marks the clock:
a job is *noticed* once its tier was polled after it finished, and everything noticing
changes is computed from that: chunk states and pins, back-pressure, the jobs in flight, the
metrics since the last ``get_stats``, the events since the last ``take_events``.
"""

from __future__ import annotations

from collections.abc import Sequence

from attrs import define, field, frozen

from models.tiered_lookup_timeline import Timeline
from models.tiered_lookup_values import JobOutcome, LookupResult, TierJob, TierSpec

PRIMARY_LABEL = "0:primary"
CHUNK_LEVEL, REQUEST_LEVEL = "chunk", "request"
PENDING, WRITTEN, GONE = "pending", "written", "gone"


@frozen
class Alloc:
    """A primary chunk allocated for ``key`` at ``at``, write pending: by a store from the GPU
    (``tier`` None) or a promotion from ``tier`` that ``req``'s lookup started."""

    key: int
    at: int
    req: str
    tier: int | None


@frozen
class Submitted:
    """A job handed to ``tier`` at ``at``; a promotion names the allocations it fills."""

    job_id: int
    tier: int
    at: int
    job: TierJob
    allocs: tuple[int, ...] = ()


@frozen
class RequestFacts:
    at: int
    request_level_tiers: tuple[int, ...]
    everywhere: bool           # False: loads may come from tier 0 only (its load filter)
    origin: int | None         # the tier whose peer asked (None: the connector's request)


@frozen
class Answer:
    """A lookup's resolved answer from one tier (``label``), hit or miss, at ``at``."""

    at: int
    req: str
    label: str
    key: int
    hit: bool


@define
class TieringModel:
    num_chunks: int
    chunk_bytes: int
    tiers: Sequence[TierSpec]
    # vLLM 0.34.0's meaning (``pending_work``): with a polled tier and no tier-poll thread
    # running, only a step makes progress, so there is always pending work.
    pending_work_while_polled: bool = False
    # vLLM 0.34.0's payload: each tier's chunks whose release it deferred (a failed promotion
    # its I/O may still write into). The tiers here defer none, so the gauge reads 0.
    deferred_release_gauge: bool = False
    clock: Timeline = field(factory=Timeline)
    requests: dict[str, RequestFacts] = field(factory=dict)   # insertion order: start order
    finished: dict[str, int] = field(factory=dict)     # req -> when the connector ended it
    finalized: dict[str, int] = field(factory=dict)    # req -> when its tiers heard the end
    allocated: dict[str, int] = field(factory=dict)    # req -> the step end that named it
    allocs: list[Alloc] = field(factory=list)          # every chunk allocated, in order
    # (at, req, keys, success) of each complete_store
    store_done: list[tuple[int, str, tuple[int, ...], bool]] = field(factory=list)
    jobs: list[Submitted] = field(factory=list)        # job_id = position
    finishes: dict[int, tuple[int, JobOutcome]] = field(factory=dict)   # job_id -> when, how
    parks: list[tuple[int, str, int]] = field(factory=list)    # (at, req, key)
    unparked: dict[int, int] = field(factory=dict)     # park index -> the step end resolving it
    drops: list[tuple[int, int, int]] = field(factory=list)    # (at, tier, blocks)
    calls: list[tuple[int, int, tuple]] = field(factory=list)  # (at, tier, call)
    answers: list[Answer] = field(factory=list)
    asks: list[tuple[int, int, tuple[int, ...]]] = field(factory=list)   # (at, tier, keys)
    # (tier, peer request, answers) of each peer served, in order: p0, p1, ...
    served: list[tuple[int, str, tuple[LookupResult, ...]]] = field(factory=list)

    # -- facts of time, as questions ----------------------------------------------------

    def _reset_at(self) -> int:
        return self.clock.last("reset")

    def _step_began(self) -> int:
        # A step end and a reset both re-arm the once-per-step poll and drop the promotions
        # not yet submitted: either begins a step.
        return max(self.clock.last("step_end"), self._reset_at())

    @property
    def polled_this_step(self) -> bool:
        return self.clock.last("step_poll") > self._step_began()

    @property
    def promotions_held(self) -> bool:
        """From ``reset_cache`` until ``on_reset_flushed`` no promotion may take a chunk a
        late write may still land in."""
        return bool(self.tiers) and self._reset_at() > self.clock.last("reset_flushed")

    def _alive(self, req: str) -> RequestFacts | None:
        return None if req in self.finalized else self.requests.get(req)

    # -- jobs, computed -------------------------------------------------------------------

    def _noticed_at(self, s: Submitted) -> int | None:
        """When a poll of the job's tier first followed its finish (None: not yet)."""
        done = self.finishes.get(s.job_id)
        return None if done is None else self.clock.first_after(f"poll:{s.tier}", done[0])

    def _in_flight(self) -> list[Submitted]:
        return [s for s in self.jobs if self._noticed_at(s) is None]

    def _noticed_between(self, since: int) -> list[tuple[int, Submitted, JobOutcome]]:
        """(noticed at, job, outcome) of the jobs noticed after ``since``, in that order."""
        out = []
        for s in self.jobs:
            at = self._noticed_at(s)
            if at is not None and at > since:
                out.append((at, s, self.finishes[s.job_id][1]))
        return sorted(out, key=lambda x: (x[0], self.finishes[x[1].job_id][0]))

    def tier_jobs(self, i: int) -> list[TierJob]:
        """The jobs tier ``i`` holds: submitted, not yet run."""
        return sorted(s.job for s in self.jobs if s.tier == i and s.job_id not in self.finishes)

    def tier_copies(self, i: int) -> frozenset[int]:
        """What tier ``i`` holds: its earlier run's keys and every key a store job copied."""
        copied = {k for s in self.jobs if s.tier == i and s.job.kind == "store"
                  and s.job_id in self.finishes for k in self.finishes[s.job_id][1].ok_keys}
        return self.tiers[i].copies | copied

    def _pressured(self, i: int) -> bool:
        """A detector is under pressure when the last store job of its tier noticed since the
        reset failed."""
        stores = [(at, s, o) for at, s, o in self._noticed_between(self._reset_at())
                  if s.tier == i and s.job.kind == "store"]
        return bool(stores) and not stores[-1][2].success

    def _fed_bytes(self, i: int) -> int:
        """The bytes of the tier's successful stores noticed since the reset (the tier's own
        report, else the job's size)."""
        return sum(len(s.job.keys) * self.chunk_bytes if o.transfer_bytes is None
                   else o.transfer_bytes
                   for _, s, o in self._noticed_between(self._reset_at())
                   if s.tier == i and s.job.kind == "store" and o.success)

    # -- chunks, computed -----------------------------------------------------------------

    def _state(self, index: int) -> str:
        """An allocation's chunk: written, pending, or gone (a reset since, its store failed,
        or its promotion was noticed failing for the key)."""
        a = self.allocs[index]
        if a.at < self._reset_at():
            return GONE
        if a.tier is None:
            done = next((ok for t, _, keys, ok in self.store_done
                         if t > a.at and a.key in keys), None)
            return PENDING if done is None else (WRITTEN if done else GONE)
        s = next((s for s in self.jobs if index in s.allocs), None)
        if s is None or self._noticed_at(s) is None:
            return PENDING
        outcome = self.finishes[s.job_id][1]
        return WRITTEN if outcome.success or a.key in outcome.ok_keys else GONE

    def _chunks(self) -> dict[int, tuple[int, str]]:
        """key -> (its allocation, state) for every chunk in the primary: a key is allocated
        only while absent, so its latest allocation is its only candidate."""
        latest = {a.key: i for i, a in enumerate(self.allocs)}
        states = {k: (i, self._state(i)) for k, i in latest.items()}
        return {k: v for k, v in sorted(states.items()) if v[1] != GONE}

    def _chunk_state(self, key: int) -> str:
        return self._chunks().get(key, (None, GONE))[1]

    def present(self, key: int) -> bool:
        return self._chunk_state(key) != GONE

    def ref_counts(self) -> dict[int, int]:
        """-1 while written; else the cascades in flight reading the chunk."""
        flying = [s.job.keys for s in self._in_flight() if s.job.kind == "store"]
        return {k: (sum(keys.count(k) for keys in flying) if state == WRITTEN else -1)
                for k, (_, state) in self._chunks().items()}

    def load_source(self, key: int, req: str) -> int | None:
        """The tier whose promotion supplied ``key`` to ``req`` (None: the primary): the
        request's latest promotion of the key since the reset, unless it failed."""
        mine = [i for i, a in enumerate(self.allocs) if a.key == key and a.req == req
                and a.tier is not None and a.at > self._reset_at()]
        if not mine or self._state(mine[-1]) == GONE:
            return None
        return self.allocs[mine[-1]].tier

    def _open_stores(self, req: str) -> int:
        """Stores of new keys prepared since the reset and not completed."""
        since = self._reset_at()
        prepared = {a.at for a in self.allocs if a.req == req and a.tier is None
                    and a.at > since}
        return len(prepared) - sum(1 for t, r, _, _ in self.store_done if r == req and t > since)

    def _parked(self, req: str | None = None) -> list[int]:
        """Indices of parks since the reset no step end has resolved (of ``req``, or of any
        request still alive)."""
        return [i for i, (at, r, _) in enumerate(self.parks)
                if at > self._reset_at() and i not in self.unparked
                and (r == req if req is not None else self._alive(r) is not None)]

    def pending_work(self) -> bool:
        """Whether only an engine step can finish some work: a job in flight or a parked
        cascade; from vLLM 0.34.0 (``pending_work_while_polled``) also any polled tier, as
        the tier-poll thread is off here (the machine plays its rounds)."""
        if self.pending_work_while_polled and any(t.polled for t in self.tiers):
            return True
        return bool(self._in_flight()) or bool(self._parked())

    # -- requests -------------------------------------------------------------------------

    def on_new_request(self, req: str, everywhere: bool = True,
                       origin: int | None = None) -> str:
        for i in self._others(origin):
            self._call(i, "on_new_request", req)
        levels = tuple(i for i in self._others(origin) if self.tiers[i].request_level)
        self.requests[req] = RequestFacts(self.clock.tick(), levels, everywhere, origin)
        return REQUEST_LEVEL if levels else CHUNK_LEVEL

    def on_request_finished(self, req: str, origin: int | None = None) -> None:
        self.finished[req] = self.clock.tick()
        self._maybe_finalize(req, origin)

    def _maybe_finalize(self, req: str, origin: int | None = None) -> None:
        if (req in self.finished and self._alive(req) is not None
                and not self._open_stores(req) and not self._parked(req)):
            self._finalize(req, origin)

    def _finalize(self, req: str, origin: int | None = None) -> None:
        for i in self._others(origin):
            self._call(i, "on_request_finished", req)
        self.finalized[req] = self.clock.tick()

    # -- stores and cascades --------------------------------------------------------------

    def prepare_store(self, keys: tuple[int, ...], req: str) -> tuple[int, ...]:
        self._step_poll()              # every store polls first
        before = self._chunks()
        new = tuple(k for k in keys if k not in before)
        at = self.clock.tick()         # one stamp: one allocation of len(new) chunks
        self.allocs += [Alloc(k, at, req, None) for k in new]
        if self.requests[req].request_level_tiers:
            self._cascade_present([k for k in keys if k in before], req)
        return new

    def complete_store(self, keys: tuple[int, ...], req: str, success: bool) -> None:
        self.store_done.append((self.clock.tick(), req, tuple(keys), success))
        if success:
            for i in range(len(self.tiers)):
                self._cascade(i, tuple(keys), req)
        self._maybe_finalize(req)

    def _cascade_present(self, keys: list[int], req: str) -> None:
        """A request-level request's chunks already in the primary: the readable go to its
        request-level tiers now, those being written are parked; the gone are dropped."""
        ready = tuple(k for k in keys if self._chunk_state(k) == WRITTEN)
        for k in keys:
            if self._chunk_state(k) == PENDING:
                self.parks.append((self.clock.tick(), req, k))
        if ready:
            for i in sorted(self.requests[req].request_level_tiers):
                self._cascade(i, ready, req)

    def _cascade(self, i: int, keys: tuple[int, ...], req: str) -> None:
        """A store job of ``keys`` to tier ``i``, unless its detector drops it."""
        if self.tiers[i].detector and self._pressured(i):
            self.drops.append((self.clock.tick(), i, len(keys)))
            return
        self._submit(i, TierJob("store", keys, req))
        self._call(i, "submit_store", req, keys)

    def touch(self, keys: tuple[int, ...], req: str) -> None:
        for i in range(len(self.tiers)):
            self._call(i, "touch", req, tuple(keys))

    # -- lookups and promotions -----------------------------------------------------------

    def lookup(self, key: int, req: str) -> LookupResult:
        if not self.polled_this_step:          # the step's first lookup polls
            self._step_poll()
        return self._answer(key, req)

    def _answer(self, key: int, req: str, origin: int | None = None) -> LookupResult:
        """The primary first (readable or in flight), then each tier the request may load
        from, until one holds the key: its promotion is allocated now, submitted at step end.
        A tier's serving asks this directly: serving never polls."""
        state = self._chunk_state(key)
        if state == PENDING:
            return LookupResult.HIT_PENDING
        self._answered(req, PRIMARY_LABEL, key, state == WRITTEN)
        if state == WRITTEN:
            return LookupResult.HIT
        if self.promotions_held:
            return LookupResult.MISS
        r = self._alive(req)
        for i in self._others(origin):
            if i > 0 and r is not None and not r.everywhere:
                continue
            self._call(i, "lookup", req, key)
            hit = key in self.tier_copies(i)
            self._answered(req, self.label(i), key, hit)
            if hit:
                self.allocs.append(Alloc(key, self.clock.tick(), req, i))
                return LookupResult.HIT_PENDING
        return LookupResult.MISS

    def _answered(self, req: str, label: str, key: int, hit: bool) -> None:
        self.answers.append(Answer(self.clock.tick(), req, label, key, hit))

    # -- the tiers' side ------------------------------------------------------------------

    def run_job(self, i: int, job: TierJob, outcome: JobOutcome) -> None:
        """Tier ``i`` finishes its oldest held ``job`` (the manager notices at a later poll)."""
        s = next(s for s in self.jobs
                 if s.tier == i and s.job == job and s.job_id not in self.finishes)
        self.finishes[s.job_id] = (self.clock.tick(), outcome)

    def peer_request(self, i: int, keys: tuple[int, ...]) -> None:
        """A peer asks tier ``i`` for ``keys``; the tier serves it at its next service."""
        self.asks.append((self.clock.tick(), i, tuple(keys)))

    def peer_answers(self, i: int) -> list[tuple[str, tuple[LookupResult, ...]]]:
        return [(req, answers) for tier, req, answers in self.served if tier == i]

    def _serve(self, i: int) -> None:
        """Tier ``i`` serves the peers that asked since its last service, through its parent:
        a new request, a lookup per key, a store job of the hits to itself, the end."""
        since = self.clock.last(f"serve:{i}")
        asks = [keys for at, tier, keys in self.asks if tier == i and at > since]
        self.clock.mark(f"serve:{i}")
        for keys in asks:
            req = f"p{len(self.served)}"
            self.on_new_request(req, origin=i)
            answers = tuple(self._answer(k, req, origin=i) for k in keys)
            hits = tuple(k for k, a in zip(keys, answers, strict=True)
                         if a is LookupResult.HIT)
            if hits:
                self._submit(i, TierJob("store", hits, req))
            self.served.append((i, req, answers))
            self.on_request_finished(req, origin=i)

    # -- the step ---------------------------------------------------------------------------

    def new_requests(self) -> tuple[str, ...]:
        """The connector's requests started in this step: the step's end allocates them."""
        began = self.clock.last("step_end")
        return tuple(r for r, f in self.requests.items() if f.origin is None and f.at > began)

    def on_schedule_end(self) -> None:
        new_reqs = self.new_requests()
        if not self.polled_this_step:          # a step without lookups still notices jobs
            self._poll(range(len(self.tiers)))
        for i in range(len(self.tiers)):
            self._serve(i)
        self._submit_promotions()
        self._resolve_parks()
        for i in range(len(self.tiers)):
            self._call(i, "on_schedule_end")
        for req in new_reqs:
            if self._alive(req) is not None:
                self.allocated[req] = self.clock.tick()
        self.clock.mark("step_end")

    def _submit_promotions(self) -> None:
        """The step's promotions, one load job per tier and request, keys in lookup order."""
        began = self._step_began()
        started = [(i, a) for i, a in enumerate(self.allocs)
                   if a.tier is not None and a.at > began]
        for tier in range(len(self.tiers)):
            reqs = list(dict.fromkeys(a.req for _, a in started if a.tier == tier))
            for req in reqs:
                mine = [(i, a) for i, a in started if a.tier == tier and a.req == req]
                keys = tuple(a.key for _, a in mine)
                self._submit(tier, TierJob("promote", keys, req), tuple(i for i, _ in mine))
                self._call(tier, "submit_load", req, keys)

    def _resolve_parks(self) -> None:
        """Each request's parked chunks, in request order: the readable cascade now, the gone
        are dropped, the still-written stay parked."""
        for req in self.requests:
            parked = self._parked(req) if self._alive(req) is not None else []
            if not parked:
                continue
            states = {i: self._chunk_state(self.parks[i][2]) for i in parked}
            at = self.clock.tick()
            ready = tuple(self.parks[i][2] for i in parked if states[i] == WRITTEN)
            self.unparked.update({i: at for i in parked if states[i] != PENDING})
            if ready:
                for i in sorted(self.requests[req].request_level_tiers):
                    self._cascade(i, ready, req)
            self._maybe_finalize(req)

    def poll_round(self) -> None:
        """A tier-poll round: the polled tiers' finished jobs, then their peers. Not the
        step's own poll: that is still to come."""
        polled = [i for i, t in enumerate(self.tiers) if t.polled]
        self._poll(polled)
        for i in polled:
            self._serve(i)

    def reset_cache(self) -> None:
        """Every tier drains (its jobs run whole) and is polled; then the primary empties,
        promotions are held, and finished requests are ended at once."""
        for s in self.jobs:
            if s.job_id not in self.finishes:
                self.finishes[s.job_id] = (self.clock.tick(), JobOutcome(s.job.keys, True))
        self._poll(range(len(self.tiers)))
        self.clock.mark("reset")
        for req in self.requests:
            if req in self.finished and self._alive(req) is not None:
                self._finalize(req)

    def on_reset_flushed(self) -> None:
        self.clock.mark("reset_flushed")

    # -- reports --------------------------------------------------------------------------

    def get_stats(self) -> dict[tuple, object]:
        """The payload, as {(metric, *labels): value}: counts of the facts since the last
        call, gauges now, histograms as their number of samples (the primary's allocation
        sizes as the sizes)."""
        since = self.clock.last("stats")
        chunks = self._chunks()
        refs = self.ref_counts()
        writing = sum(1 for _, state in chunks.values() if state == PENDING)
        in_use = sum(1 for k in chunks if refs[k] != 0)
        out: dict[tuple, object] = {
            ("usage",): in_use / self.num_chunks, ("write",): writing / self.num_chunks,
            ("read",): max(in_use - writing, 0) / self.num_chunks}
        sizes = _counted(a.at for a in self.allocs if a.at > since)
        if sizes:
            out[("allocation",)] = tuple(sizes.values())
        flying = self._in_flight()
        for i, tier in enumerate(self.tiers):
            label = self.label(i)
            if tier.detector:
                out[("bp_ema", label)] = float(self._fed_bytes(i))
            mine = [s.job for s in flying if s.tier == i]
            promote = [j for j in mine if j.kind == "promote"]
            store = [j for j in mine if j.kind == "store"]
            out[("active_promotions", label)] = len(promote)
            out[("active_cascades", label)] = len(store)
            out[("primary_write_usage", label)] = _share(promote, self.num_chunks)
            out[("primary_read_usage", label)] = _share(store, self.num_chunks)
            if self.deferred_release_gauge:
                out[("deferred_release_chunks", label)] = 0
            lookups = sum(1 for at, t, call in self.calls
                          if t == i and at > since and call[0] == "lookup")
            if lookups:
                out[("tier_lookups", tier.name)] = lookups
        for key, n in self._counts_since(since).items():
            out[key] = n
        self.clock.mark("stats")
        return out

    def _counts_since(self, since: int) -> dict[tuple, int]:
        """The counters: answers, moved jobs and drops since ``since``."""
        counts: dict[tuple, int] = {}

        def count(key: tuple, by: int = 1) -> None:
            counts[key] = counts.get(key, 0) + by

        for a in self._first_answers():
            if a.at > since:
                count(("queries", a.label))
                count(("lookup_sync_delay", a.label))
                if a.hit:
                    count(("hits", a.label))
        for _, s, outcome in self._noticed_between(since):
            label, promotion = self.label(s.tier), s.job.kind == "promote"
            moved = len(s.job.keys)
            if not outcome.success:
                count(("promotion_failures" if promotion else "cascade_failures", label))
                moved = len(outcome.ok_keys) if promotion else 0
            if moved:
                count(("read_bytes" if promotion else "write_bytes", label),
                      moved * self.chunk_bytes)
            if promotion:
                count(("promotion_latency", label,
                       "success" if outcome.success else "failure"))
        for at, i, blocks in self.drops:
            if at > since:
                count(("bp_stores_dropped", self.label(i)))
                count(("bp_blocks_dropped", self.label(i)), blocks)
        return counts

    def _first_answers(self) -> list[Answer]:
        """Each request's first answer per tier and key, while the request was alive and not
        yet allocated (what the metrics count; a later answer of the same is not)."""
        first: dict[tuple, Answer] = {}
        for a in self.answers:
            first.setdefault((a.req, a.label, a.key), a)
        return [a for a in first.values()
                if a.req in self.requests
                and self.finalized.get(a.req, a.at + 1) > a.at
                and self.allocated.get(a.req, a.at + 1) > a.at]

    def config_info(self, primary_info: dict) -> list[dict]:
        return [{**primary_info, "tier": PRIMARY_LABEL}] + [
            {"lch_tier": tier.name, "tier": self.label(i)} for i, tier in enumerate(self.tiers)]

    def take_events(self) -> list[tuple[str, tuple[int, ...]]]:
        """Each tier's own events since the last call, in tier order: the keys of each store
        job it finished copying something (the primary here reports none)."""
        since = self.clock.last("events")
        done = sorted((s.tier, self.finishes[s.job_id][0], self.finishes[s.job_id][1].ok_keys)
                      for s in self.jobs if s.job.kind == "store" and s.job_id in self.finishes
                      and self.finishes[s.job_id][0] > since)
        self.clock.mark("events")
        return [(self.tiers[i].name, keys) for i, _, keys in done if keys]

    def tier_calls(self, i: int, since: int) -> list[tuple]:
        """What the manager asked of tier ``i`` after ``since``, in order."""
        return [call for at, t, call in self.calls if t == i and at > since]

    # -- helpers --------------------------------------------------------------------------

    def label(self, i: int) -> str:
        return f"{i + 1}:{self.tiers[i].name}"

    def _others(self, origin: int | None) -> list[int]:
        return [i for i in range(len(self.tiers)) if i != origin]

    def _call(self, i: int, *call) -> None:
        self.calls.append((self.clock.tick(), i, tuple(call)))

    def _submit(self, i: int, job: TierJob, allocs: tuple[int, ...] = ()) -> None:
        self.jobs.append(Submitted(len(self.jobs), i, self.clock.tick(), job, allocs))

    def _step_poll(self) -> None:
        self.clock.mark("step_poll")
        self._poll(range(len(self.tiers)))

    def _poll(self, tiers) -> None:
        """A poll is a mark per tier: what it notices is computed from it."""
        for i in tiers:
            self.clock.mark(f"poll:{i}")


def _counted(stamps) -> dict[int, int]:
    """stamp -> how many facts share it, in stamp order (one allocation per stamp)."""
    out: dict[int, int] = {}
    for at in sorted(stamps):
        out[at] = out.get(at, 0) + 1
    return out


def _share(jobs: list[TierJob], num_chunks: int) -> float:
    """The primary's share the jobs' chunks take."""
    return sum(len(j.keys) for j in jobs) / num_chunks
