"""Reference model of vLLM's free-block queue (``FreeKVCacheBlockQueue``): the prefix cache's
free blocks in the order they are reused, with the operations its callers make (the block
pool: pop from the front, take a hit block out of the middle, give blocks back to either
end) and those its API offers besides (a single append, a walk from a cursor).

The queue is a sequence of distinct block ids, nothing more: the implementation keeps it as
a doubly linked list threaded through the blocks with two sentinels and a counter; here it
is a tuple. Popping from an empty queue is refused (vLLM raises ``ValueError``); the other
operations are asked only of blocks their callers may pass (a block in the queue to take
out, blocks not in it to give back), as the block pool does.
"""

from __future__ import annotations

from attrs import define


@define
class FreeQueueModel:
    """A queue built from ``num_blocks`` blocks, ids 0..n-1, in id order (the pool's)."""

    num_blocks: int
    order: tuple[int, ...] = ()

    def __attrs_post_init__(self) -> None:
        if self.num_blocks < 0:
            raise ValueError(f"num_blocks must be >= 0, got {self.num_blocks}")
        self.order = tuple(range(self.num_blocks))

    @property
    def num_free_blocks(self) -> int:
        return len(self.order)

    def popleft(self) -> int | None:
        """The front block, taken off; None: the queue is empty and refuses."""
        if not self.order:
            return None
        first, self.order = self.order[0], self.order[1:]
        return first

    def popleft_n(self, n: int) -> tuple[int, ...]:
        taken, self.order = self.order[:n], self.order[n:]
        return taken

    def remove(self, block: int) -> None:
        self.order = tuple(b for b in self.order if b != block)

    def append(self, block: int) -> None:
        self.order += (block,)

    def append_n(self, blocks: tuple[int, ...]) -> None:
        self.order += tuple(blocks)

    def prepend_n(self, blocks: tuple[int, ...]) -> None:
        self.order = tuple(blocks) + self.order

    def get_all_free_blocks(self) -> tuple[int, ...]:
        return self.order

    def iter_blocks_after(self, cursor: int | None) -> tuple[int, ...]:
        """The free blocks after ``cursor`` (a block in the queue), or all of them."""
        return self.order if cursor is None else self.order[self.order.index(cursor) + 1:]
