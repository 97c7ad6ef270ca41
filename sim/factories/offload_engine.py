"""The offload engine's target factories (``sim/manifests/offload_engine.py`` names them)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sim.sizes import check_size

if TYPE_CHECKING:
    from sim.targets import Target


def _offload_sizes(block_size: int, num_slots: int, num_layers: int,
                   num_cpu_blocks: int) -> tuple[int, int, int, int]:
    return (check_size("block_size", block_size), check_size("num_slots", num_slots),
            check_size("num_layers", num_layers), check_size("num_cpu_blocks", num_cpu_blocks))


def make_model(target: Target, block_size: int, num_slots: int, num_layers: int,
               num_cpu_blocks: int, async_mode: bool = False,
               copy_delay_cycles: dict[str, int] | None = None) -> Any:
    # The model has no device: async copies and delays do not change what it answers.
    from models.offload_engine import OffloadEngineModel
    return OffloadEngineModel(*_offload_sizes(block_size, num_slots, num_layers,
                                              num_cpu_blocks))


def make_native(target: Target, block_size: int, num_slots: int, num_layers: int,
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
