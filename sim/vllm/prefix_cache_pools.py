"""``prefix_cache.block_pools``' vLLM target: two real ``BlockPool`` objects, a device pool
and a second one (as HiSparse keeps a host pool beside the device's), called by block id.

Blocks are named ``(pool, id)``; the adapter passes the real ``KVCacheBlock`` objects. A
watcher handed to ``unpin_blocks`` is a callable that records its name, the pool and the
block it hears of. ``get_new_blocks`` asking for more than are free answers None where vLLM
raises ``ValueError`` (any other raise is the pool's own). What the release lacks is
reported (``unpins``, ``cross_pool``, ``null_left_alone``) and the machine does not draw it.
"""

from __future__ import annotations

from typing import Any

from sim.vllm import prefix_cache_compat, release

BLOCK_SIZE = 16         # the pools cache nothing here; a size their constructor accepts


class VllmBlockPools:
    def __init__(self, num_blocks: tuple[int, ...]):
        pool_cls = release.import_module("vllm.v1.core.block_pool").BlockPool
        utils = release.import_module("vllm.v1.core.kv_cache_utils")
        kwargs = prefix_cache_compat.pool_kwargs(pool_cls, BLOCK_SIZE)
        self.pools = [pool_cls(n, **kwargs) for n in num_blocks]
        self.unpins = prefix_cache_compat.unpins_blocks(pool_cls)
        self.cross_pool = prefix_cache_compat.blocks_know_their_pool(utils.KVCacheBlock)
        self.null_left_alone = prefix_cache_compat.null_left_alone()
        self.uncached_first = prefix_cache_compat.uncached_first(utils, pool_cls)
        self.heard: list[tuple[str, int, int]] = []

    def get_new_blocks(self, pool: int, n: int) -> tuple[int, ...] | None:
        try:
            blocks = self.pools[pool].get_new_blocks(n)
        except ValueError:
            return None
        return tuple(b.block_id for b in blocks)

    def touch(self, pool: int, blocks: tuple[int, ...]) -> None:
        prefix_cache_compat.touch(self.pools[pool], [self.pools[pool].blocks[b] for b in blocks])

    def free_blocks(self, pool: int, blocks: tuple[tuple[int, int], ...]) -> None:
        self.pools[pool].free_blocks([self.pools[q].blocks[b] for q, b in blocks])

    def unpin_blocks(self, pool: int, blocks: tuple[int, ...], watcher: str) -> None:
        def on_reuse(block: Any) -> None:
            self.heard.append((watcher, pool, block.block_id))
        self.pools[pool].unpin_blocks([self.pools[pool].blocks[b] for b in blocks], on_reuse)

    def reset_prefix_cache(self, pool: int) -> bool:
        return self.pools[pool].reset_prefix_cache()

    def take_notices(self) -> tuple[tuple[str, int, int], ...]:
        heard, self.heard = self.heard, []
        return tuple(sorted(heard))

    def free_order(self, pool: int) -> tuple[int, ...] | Any:
        listed = self.pools[pool].free_block_queue.get_all_free_blocks()
        try:
            return tuple(b.block_id for b in listed)
        except (TypeError, AttributeError):
            return listed

    def holder_counts(self, pool: int) -> tuple[int, ...]:
        return tuple(b.ref_cnt for b in self.pools[pool].blocks)
