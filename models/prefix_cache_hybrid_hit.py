"""A hybrid Mamba model's prefix hit, from what the pool caches (vLLM's align mode).

Keys name prefixes that end on a multiple of the key unit (``prefix_match_unit``: the block,
or a divisor of it). A full-attention group serves a prefix only if it holds every token of
it: the key of each whole block inside the prefix, and, where the prefix ends inside a
block, a key of the request's that ends in that block no earlier than the prefix (the block
cached up to there or further: its first tokens are the prefix's). A Mamba group keeps one
state per cached prefix, the model's state after that prefix's last token, and needs only
that one: the prefix's own key. So a prefix of ``m`` units is a hit exactly when every
full-attention group caches the keys of its whole blocks and its own key, and every Mamba
group caches its own key; the hit is the longest such prefix within the lookup's cap.
Nothing here searches the way vLLM's coordinator does (each group in turn, to a fixed
point): the hit is read off the cached set.
"""

from __future__ import annotations

from collections.abc import Container, Sequence
from typing import Any


def longest_hit(prefixes: Sequence[Any], cached: Container[tuple[int, Any]], *,
                full_groups: Sequence[int], state_groups: Sequence[int], cap_units: int,
                units_per_block: int = 1) -> int:
    """Units in the longest hit: ``prefixes[i]`` is the key of the request's first ``i + 1``
    units, ``cached`` holds (group, key) pairs, ``cap_units`` bounds the hit."""
    def served(m: int) -> bool:
        last = (m - 1) // units_per_block            # the block the prefix ends in
        inside = range(units_per_block - 1, last * units_per_block, units_per_block)
        tail = range(m - 1, min((last + 1) * units_per_block, len(prefixes)))
        full = all(all((g, prefixes[e]) in cached for e in inside)
                   and any((g, prefixes[e]) in cached for e in tail) for g in full_groups)
        return full and all((g, prefixes[m - 1]) in cached for g in state_groups)
    return max((m for m in range(1, min(cap_units, len(prefixes)) + 1) if served(m)),
               default=0)


def keeps_state_at(position: int, boundary: int, block: int,
                   retention_interval: int | None) -> bool:
    """Whether the prefix cache keeps the Mamba state a prompt's chunk computed at
    ``position`` (a chunk ends there): at the prompt's replay ``boundary`` always (a repeat of
    the prompt resumes there); below it, at a block's end, every one under dense retention
    (``retention_interval`` None), one per ``retention_interval`` tokens under a positive
    one, and none other under 0 (vLLM's default: the boundary, and junctions of prefixes
    shared across requests, which are not asserted here)."""
    if position == boundary:
        return position > 0
    if not 0 < position < boundary or position % block:
        return False
    return retention_interval is None or bool(retention_interval) and \
        position % retention_interval == 0


def may_keep_state_at(position: int, prompt_tokens: int, block: int, unit: int,
                      retention_interval: int | None, junction: int = 0) -> bool:
    """Whether sparse retention may keep the Mamba state a request computed at ``position``
    (the converse bound of ``keeps_state_at``): dense retention (None) keeps every one;
    otherwise only a state a later request can resume at. That is a multiple of a positive
    interval, or where a repeat or an extension of the prompt can stop: its replay boundary
    (below its last token), on a block's end or a key unit's, or one block or one unit below
    it, or below its whole length (a drafter drops its hit back by one); or the request's
    ``junction``, where at its lookup full attention alone would have served more than the
    Mamba state let it (a sibling diverging there resumes at it), on the block's end below
    it or one block lower, or at it. An over-approximation: it flags a state kept where no
    later request can resume, never one vLLM has reason to keep."""
    if retention_interval is None or retention_interval and position % retention_interval == 0:
        return True
    reachable = set()
    for step in (block, unit):
        replay, whole = (prompt_tokens - 1) // step * step, prompt_tokens // step * step
        reachable |= {replay, replay - step, whole - step}
    if junction:
        reachable |= {junction // block * block, junction // block * block - block, junction}
    return position in reachable
