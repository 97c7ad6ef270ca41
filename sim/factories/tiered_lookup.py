"""The tiered lookup's target factories (``sim/manifests/tiered_lookup.py`` names them)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sim.errors import HarnessError
from sim.sizes import check_size

if TYPE_CHECKING:
    from sim.targets import Target


def _tiered_config(num_chunks: int, secondary: str) -> tuple[int, str]:
    from models.tiered_lookup import SECONDARY_KINDS
    if secondary not in SECONDARY_KINDS:
        raise HarnessError(f"secondary must be one of {', '.join(SECONDARY_KINDS)}, "
                           f"got {secondary!r}")
    # No chunks is a real CPU manager (CPUOffloadingSpec's when cpu_bytes_to_use is under one
    # chunk); a secondary tier's primary needs memory to map.
    return check_size("num_chunks", num_chunks, 0 if secondary == "none" else 1), secondary


def make_model(target: Target, num_chunks: int, secondary: str = "none",
               eviction_policy: str = "lru", store_threshold: int = 1,
               max_tracker_size: int = 64_000, **options: Any) -> Any:
    from models.tiered_lookup import TieredLookupModel
    return TieredLookupModel(*_tiered_config(num_chunks, secondary),
                             eviction_policy=_eviction_policy(eviction_policy),
                             store_threshold=store_threshold,
                             max_tracker_size=check_size("max_tracker_size", max_tracker_size),
                             **options)


def make_native(target: Target, num_chunks: int, secondary: str = "none",
                eviction_policy: str = "lru", store_threshold: int = 1,
                max_tracker_size: int = 64_000, preloaded: tuple[int, ...] = (),
                requests: tuple[tuple[int, ...], ...] = (),
                enable_events: bool = True, unpositioned: tuple[int, ...] = ()) -> Any:
    from sim.native.tiered_lookup import NativeTieredLookup
    return NativeTieredLookup(*_tiered_config(num_chunks, secondary), bugs=target.bugs,
                              eviction_policy=_eviction_policy(eviction_policy),
                              store_threshold=store_threshold,
                              max_tracker_size=check_size("max_tracker_size", max_tracker_size),
                              preloaded=preloaded, requests=requests,
                              enable_events=enable_events, unpositioned=unpositioned)


def make_vllm(target: Target, num_chunks: int, secondary: str = "none",
              eviction_policy: str = "lru", store_threshold: int = 1,
              max_tracker_size: int = 64_000, preloaded: tuple[int, ...] = (),
              requests: tuple[tuple[int, ...], ...] = (),
              enable_events: bool = True, unpositioned: tuple[int, ...] = ()) -> Any:
    from sim.vllm.tiered_lookup import make_tiered_lookup
    return make_tiered_lookup(*_tiered_config(num_chunks, secondary),
                              eviction_policy=_eviction_policy(eviction_policy),
                              store_threshold=store_threshold,
                              max_tracker_size=check_size("max_tracker_size", max_tracker_size),
                              preloaded=preloaded, requests=requests,
                              enable_events=enable_events, unpositioned=unpositioned)


def _eviction_policy(name: str) -> str:
    from models.tiered_lookup import EVICTION_POLICIES
    if name not in EVICTION_POLICIES:
        raise HarnessError(f"eviction_policy must be one of {', '.join(EVICTION_POLICIES)}, "
                           f"got {name!r}")
    return name
