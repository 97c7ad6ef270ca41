"""The prefix cache's target factories (``sim/manifests/prefix_cache.py`` names them)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sim.targets import Target


def make_model(target: Target, **config: Any) -> Any:
    from models.prefix_cache import PrefixCacheModel
    from sim.prefix_cache_config import as_scheduler_blocks, prefix_cache_config
    return PrefixCacheModel(**as_scheduler_blocks(prefix_cache_config(**config)))


def make_native(target: Target, **config: Any) -> Any:
    from sim.native.prefix_cache import NativePrefixCache
    from sim.prefix_cache_config import prefix_cache_config
    return NativePrefixCache(**prefix_cache_config(**config), bugs=target.bugs)


def make_vllm(target: Target, **config: Any) -> Any:
    from sim.prefix_cache_config import prefix_cache_config
    from sim.vllm.prefix_cache import make_prefix_cache
    config = prefix_cache_config(**config)
    del config["uncached_first"]          # the release's own order (the target reports it)
    return make_prefix_cache(**config)


def make_free_queue(target: str, num_blocks: int) -> Any:
    """The free-block queue alone (``prefix_cache.free_queue``): the model, the native queue
    (``native:<bug>`` too: no switch acts on it) or vLLM's ``FreeKVCacheBlockQueue``."""
    base = target.split(":", 1)[0]
    if base == "model":
        from models.prefix_cache_queue import FreeQueueModel
        return FreeQueueModel(num_blocks)
    if base == "native":
        from sim.native.prefix_cache import NativeFreeQueue
        return NativeFreeQueue(num_blocks)
    if base == "vllm":
        from sim.vllm.prefix_cache import VllmFreeQueue
        return VllmFreeQueue(num_blocks)
    raise ValueError(f"target {target!r} has no free queue: name model, native or vllm")


def make_block_pools(target: str, num_blocks: tuple[int, ...]) -> Any:
    """Block pools on their own (``prefix_cache.block_pools``): the model, the native pools
    (``native:<bug>`` too: no switch acts on them) or vLLM's ``BlockPool`` objects."""
    base = target.split(":", 1)[0]
    if base == "model":
        from models.prefix_cache_pools import BlockPoolsModel
        return BlockPoolsModel(tuple(num_blocks))
    if base == "native":
        from sim.native.prefix_cache_pools import NativeBlockPools
        return NativeBlockPools(tuple(num_blocks))
    if base == "vllm":
        from sim.vllm.prefix_cache_pools import VllmBlockPools
        return VllmBlockPools(tuple(num_blocks))
    raise ValueError(f"target {target!r} has no block pools: name model, native or vllm")
