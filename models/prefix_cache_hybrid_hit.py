"""A hybrid Mamba model's prefix hit, from what the pool caches (vLLM's align mode).

A full-attention group serves a prefix only if it caches every block of it: the keys of the
prefix's first block, first two blocks, and so on to the whole. A Mamba group keeps one
state per cached prefix, the model's state after that prefix's last token, and needs only
that one. So a prefix of ``k`` blocks is a hit exactly when every full-attention group caches
the keys of its first ``1 .. k`` blocks and every Mamba group caches the key of all ``k``; the
hit is the longest such prefix within the lookup's cap. Nothing here searches the way vLLM's
coordinator does (each group in turn, to a fixed point): the hit is read off the cached set.
"""

from __future__ import annotations

from collections.abc import Container, Sequence
from typing import Any


def longest_hit(prefixes: Sequence[Any], cached: Container[tuple[int, Any]], *,
                full_groups: Sequence[int], state_groups: Sequence[int],
                cap_blocks: int) -> int:
    """Blocks in the longest hit: ``prefixes[i]`` is the key of the request's first ``i + 1``
    blocks, ``cached`` holds (group, key) pairs, ``cap_blocks`` bounds the hit."""
    def served(k: int) -> bool:
        whole = all((g, key) in cached for g in full_groups for key in prefixes[:k])
        return whole and all((g, prefixes[k - 1]) in cached for g in state_groups)
    return max((k for k in range(1, min(cap_blocks, len(prefixes)) + 1) if served(k)),
               default=0)
