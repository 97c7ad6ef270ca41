"""One request's accesses to the CPU offload tier, applied to the eviction order when the
request finishes (vLLM 0.33.0 ``OffloadingManager.on_request_finished``).

A request's stores and loads do not reorder the cache as they happen: the cache remembers
which keys the request saw (offered for a store while absent or readable, or loaded), which it
inserted and which readable chunks it reused, and commits one access per key when the request
finishes, its head the most recent. A store miss is also where ARC learns from its ghost
lists; the request counts each key's store miss once (``first_store_misses``).
"""

from __future__ import annotations

from collections.abc import Iterable

from attrs import define, field


@define
class RequestAccess:
    seen: list[int] = field(factory=list)          # first observed, in order
    inserted: set[int] = field(factory=set)        # stored (allocated) by this request
    reused: set[int] = field(factory=set)          # readable chunks it loaded or re-offered
    store_missed: set[int] = field(factory=set)    # absent keys it offered for a store

    def observe(self, keys: Iterable[int], reused: Iterable[int] = ()) -> None:
        self.seen.extend(k for k in dict.fromkeys(keys) if k not in self.seen)
        # Reading back a chunk this request inserted is not a reuse of the cache.
        self.reused.update(k for k in reused if k not in self.inserted)

    def first_store_misses(self, keys: Iterable[int]) -> list[int]:
        fresh = [k for k in keys if k not in self.store_missed]
        self.store_missed.update(fresh)
        return fresh

    @property
    def insertion_only(self) -> set[int]:
        return self.inserted - self.reused
