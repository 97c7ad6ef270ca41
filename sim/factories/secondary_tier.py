"""The secondary tier's target factories (``sim/manifests/secondary_tier.py`` names them)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sim.errors import HarnessError
from sim.sizes import check_size

if TYPE_CHECKING:
    from sim.targets import Target


def _tier_config(num_chunks: int, tier: str) -> tuple[int, str]:
    from models.secondary_tier import TIERS
    if tier not in TIERS:
        raise HarnessError(f"tier must be one of {', '.join(TIERS)}, got {tier!r}")
    return check_size("num_chunks", num_chunks), tier


def make_model(target: Target, num_chunks: int, tier: str = "fs",
               store_marks_present: bool = False) -> Any:
    """``store_marks_present``: vLLM 0.34.0's meaning (a reproducer recorded on it passes
    it to the model alone)."""
    from models.secondary_tier import SecondaryTierModel
    return SecondaryTierModel(*_tier_config(num_chunks, tier),
                              store_marks_present=store_marks_present)


def make_native(target: Target, num_chunks: int, tier: str = "fs",
                root: str | None = None) -> Any:
    from sim.native.secondary_tier import NativeSecondaryTier
    return NativeSecondaryTier(*_tier_config(num_chunks, tier), bugs=target.bugs, root=root)


def make_vllm(target: Target, num_chunks: int, tier: str = "fs",
              root: str | None = None) -> Any:
    from sim.vllm.secondary_tier import make_secondary_tier
    return make_secondary_tier(*_tier_config(num_chunks, tier), root)
