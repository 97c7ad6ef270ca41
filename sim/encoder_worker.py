"""The worker side of the encoder cache: encoder outputs as real tensors on the device.

Plays the part of vLLM's ``GPUModelRunner.encoder_cache`` (which needs a GPU and a model):
each step it (1) deletes the tensors named in ``free_encoder_mm_hashes``, (2) encodes the
scheduled items, (3) gathers the embeddings a scheduled token needs. A missing hash in (3) is
the engine-killing "Encoder cache miss". An item's output is a pure function of its hash, so a
gathered tensor can be checked exactly on any device.
"""

from __future__ import annotations

import functools
import hashlib

import torch

from models.encoder_cache_values import MmItem
from sim.device import pick_device

HIDDEN_SIZE = 4


class EncoderCacheMiss(RuntimeError):
    pass


@functools.lru_cache(maxsize=4096)
def encoder_output(item: MmItem, device: torch.device) -> torch.Tensor:
    """Deterministic stand-in for the vision encoder: rows distinct per (hash, row). Cached:
    callers must not write into the returned tensor (the worker stores clones)."""
    base = int.from_bytes(hashlib.sha256(item.mm_hash.encode()).digest()[:3], "big")
    rows = torch.arange(item.num_embeds * HIDDEN_SIZE, dtype=torch.float64, device=device)
    return (rows + float(base) * 1024.0).reshape(item.num_embeds, HIDDEN_SIZE)


def misread_rows(target, reads: list[tuple[MmItem, int, int]]) -> list[str]:
    """What ``target``'s last step gathered wrongly: one line per gathered tensor that is not
    rows ``[start, end)`` of its item's encoder output, ``reads`` naming the item and rows of
    each tensor in order (a count that differs is one line too). A reproducer asserts it
    empty after each step that gathers (``gathered-equals-encoded``). A target with no worker
    (the model) gathers no tensors: its rows are the step's ``gathered`` ranges."""
    tensors = getattr(target, "last_gathered_tensors", None)
    if tensors is None:
        return []
    if len(tensors) != len(reads):
        return [f"{len(tensors)} tensors gathered for {len(reads)} reads"]
    device = target.worker.device
    return [f"{item.mm_hash} rows {start}:{end} differ from the encoder's output"
            for (item, start, end), got in zip(reads, tensors, strict=True)
            if not got.equal(encoder_output(item, device)[start:end])]


class EncoderWorker:
    def __init__(self, device: torch.device | None = None):
        self.device = device or pick_device()
        self.encoder_cache: dict[str, torch.Tensor] = {}
        self.encoded_count = 0

    def free(self, free_encoder_mm_hashes: list[str]) -> None:
        for mm_hash in free_encoder_mm_hashes:
            self.encoder_cache.pop(mm_hash, None)

    def encode(self, item: MmItem) -> None:
        self.encoder_cache[item.mm_hash] = encoder_output(item, self.device).clone()
        self.encoded_count += 1

    def load(self, item: MmItem) -> None:
        """An encoder-cache connector's load: the output another instance encoded (the same
        function of the hash), stored without running the encoder here."""
        self.encoder_cache[item.mm_hash] = encoder_output(item, self.device).clone()

    def gather(self, item: MmItem, start: int = 0, end: int | None = None) -> torch.Tensor:
        out = self.encoder_cache.get(item.mm_hash)
        if out is None:
            raise EncoderCacheMiss(f"Encoder cache miss for {item.mm_hash}")
        return out[start:end]

    def resident_hashes(self) -> set[str]:
        return set(self.encoder_cache)
