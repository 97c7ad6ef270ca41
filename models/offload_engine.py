"""Reference model of the CPU-primary KV offload engine (``docs/specs/offload-engine.md``).

Scope: which KV a sequence has written, which of it lives on the CPU, what every attention read
must return and how many blocks are free. Not in scope: start positions, ring slots, the decode
buffer, offsets, logical ids (the implementation keeps those; the model *is* the spec).

Facts kept: ``kv[(uid, layer, pos)]`` (the value of the latest write, unique per write),
``live: uid -> Live`` and the sequences added. Free counts, block tables, tracking keys and
decode starts are computed from those facts.
"""

from __future__ import annotations

from attrs import define, field

from models.offload_engine_values import kv_value


@define
class SeqFacts:
    """A request as the engine sees it: its prompt, its identity handle, its tokens so far."""

    prompt_len: int
    handle: int
    num_tokens: int           # prompt plus every sampled token
    writes: int = 0           # prefills begun (the write of a value: 0, 1 after a preempt ...)


@define
class Live:
    """An allocated sequence: ``target`` positions to prefill, ``kv_len`` written so far,
    ``cpu_len`` leading positions on the CPU; ``decoding`` after its first decode step."""

    target: int
    kv_len: int = 0
    cpu_len: int = 0
    decoding: bool = False


@define
class OffloadEngineModel:
    block_size: int
    num_slots: int
    num_layers: int
    num_cpu_blocks: int
    seqs: dict[int, SeqFacts] = field(factory=dict)
    live: dict[int, Live] = field(factory=dict)
    kv: dict[tuple[int, int, int], int] = field(factory=dict)

    # -- computed views ---------------------------------------------------------------------

    def num_blocks(self, uid: int) -> int:
        s = self.live[uid]
        return -(-max(s.target, s.kv_len) // self.block_size)

    @property
    def num_free_blocks(self) -> int:
        return self.num_cpu_blocks - sum(self.num_blocks(u) for u in self.live)

    def is_prefilled(self, uid: int) -> bool:
        return uid in self.live and self.live[uid].kv_len >= self.live[uid].target

    def can_allocate(self, uid: int) -> bool:
        return -(-self.seqs[uid].num_tokens // self.block_size) <= self.num_free_blocks

    def can_append(self, uid: int) -> bool:
        t = self.seqs[uid].num_tokens - 1
        return t % self.block_size != 0 or self.num_free_blocks >= 1

    def tracking_keys(self) -> set[int]:
        return {self.seqs[u].handle for u, s in self.live.items() if s.decoding}

    def decode_start(self, uid: int) -> int | None:
        s = self.live.get(uid)
        return s.cpu_len % self.block_size if s and s.decoding else None

    def cpu_rows(self, uid: int) -> list[list[int]]:
        n = self.live[uid].cpu_len
        return [[self.kv[(uid, layer, p)] for p in range(n)] for layer in range(self.num_layers)]

    def block_refs(self, uid: int) -> list[int]:
        return [1] * self.num_blocks(uid)      # no prefix sharing: one table holds each block

    def expected_read(self, uid: int, layer: int, last: int) -> list[int]:
        return [self.kv[(uid, layer, p)] for p in range(last + 1)]

    # -- operations -------------------------------------------------------------------------

    def add_request(self, uid: int, prompt_len: int, handle: int) -> None:
        self.seqs[uid] = SeqFacts(prompt_len, handle, prompt_len)

    def prefill(self, uid: int, num_chunks: int) -> list[list[list[int]]]:
        """Chunks of B positions; each chunk's read per layer: every position up to its end."""
        seq = self.seqs[uid]
        if uid not in self.live:
            self.live[uid] = Live(target=seq.num_tokens)
            seq.writes += 1
        s, B = self.live[uid], self.block_size
        # The chunk ends this call reaches, computed at once: each block boundary past what is
        # written, the prompt's end last (an already written prompt reaches only its end).
        ends = [min(e, s.target) for e in range(s.kv_len + B, s.target + B, B)] or [s.target]
        ends = ends[:num_chunks]
        if not ends:
            return []
        self._write(uid, range(s.kv_len, ends[-1]))
        s.kv_len = s.cpu_len = ends[-1]
        if ends[-1] == s.target:
            seq.num_tokens += 1                    # the prefill samples a token
        # Later chunks write only later positions: each chunk's read is as it was at its end.
        return [[self.expected_read(uid, layer, end - 1) for layer in range(self.num_layers)]
                for end in ends]

    def decode(self, uid: int) -> list[list[int]]:
        seq, s = self.seqs[uid], self.live[uid]
        t = seq.num_tokens - 1
        self._write(uid, [t])
        s.kv_len, s.decoding = t + 1, True
        if (t + 1) % self.block_size == 0:
            s.cpu_len = t + 1
        seq.num_tokens += 1
        return [self.expected_read(uid, layer, t) for layer in range(self.num_layers)]

    def finish(self, uid: int) -> None:
        self.live.pop(uid, None)
        del self.seqs[uid]

    def run_copies(self, stream: str, count: int = 1) -> None:
        """Run pending copies early (the engine's async mode on the simulated device). The
        model has no device: every copy is done the moment it is asked for, so this changes
        nothing, and a correct engine reads the same rows whenever its copies run."""

    def preempt(self, uid: int) -> None:
        del self.live[uid]                         # same sequence, requeued with its tokens

    def _write(self, uid: int, positions) -> None:
        write = self.seqs[uid].writes - 1
        for layer in range(self.num_layers):
            for p in positions:
                self.kv[(uid, layer, p)] = kv_value(uid, write, layer, p)
