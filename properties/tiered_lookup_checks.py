"""What the tiered-lookup machine checks, and the hazards it counts while checking: the
answer of every lookup and scan against the model's, deferrals that can never resolve, and
the whole state after every step. Mixed into ``TieredLookupMachine``, which sets ``model``,
``mgr``, ``keys`` and ``deferred``.
"""

from __future__ import annotations

from hypothesis.stateful import invariant

from models.tiered_lookup_values import LookupResult, Scan

DEFERRED = (LookupResult.RETRY, LookupResult.HIT_PENDING)
RESOLVE_ROUNDS = 4          # probe flushed, promotion started, submitted, completed

HAZARDS = (
    "prepare_store: evicts",
    "prepare_store: no room",
    "complete_store: failed store removed",
    "lookup: HIT_PENDING",
    "lookup: RETRY",
    "promotion started",
    "promotion refused: primary full",
    "scan: pending block in the run",
    "deferred lookup resolved",
    "reset: promotions held",
    "store job failed",
    "promote job failed",
)


PROPERTIES = {
    "lookup-results-agree": "every lookup answers what the model answers",
    "deferred-lookup-resolves": "a deferral (HIT_PENDING / RETRY) has a job or probe in flight",
    "scan-agrees": "a prefix / sliding-window scan looks up the model's keys, returns its value",
    "store-outputs-agree": "prepare_store returns the model's keys to store and evictions",
    "pinned-never-evicted": "no pinned, write-pending or offered chunk is evicted",
    "events-agree": "take_events() drains the model's stored / removed events",
    "stats-agree": "get_stats() reports the model's chunks in use, store sizes and skips",
    "ref-counts-agree": "each key's ref count is the model's (-1 write pending)",
    "arc-memory-agrees": "ARC's ghost lists (B1, B2, least recent first) and T1's target are "
                         "the model's",
    "request-policy-agrees": "on_new_request tells the connector to offload chunk by chunk "
                             "(the CPU manager alone)",
    "eviction-order-agrees": "the primary would evict its evictable chunks in the model's "
                             "order (all of them in one call, no key offered)",
    "recency-order-agrees": "LRU: the primary would evict its written chunks in the model's "
                            "order were none being read (touches reorder chunks being read)",
    "data-roundtrip": "a readable chunk holds the bytes stored for its own key",
    # With every key's ref count the model's (resident or not), free chunks + resident chunks
    # == num_chunks follows: the partition is no property of its own (the native target's
    # structural self-check, check-valid, still asserts it from its own lists).
    "free-chunks-agree": "num_free_chunks is the model's",
    "jobs-agree": "the pending jobs are the model's",
    "secondary-agrees": "the secondary tier holds the model's keys",
    "load-source-agrees": "a HIT's load source is the tier that supplied it to the request",
    "tier-touched": "every touch reaches the secondary tier too, keys in order",
    "pending-work-agrees": "has_pending_work() while a secondary job runs or waits unnoticed",
    "shutdown-releases-all": "shutdown releases the secondary tier, then the primary's memory",
}


class TieredLookupChecks:
    def _model_lookup(self, key: int, live: list[bool], counted: bool = True) -> LookupResult:
        """The model's lookup, noting whether a deferral has something in flight."""
        m = self.model
        promotions = len(m.promotions)
        could_promote = not m.promotions_held and key not in m.chunks and (
            m.secondary_answer(key) is LookupResult.HIT)
        answer = m.lookup_meant(key, counted)
        live.append(m.in_flight(key))
        if answer in DEFERRED:
            self.hazard(f"lookup: {answer.name}")
            self.deferred.add(key)
        else:
            if key in self.deferred:
                self.hazard("deferred lookup resolved")
            self.deferred.discard(key)
        if len(m.promotions) > promotions:
            self.hazard("promotion started")
        elif could_promote and answer is LookupResult.MISS:
            self.hazard("promotion refused: primary full")
        if m.promotions_held and answer is LookupResult.MISS and key in m.tier_keys:
            self.hazard("reset: promotions held")
        return answer

    def _check_answer(self, key: int, expect: LookupResult, actual: LookupResult,
                      live: bool, where: str) -> None:
        if actual != expect and actual in DEFERRED and not live:
            self.fail("deferred-lookup-resolves",
                      f"{where} of key {key} answered {actual!r} (expected {expect!r}) with "
                      "nothing in flight for it: no store, promotion or probe will ever "
                      "change the answer, the request waits forever")
        self.check("lookup-results-agree", actual == expect,
                   lambda: f"{where} of key {key} answered {actual!r}, expected {expect!r}")

    def _check_scan(self, name: str, expect: Scan, actual: Scan, live: list[bool]) -> None:
        for i, (key, want, got) in enumerate(zip(expect.lookups, expect.answers,
                                                 actual.answers, strict=False)):
            if actual.lookups[i] != key:
                break
            self._check_answer(key, want, got, live[i], f"{name} lookup {i}")
        # One property for the whole scan: a wrong scan may return the right value after
        # probing further (starting promotions and probes), or the wrong value after the
        # same lookups; both are the same divergence.
        self.check("scan-agrees", actual.lookups == expect.lookups,
                   lambda: f"{name} looked up {list(actual.lookups)}, expected "
                   f"{list(expect.lookups)} (answers {actual.answers}, expected "
                   f"{expect.answers})")
        self.check("scan-agrees", actual.result == expect.result,
                   lambda: f"{name} returned {actual.result} after looking up "
                   f"{list(actual.lookups)} (answers {actual.answers}), expected "
                   f"{expect.result}")
        if LookupResult.HIT_PENDING in expect.answers:
            self.hazard("scan: pending block in the run")

    @invariant()
    def state_agrees(self):
        # After shutdown nothing is left to read: the primary's memory is released.
        if not hasattr(self, "model") or getattr(self, "closed", False):
            return
        m, t = self.model, self.mgr
        for key in self.keys:
            if t.ref_cnt(key) != m.ref_cnt(key):
                self.fail("ref-counts-agree", f"key {key} ref count {t.ref_cnt(key)}, expected "
                          f"{m.ref_cnt(key)} (-1 write pending, loads + store jobs reading it)")
            got, want = t.read_chunk(key), m.read_chunk(key)
            if got != want:
                self.fail("data-roundtrip",
                          f"key {key}'s chunk holds key {got}'s bytes, expected {want}'s")
        # The eviction policy's whole state, as the stores to come will see it: checked after
        # every step, not only when a store happens to evict (an order that goes wrong is a
        # wrong victim later, once the cache fills).
        policy = t.request_policy() if m.secondary == "none" else None
        if policy is not None:              # None: the release has no on_new_request
            self.check("request-policy-agrees", policy == m.request_policy(),
                       lambda: f"the current request was told to offload {policy!r}, "
                       f"expected {m.request_policy()!r}")
        if self._orders_evictions():
            got, want = t.eviction_order(), m.eviction_order()
            self.check("eviction-order-agrees", got == want,
                       lambda: f"evicting every evictable chunk now would evict {got}, "
                       f"expected {want}")
            # LRU ranks a chunk a cascade or a load still reads (a touch, a request's end);
            # in a tiering world store jobs pin most chunks, so the order of the evictable
            # ones alone rarely shows a lost touch before the chunk is reordered again.
            if m.eviction_policy == "lru":
                got_all, want_all = t.recency_order(), m.recency_order()
                self.check("recency-order-agrees", got_all == want_all,
                           lambda: f"evicting every written chunk, were none being read, "
                           f"would evict {got_all}, expected {want_all}")
            # What ARC remembers of its evictions decides how a later miss adapts: checked
            # as it changes, not only once a ghost is offered again and an eviction follows.
            got_memory, want_memory = t.arc_memory(), m.arc_memory()
            self.check("arc-memory-agrees", got_memory == want_memory,
                       lambda: f"ARC holds (B1, B2, target) {got_memory}, expected "
                       f"{want_memory}")
        self.check("free-chunks-agree", t.num_free_chunks == m.num_free_chunks,
                   lambda: f"{t.num_free_chunks} free chunks, expected {m.num_free_chunks}")
        self.check("jobs-agree", t.pending_jobs() == m.pending_jobs(),
                   lambda: f"pending jobs {t.pending_jobs()}, expected {m.pending_jobs()}")
        self.check("tier-touched", t.tier_touches() == m.tier_touches(),
                   lambda: f"the secondary tier was touched with {t.tier_touches()}, "
                   f"expected {m.tier_touches()}")
        if "has_pending_work" not in self.missing_calls:
            self.check("pending-work-agrees", t.has_pending_work() == m.has_pending_work(),
                       lambda: f"has_pending_work() is {t.has_pending_work()}, expected "
                       f"{m.has_pending_work()} (jobs {m.pending_jobs()})")
        self.check("secondary-agrees", t.secondary_keys() == m.secondary_keys(),
                   lambda: f"secondary tier holds {t.secondary_keys()}, expected "
                   f"{m.secondary_keys()}")
        self.check_valid(t)

    def _orders_evictions(self) -> bool:
        # The tiering manager's primary too: it is a CPU manager evicting by LRU, and the
        # tiering manager must pass touches and requests' ends on to it.
        return "eviction_order" not in self.missing_calls

    def state_checks(self) -> list[str]:
        if getattr(self, "closed", False):
            return []
        m = self.model
        keys = list(self.keys)
        # Every check ``state_agrees`` makes, in its order: the file fails where it did.
        policy = [f"assert mgr.request_policy() == {m.request_policy()!r}"] \
            if m.secondary == "none" and self.mgr.request_policy() is not None else []
        order = [f"assert mgr.eviction_order() == {m.eviction_order()!r}",
                 f"assert mgr.arc_memory() == {m.arc_memory()!r}"] \
            if self._orders_evictions() else []
        if order and m.eviction_policy == "lru":
            order.append(f"assert mgr.recency_order() == {m.recency_order()!r}")
        pending = [f"assert mgr.has_pending_work() is {m.has_pending_work()}"] \
            if "has_pending_work" not in self.missing_calls else []
        return [*policy, *order, f"assert mgr.num_free_chunks == {m.num_free_chunks}",
                f"assert [mgr.ref_cnt(k) for k in {keys}] == {[m.ref_cnt(k) for k in keys]}",
                f"assert [mgr.read_chunk(k) for k in {keys}] == "
                f"{[m.read_chunk(k) for k in keys]}",
                f"assert mgr.pending_jobs() == {m.pending_jobs()!r}",
                f"assert mgr.tier_touches() == {m.tier_touches()!r}", *pending,
                f"assert mgr.secondary_keys() == {m.secondary_keys()!r}"]
