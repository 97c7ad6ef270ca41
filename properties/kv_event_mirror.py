"""What a consumer of vLLM's KV cache events (a router, a gateway) believes the cache holds,
replayed from the events alone: each ``BlockStored`` adds its prefixes to its group, each
``BlockRemoved`` takes them away, ``AllBlocksCleared`` empties it.

The promise checked (``events-claim-only-cached``): the consumer never believes a prefix is
cached that the pool does not cache. The other direction is not promised: vLLM reports a
block's removal per block, so where two blocks cached one prefix (two requests computed it
side by side) and one is evicted, the consumer forgets a prefix still cached; that costs a
router a hit it could have had, never a wrong one.

Events are vLLM's own objects, read by their class names and fields (``block_hashes``,
``group_idx``), so this module imports neither vLLM nor torch."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any


class EventMirror:
    """The prefixes the events claim cached, as (group index, hash as the events carry it)."""

    def __init__(self) -> None:
        self.claimed: set[tuple[int, Any]] = set()

    def apply(self, events: Iterable[Any]) -> None:
        for event in events:
            kind = type(event).__name__
            if kind == "BlockStored":
                self.claimed.update((event.group_idx or 0, h) for h in event.block_hashes)
            elif kind == "BlockRemoved":
                self.claimed.difference_update((event.group_idx or 0, h)
                                               for h in event.block_hashes)
            elif kind == "AllBlocksCleared":
                self.claimed.clear()

    def not_cached(self, cached: set[tuple[int, Any]]) -> set[tuple[int, Any]]:
        """What the events claim and the pool does not cache."""
        return self.claimed - cached
