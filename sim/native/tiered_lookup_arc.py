"""Native ARC eviction for the tiered lookup's primary tier, written the way an engine keeps
it: four ordered dicts (T1, T2 resident; B1, B2 ghosts), least recent first, and the target
``p`` as a float (``docs/specs/tiered-lookup.md``; the rules are ``models/tiered_lookup_arc.py``'s).

Bug switch ``native:arc-replace-inverted``: REPLACE's test is inverted, T2 loses a chunk
while T1 holds at least its target (and T1 while it is under it): a chunk a second request
reused is evicted before one seen once.

Bug switch ``native:arc-ghost-ignored``: a store miss on a ghost leaves the target where it
is (the ghost still becomes its list's most recent): ARC never learns that recency (B1) or
frequency (B2) was evicted too early, and evicts as a fixed split would.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Sequence


class NativeArc:
    def __init__(self, capacity: int, bugs: frozenset[str] = frozenset()):
        self.capacity = capacity
        self.bugs = bugs
        self.p = 0.0
        self.t1: OrderedDict[int, None] = OrderedDict()
        self.t2: OrderedDict[int, None] = OrderedDict()
        self.b1: OrderedDict[int, None] = OrderedDict()
        self.b2: OrderedDict[int, None] = OrderedDict()

    def ghost_hit(self, key: int) -> None:
        before = self.p
        self._adapt(key)
        if "arc-ghost-ignored" in self.bugs:
            self.p = before

    def _adapt(self, key: int) -> None:
        if key in self.b1:
            self.p = min(self.p + max(1, len(self.b2) / len(self.b1)), self.capacity)
            self.b1.move_to_end(key)
        elif key in self.b2:
            self.p = max(self.p - max(1, len(self.b1) / len(self.b2)), 0)
            self.b2.move_to_end(key)

    def choose(self, n: int, evictable: Callable[[int], bool]) -> list[int] | None:
        """``n`` victims, T1 first while it holds at least ``int(p)``; None if too few."""
        t1 = [k for k in self.t1 if evictable(k)]
        t2 = [k for k in self.t2 if evictable(k)]
        t1_size = len(self.t1)
        out: list[int] = []
        while len(out) < n:
            over = t1_size >= int(self.p)
            if "arc-replace-inverted" in self.bugs:
                over = not over
            if t1 and over:
                out.append(t1.pop(0))
                t1_size -= 1
            elif t2:
                out.append(t2.pop(0))
            elif t1:
                out.append(t1.pop(0))
                t1_size -= 1
            else:
                return None
        return out

    def evict(self, keys: Sequence[int]) -> None:
        for key in keys:
            if key in self.t1:
                del self.t1[key]
                self.b1[key] = None
            else:
                del self.t2[key]
                self.b2[key] = None
        for ghosts in (self.b1, self.b2):
            while len(ghosts) > self.capacity:
                ghosts.popitem(last=False)

    def insert(self, key: int) -> None:
        self.t1[key] = None
        self.b1.pop(key, None)
        self.b2.pop(key, None)

    def remove(self, key: int) -> None:
        self.t1.pop(key, None)
        self.t2.pop(key, None)

    def touch(self, key: int, ready: bool) -> None:
        if key in self.t1 and ready:
            self.reuse(key)
        elif key in self.t1:
            self.t1.move_to_end(key)
        elif key in self.t2:
            self.t2.move_to_end(key)
        else:
            self.ghost_hit(key)

    def reuse(self, key: int) -> None:
        if key in self.t1:
            del self.t1[key]
            self.t2[key] = None
        elif key in self.t2:
            self.t2.move_to_end(key)

    def refresh(self, key: int) -> None:
        """Most recent in its own list (a chunk the request only stored)."""
        for resident in (self.t1, self.t2):
            if key in resident:
                resident.move_to_end(key)

    def clear(self) -> None:
        self.p = 0.0
        for entries in (self.t1, self.t2, self.b1, self.b2):
            entries.clear()
