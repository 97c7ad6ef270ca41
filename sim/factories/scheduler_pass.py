"""The scheduler pass's target factories (``sim/manifests/scheduler_pass.py`` names them)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sim.sizes import check_size

if TYPE_CHECKING:
    from sim.targets import Target


def _scheduler_config(cache_size: int, token_budget: int, encoder_compute_budget: int,
                      read_ahead: int = 0, disable_chunked_mm_input: bool = False,
                      ec_cached_mm_hashes: Any = (), encoder_decoder: bool = False,
                      async_scheduling: bool = False, mamba_block_size: int = 0,
                      kv_blocks: int = 0, enable_prefix_caching: bool = False,
                      reserve_full_isl: bool = True, watermark: float = 0.0) -> dict:
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
    if kv_blocks:                  # likewise
        config["kv_blocks"] = check_size("kv_blocks", kv_blocks)
    if enable_prefix_caching:      # likewise
        config["enable_prefix_caching"] = True
    if not reserve_full_isl:       # the admission gate off (vLLM's default: on)
        config["reserve_full_isl"] = False
    if watermark:                  # the pool's share admissions leave free (vLLM's: 0)
        if not 0.0 <= watermark < 1.0:
            raise ValueError(f"watermark={watermark!r}: give a share of the pool in [0, 1)")
        config["watermark"] = float(watermark)
    return config


def make_model(target: Target, **config: Any) -> Any:
    from models.scheduler_pass import SchedulerPassModel
    return SchedulerPassModel(**_scheduler_config(**config))


def make_native(target: Target, **config: Any) -> Any:
    from sim.native.scheduler_pass import NativeSchedulerPass
    return NativeSchedulerPass(**_scheduler_config(**config), bugs=target.bugs)


def make_vllm(target: Target, **config: Any) -> Any:
    from sim.vllm.scheduler_pass import VllmSchedulerPass
    return VllmSchedulerPass(**_scheduler_config(**config))
