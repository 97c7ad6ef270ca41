"""Offload engine data plane: the CPU pool, the GPU ring slots and the decode buffer as real
tensors, and the copies between them (``specs/offload-engine.md`` sections 1 and 5).

``cpu[L, C, B, D]`` (pinned on CUDA) is the primary store; ``slots[N, B, D]`` (no layer
dimension, reused by every layer) and ``dbuf[L, B, D]`` live on the device. Rows hold one KV
value broadcast over D, int64, so comparisons are exact on every device.

Async mode (CUDA only): loads run on a load stream and offloads on a store stream; events keep
invariant I8: a load into a slot waits for the slot's last reader and pending store, a store
waits for the write it copies, a reader waits for the load or write it reads, a load of a CPU
block waits for the last store into it. Without async mode every copy is synchronous.
"""

from __future__ import annotations

import torch

HEAD_DIM = 2


class OffloadData:
    def __init__(self, num_layers: int, num_cpu_blocks: int, block_size: int, num_slots: int,
                 device: torch.device, async_mode: bool = False):
        cuda = device.type == "cuda"
        self.device = device
        self.cpu = torch.zeros((num_layers, num_cpu_blocks, block_size, HEAD_DIM),
                               dtype=torch.int64, pin_memory=cuda)
        self.slots = torch.zeros((num_slots, block_size, HEAD_DIM), dtype=torch.int64,
                                 device=device)
        self.dbuf = torch.zeros((num_layers, block_size, HEAD_DIM), dtype=torch.int64,
                                device=device)
        self.async_mode = async_mode and cuda
        if self.async_mode:
            self.load_stream, self.store_stream = torch.cuda.Stream(), torch.cuda.Stream()
            self._events: dict[tuple, torch.cuda.Event] = {}

    # -- I8: stream/event discipline (no-ops when synchronous) ------------------------------

    def _record(self, key: tuple, stream=None) -> None:
        if self.async_mode:
            event = self._events.setdefault(key, torch.cuda.Event())
            event.record(stream or torch.cuda.current_stream())

    def _wait(self, stream, *keys: tuple) -> None:
        if self.async_mode:
            for key in keys:
                if key in self._events:
                    (stream or torch.cuda.current_stream()).wait_event(self._events[key])

    def _on(self, stream):
        return torch.cuda.stream(stream) if self.async_mode else _NoStream()

    def synchronize(self) -> None:
        if self.async_mode:
            torch.cuda.synchronize(self.device)

    # -- ring slots -------------------------------------------------------------------------

    def load(self, slot: int, layer: int, cpu_block: int) -> None:
        """CPU block -> slot (H2D)."""
        stream = self.load_stream if self.async_mode else None
        self._wait(stream, ("read", slot), ("stored", slot), ("cpu", layer, cpu_block))
        with self._on(stream):
            self.slots[slot].copy_(self.cpu[layer, cpu_block], non_blocking=self.async_mode)
        self._record(("ready", slot), stream)

    def write_slot(self, slot: int, values: list[int]) -> None:
        """A prefill chunk's freshly computed KV into rows 0..n of a slot."""
        self._wait(None, ("stored", slot), ("ready", slot))
        rows = torch.tensor(values, dtype=torch.int64).unsqueeze(1).expand(-1, HEAD_DIM)
        self.slots[slot, :len(values)].copy_(rows)
        self._record(("ready", slot))

    def read_slot(self, slot: int, num_rows: int) -> torch.Tensor:
        self._wait(None, ("ready", slot))
        out = self.slots[slot, :num_rows].clone()
        self._record(("read", slot))
        return out

    def store_slot(self, slot: int, layer: int, cpu_block: int, start: int, stop: int) -> None:
        """Rows [start, stop) of a slot -> the same rows of a CPU block (D2H)."""
        stream = self.store_stream if self.async_mode else None
        self._wait(stream, ("ready", slot))
        self._copy_to_cpu(stream, layer, cpu_block, start, stop, self.slots[slot])
        self._record(("stored", slot), stream)

    # -- decode buffer ----------------------------------------------------------------------

    def write_dbuf(self, layer: int, row: int, value: int) -> None:
        self._wait(None, ("dbuf-stored", layer))
        self.dbuf[layer, row].fill_(value)

    def read_dbuf(self, layer: int, start: int, stop: int) -> torch.Tensor:
        return self.dbuf[layer, start:stop].clone()

    def stage_dbuf(self, layer: int, slot: int) -> None:
        """Copy a layer's decode buffer into a ring slot (the aliasing path of bug 5)."""
        self._wait(None, ("stored", slot))
        self.slots[slot].copy_(self.dbuf[layer])
        self._record(("ready", slot))

    def offload_dbuf(self, layer: int, cpu_block: int, start: int, stop: int) -> None:
        """Rows [start, stop) of a layer's decode buffer -> its CPU block (block full)."""
        stream = self.store_stream if self.async_mode else None
        self._record(("dbuf-written", layer))
        self._wait(stream, ("dbuf-written", layer))
        self._copy_to_cpu(stream, layer, cpu_block, start, stop, self.dbuf[layer])
        self._record(("dbuf-stored", layer), stream)

    def _copy_to_cpu(self, stream, layer: int, cpu_block: int, start: int, stop: int,
                     rows: torch.Tensor) -> None:
        """Rows [start, stop) of ``rows`` (a slot or a decode buffer) -> the CPU block."""
        with self._on(stream):
            self.cpu[layer, cpu_block, start:stop].copy_(rows[start:stop],
                                                          non_blocking=self.async_mode)
        self._record(("cpu", layer, cpu_block), stream)

    # -- inspection and clearing ------------------------------------------------------------

    def cpu_rows(self, layer: int, cpu_block: int, num_rows: int) -> torch.Tensor:
        self.synchronize()
        return self.cpu[layer, cpu_block, :num_rows]

    def zero(self, cpu_blocks: list[int], scratch: bool) -> None:
        """Clear freed CPU blocks, and the slots and dbuf if ``scratch`` (the residue 'fix'
        that fixes nothing)."""
        self.synchronize()
        for block in cpu_blocks:
            self.cpu[:, block].zero_()
        if scratch:
            self.slots.zero_()
            self.dbuf.zero_()
            for slot in range(self.slots.shape[0]):   # a later load waits for the zeroing
                self._record(("read", slot))


class _NoStream:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False
