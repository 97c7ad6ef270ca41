"""Target registry: a target name -> a factory per subsystem.

Names: ``model`` (the reference model itself, for reproducers), ``native`` (in-tree
torch-backed implementations, the default), ``native:<bug-id>`` (native with one catalogued
bug switched on; ``native:<id>+<id>`` turns on several, e.g. two bugs of one subsystem for a
hunt that must report both) and ``vllm`` (the installed vLLM's real classes, imported lazily).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from attrs import frozen

from sim.errors import AdapterError, HarnessError
from sim.native.bugs import BUG_SWITCHES, bug_subsystems

SUBSYSTEMS = ("encoder_cache", "encoder_decoder_cache", "scheduler_pass", "tiered_lookup",
              "offload_engine", "secondary_tier", "prefix_cache")
BASE_TARGETS = ("model", "native", "vllm")


@frozen
class Target:
    name: str
    base: str
    bug_ids: tuple[str, ...] = ()

    @property
    def bugs(self) -> frozenset[str]:
        return frozenset(self.bug_ids)

    @property
    def bug(self) -> str | None:
        """The switches as written after ``native:`` (None: none on)."""
        return "+".join(self.bug_ids) or None

    @property
    def bug_subsystems(self) -> tuple[str, ...]:
        """The subsystems any of the switches acts in (a switch is inert elsewhere)."""
        return tuple(dict.fromkeys(s for b in self.bug_ids for s in bug_subsystems(b)))


def known_target_names() -> list[str]:
    return [*BASE_TARGETS, *(f"native:{b}" for b in sorted(BUG_SWITCHES))]


def parse_target(name: str) -> Target:
    base, _, bug = name.partition(":")
    if base not in BASE_TARGETS:
        raise HarnessError(f"unknown target {name!r}; known targets: "
                           f"{', '.join(BASE_TARGETS)}, native:<bug-id> (bug ids: "
                           f"{', '.join(sorted(BUG_SWITCHES))})")
    if not bug:
        return Target(name, base)
    if base != "native":
        raise HarnessError(f"target {name!r}: only the native target takes a bug switch; "
                           f"use native:{bug}")
    ids = bug.split("+")
    for one in ids:
        if one not in BUG_SWITCHES:
            raise HarnessError(f"unknown bug id {one!r} in target {name!r}; known bug ids: "
                               f"{', '.join(sorted(BUG_SWITCHES))} (several: joined by +)")
    if len(set(ids)) != len(ids):
        raise HarnessError(f"target {name!r} names a bug twice; name each once")
    return Target(name, base, tuple(ids))


def _native_encoder_cache(target: Target, cache_size: int) -> Any:
    from sim.native.encoder_cache import NativeEncoderCache
    return NativeEncoderCache(cache_size, bugs=target.bugs)


def _model_encoder_cache(target: Target, cache_size: int) -> Any:
    from models.encoder_cache import EncoderCacheModel
    return EncoderCacheModel(cache_size)


def _vllm_encoder_cache(target: Target, cache_size: int) -> Any:
    from sim.vllm.encoder_cache import make_encoder_cache
    return make_encoder_cache(cache_size)


def _native_encoder_decoder_cache(target: Target, cache_size: int) -> Any:
    from sim.native.encoder_decoder_cache import NativeEncoderDecoderCache
    return NativeEncoderDecoderCache(cache_size, bugs=target.bugs)


def _model_encoder_decoder_cache(target: Target, cache_size: int) -> Any:
    from models.encoder_decoder_cache import EncoderDecoderCacheModel
    return EncoderDecoderCacheModel(cache_size)


def _vllm_encoder_decoder_cache(target: Target, cache_size: int) -> Any:
    from sim.vllm.encoder_decoder_cache import make_encoder_decoder_cache
    return make_encoder_decoder_cache(cache_size)


def _offload_sizes(block_size: int, num_slots: int, num_layers: int,
                   num_cpu_blocks: int) -> tuple[int, int, int, int]:
    return (check_size("block_size", block_size), check_size("num_slots", num_slots),
            check_size("num_layers", num_layers), check_size("num_cpu_blocks", num_cpu_blocks))


def _model_offload_engine(target: Target, block_size: int, num_slots: int, num_layers: int,
                          num_cpu_blocks: int, async_mode: bool = False,
                          copy_delay_cycles: dict[str, int] | None = None) -> Any:
    # The model has no device: async copies and delays do not change what it answers.
    from models.offload_engine import OffloadEngineModel
    return OffloadEngineModel(*_offload_sizes(block_size, num_slots, num_layers,
                                              num_cpu_blocks))


def _native_offload_engine(target: Target, block_size: int, num_slots: int, num_layers: int,
                           num_cpu_blocks: int, zero_on_deallocate: bool = False,
                           async_mode: bool = False,
                           copy_delay_cycles: dict[str, int] | None = None) -> Any:
    import os

    from sim.native.offload_engine import NativeOffloadEngine
    # Async mode: loads and offloads on side streams with events, real ones on CUDA (with
    # ``copy_delay_cycles`` of sleep before each side-stream copy), the simulated device's
    # queues on CPU. The machine's world draws it; LCH_OFFLOAD_ASYNC=1 forces it on.
    return NativeOffloadEngine(*_offload_sizes(block_size, num_slots, num_layers,
                                               num_cpu_blocks), bugs=target.bugs,
                               async_mode=async_mode
                               or os.environ.get("LCH_OFFLOAD_ASYNC") == "1",
                               zero_on_deallocate=zero_on_deallocate,
                               copy_delay_cycles=copy_delay_cycles)


def _tiered_config(num_chunks: int, secondary: str) -> tuple[int, str]:
    from models.tiered_lookup import SECONDARY_KINDS
    if secondary not in SECONDARY_KINDS:
        raise HarnessError(f"secondary must be one of {', '.join(SECONDARY_KINDS)}, "
                           f"got {secondary!r}")
    # No chunks is a real CPU manager (CPUOffloadingSpec's when cpu_bytes_to_use is under one
    # chunk); a secondary tier's primary needs memory to map.
    return check_size("num_chunks", num_chunks, 0 if secondary == "none" else 1), secondary


def _model_tiered_lookup(target: Target, num_chunks: int, secondary: str = "none",
                         eviction_policy: str = "lru", store_threshold: int = 1,
                         max_tracker_size: int = 64_000, **options: Any) -> Any:
    from models.tiered_lookup import TieredLookupModel
    return TieredLookupModel(*_tiered_config(num_chunks, secondary),
                             eviction_policy=_eviction_policy(eviction_policy),
                             store_threshold=store_threshold,
                             max_tracker_size=check_size("max_tracker_size", max_tracker_size),
                             **options)


def _native_tiered_lookup(target: Target, num_chunks: int, secondary: str = "none",
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


def _vllm_tiered_lookup(target: Target, num_chunks: int, secondary: str = "none",
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


def _tier_config(num_chunks: int, tier: str) -> tuple[int, str]:
    from models.secondary_tier import TIERS
    if tier not in TIERS:
        raise HarnessError(f"tier must be one of {', '.join(TIERS)}, got {tier!r}")
    return check_size("num_chunks", num_chunks), tier


def _model_secondary_tier(target: Target, num_chunks: int, tier: str = "fs") -> Any:
    from models.secondary_tier import SecondaryTierModel
    return SecondaryTierModel(*_tier_config(num_chunks, tier))


def _native_secondary_tier(target: Target, num_chunks: int, tier: str = "fs",
                           root: str | None = None) -> Any:
    from sim.native.secondary_tier import NativeSecondaryTier
    return NativeSecondaryTier(*_tier_config(num_chunks, tier), bugs=target.bugs, root=root)


def _vllm_secondary_tier(target: Target, num_chunks: int, tier: str = "fs",
                         root: str | None = None) -> Any:
    from sim.vllm.secondary_tier import make_secondary_tier
    return make_secondary_tier(*_tier_config(num_chunks, tier), root)


def _scheduler_config(cache_size: int, token_budget: int, encoder_compute_budget: int,
                      read_ahead: int = 0, disable_chunked_mm_input: bool = False,
                      ec_cached_mm_hashes: Any = (), encoder_decoder: bool = False,
                      async_scheduling: bool = False, mamba_block_size: int = 0) -> dict:
    config = dict(cache_size=check_size("cache_size", cache_size),
                  token_budget=check_size("token_budget", token_budget),
                  encoder_compute_budget=check_size("encoder_compute_budget",
                                                    encoder_compute_budget),
                  read_ahead=check_size("read_ahead", read_ahead, minimum=0),
                  disable_chunked_mm_input=bool(disable_chunked_mm_input))
    if ec_cached_mm_hashes:        # only then: a target without a connector is not asked
        config["ec_cached_mm_hashes"] = frozenset(ec_cached_mm_hashes)
    if encoder_decoder:
        config["encoder_decoder"] = True
    if async_scheduling:           # only then: a target that cannot drive it says so
        config["async_scheduling"] = True
    if mamba_block_size:           # likewise
        config["mamba_block_size"] = check_size("mamba_block_size", mamba_block_size)
    return config


def _model_scheduler_pass(target: Target, **config: Any) -> Any:
    from models.scheduler_pass import SchedulerPassModel
    return SchedulerPassModel(**_scheduler_config(**config))


def _native_scheduler_pass(target: Target, **config: Any) -> Any:
    from sim.native.scheduler_pass import NativeSchedulerPass
    return NativeSchedulerPass(**_scheduler_config(**config), bugs=target.bugs)


def _vllm_scheduler_pass(target: Target, **config: Any) -> Any:
    from sim.vllm.scheduler_pass import VllmSchedulerPass
    return VllmSchedulerPass(**_scheduler_config(**config))


def _model_prefix_cache(target: Target, **config: Any) -> Any:
    from models.prefix_cache import PrefixCacheModel
    from sim.prefix_cache_config import prefix_cache_config
    return PrefixCacheModel(**prefix_cache_config(**config))


def _native_prefix_cache(target: Target, **config: Any) -> Any:
    from sim.native.prefix_cache import NativePrefixCache
    from sim.prefix_cache_config import prefix_cache_config
    return NativePrefixCache(**prefix_cache_config(**config), bugs=target.bugs)


def _vllm_prefix_cache(target: Target, **config: Any) -> Any:
    from sim.prefix_cache_config import prefix_cache_config
    from sim.vllm.prefix_cache import make_prefix_cache
    config = prefix_cache_config(**config)
    del config["uncached_first"]          # the release's own order (the target reports it)
    return make_prefix_cache(**config)


_FACTORIES: dict[tuple[str, str], Callable[..., Any]] = {
    ("model", "encoder_cache"): _model_encoder_cache,
    ("native", "encoder_cache"): _native_encoder_cache,
    ("vllm", "encoder_cache"): _vllm_encoder_cache,
    ("model", "encoder_decoder_cache"): _model_encoder_decoder_cache,
    ("native", "encoder_decoder_cache"): _native_encoder_decoder_cache,
    ("vllm", "encoder_decoder_cache"): _vllm_encoder_decoder_cache,
    ("model", "offload_engine"): _model_offload_engine,
    ("native", "offload_engine"): _native_offload_engine,
    ("model", "scheduler_pass"): _model_scheduler_pass,
    ("native", "scheduler_pass"): _native_scheduler_pass,
    ("vllm", "scheduler_pass"): _vllm_scheduler_pass,
    ("model", "tiered_lookup"): _model_tiered_lookup,
    ("native", "tiered_lookup"): _native_tiered_lookup,
    ("vllm", "tiered_lookup"): _vllm_tiered_lookup,
    ("model", "secondary_tier"): _model_secondary_tier,
    ("native", "secondary_tier"): _native_secondary_tier,
    ("vllm", "secondary_tier"): _vllm_secondary_tier,
    ("model", "prefix_cache"): _model_prefix_cache,
    ("native", "prefix_cache"): _native_prefix_cache,
    ("vllm", "prefix_cache"): _vllm_prefix_cache,
}


def make_drop_policy(name: str, policy: str = "throttled") -> Any:
    """A secondary tier's back-pressure drop policy (``models/backpressure.py``) of target
    ``name``: "drop" (DropStorePolicy) or "throttled" (ThrottledDropPolicy)."""
    base = parse_target(name).base
    if base == "model":
        from models.backpressure import DropPolicyModel
        return DropPolicyModel(policy)
    if base == "native":
        from sim.native.backpressure import NativeDropPolicy
        return NativeDropPolicy(policy)
    from sim.vllm.backpressure import VllmDropPolicy
    return VllmDropPolicy(policy)


def make_threaded_tier(name: str, unlocked: bool = False) -> Any:
    """A block tier callable from several threads (the linearizability test): ``native``
    (``unlocked``: its lock removed, the planted race) or vLLM's real file-system tier with
    its real I/O threads."""
    base = parse_target(name).base
    if base == "vllm":
        from sim.vllm.threaded_tier import VllmThreadedTier
        return VllmThreadedTier()
    from sim.native.threaded_tier import NativeThreadedTier
    return NativeThreadedTier(unlocked=unlocked)


def implemented_pairs() -> list[tuple[str, str]]:
    """(target base, subsystem) pairs that have an implementation, in a stable order."""
    return sorted(_FACTORIES)


def check_size(name: str, value: int, minimum: int = 1) -> int:
    if not isinstance(value, int) or value < minimum:
        raise HarnessError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return value


def make(name: str, subsystem: str, **config: Any) -> Any:
    """Build the ``subsystem`` implementation of target ``name`` with ``config``."""
    target = parse_target(name)
    if subsystem not in SUBSYSTEMS:
        raise HarnessError(f"unknown subsystem {subsystem!r}; known: {', '.join(SUBSYSTEMS)}")
    if target.bug and subsystem not in target.bug_subsystems:
        raise HarnessError(f"bug {target.bug!r} belongs to the "
                           f"{' and '.join(target.bug_subsystems)} subsystem, "
                           f"not {subsystem}")
    factory = _FACTORIES.get((target.base, subsystem))
    if factory is None:
        raise HarnessError(f"target {target.base!r} has no {subsystem} implementation yet")
    if "cache_size" in config:
        check_size("cache_size", config["cache_size"])
    if target.base != "vllm":
        return factory(target, **config)
    try:
        return factory(target, **config)
    except HarnessError:
        raise
    except Exception as error:  # noqa: BLE001 - the adapter cannot build it on this release
        from sim.outcomes import classify
        verdict = classify(error)
        raise AdapterError(f"building the vllm {subsystem} ({_config_text(config)}) failed: "
                           f"{verdict.detail} (at {verdict.where})") from error


def _config_text(config: dict) -> str:
    return ", ".join(f"{k}={v!r}" for k, v in config.items())
