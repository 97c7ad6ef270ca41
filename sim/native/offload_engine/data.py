"""Offload engine data plane: the CPU pool, the GPU ring slots and the decode buffer as real
tensors, and the copies between them (``docs/specs/offload-engine.md``).

``cpu[L, C, B, D]`` (pinned on CUDA) is the primary store; ``slots[N, B, D]`` (no layer
dimension, reused by every layer) and ``dbuf[L, B, D]`` live on the device. Rows hold one KV
value broadcast over D, int64, so comparisons are exact on every device.

Async mode: loads run on a load stream and offloads on a store stream; events keep slot
ownership (``docs/specs/offload-engine.md``): a load into a slot waits for the slot's last
reader and pending store, a store waits for the write it copies, a reader waits for the load
or write it reads, a load of a CPU block waits for the last store into it, a decode write
waits for the offload of the row it overwrites. On CUDA the streams are real
(``CudaStreams``, with drawn delays); on CPU they are the simulated device's queues
(``SimStreams``). Without async mode every copy is synchronous.
Every tensor op goes through ``self.streams.enqueue``, so on the simulated device a copy runs
only when the machine or a host read needs it.

Race switches (``sim/native/bugs.py``), each one missing wait of slot ownership, off
by default:

- ``offload-race-read-before-load``: a slot read does not wait for the load into the slot.
- ``offload-race-slot-reuse``: a load or a write into a slot does not wait for the slot's
  pending store, so it overwrites rows the store has not copied yet.
- ``offload-race-dbuf-overwrite``: a decode write does not wait for the block-full offload of
  the decode buffer, so the next token's row can reach the CPU block instead of the old one.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

from sim.native.offload_engine.streams import CudaStreams, SimStreams, SyncStreams

HEAD_DIM = 2
READ_BEFORE_LOAD = "offload-race-read-before-load"
SLOT_REUSE = "offload-race-slot-reuse"
DBUF_OVERWRITE = "offload-race-dbuf-overwrite"
RACE_SWITCHES = (READ_BEFORE_LOAD, SLOT_REUSE, DBUF_OVERWRITE)


class OffloadData:
    def __init__(self, num_layers: int, num_cpu_blocks: int, block_size: int, num_slots: int,
                 device: torch.device, async_mode: bool = False,
                 bugs: frozenset[str] = frozenset(), delays: Mapping[str, int] | None = None):
        cuda = device.type == "cuda"
        self.device = device
        self.bugs = bugs
        self.cpu = torch.zeros((num_layers, num_cpu_blocks, block_size, HEAD_DIM),
                               dtype=torch.int64, pin_memory=cuda)
        self.slots = torch.zeros((num_slots, block_size, HEAD_DIM), dtype=torch.int64,
                                 device=device)
        self.dbuf = torch.zeros((num_layers, block_size, HEAD_DIM), dtype=torch.int64,
                                device=device)
        self.async_mode = async_mode
        if not async_mode:
            self.streams = SyncStreams()
        elif cuda:
            self.streams = CudaStreams(delays)
        else:
            self.streams = SimStreams()
        self.compute = self.streams.compute
        self.load_stream = self.streams.stream("load") if async_mode else self.compute
        self.store_stream = self.streams.stream("store") if async_mode else self.compute
        self._events: dict[tuple, object] = {}
        self._non_blocking = async_mode and cuda

    # -- slot ownership: stream/event discipline (no-ops when synchronous) ------------------

    def _record(self, key: tuple, stream=None) -> None:
        if self.async_mode:
            event = self._events.setdefault(key, self.streams.event())
            self.streams.record(event, self.compute if stream is None else stream)

    def _wait(self, stream, *keys: tuple) -> None:
        for key in keys:
            if key in self._events:
                self.streams.wait(self.compute if stream is None else stream, self._events[key])

    def _copy(self, stream, dst: torch.Tensor, src: torch.Tensor, label: str) -> None:
        self.streams.enqueue(self.compute if stream is None else stream,
                             lambda: dst.copy_(src, non_blocking=self._non_blocking), label)

    def synchronize(self) -> None:
        self.streams.synchronize()

    def results(self, rows: list[torch.Tensor]) -> list[torch.Tensor]:
        """Rows read on the compute stream, now visible to the host."""
        self.streams.host_sync()
        return rows

    # -- ring slots -------------------------------------------------------------------------

    def load(self, slot: int, layer: int, cpu_block: int) -> None:
        """CPU block -> slot (H2D)."""
        stream = self.load_stream
        waits = [("read", slot), ("cpu", layer, cpu_block)]
        if SLOT_REUSE not in self.bugs:
            waits.append(("stored", slot))
        self._wait(stream, *waits)
        self._copy(stream, self.slots[slot], self.cpu[layer, cpu_block],
                   f"load cpu[{layer},{cpu_block}] -> slot {slot}")
        self._record(("ready", slot), stream)

    def write_slot(self, slot: int, values: list[int]) -> None:
        """A prefill chunk's freshly computed KV into rows 0..n of a slot."""
        self._wait(None, ("ready", slot), *(() if SLOT_REUSE in self.bugs else (("stored", slot),)))
        rows = torch.tensor(values, dtype=torch.int64).unsqueeze(1).expand(-1, HEAD_DIM)
        self._copy(None, self.slots[slot, :len(values)], rows.to(self.device),
                   f"write slot {slot}")
        self._record(("ready", slot))

    def read_slot(self, slot: int, num_rows: int) -> torch.Tensor:
        if READ_BEFORE_LOAD not in self.bugs:
            self._wait(None, ("ready", slot))
        out = torch.empty_like(self.slots[slot, :num_rows])
        self._copy(None, out, self.slots[slot, :num_rows], f"read slot {slot}")
        self._record(("read", slot))
        return out

    def store_slot(self, slot: int, layer: int, cpu_block: int, start: int, stop: int) -> None:
        """Rows [start, stop) of a slot -> the same rows of a CPU block (D2H)."""
        self._wait(self.store_stream, ("ready", slot))
        self._copy_to_cpu(layer, cpu_block, start, stop, self.slots[slot], f"slot {slot}")
        self._record(("stored", slot), self.store_stream)

    # -- decode buffer ----------------------------------------------------------------------

    def write_dbuf(self, layer: int, row: int, value: int) -> None:
        if DBUF_OVERWRITE not in self.bugs:
            self._wait(None, ("dbuf-stored", layer))
        target = self.dbuf[layer, row]
        self.streams.enqueue(self.compute, lambda: target.fill_(value),
                             f"write dbuf[{layer},{row}]")

    def read_dbuf(self, layer: int, start: int, stop: int) -> torch.Tensor:
        out = torch.empty_like(self.dbuf[layer, start:stop])
        self._copy(None, out, self.dbuf[layer, start:stop], f"read dbuf[{layer}]")
        return out

    def stage_dbuf(self, layer: int, slot: int) -> None:
        """Copy a layer's decode buffer into a ring slot (``offload-layer-alias``'s path)."""
        self._wait(None, ("stored", slot))
        self._copy(None, self.slots[slot], self.dbuf[layer], f"stage dbuf[{layer}]")
        self._record(("ready", slot))

    def offload_dbuf(self, layer: int, cpu_block: int, start: int, stop: int) -> None:
        """Rows [start, stop) of a layer's decode buffer -> its CPU block (block full)."""
        self._record(("dbuf-written", layer))
        self._wait(self.store_stream, ("dbuf-written", layer))
        self._copy_to_cpu(layer, cpu_block, start, stop, self.dbuf[layer], f"dbuf[{layer}]")
        self._record(("dbuf-stored", layer), self.store_stream)

    def _copy_to_cpu(self, layer: int, cpu_block: int, start: int, stop: int,
                     rows: torch.Tensor, what: str) -> None:
        """Rows [start, stop) of ``rows`` (a slot or a decode buffer) -> the CPU block."""
        self._copy(self.store_stream, self.cpu[layer, cpu_block, start:stop], rows[start:stop],
                   f"store {what} rows {start}..{stop - 1} -> cpu[{layer},{cpu_block}]")
        self._record(("cpu", layer, cpu_block), self.store_stream)

    # -- inspection and clearing ------------------------------------------------------------

    def settled_cpu(self) -> torch.Tensor:
        """The CPU pool once every queued copy has landed. On the simulated device this is a
        look ahead that leaves the queues as they were (a check must not run the copies it
        is checking, or no store would ever be pending across calls); elsewhere it
        synchronizes."""
        if not self.streams.simulated:
            self.synchronize()
            return self.cpu
        device, tensors = self.streams.device, (self.cpu, self.slots, self.dbuf)
        saved, state = [t.clone() for t in tensors], device.snapshot()
        device.synchronize()
        settled = self.cpu.clone()
        for tensor, old in zip(tensors, saved, strict=True):
            tensor.copy_(old)
        device.restore(state)
        return settled

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

    # -- the simulated device, for the machine (empty unless async on CPU) ----------------

    def copy_streams(self) -> list[str]:
        """Side streams whose next op could run now (simulated device only)."""
        return self.streams.device.pending_copies() if self.streams.simulated else []

    def run_copies(self, stream: str, count: int) -> int:
        return self.streams.device.run(stream, count) if self.streams.simulated else 0

    def device_stats(self) -> dict[str, int]:
        return dict(self.streams.device.stats) if self.streams.simulated else {}
