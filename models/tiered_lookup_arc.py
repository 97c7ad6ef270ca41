"""ARC, the adaptive replacement cache (Megiddo & Modha, FAST '03), as the CPU offload tier's
eviction policy: which resident chunk is evicted next.

The definition: resident entries are split into T1 (seen once recently) and T2 (seen at
least twice); the ghost lists B1 and B2 remember keys recently evicted from T1 and T2 (no
data); a target ``p`` for T1's size adapts: a miss on a key in B1 says recency was evicted too
early and grows ``p`` by max(1, |B2|/|B1|); a miss on a key in B2 shrinks it by
max(1, |B1|/|B2|); ``p`` stays within [0, capacity]. REPLACE evicts T1's least recent entry
while T1 holds its target, else T2's.

What vLLM 0.33.0's ``ARCCachePolicy`` promises on top of the definition, each a deliberate
choice of an offload cache (its docstring), modelled here as such:

- a new chunk always enters T1, a ghost hit included (the paper puts a ghost hit in T2); only
  a *reuse* of a readable chunk (a ``touch``, or a finished request that loaded it or offered
  it again) moves it to T2; a chunk still being written stays in T1;
- eviction skips pinned and offered chunks, picks several victims at once (T1 counted as
  shrinking by each T1 victim), and falls back to the other list when one has nothing
  evictable; T1 "holds its target" when its size is at least ``int(p)``;
- each ghost list is bounded by the capacity on its own (the paper bounds |T1|+|B1| and
  the whole directory);
- a request adapts ``p`` at most once per key from its store misses (``RequestAccess``); a
  ``touch`` of a ghost adapts it every time.

Structure, unlike vLLM's four ordered lists: the model keeps which resident keys are in T2
(T1 is the rest), each ghost's list and when it got there; recency of resident chunks is the
tiered model's ``Chunk.used_at``. Orders are computed by sorting on those times.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Protocol

from attrs import define, field


class Resident(Protocol):
    written: bool
    used_at: tuple[int, int]


@define
class ArcPolicy:
    capacity: int
    target: float = 0.0                                  # p, T1's adaptive target size
    frequent: set[int] = field(factory=set)             # resident keys in T2
    ghosts: dict[int, tuple[str, int]] = field(factory=dict)   # key -> ("B1"|"B2", since)

    def ghost_list(self, name: str) -> list[int]:
        """The ghost list's keys, least recent first."""
        return [k for _, k in sorted((t, k) for k, (g, t) in self.ghosts.items() if g == name)]

    def adapt(self, key: int, now: int) -> None:
        """A miss on ``key``: a ghost hit moves ``p`` toward the list that lost it."""
        where = self.ghosts.get(key)
        if where is None:
            return
        b1, b2 = len(self.ghost_list("B1")), len(self.ghost_list("B2"))
        if where[0] == "B1":
            self.target = min(self.target + max(1, b2 / b1), self.capacity)
        else:
            self.target = max(self.target - max(1, b1 / b2), 0)
        self.ghosts[key] = (where[0], now)               # the hit ghost is now its list's MRU

    def victims(self, chunks: Mapping[int, Resident], spare: frozenset[int] | set[int],
                need: int) -> tuple[int, ...] | None:
        """The ``need`` chunks REPLACE evicts, in the order chosen; None if too few of the
        chunks not in ``spare`` can go."""
        def recency(frequent: bool) -> list[int]:
            return [k for _, k in sorted((c.used_at, k) for k, c in chunks.items()
                                         if (k in self.frequent) == frequent)]
        t1, t2 = recency(False), recency(True)
        free_t1 = [k for k in t1 if k not in spare]
        free_t2 = [k for k in t2 if k not in spare]
        chosen: list[int] = []
        for _ in range(need):
            # REPLACE prefers T1 while it holds its target (counting T1 as shrinking by each
            # T1 victim), else T2; a preferred list with nothing evictable yields to the other.
            holds_target = len(t1) - sum(k in chosen for k in t1) >= int(self.target)
            preference = (free_t1, free_t2) if holds_target else (free_t2, free_t1)
            source = next((free for free in preference if free), None)
            if source is None:
                return None
            chosen.append(source.pop(0))
        return tuple(chosen)

    def evicted(self, victims: Sequence[int], now: Callable[[], int]) -> None:
        """Victims become ghosts of the list they left; each ghost list keeps its newest
        ``capacity`` keys."""
        for key in victims:
            self.ghosts[key] = ("B2" if key in self.frequent else "B1", now())
            self.frequent.discard(key)
        for name in ("B1", "B2"):
            for key in self.ghost_list(name)[:-self.capacity or None]:
                del self.ghosts[key]

    def inserted(self, key: int) -> None:
        self.ghosts.pop(key, None)                       # resident now, in T1

    def removed(self, key: int) -> None:
        self.frequent.discard(key)                       # a failed store: no ghost

    def touched(self, key: int, chunk: Resident | None, now: int) -> None:
        """A touch of ``key``: a readable chunk joins (or stays in) T2, one being written
        stays where it is; a ghost adapts ``p``."""
        if chunk is None:
            self.adapt(key, now)
        elif chunk.written:
            self.frequent.add(key)

    def reused(self, key: int) -> None:
        """A finished request reused the resident ``key`` (loaded it, or offered it again
        while readable): it is in T2 now, whatever its state since."""
        self.frequent.add(key)

    def clear(self) -> None:
        self.target, self.frequent, self.ghosts = 0.0, set(), {}
