"""A native in-memory block tier meant to be called from several threads at once (for the
linearizability test): ``store(key)`` writes a key's bytes into a block buffer it publishes
in an index, ``load(key)`` returns whose bytes the block holds, None if absent.

One lock covers the index and every block's bytes, so a load sees a block either not at all
or whole. The switch ``unlocked=True`` removes the lock (the planted race): a store publishes
its buffer and fills it in slices, yielding between them, so a concurrent load can read a
half-written block.
"""

from __future__ import annotations

import contextlib
import threading
import time

from models.secondary_tier_values import CHUNK_BYTES, holder, payload

SLICES = 8


class NativeThreadedTier:
    def __init__(self, unlocked: bool = False):
        self._blocks: dict[int, bytearray] = {}
        self._lock = contextlib.nullcontext() if unlocked else threading.Lock()

    def store(self, key: int) -> bool:
        data = payload(key)
        with self._lock:
            if key in self._blocks:
                return True
            block = self._blocks[key] = bytearray(CHUNK_BYTES)
            step = CHUNK_BYTES // SLICES
            for start in range(0, CHUNK_BYTES, step):
                block[start:start + step] = data[start:start + step]
                time.sleep(0)                 # another thread may run here
        return True

    def load(self, key: int) -> int | None:
        with self._lock:
            block = self._blocks.get(key)
            return None if block is None else holder(bytes(block))

    def close(self) -> None:
        pass
