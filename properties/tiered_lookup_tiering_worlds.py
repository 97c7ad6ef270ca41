"""Worlds for the tiered lookup's tiering machine: a primary that never evicts (more chunks
than keys: eviction is the tiered-lookup machine's) under two harness-played secondary tiers,
each chunk-level or request-level and with or without a back-pressure detector, the first
one maybe polled between steps, each maybe holding keys from an earlier run (a persistent
tier: without them a promotion would need a reset first, the primary never evicting)."""

from __future__ import annotations

from attrs import evolve, frozen
from hypothesis import strategies as st

from models.tiered_lookup_values import TierSpec

NUM_CHUNKS = 8
KEYS = tuple(range(5))


@frozen
class TieringWorld:
    tiers: tuple[TierSpec, ...]
    num_chunks: int = NUM_CHUNKS

    def config(self) -> dict:
        return {"num_chunks": self.num_chunks, "tiers": self.tiers}


@st.composite
def tiering_worlds(draw) -> TieringWorld:
    request_level = draw(st.tuples(st.booleans(), st.booleans()))
    polled = draw(st.booleans())
    # Two in three tiers carry a detector: back-pressure drops need one and a failed store.
    detector = draw(st.tuples(*[st.sampled_from((True, True, False))] * 2))
    preloaded = draw(st.tuples(*[st.sets(st.sampled_from(KEYS), max_size=3)] * 2))
    return TieringWorld(tuple(TierSpec(f"t{i}", request_level[i], polled and i == 0,
                                       detector[i], preloaded[i]) for i in range(2)))


def simpler_worlds(world: TieringWorld, actions: list[tuple]):
    """For the minimizer: each tier plainer (chunk-level, not polled, no detector, holding
    fewer keys), one change at a time, the program kept."""
    for i, tier in enumerate(world.tiers):
        plainer = [evolve(tier, request_level=False), evolve(tier, polled=False),
                   evolve(tier, detector=False)]
        plainer += [evolve(tier, copies=tier.copies - {k}) for k in sorted(tier.copies)]
        for simpler in plainer:
            if simpler != tier:
                tiers = world.tiers[:i] + (simpler,) + world.tiers[i + 1:]
                yield evolve(world, tiers=tiers), actions
