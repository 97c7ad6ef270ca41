"""``hit-is-longest-cached``: a hybrid Mamba model's prefix-cache lookup returns the longest
hit the pool's cached set serves (``models/prefix_cache_hybrid_hit.py``), no longer and no
shorter, within its cap. Reads a recorded lookup (``sim/vllm/hybrid_world.py``: ``Lookup``),
so it imports neither vLLM nor torch."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from models.prefix_cache_hybrid_hit import longest_hit
from properties.scenarios import holds

HIT = "hit-is-longest-cached"


def check_lookup(lookup: Any, block: int, *, full_groups: Sequence[int],
                 state_groups: Sequence[int], unit: int | None = None,
                 name: Callable[[Any], str] = str) -> None:
    """``lookup``: request_id, prefixes (one key per ``unit`` tokens: the block's, unless
    given), cap_tokens, cached, hit_tokens. ``name`` shows a key."""
    unit = unit or block
    want = unit * longest_hit(lookup.prefixes, lookup.cached, full_groups=full_groups,
                              state_groups=state_groups, cap_units=lookup.cap_tokens // unit,
                              units_per_block=block // unit)
    holds(HIT, lookup.hit_tokens == want, lambda: (
        f"{lookup.request_id}'s lookup hit {lookup.hit_tokens} tokens where the pool served "
        f"{want} (cap {lookup.cap_tokens}); cached of its prefixes: " + ", ".join(
            f"group {g} {name(key)}" for g, key in sorted(
                (g, key) for g, key in lookup.cached if key in lookup.prefixes))))
