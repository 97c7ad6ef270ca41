"""One request's accesses to the CPU offload tier, applied to the eviction order when the
request finishes (vLLM 0.33.0 ``OffloadingManager.on_request_finished``), and where its
blocks stand in LRU order while it runs.

A request's stores and loads do not reorder the cache as they happen: the cache remembers
which keys the request saw (offered for a store while absent or readable, or loaded), which it
inserted and which readable chunks it reused, and commits one access per key when the request
finishes, its head the most recent. A store miss is also where ARC learns from its ghost
lists; the request counts each key's store miss once (``first_store_misses``).

Request-position recency (LRU, vLLM 0.33.0; what ``docs/specs/tiered-lookup.md`` says in
one line, stated here in full). The connector records each key's *position* on the
request's context: the end token of the block, so a request's keys are a prefix-ordered chain
(``positions``). A chunk's place in LRU order is a comparable pair ``(time, -position)``:

- a touch, and a finished request's commit, give the chunk ``(now, 0)``;
- a request is *ranked* (gets a time) the first time the cache observes one of its keys in
  the current cache generation, and keeps that rank while it runs: a chunk it stores with a
  position gets ``(rank, -position)``, so within a request tails are evicted before heads,
  and everything the request stores ranks *below* anything touched or committed since the
  request was ranked (surprising, and meant: the request's recency is provisional until it
  finishes);
- when the request first observes an already-resident key with a position, the key's pair
  rises to ``(rank, -position)`` if that is later, never falls;
- finishing commits the request's keys head to tail (sorted by position when every key it
  saw has one, else in the order it first saw them): the head is the most recent;
- ``reset_cache`` begins a new cache generation: a running request is ranked afresh.

Keys without a position (releases before 0.33.0 set none; a key of another request's
chain) rank as a touch does.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from attrs import define, field

TOKENS_PER_CHUNK = 16          # a chunk's tokens: key i of a chain ends at token 16 (i + 1)


def chain_positions(chain: Iterable[int]) -> dict[int, int]:
    """The positions the connector records for a request's keys: end tokens, head first."""
    return {key: TOKENS_PER_CHUNK * (i + 1) for i, key in enumerate(chain)}


@define
class RequestAccess:
    positions: Mapping[int, int] = field(factory=dict)   # key -> end token (the context's)
    rank: int | None = None                        # when first observed, this generation
    seen: list[int] = field(factory=list)          # first observed, in order
    inserted: set[int] = field(factory=set)        # stored (allocated) by this request
    reused: set[int] = field(factory=set)          # readable chunks it loaded or re-offered
    store_missed: set[int] = field(factory=set)    # absent keys it offered for a store
    offered: set[int] = field(factory=set)         # every key it offered for a store

    def observe(self, keys: Iterable[int], reused: Iterable[int] = ()) -> list[int]:
        """Record the keys; return those seen for the first time."""
        new = [k for k in dict.fromkeys(keys) if k not in self.seen]
        self.seen.extend(new)
        # Reading back a chunk this request inserted is not a reuse of the cache.
        self.reused.update(k for k in reused if k not in self.inserted)
        return new

    def first_store_misses(self, keys: Iterable[int]) -> list[int]:
        fresh = [k for k in keys if k not in self.store_missed]
        self.store_missed.update(fresh)
        return fresh

    def recency(self, key: int, now: int) -> tuple[int, int]:
        """The LRU pair a chunk of this request's ``key`` gets when it stores or first
        observes it: ``(rank, -position)``; a key without a position ranks as a touch."""
        position = self.positions.get(key)
        return (now, 0) if position is None else (self.rank, -position)

    def head_to_tail(self) -> list[int]:
        """The keys it saw, head first: by position when every one has one."""
        if all(k in self.positions for k in self.seen):
            return sorted(self.seen, key=self.positions.__getitem__)
        return list(self.seen)

    def fresh(self) -> RequestAccess:
        """The same request (its context keeps the positions) in a new cache generation."""
        return RequestAccess(self.positions)

    @property
    def insertion_only(self) -> set[int]:
        return self.inserted - self.reused
