"""Offload engine bookkeeping: logical blocks, the CPU pool's free list, prefilled blocks and
the per-sequence decode tracking (``docs/specs/offload-engine.md``).

Written the way the engine keeps it (deques, an inverse map, counters updated in place), not
the way the model computes it. Decode tracking is keyed by the sequence's *handle*, the
engine's stand-in for ``id(seq)``: handles are reused once a sequence is gone, as CPython
reuses ids. ``clear_tracking=False`` re-introduces ``offload-id-reuse``: deallocate leaves the
tracking entries behind, so a later sequence with the same handle, or the same sequence after
a preempt, inherits a stale decode start and prefill length.
"""

from __future__ import annotations

from collections import deque

from attrs import define, field


@define
class LogicalBlock:
    block_id: int
    cpu_block_id: int = -1
    ref_count: int = 0

    def reset(self) -> None:
        self.cpu_block_id, self.ref_count = -1, 0


@define
class Sequence:
    """What the engine holds per request (nano-vllm's ``Sequence``, cut down)."""

    seq_id: int
    handle: int
    num_tokens: int
    block_table: list[int] = field(factory=list)
    num_prefilled_tokens: int = 0
    writes: int = 0


class OffloadBlockManager:
    def __init__(self, num_cpu_blocks: int, block_size: int, clear_tracking: bool = True):
        self.block_size = block_size
        self.clear_tracking = clear_tracking
        self.blocks = [LogicalBlock(i) for i in range(num_cpu_blocks)]
        self.free_block_ids: deque[int] = deque(range(num_cpu_blocks))
        self.free_cpu_blocks: deque[int] = deque(range(num_cpu_blocks))
        self.cpu_to_logical: dict[int, int] = {}
        self.prefilled: set[int] = set()            # logical ids whose CPU rows decode reads
        self.decode_start_pos: dict[int, int] = {}  # handle -> first dbuf row of the open block
        self.prefill_len: dict[int, int] = {}       # handle -> positions valid on the CPU

    def _take(self) -> int:
        logical, cpu = self.free_block_ids.popleft(), self.free_cpu_blocks.popleft()
        block = self.blocks[logical]
        block.cpu_block_id, block.ref_count = cpu, 1
        self.cpu_to_logical[cpu] = logical
        return logical

    def can_allocate(self, seq: Sequence) -> bool:
        return len(self.free_cpu_blocks) >= -(-seq.num_tokens // self.block_size)

    def allocate(self, seq: Sequence) -> None:
        assert not seq.block_table, f"s{seq.seq_id} already allocated"
        seq.block_table = [self._take() for _ in range(-(-seq.num_tokens // self.block_size))]

    def can_append(self, seq: Sequence) -> bool:
        return (seq.num_tokens - 1) % self.block_size != 0 or len(self.free_cpu_blocks) >= 1

    def may_append(self, seq: Sequence) -> None:
        """Before decoding position len-1: a new block when that position starts one."""
        if (seq.num_tokens - 1) % self.block_size == 0 and \
                len(seq.block_table) * self.block_size < seq.num_tokens:
            seq.block_table.append(self._take())

    def deallocate(self, seq: Sequence) -> list[int]:
        """Drop the sequence's blocks; returns the CPU blocks freed."""
        freed = []
        for logical in reversed(seq.block_table):
            block = self.blocks[logical]
            block.ref_count -= 1
            if block.ref_count == 0:
                freed.append(block.cpu_block_id)
                del self.cpu_to_logical[block.cpu_block_id]
                self.free_cpu_blocks.append(block.cpu_block_id)
                self.free_block_ids.append(logical)
                self.prefilled.discard(logical)
                block.reset()
        seq.block_table.clear()
        seq.num_prefilled_tokens = 0
        if self.clear_tracking:
            self.clear_decode_tracking(seq)
        return freed

    def clear_decode_tracking(self, seq: Sequence) -> None:
        self.decode_start_pos.pop(seq.handle, None)
        self.prefill_len.pop(seq.handle, None)

    def cpu_block(self, logical: int) -> int:
        return self.blocks[logical].cpu_block_id

    def prefilled_blocks(self, seq: Sequence) -> list[int]:
        return [b for b in seq.block_table if b in self.prefilled]

    def check_valid(self) -> None:
        """Partition, inverse map, ref counts, reset free blocks (the resource promises)."""
        free_cpu, free_ids = set(self.free_cpu_blocks), set(self.free_block_ids)
        used = {b.block_id for b in self.blocks if b.ref_count > 0}
        assert len(free_cpu) == len(self.free_cpu_blocks), \
            "resource-partition: a CPU block is free twice"
        assert free_ids.isdisjoint(used) and free_ids | used == set(range(len(self.blocks))), \
            f"resource-partition: free ids {sorted(free_ids)} vs used {sorted(used)}"
        held = {self.blocks[b].cpu_block_id for b in used}
        assert free_cpu.isdisjoint(held) and len(free_cpu) + len(held) == len(self.blocks), \
            f"resource-partition: free CPU blocks {sorted(free_cpu)} vs held {sorted(held)}"
        assert self.cpu_to_logical == {self.blocks[b].cpu_block_id: b for b in used}, \
            "resource-partition: cpu->logical map is not the inverse of the block table"
        for b in free_ids:
            assert self.blocks[b] == LogicalBlock(b), f"resource-partition: free block {b} " \
                "not reset"
        assert self.prefilled <= used, "resource-partition: a free block is marked prefilled"
