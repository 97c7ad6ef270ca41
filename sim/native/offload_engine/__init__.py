"""Native CPU-primary offload engine: chunked prefill and decode over real tensors.

Follows ``docs/specs/offload-engine.md``: prefill chunk c (B positions) writes its KV for
each layer into ring slot ``c % N``, attends over the earlier prefilled blocks loaded through
the slots, offloads the slot to the chunk's CPU block and marks the block prefilled. Decode
writes ``dbuf[l, pib]``, attends over the prefilled CPU blocks (rows up to the tracked prefill
length) plus ``dbuf[l, start:pib+1]``; when the block fills it is offloaded, marked prefilled,
the prefill length moves to its end and the start resets to 0. The fake attention returns the
values of the rows it read, in order, one list per layer.

Catalogued bugs (``sim/native/bugs.py``), each off by default:

- ``offload-id-reuse``: deallocate does not clear the decode tracking (keyed by the handle,
  nano-vllm's ``id(seq)``); a reused handle, or the same sequence after a preempt, inherits it.
- ``offload-partial-block``: the block-full offload copies all B rows of dbuf, clobbering the
  prompt's rows ``[0, P % B)`` that this sequence never wrote into dbuf.
- ``offload-dropped-decode``: a decode-filled block is offloaded but neither marked prefilled
  nor counted in the prefill length, so its tokens are never read again.
- ``offload-layer-alias``: each layer stages its decode buffer in ring slot 0 (no layer
  dimension) and the full block is offloaded from that slot for every layer after the forward
  pass: every layer's CPU block gets the last layer's KV.

Three more switches are missing event waits in the async data plane
(``offload-race-read-before-load``, ``offload-race-slot-reuse``,
``offload-race-dbuf-overwrite``): see ``data.py``. They matter only with ``async_mode``: on CPU
the simulated device of ``sim/sim_device.py``, on CUDA real streams with the run's drawn
``copy_delay_cycles``.

Not a bug switch: ``zero_on_deallocate`` clears freed CPU blocks, the ring slots and dbuf at
every deallocate. Residue (``docs/specs/offload-engine.md``) is the default and harmless
while starts are right; zeroing turns foreign rows into zero rows and fixes none of the bugs above.
"""

from __future__ import annotations

import torch

from models.offload_engine_values import kv_value
from sim.native.offload_engine.blocks import OffloadBlockManager, Sequence
from sim.native.offload_engine.data import OffloadData

ID_REUSE, PARTIAL_BLOCK = "offload-id-reuse", "offload-partial-block"
DROPPED_DECODE, LAYER_ALIAS = "offload-dropped-decode", "offload-layer-alias"


class NativeOffloadEngine:
    def __init__(self, block_size: int, num_slots: int, num_layers: int, num_cpu_blocks: int,
                 bugs: frozenset[str] = frozenset(), device: torch.device | None = None,
                 async_mode: bool = False, zero_on_deallocate: bool = False,
                 copy_delay_cycles: dict[str, int] | None = None):
        from sim.device import pick_device
        self.block_size, self.num_slots, self.num_layers = block_size, num_slots, num_layers
        self.bugs = bugs
        self.zero_on_deallocate = zero_on_deallocate
        self.manager = OffloadBlockManager(num_cpu_blocks, block_size,
                                           clear_tracking=ID_REUSE not in bugs)
        self.data = OffloadData(num_layers, num_cpu_blocks, block_size, num_slots,
                                device or pick_device(), async_mode, bugs=bugs,
                                delays=copy_delay_cycles)
        self.seqs: dict[int, Sequence] = {}

    # -- requests ---------------------------------------------------------------------------

    def add_request(self, uid: int, prompt_len: int, handle: int | None = None) -> None:
        """A new sequence object; its tracking key is ``handle``, or its ``id()`` if None."""
        seq = Sequence(uid, -1, prompt_len)
        seq.handle = id(seq) if handle is None else handle
        self.seqs[uid] = seq

    def handle_of(self, uid: int) -> int:
        return self.seqs[uid].handle

    def can_allocate(self, uid: int) -> bool:
        return self.manager.can_allocate(self.seqs[uid])

    def can_append(self, uid: int) -> bool:
        return self.manager.can_append(self.seqs[uid])

    def finish(self, uid: int) -> None:
        self._deallocate(self.seqs.pop(uid))     # the sequence object is gone: its id is free

    def preempt(self, uid: int) -> None:
        self._deallocate(self.seqs[uid])         # same object, requeued, re-prefilled in full

    def _deallocate(self, seq: Sequence) -> None:
        # Only the decoding sequence's rows are in dbuf: zeroing the shared scratch when another
        # (waiting) sequence goes would wipe the decode owner's open block (the machine found
        # that in a first draft of this option).
        decoding = seq.handle in self.manager.decode_start_pos
        freed = self.manager.deallocate(seq)
        if self.zero_on_deallocate:
            self.data.zero(freed, scratch=decoding)

    # -- prefill ----------------------------------------------------------------------------

    def prefill(self, uid: int, num_chunks: int) -> list[list[list[int]]]:
        seq = self.seqs[uid]
        if not seq.block_table:
            self.manager.allocate(seq)
            seq.writes += 1
        reads = []
        for _ in range(num_chunks):
            reads.append(self._prefill_chunk(seq))
            if seq.num_prefilled_tokens == seq.num_tokens:
                seq.num_tokens += 1              # the prefill samples a token
                break
        return reads

    def _prefill_chunk(self, seq: Sequence) -> list[list[int]]:
        B, N = self.block_size, self.num_slots
        begin = seq.num_prefilled_tokens
        end = min(begin + B, seq.num_tokens)
        c = begin // B
        logical = seq.block_table[c]
        cpu_block = self.manager.cpu_block(logical)
        chunk_slot, reads = c % N, []
        for layer in range(self.num_layers):
            rows = []
            for j, earlier in enumerate(self.manager.prefilled_blocks(seq)[:c]):
                slot = (c + 1 + j) % N
                self.data.load(slot, layer, self.manager.cpu_block(earlier))
                rows.append(self.data.read_slot(slot, B))
            values = [kv_value(seq.seq_id, seq.writes - 1, layer, p) for p in range(begin, end)]
            self.data.write_slot(chunk_slot, values)
            rows.append(self.data.read_slot(chunk_slot, end - begin))
            self.data.store_slot(chunk_slot, layer, cpu_block, 0, end - begin)
            reads.append(_attend(self.data.results(rows)))
        self.manager.prefilled.add(logical)
        seq.num_prefilled_tokens = end
        return reads

    # -- decode -----------------------------------------------------------------------------

    def decode(self, uid: int) -> list[list[int]]:
        seq, manager, B = self.seqs[uid], self.manager, self.block_size
        manager.may_append(seq)
        t = seq.num_tokens - 1
        pib = t % B
        start = manager.decode_start_pos.setdefault(seq.handle, t % B)   # first decode
        prefill_len = manager.prefill_len.setdefault(seq.handle, t)
        cpu_blocks = manager.prefilled_blocks(seq)
        reads = []
        for layer in range(self.num_layers):
            self.data.write_dbuf(layer, pib, kv_value(seq.seq_id, seq.writes - 1, layer, t))
            rows = []
            for j, logical in enumerate(cpu_blocks):
                valid = min(B, prefill_len - j * B)
                if valid <= 0:
                    break
                slot = j % self.num_slots
                self.data.load(slot, layer, manager.cpu_block(logical))
                rows.append(self.data.read_slot(slot, valid))
            rows.append(self.data.read_dbuf(layer, start, pib + 1))
            reads.append(_attend(self.data.results(rows)))
            if pib == B - 1 and LAYER_ALIAS in self.bugs:
                self.data.stage_dbuf(layer, 0)
        if pib == B - 1:
            self._offload_full_block(seq, t, start)
        seq.num_tokens += 1
        return reads

    def _offload_full_block(self, seq: Sequence, t: int, start: int) -> None:
        logical = seq.block_table[t // self.block_size]
        cpu_block = self.manager.cpu_block(logical)
        first = 0 if PARTIAL_BLOCK in self.bugs else start
        for layer in range(self.num_layers):
            if LAYER_ALIAS in self.bugs:          # after the pass, the slot holds the last layer
                self.data.store_slot(0, layer, cpu_block, first, self.block_size)
            else:
                self.data.offload_dbuf(layer, cpu_block, first, self.block_size)
        if DROPPED_DECODE not in self.bugs:
            self.manager.prefilled.add(logical)
            self.manager.prefill_len[seq.handle] = t + 1
        self.manager.decode_start_pos[seq.handle] = 0

    # -- the simulated device (async mode on CPU): the machine runs pending copies ----------

    def copy_streams(self) -> list[str]:
        """Side streams with a copy that could run now; empty unless async on CPU."""
        return self.data.copy_streams()

    def run_copies(self, stream: str, count: int = 1) -> None:
        """Run up to ``count`` pending ops of ``stream`` now, ahead of whatever waits."""
        self.data.run_copies(stream, count)

    def device_stats(self) -> dict[str, int]:
        """Named hazards of the simulated device so far (empty on other devices)."""
        return self.data.device_stats()

    # -- observable state (what the model also answers) ------------------------------------

    @property
    def num_free_blocks(self) -> int:
        return len(self.manager.free_cpu_blocks)

    def tracking_keys(self) -> set[int]:
        return set(self.manager.decode_start_pos) | set(self.manager.prefill_len)

    def decode_start(self, uid: int) -> int | None:
        return self.manager.decode_start_pos.get(self.seqs[uid].handle)

    def cpu_rows(self, uid: int) -> list[list[int]]:
        """The CPU rows the engine counts as valid for a live sequence, per layer."""
        seq = self.seqs[uid]
        n = self.manager.prefill_len.get(seq.handle, seq.num_prefilled_tokens)
        out, cpu = [], self.data.settled_cpu()
        for layer in range(self.num_layers):
            rows = [cpu[layer, self.manager.cpu_block(b), :min(self.block_size,
                                                              n - j * self.block_size)]
                    for j, b in enumerate(seq.block_table) if n > j * self.block_size]
            out.append(_attend(rows))
        return out

    def block_refs(self, uid: int) -> list[int]:
        return [self.manager.blocks[b].ref_count for b in self.seqs[uid].block_table]

    def check_valid(self) -> None:
        self.manager.check_valid()
        holders: dict[int, int] = {}
        for seq in self.seqs.values():
            for b in seq.block_table:
                holders[b] = holders.get(b, 0) + 1
        for block in self.manager.blocks:
            assert block.ref_count == holders.get(block.block_id, 0), \
                f"ref-counts: block {block.block_id} has ref_count {block.ref_count}, " \
                f"held by {holders.get(block.block_id, 0)} tables"
        for seq in self.seqs.values():
            pre = [b in self.manager.prefilled for b in seq.block_table]
            assert pre == sorted(pre, reverse=True), \
                f"block-table-shape: s{seq.seq_id} prefilled blocks are not a prefix"


def _attend(rows: list[torch.Tensor]) -> list[int]:
    """The fake attention: the values of the rows read, in order (column 0; rows are
    broadcast over the head dim, and a row whose columns disagree is reported as -1)."""
    if not rows:
        return []
    kv = torch.cat(rows)
    same = (kv == kv[:, :1]).all(dim=1)
    return torch.where(same, kv[:, 0], torch.full_like(kv[:, 0], -1)).tolist()
