"""``hit-is-longest-cached``: a hybrid Mamba model's prefix-cache lookup returns the longest
hit the pool's cached set serves (``models/prefix_cache_hybrid_hit.py``), no longer and no
shorter, within its cap. Reads a recorded lookup (``sim/vllm/hybrid_world.py``: ``Lookup``),
so it imports neither vLLM nor torch. ``kept-state-cached``: where a prompt's chunk ends on
a state the cache keeps, a repeat of the prompt is served up to there (the first check
alone holds of a pool that caches nothing)."""

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


KEPT = "kept-state-cached"


def replay_boundary(keys: Sequence[Any], prompt_tokens: int, unit: int) -> int:
    """The longest prefix a repeat of the prompt may hit, in tokens: on a key's end, below
    the prompt's last token (whose logits a repeat must compute)."""
    return unit * min((prompt_tokens - 1) // unit, len(keys))


def check_kept_state(request_id: str, keys: Sequence[Any], position: int, cached: Any,
                     block: int, *, full_groups: Sequence[int], state_groups: Sequence[int],
                     unit: int | None = None, name: Callable[[Any], str] = str) -> None:
    """At the step ``request_id``'s prompt chunk ends on ``position``, a state the cache keeps
    (``keeps_state_at``), a repeat of the prompt is served up to there in every group.
    ``keys``: the prompt's, one per ``unit`` tokens. (Later the state may be evicted: the
    request moves past it.)"""
    unit = unit or block
    got = unit * longest_hit(keys, cached, full_groups=full_groups, state_groups=state_groups,
                             cap_units=position // unit, units_per_block=block // unit)
    holds(KEPT, got == position, lambda: (
        f"{request_id}'s prompt chunk ended on {position}, where the cache keeps the state, "
        f"and a repeat of the prompt is served {got} tokens; cached of its prefixes: "
        + ", ".join(f"group {g} {name(key)}" for g, key in sorted(
            (g, key) for g, key in cached if key in keys))))
