"""Worlds for the secondary-tier machine: a primary of 2-4 chunks, the tier (vLLM's
file-system tier on real files, or the example in-memory tier), keys from a pool two larger
than the primary, and whether the machine may arm faults and damage files."""

from __future__ import annotations

from attrs import frozen
from hypothesis import strategies as st

from models.secondary_tier import TIERS


@frozen
class TierWorld:
    num_chunks: int
    tier: str                   # "fs" | "example"
    faults: bool                # arm os faults, lose and truncate files (fs only)

    def config(self) -> dict:
        return {"num_chunks": self.num_chunks, "tier": self.tier}

    @property
    def keys(self) -> tuple[int, ...]:
        return tuple(range(self.num_chunks + 2))


@st.composite
def tier_worlds(draw):
    # The file-system tier in three worlds of four: it has the jobs, the probes and the disk.
    tier = draw(st.sampled_from([*TIERS, TIERS[0], TIERS[0]]))
    # Faults are drawn in three worlds of four: a fault-free world still has to show that
    # nothing is lost without a fault.
    faults = tier == "fs" and draw(st.integers(0, 3)) > 0
    return TierWorld(draw(st.integers(2, 4)), tier, faults)
