"""A native block pool beside a second one (``prefix_cache.block_pools``): the calls vLLM's
``BlockPool`` offers its callers, for the harness's own implementation.

Each pool keeps its free blocks as a map from block id to a position: the front is the
lowest, a block given back to the front takes one below it, one given back to the back one
above the highest. The reuse order is the positions sorted: no list is shifted on a
give-back, and a block is taken out of the middle by deleting its key. Blocks are
``(pool, id)`` pairs; id 0 of each pool is the null block, which never joins the free blocks
and whose count nothing changes.
"""

from __future__ import annotations


class _Pool:
    def __init__(self, num_blocks: int):
        self.num_blocks = num_blocks
        self.position = {b: b for b in range(1, num_blocks)}
        self.front, self.back = 0, num_blocks
        self.refs = dict.fromkeys(range(num_blocks), 0)
        self.watchers: dict[int, str] = {}

    def ordered(self) -> list[int]:
        return sorted(self.position, key=self.position.__getitem__)

    def to_front(self, blocks: list[int]) -> None:
        for b in reversed(blocks):
            self.front -= 1
            self.position[b] = self.front

    def to_back(self, blocks: list[int]) -> None:
        for b in blocks:
            self.position[b] = self.back
            self.back += 1


class NativeBlockPools:
    def __init__(self, num_blocks: tuple[int, ...]):
        self.pools = [_Pool(n) for n in num_blocks]
        self.heard: list[tuple[str, int, int]] = []

    def get_new_blocks(self, pool: int, n: int) -> tuple[int, ...] | None:
        p = self.pools[pool]
        if n > len(p.position):
            return None
        taken = p.ordered()[:n]
        for b in taken:
            del p.position[b]
            p.refs[b] += 1
            self._hand_out(pool, b)
        return tuple(taken)

    def touch(self, pool: int, blocks: tuple[int, ...]) -> None:
        p = self.pools[pool]
        for b in blocks:
            if b == 0:
                continue
            p.position.pop(b, None)
            p.refs[b] += 1

    def free_blocks(self, pool: int, blocks: tuple[tuple[int, int], ...]) -> None:
        by_pool: dict[int, list[int]] = {}
        for q, b in blocks:
            if b:
                by_pool.setdefault(q, []).append(b)
        mine = by_pool.pop(pool, [])
        p = self.pools[pool]
        released = []
        for b in mine:
            p.refs[b] -= 1
            if p.refs[b] == 0:
                released.append(b)
        p.to_front(released)
        for q, ids in by_pool.items():
            self.free_blocks(q, tuple((q, b) for b in ids))

    def unpin_blocks(self, pool: int, blocks: tuple[int, ...], watcher: str) -> None:
        p = self.pools[pool]
        for b in blocks:
            p.refs[b] -= 1
            p.watchers[b] = watcher
        p.to_back([b for b in blocks if p.refs[b] == 0])

    def reset_prefix_cache(self, pool: int) -> bool:
        p = self.pools[pool]
        if len(p.position) != p.num_blocks - 1:
            return False
        for b in sorted(p.watchers):
            self._hand_out(pool, b)
        return True

    def take_notices(self) -> tuple[tuple[str, int, int], ...]:
        heard, self.heard = self.heard, []
        return tuple(sorted(heard))

    def free_order(self, pool: int) -> tuple[int, ...]:
        return tuple(self.pools[pool].ordered())

    def holder_counts(self, pool: int) -> tuple[int, ...]:
        refs = self.pools[pool].refs
        return tuple(refs[b] for b in range(len(refs)))

    def check_valid(self) -> None:
        for i, p in enumerate(self.pools):
            free = set(p.position)
            assert 0 not in free, f"pool {i}: the null block is free"
            held = {b for b, n in p.refs.items() if n and b}
            assert not free & held, f"pool {i}: blocks both free and held: {free & held}"
            assert all(n >= 0 for n in p.refs.values()), f"pool {i}: a negative count"
            lost = set(range(1, p.num_blocks)) - free - held
            assert not lost, f"pool {i}: blocks neither free nor held: {sorted(lost)}"

    def _hand_out(self, pool: int, block: int) -> None:
        watcher = self.pools[pool].watchers.pop(block, None)
        if watcher is not None:
            self.heard.append((watcher, pool, block))
