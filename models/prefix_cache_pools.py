"""Reference model of vLLM's block pool (``BlockPool``) called on its own API, beside a second
pool: what the pool promises its callers about handing blocks out and taking them back, where
the KV cache manager's own calls do not reach (``properties/prefix_cache_pools_machine.py``).

vLLM 0.33.0's pool, as its docstrings and comments state it: every block but the null one
(block 0, a placeholder in a window's or a Mamba group's table) is free or held; a held block
counts its holders; the free ones wait in the order they are reused. ``get_new_blocks`` hands
out the front ones (refusing more than are free); ``touch`` takes a holder on, taking a free
block out of the queue; ``free_blocks`` lets one holder go per block listed, and a block left
with none goes to the front (no hash here: the machine never caches one); the null block is
never pooled, so both leave it alone; a block another pool built is freed into that pool (a
HiSparse host pool's blocks listed with the device pool's). ``unpin_blocks`` lets holders go
but leaves the block readable until it is reused: it goes to the back, and the caller's watcher
hears when the pool hands the block out again or a reset drops it. ``reset_prefix_cache``
succeeds exactly when no block is held.

A pool here is a tuple of free block ids and a holder count per block; the implementation
threads a doubly linked list through block objects. Notices are compared as a set per call:
the order watchers of one reset fire in is the dict's, which no caller relies on.
"""

from __future__ import annotations

from attrs import define, field

NULL_BLOCK = 0

Block = tuple[int, int]        # (pool, block id)


@define
class PoolModel:
    num_blocks: int
    free: tuple[int, ...] = ()
    holders: list[int] = field(factory=list)
    watchers: dict[int, str] = field(factory=dict)    # block -> the watcher that hears of it

    def __attrs_post_init__(self) -> None:
        self.free = tuple(range(1, self.num_blocks))    # the null block never joins
        self.holders = [0] * self.num_blocks


@define
class BlockPoolsModel:
    """Pools of ``num_blocks[i]`` blocks each (ids 0..n-1, 0 the null block)."""

    num_blocks: tuple[int, ...]
    uncached_first: bool = True     # vLLM >=0.24.0; before, a released block goes to the back
    pools: list[PoolModel] = field(init=False)
    notices: list[tuple[str, int, int]] = field(factory=list)   # (watcher, pool, block)

    def __attrs_post_init__(self) -> None:
        if any(n < 2 for n in self.num_blocks):
            raise ValueError(f"each pool needs the null block and one more: {self.num_blocks}")
        self.pools = [PoolModel(n) for n in self.num_blocks]

    def get_new_blocks(self, pool: int, n: int) -> tuple[int, ...] | None:
        """The ``n`` front free blocks, now held once; None: fewer are free (vLLM raises)."""
        p = self.pools[pool]
        if n > len(p.free):
            return None
        taken, p.free = p.free[:n], p.free[n:]
        for b in taken:
            p.holders[b] += 1
            self._reused(pool, b)
        return taken

    def touch(self, pool: int, blocks: tuple[int, ...]) -> None:
        p = self.pools[pool]
        for b in blocks:
            if b != NULL_BLOCK:
                p.free = tuple(f for f in p.free if f != b)
                p.holders[b] += 1

    def free_blocks(self, pool: int, blocks: tuple[Block, ...]) -> None:
        """One holder less per block listed, each in the pool that built it; a block of
        ``pool`` left with none goes to the front (``uncached_first``), in the order listed."""
        own = [b for q, b in blocks if q == pool and b != NULL_BLOCK]
        for b in own:
            self.pools[pool].holders[b] -= 1
        p, released = self.pools[pool], tuple(b for b in own if not self.pools[pool].holders[b])
        p.free = released + p.free if self.uncached_first else p.free + released
        others = tuple((q, b) for q, b in blocks if q != pool and b != NULL_BLOCK)
        for q in dict.fromkeys(q for q, _ in others):
            self.free_blocks(q, tuple(x for x in others if x[0] == q))

    def unpin_blocks(self, pool: int, blocks: tuple[int, ...], watcher: str) -> None:
        p = self.pools[pool]
        for b in blocks:
            p.holders[b] -= 1
            p.watchers[b] = watcher
        p.free += tuple(b for b in blocks if not p.holders[b])

    def reset_prefix_cache(self, pool: int) -> bool:
        """Succeeds exactly when no block is held; every watcher of the pool then hears."""
        p = self.pools[pool]
        reset = not any(p.holders)
        if reset:
            self.notices += [(w, pool, b) for b, w in p.watchers.items()]
            p.watchers = {}
        return reset

    def take_notices(self) -> tuple[tuple[str, int, int], ...]:
        """The watchers heard since the last call, as a sorted tuple."""
        heard = tuple(sorted(self.notices))
        self.notices.clear()
        return heard

    def free_order(self, pool: int) -> tuple[int, ...]:
        return self.pools[pool].free

    def holder_counts(self, pool: int) -> tuple[int, ...]:
        return tuple(self.pools[pool].holders)

    def _reused(self, pool: int, block: int) -> None:
        watcher = self.pools[pool].watchers.pop(block, None)
        if watcher is not None:
            self.notices.append((watcher, pool, block))
