"""The CPU offload tier's store threshold: a chunk is stored only once it has been offered
``store_threshold`` times (vLLM 0.33.0 ``CPUOffloadingManager(store_threshold=...)``;
values below 2 store every offer).

The cache counts offers in a tracker of at most ``max_tracked`` keys. An offer counts once
per key; a key it brings when the tracker is full replaces the key offered least recently,
never one of the same offer (with none to replace, it goes uncounted). The tracker outlives
``reset_cache``: a reset frees chunks, not what the cache learned about offers. A rejected
candidate is counted in ``stores_skipped`` (reported and zeroed by ``get_stats``).

From vLLM 0.34.0 (the model's ``offers_count_per_request``) a key counts once per request:
an offer of a key the same request already offered (a retry of a refused store, a re-offer
after preemption) still marks the key recently offered, but adds nothing to its count, and
its rejection is not counted as a skip again. The caller says which keys those are
(``already``): what the request has offered is the request's fact, not the tracker's.

Structure: each tracked key's count and when it was last offered; the least recent is found
by sorting those times.
"""

from __future__ import annotations

from collections.abc import Sequence, Set

from attrs import define, field


@define
class StoreAdmission:
    threshold: int
    max_tracked: int
    offers: dict[int, tuple[int, int]] = field(factory=dict)   # key -> (count, offered at)
    skipped: int = 0

    @property
    def filtering(self) -> bool:
        return self.threshold >= 2

    def offer(self, keys: Sequence[int], now, already: Set[int] = frozenset()) -> None:
        if not self.filtering:
            return
        this_offer = {k for k in keys if k in self.offers}
        for key in keys:
            if key in this_offer:
                self.offers[key] = (self.offers[key][0] + (key not in already), now())
        for key in keys:
            if key in self.offers:
                continue
            if len(self.offers) >= self.max_tracked:
                others = sorted((t, k) for k, (_, t) in self.offers.items()
                                if k not in this_offer and k not in keys)
                if not others:
                    continue
                del self.offers[others[0][1]]
            self.offers[key] = (1, now())

    def admitted(self, candidates: Sequence[int],
                 already: Set[int] = frozenset()) -> tuple[int, ...]:
        """The absent keys offered often enough to store; the rest are skipped (a key the
        request offered before was counted as a skip then)."""
        if not self.filtering:
            return tuple(candidates)
        kept = tuple(k for k in candidates if self.offers.get(k, (0, 0))[0] >= self.threshold)
        self.skipped += sum(k not in kept and k not in already for k in candidates)
        return kept
