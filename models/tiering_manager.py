"""Reference model of what vLLM's ``TieringOffloadingManager`` (0.33.0) asks of its secondary
tiers and reports, for the tiering machine (``properties/tiering_manager_machine.py``).

Scope: a primary large enough never to evict (the pool of keys is smaller than it), two
secondary tiers the harness plays, each chunk-level or request-level, one of them polled
between steps and one with a back-pressure detector; requests (ours, and peers' that a tier
serves through its ``ParentManager``), store cascades, parked request-level cascades,
promotions, the once-per-step poll, the reset hold and the metrics payload.
Not in scope: eviction and its order (the tiered-lookup machine's), RETRY probes, timing
(histograms are compared by their number of samples).

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
  a reset (after every tier drained);
- the metrics count each request's first resolved answer per tier and key until the
  request is allocated (a step end names it new), bytes moved, failures and drops, and show
  the jobs in flight; ``get_stats`` adds the primary's and each tier's own payload.
"""

from __future__ import annotations

from attrs import define, field, frozen

from models.tiered_lookup_values import LookupResult

PRIMARY_LABEL = "0:primary"
CHUNK_LEVEL, REQUEST_LEVEL = "chunk", "request"


@frozen(order=True)
class TierJob:
    kind: str                 # "store" (primary -> tier) | "promote" (tier -> primary)
    keys: tuple[int, ...]
    req: str


@frozen
class JobOutcome:
    """How the harness finishes a job: whole, failed, or (a promotion) partly failed;
    ``transfer_bytes``: what the tier reports moving (None: not reported)."""

    ok_keys: tuple[int, ...]
    success: bool
    transfer_bytes: int | None = None


@define
class Tier:
    name: str
    request_level: bool
    polled: bool
    detector: bool                            # a back-pressure detector that drops stores
    copies: set[int] = field(factory=set)
    submitted: list[TierJob] = field(factory=list)       # not yet run
    done: list[tuple[TierJob, JobOutcome]] = field(factory=list)   # run, not yet noticed
    calls: list[tuple] = field(factory=list)             # what the manager asked of it
    peers: list[tuple[int, ...]] = field(factory=list)   # peer requests to serve
    answers: list[tuple] = field(factory=list)           # what the parent told its peers
    pressured: bool = False
    fed_bytes: int = 0                       # bytes of noticed stores fed to the detector
    dropped: list[int] = field(factory=list)  # blocks of each store dropped, since popped
    lookups: int = 0                          # its own stats: lookups asked, since taken
    events: list[tuple[int, ...]] = field(factory=list)  # keys of each store it finished


@define
class Request:
    request_level_tiers: tuple[int, ...]
    everywhere: bool = True                   # False: loads may come from tier 0 only
    finished: bool = False
    stores: int = 0                           # prepared stores with new keys not completed
    parked: list[int] = field(factory=list)
    sources: dict[int, int] = field(factory=dict)     # key -> tier that promoted it
    observed: dict[str, set[int]] | None = field(factory=dict)   # None once allocated


@define
class Chunk:
    ready: bool
    pins: int = 0                            # cascades reading it


@define
class TieringModel:
    num_chunks: int
    chunk_bytes: int
    tiers: list[Tier]
    chunks: dict[int, Chunk] = field(factory=dict)
    requests: dict[str, Request] = field(factory=dict)
    in_flight: list[tuple[int, TierJob]] = field(factory=list)   # registered, not noticed
    promotions: dict[int, dict[str, list[int]]] = field(factory=dict)   # to submit at step end
    polled_this_step: bool = False
    held: bool = False
    counters: dict[tuple, int] = field(factory=dict)
    allocations: list[int] = field(factory=list)
    peers_served: int = 0

    # -- requests -------------------------------------------------------------------------

    def on_new_request(self, req: str, everywhere: bool = True,
                       origin: int | None = None) -> str:
        levels = []
        for i, tier in self._tiers(origin):
            tier.calls.append(("on_new_request", req))
            if tier.request_level:
                levels.append(i)
        self.requests[req] = Request(tuple(levels), everywhere)
        return REQUEST_LEVEL if levels else CHUNK_LEVEL

    def on_request_finished(self, req: str, origin: int | None = None) -> None:
        self.requests[req].finished = True
        self._maybe_finalize(req, origin)

    def _maybe_finalize(self, req: str, origin: int | None = None) -> None:
        r = self.requests[req]
        if r.finished and not r.stores and not r.parked:
            for _, tier in self._tiers(origin):
                tier.calls.append(("on_request_finished", req))
            del self.requests[req]

    # -- stores and cascades --------------------------------------------------------------

    def prepare_store(self, keys: tuple[int, ...], req: str) -> tuple[int, ...]:
        self.polled_this_step = True
        self._poll()
        new = tuple(k for k in keys if k not in self.chunks)
        for k in new:
            self.chunks[k] = Chunk(ready=False)
        r = self.requests[req]
        if new:
            self.allocations.append(len(new))
            r.stores += 1
        if r.request_level_tiers:
            self._cascade_present([k for k in keys if k not in new], req)
        return new

    def complete_store(self, keys: tuple[int, ...], req: str, success: bool) -> None:
        for k in keys:
            chunk = self.chunks.get(k)
            if chunk is not None and not chunk.ready:
                if success:
                    chunk.ready = True
                else:
                    del self.chunks[k]
        if success:
            for i, _ in self._tiers():
                self._cascade(i, keys, req)
        self.requests[req].stores -= 1
        self._maybe_finalize(req)

    def _cascade_present(self, keys: list[int], req: str) -> None:
        r = self.requests[req]
        ready = [k for k in keys if k in self.chunks and self.chunks[k].ready]
        r.parked += [k for k in keys if k in self.chunks and not self.chunks[k].ready]
        if ready:
            for i in sorted(r.request_level_tiers):
                self._cascade(i, tuple(ready), req)

    def _cascade(self, i: int, keys: tuple[int, ...], req: str) -> None:
        """A store job of ``keys`` to tier ``i``, unless its detector drops it."""
        tier = self.tiers[i]
        if tier.detector and tier.pressured:
            tier.dropped.append(len(keys))
            return
        self._store_job(i, keys, req)
        tier.calls.append(("submit_store", req, keys))

    def _store_job(self, i: int, keys: tuple[int, ...], req: str) -> None:
        for k in keys:
            self.chunks[k].pins += 1
        job = TierJob("store", keys, req)
        self.in_flight.append((i, job))
        self.tiers[i].submitted.append(job)

    def touch(self, keys: tuple[int, ...], req: str) -> None:
        for _, tier in self._tiers():
            tier.calls.append(("touch", req, keys))

    # -- lookups and promotions -----------------------------------------------------------

    def lookup(self, key: int, req: str, origin: int | None = None) -> LookupResult:
        if not self.polled_this_step:
            self.polled_this_step = True
            self._poll()
        chunk = self.chunks.get(key)
        if chunk is not None:
            if chunk.ready:
                self._observe(req, PRIMARY_LABEL, key, hit=True)
                return LookupResult.HIT
            return LookupResult.HIT_PENDING
        self._observe(req, PRIMARY_LABEL, key, hit=False)
        if self.held:
            return LookupResult.MISS
        r = self.requests.get(req)
        for i, tier in self._tiers(origin):
            if i > 0 and r is not None and not r.everywhere:
                continue
            tier.calls.append(("lookup", req, key))
            tier.lookups += 1
            hit = key in tier.copies
            self._observe(req, self.label(i), key, hit)
            if hit:
                self.chunks[key] = Chunk(ready=False)
                self.allocations.append(1)
                if r is not None:
                    r.sources[key] = i
                self.promotions.setdefault(i, {}).setdefault(req, []).append(key)
                return LookupResult.HIT_PENDING
        return LookupResult.MISS

    def load_source(self, key: int, req: str) -> int | None:
        """The tier whose promotion supplied ``key`` to ``req`` (None: the primary)."""
        r = self.requests.get(req)
        return None if r is None else r.sources.get(key)

    def _observe(self, req: str, label: str, key: int, hit: bool) -> None:
        r = self.requests.get(req)
        if r is None or r.observed is None:
            return
        seen = r.observed.setdefault(label, set())
        if key in seen:
            return
        seen.add(key)
        self._count("queries", label)
        self._count("lookup_sync_delay", label)
        if hit:
            self._count("hits", label)

    # -- jobs -----------------------------------------------------------------------------

    def run_job(self, i: int, job: TierJob, outcome: JobOutcome) -> None:
        """The tier finishes ``job`` (the manager notices at its next poll)."""
        tier = self.tiers[i]
        tier.submitted.remove(job)
        if job.kind == "store":
            tier.copies.update(outcome.ok_keys)
            if outcome.ok_keys:
                tier.events.append(outcome.ok_keys)
        tier.done.append((job, outcome))

    def _poll(self, polled_only: bool = False) -> None:
        for i, tier in self._tiers():
            if polled_only and not tier.polled:
                continue
            done, tier.done = tier.done, []
            for job, outcome in done:
                self._notice(i, job, outcome)

    def _notice(self, i: int, job: TierJob, outcome: JobOutcome) -> None:
        self.in_flight.remove((i, job))
        label, tier = self.label(i), self.tiers[i]
        promotion = job.kind == "promote"
        moved = len(job.keys)
        if not outcome.success:
            self._count("promotion_failures" if promotion else "cascade_failures", label)
            moved = len(outcome.ok_keys) if promotion else 0
        if moved:
            self._count("read_bytes" if promotion else "write_bytes", label,
                        moved * self.chunk_bytes)
        if promotion:
            self._count("promotion_latency", label, 1,
                        "success" if outcome.success else "failure")
            r = self.requests.get(job.req)
            for k in job.keys:
                if outcome.success or k in outcome.ok_keys:
                    self.chunks[k].ready = True
                    continue
                del self.chunks[k]
                if r is not None and r.sources.get(k) == i:
                    del r.sources[k]
            return
        for k in job.keys:
            self.chunks[k].pins -= 1
        if tier.detector:
            if outcome.success:
                fed = outcome.transfer_bytes
                tier.fed_bytes += len(job.keys) * self.chunk_bytes if fed is None else fed
            tier.pressured = not outcome.success

    # -- the step ---------------------------------------------------------------------------

    def on_schedule_end(self, new_reqs: tuple[str, ...]) -> None:
        if not self.polled_this_step:
            self._poll()
        self.polled_this_step = True
        for i, _ in self._tiers():
            self._serve(i)
        self.polled_this_step = False
        for i in list(self.promotions):
            for req, keys in self.promotions[i].items():
                job = TierJob("promote", tuple(keys), req)
                self.in_flight.append((i, job))
                self.tiers[i].submitted.append(job)
                self.tiers[i].calls.append(("submit_load", req, tuple(keys)))
        self.promotions.clear()
        for req in list(self.requests):
            r = self.requests[req]
            if r.parked:
                keys, r.parked = r.parked, []
                self._cascade_present(keys, req)
                self._maybe_finalize(req)
        for _, tier in self._tiers():
            tier.calls.append(("on_schedule_end",))
        for req in new_reqs:
            if req in self.requests:
                self.requests[req].observed = None

    def poll_round(self) -> None:
        """A tier-poll round: the polled tiers' finished jobs, then their peers."""
        gate, self.polled_this_step = self.polled_this_step, True
        self._poll(polled_only=True)
        for i, tier in self._tiers():
            if tier.polled:
                self._serve(i)
        self.polled_this_step = gate

    def _serve(self, i: int) -> None:
        """Tier ``i`` serves its peers' requests through its parent: a new request, a lookup
        per key, a store job of the hits to itself, the request finished."""
        tier = self.tiers[i]
        for keys in tier.peers:
            req = f"p{self.peers_served}"
            self.peers_served += 1
            self.on_new_request(req, origin=i)
            answers = tuple(self.lookup(k, req, origin=i) for k in keys)
            hits = tuple(k for k, a in zip(keys, answers, strict=True)
                         if a is LookupResult.HIT)
            if hits:
                self._store_job(i, hits, req)
            tier.answers.append((req, answers))
            self.on_request_finished(req, origin=i)
        tier.peers = []

    def reset_cache(self) -> None:
        for i, tier in self._tiers():
            for job in list(tier.submitted):
                self.run_job(i, job, JobOutcome(job.keys, True))
        self._poll()
        self.promotions.clear()
        for req in list(self.requests):
            r = self.requests[req]
            r.stores, r.parked, r.sources = 0, [], {}
            if r.finished:
                for _, tier in self._tiers():
                    tier.calls.append(("on_request_finished", req))
                del self.requests[req]
        self.chunks.clear()
        self.polled_this_step = False
        for tier in self.tiers:
            tier.pressured, tier.fed_bytes = False, 0
        self.held = bool(self.tiers)

    def on_reset_flushed(self) -> None:
        self.held = False

    # -- reports --------------------------------------------------------------------------

    def get_stats(self) -> dict[tuple, float]:
        """The payload, as {(metric, *labels): value}: counters since the last call, gauges
        now, histograms as their number of samples (the primary's allocation sizes as
        the sizes)."""
        in_use = sum(1 for c in self.chunks.values() if not c.ready or c.pins)
        writing = sum(1 for c in self.chunks.values() if not c.ready)
        out: dict[tuple, float] = {
            ("usage",): in_use / self.num_chunks, ("write",): writing / self.num_chunks,
            ("read",): max(in_use - writing, 0) / self.num_chunks}
        if self.allocations:
            out[("allocation",)] = tuple(self.allocations)
        self.allocations = []
        for i, tier in enumerate(self.tiers):
            label = self.label(i)
            if tier.detector:
                out[("bp_ema", label)] = float(tier.fed_bytes)
                if tier.dropped:
                    self._count("bp_stores_dropped", label, len(tier.dropped))
                    self._count("bp_blocks_dropped", label, sum(tier.dropped))
                tier.dropped = []
            jobs = [job for t, job in self.in_flight if t == i]
            promote = [job for job in jobs if job.kind == "promote"]
            store = [job for job in jobs if job.kind == "store"]
            out[("active_promotions", label)] = len(promote)
            out[("active_cascades", label)] = len(store)
            out[("primary_write_usage", label)] = (
                sum(len(j.keys) for j in promote) / self.num_chunks)
            out[("primary_read_usage", label)] = (
                sum(len(j.keys) for j in store) / self.num_chunks)
            if tier.lookups:
                out[("tier_lookups", tier.name)] = tier.lookups
            tier.lookups = 0
        out.update(self.counters)
        self.counters = {}
        return out

    def config_info(self, primary_info: dict) -> list[dict]:
        return [{**primary_info, "tier": PRIMARY_LABEL}] + [
            {"lch_tier": tier.name, "tier": self.label(i)} for i, tier in enumerate(self.tiers)]

    def take_events(self) -> list[tuple[str, tuple[int, ...]]]:
        """Each tier's own events, in tier order (the primary here reports none)."""
        out = [(tier.name, keys) for tier in self.tiers for keys in tier.events]
        for tier in self.tiers:
            tier.events = []
        return out

    def pending_work(self) -> bool:
        return bool(self.in_flight) or any(r.parked for r in self.requests.values())

    def ref_counts(self) -> dict[int, int]:
        return {k: (c.pins if c.ready else -1) for k, c in sorted(self.chunks.items())}

    # -- helpers --------------------------------------------------------------------------

    def label(self, i: int) -> str:
        return f"{i + 1}:{self.tiers[i].name}"

    def _tiers(self, origin: int | None = None):
        return [(i, t) for i, t in enumerate(self.tiers) if i != origin]

    def _count(self, name: str, label: str, by: int = 1, *more: str) -> None:
        key = (name, label, *more)
        self.counters[key] = self.counters.get(key, 0) + by
