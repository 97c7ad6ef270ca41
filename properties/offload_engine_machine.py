"""OffloadEngineMachine: the CPU-primary KV offload engine against its reference model.

Rules (``docs/specs/offload-engine.md``): add a request (prompt 1..3B+1, max new
1..3B), optionally reusing a finished sequence's handle (the engine's ``id(seq)``, recycled as
CPython does, when the machine says); prefill one chunk or all; decode a step (offload mode runs
one sequence at a time: only the current decode owner decodes until it finishes or is
preempted); finish (deallocate); preempt (deallocate, requeue, later re-prefill prompt plus
generated tokens in full); in async worlds on CPU, run pending copies (the simulated device of
``sim/sim_device.py``: a drawn side stream runs some of its queued copies now, ahead of what
waits on them; everything else runs only when a wait or a host read needs it, the laziest
order the events allow). Every attention read is compared with the model's; after every step
the whole observable state is: tracking keys, decode starts (``== cpu_len % B``), the CPU rows
of every live sequence, ref counts and block table shape, free blocks and the engine's
structural self-check (partition, inverse map).

Each rule only *chooses* plain values; the ``do_*`` action does the step (replayable, so a
failing program is minimized and emitted as a reproducer).
"""

from __future__ import annotations

from attrs import define
from hypothesis import strategies as st
from hypothesis.stateful import initialize, invariant, precondition, rule

from fixtures.handles import HandleAllocator
from models.offload_engine import OffloadEngineModel
from models.offload_engine_values import kv_origin
from properties.harness import HarnessMachine, InvalidAction, choose, draw_bool, draw_integer
from properties.offload_engine_shrink import simpler_worlds
from properties.offload_engine_worlds import OffloadWorld, offload_worlds
from sim import targets
from sim.sim_device import OUT_OF_ORDER, READ_WHILE_PENDING


def native_on_cuda() -> bool:
    """Whether the native engine's tensors live on CUDA (then async worlds draw delays)."""
    from sim.device import pick_device
    return pick_device().type == "cuda"


MAX_OPEN_REQUESTS = 3      # added and not finished: enough to contend for a small pool
MAX_TOKENS = 90            # positions stay below models.offload_engine_values.POS_SPAN

HAZARDS = (
    "id reused after finish",
    "decode filled a block",
    "decode filled the prompt's partial block",
    "decode read a decode-filled block",
    "preempted then re-prefilled",
    "prefill split across calls",
    "pool exhausted",
    "new decode owner after another",
    OUT_OF_ORDER,            # simulated device: a copy overtook an op queued before it
    READ_WHILE_PENDING,      # simulated device: the host read while a copy was still queued
)


@define
class Request:
    prompt_len: int
    max_new: int
    handle: int


PROPERTIES = {   # the promises of docs/specs/offload-engine.md, grouped by what they compare
    "attention-reads-agree": "every prefill chunk and decode step reads the model's KV rows",
    "cpu-rows-agree": "each live sequence's CPU blocks hold its own KV, layer by layer",
    "block-table-agrees": "one reference per block, ceil(len / block_size) blocks a sequence",
    "decode-start-agrees": "a sequence's decode starts at cpu_len % block_size",
    "decode-tracking-lifetime": "decode tracking exists exactly for live decoding sequences",
    "resource-partition": "free CPU blocks + blocks in use == the pool",
}


class OffloadEngineMachine(HarnessMachine):
    subsystem = "offload_engine"
    SUBJECT = "eng"
    PROPERTIES = PROPERTIES
    HAZARDS = HAZARDS
    REPRODUCER_IMPORTS = ()
    REPRODUCER_HELPERS = ""
    # Off only in tests that show what a bug does to attention reads once nothing catches it
    # earlier (properties/test_offload_id_reuse.py).
    CHECK_TRACKING_KEYS = True
    CHECK_STATE = True
    TARGET_OPTIONS: dict = {}       # extra native options (zero_on_deallocate)

    @staticmethod
    def reproducer_subject(config: dict) -> str:
        sizes = ", ".join(f"{k}={config[k]!r}" for k in
                          ("block_size", "num_slots", "num_layers", "num_cpu_blocks",
                           "async_mode", "copy_delay_cycles") if k in config)
        return f'eng = make(target, "offload_engine", {sizes})'

    @initialize(world=st.deferred(lambda: offload_worlds(cuda=native_on_cuda())))
    def setup(self, world: OffloadWorld):
        self.world = world
        self.B = world.block_size
        self.model = OffloadEngineModel(world.block_size, world.num_slots, world.num_layers,
                                        world.num_cpu_blocks)   # no device: copies are instant
        self.eng = targets.make(self.target_name, "offload_engine", **world.config(),
                                **self.TARGET_OPTIONS)
        self.handles = HandleAllocator()
        self.requests: dict[int, Request] = {}
        self.next_uid = 0
        self.owner: int | None = None
        self.owners_seen = 0
        self._closing = False
        self.trace.config.update(world.config(), target=self.target_name)
        self.trace.world = world

    # -- rules: choose a valid step, then act ------------------------------------------------

    @precondition(lambda self: len(getattr(self, "requests", ())) < MAX_OPEN_REQUESTS)
    @rule(data=st.data())
    def add_request(self, data):
        self.act("add_request", self.next_uid, *self._draw_request(data), False)

    @precondition(lambda self: len(getattr(self, "requests", ())) < MAX_OPEN_REQUESTS
                  and self.handles.free)
    @rule(data=st.data())
    def reuse_id(self, data):
        self.act("add_request", self.next_uid, *self._draw_request(data), True)

    @precondition(lambda self: self._prefillable())
    @rule(data=st.data())
    def prefill(self, data):
        uid = choose(data, self._prefillable(), "uid")
        whole = draw_bool(data, "all_chunks")
        self.act("prefill", uid, self._chunks_left(uid) if whole else 1)

    @precondition(lambda self: self._decodable())
    @rule(data=st.data())
    def decode(self, data):
        # One or more steps in a row (each its own API call and action): the bugs of a filled
        # block, and the race of its offload with the next write, need B+1 decodes in a row.
        uid = choose(data, self._decodable(), "uid")
        for step in range(draw_integer(data, 1, self.B + 1, "steps")):
            if uid not in self._decodable():
                break
            if step:
                self.check_all_invariants()   # after every API call, as a replay checks
            self.act("decode", uid)

    @precondition(lambda self: getattr(self, "requests", None))
    @rule(data=st.data())
    def finish(self, data):
        # Any request: a decoded one finishes, a waiting or half-prefilled one is aborted.
        self.act("finish", choose(data, sorted(self.requests), "uid"))

    @precondition(lambda self: getattr(self, "model", None) and self.model.live)
    @rule(data=st.data())
    def preempt(self, data):
        self.act("preempt", choose(data, sorted(self.model.live), "uid"))

    @precondition(lambda self: self._copy_streams())
    @rule(data=st.data())
    def run_copies(self, data):
        stream = choose(data, self._copy_streams(), "stream")
        self.act("run_copies", stream, draw_integer(data, 1, 3, "count"))

    @classmethod
    def simpler_worlds(cls, world: OffloadWorld, actions):
        return simpler_worlds(world, actions)

    # -- actions: API calls on model and target, compared ----------------------------------

    def do_add_request(self, uid: int, prompt_len: int, max_new: int, reuse: bool):
        # A uid is never used twice: KV values encode it, so a reused uid would hide stale rows.
        if len(self.requests) >= MAX_OPEN_REQUESTS or (reuse and not self.handles.free) \
                or uid < self.next_uid:
            raise InvalidAction("add_request: too many requests, no freed handle, used uid")
        self.next_uid = uid + 1
        handle = self.handles.reuse() if reuse else self.handles.fresh()
        self.requests[uid] = Request(prompt_len, max_new, handle)
        self.model.add_request(uid, prompt_len, handle)
        how = "reused from a finished sequence" if reuse else "fresh"
        self.record_step(f"eng.add_request({uid}, prompt_len={prompt_len}, handle={handle})",
                         None, f"s{uid}: {prompt_len}-token prompt, handle {handle} ({how})")
        self.eng.add_request(uid, prompt_len, handle=handle)
        if reuse:
            self.hazard("id reused after finish")

    def do_prefill(self, uid: int, num_chunks: int):
        if uid not in self.requests or self.model.is_prefilled(uid) or (
                uid not in self.model.live and not self.model.can_allocate(uid)):
            raise InvalidAction("prefill: unknown, already prefilled or no room")
        writes_before = self.model.seqs[uid].writes
        begin = self.model.live[uid].kv_len if uid in self.model.live else 0
        expect = self.model.prefill(uid, num_chunks)
        end = self.model.live[uid].kv_len
        done = self.model.is_prefilled(uid)
        self.record_step(f"eng.prefill({uid}, num_chunks={num_chunks})", repr(expect),
                         f"s{uid} writes positions {begin}..{end - 1}"
                         + (" (prefill complete)" if done else ""))
        actual = self.eng.prefill(uid, num_chunks)
        self.check("attention-reads-agree", len(actual) == len(expect),
                   f"prefill s{uid} ran {len(actual)} chunks, not {len(expect)}")
        for c, (want, got) in enumerate(zip(expect, actual, strict=True)):
            self._compare_reads(f"prefill s{uid} chunk {c}", want, got)
        if not done:
            self.hazard("prefill split across calls")
        elif writes_before >= 1:
            self.hazard("preempted then re-prefilled")
        if self.model.num_free_blocks == 0:
            self.hazard("pool exhausted")

    def do_decode(self, uid: int):
        if not self.model.is_prefilled(uid) or self.owner not in (None, uid) \
                or not self.model.can_append(uid) \
                or self.model.seqs[uid].num_tokens >= MAX_TOKENS:
            raise InvalidAction("decode: not prefilled, not the decode owner, or no room")
        if self.owner is None:
            self.owners_seen += 1
            if self.owners_seen > 1:
                self.hazard("new decode owner after another")
        self.owner = uid
        live = self.model.live[uid]
        t = self.model.seqs[uid].num_tokens - 1
        if live.cpu_len > live.target:
            self.hazard("decode read a decode-filled block")
        expect = self.model.decode(uid)
        filled = (t + 1) % self.B == 0
        self.record_step(f"eng.decode({uid})", repr(expect), f"s{uid} decodes position {t}"
                         + (": block full, offloaded" if filled else ""))
        actual = self.eng.decode(uid)
        self._compare_reads(f"decode s{uid} t={t}", expect, actual)
        if filled:
            self.hazard("decode filled a block")
            if live.target % self.B and t // self.B == (live.target - 1) // self.B:
                self.hazard("decode filled the prompt's partial block")
        if self.model.num_free_blocks == 0:
            self.hazard("pool exhausted")

    def do_finish(self, uid: int):
        if uid not in self.requests:
            raise InvalidAction("finish: unknown or finished sequence")
        self.apply("finish", uid, shown=f"eng.finish({uid})",
                   effect=f"s{uid} finished: blocks and handle freed")
        self.handles.release(self.requests.pop(uid).handle)   # the object dies: id is free
        if self.owner == uid:
            self.owner = None

    def do_preempt(self, uid: int):
        if uid not in self.model.live:
            raise InvalidAction("preempt: not allocated")
        self.apply("preempt", uid, shown=f"eng.preempt({uid})",
                   effect=f"s{uid} preempted: blocks freed, requeued with its tokens")
        if self.owner == uid:
            self.owner = None

    def do_run_copies(self, stream: str, count: int):
        if stream not in self._copy_streams():
            raise InvalidAction("run_copies: no copy of that stream can run now")
        self.apply("run_copies", stream, count, shown=f"eng.run_copies({stream!r}, {count})",
                   effect=f"up to {count} queued ops of the {stream} stream run now")

    def end_of_run(self):
        # A world that checks the CPU pool only at the end checks it here, settled.
        if not self.world.check_each_step:
            self._closing = True
            self.engine_state_agrees()

    # -- invariants ---------------------------------------------------------------------------

    @invariant()
    def device_hazards(self):
        stats = getattr(getattr(self, "eng", None), "device_stats", dict)()
        for name in (OUT_OF_ORDER, READ_WHILE_PENDING):
            if stats.get(name):
                self.hazard(name)

    @invariant()
    def engine_state_agrees(self):
        if not hasattr(self, "model") or not self.CHECK_STATE:
            return
        m, e = self.model, self.eng
        if self.CHECK_TRACKING_KEYS and e.tracking_keys() != m.tracking_keys():
            self.fail("decode-tracking-lifetime", f"tracking keys {sorted(e.tracking_keys())}, "
                      f"live decoding sequences' handles {sorted(m.tracking_keys())}")
        for uid in sorted(m.live):
            if e.block_refs(uid) != m.block_refs(uid):
                self.fail("block-table-agrees", f"s{uid} block ref counts {e.block_refs(uid)}, "
                          f"expected {m.block_refs(uid)} (one ref per block, ceil(len / B))")
            if e.decode_start(uid) != m.decode_start(uid):
                self.fail("decode-start-agrees", f"s{uid} decode start {e.decode_start(uid)}, "
                          f"expected {m.decode_start(uid)} (cpu_len % B)")
            if not (self.world.check_each_step or self._closing):
                continue     # the pool is checked when the run ends (OffloadWorld)
            for layer, (want, got) in enumerate(zip(m.cpu_rows(uid), e.cpu_rows(uid),
                                                    strict=False)):
                self._compare_rows("cpu-rows-agree", f"s{uid} CPU layer {layer}", want, got)
        self.check("resource-partition", e.num_free_blocks == m.num_free_blocks,
                   f"{e.num_free_blocks} free CPU blocks, expected {m.num_free_blocks}")
        self.check_valid(e)

    def state_checks(self) -> list[str]:
        m = self.model
        keys = m.tracking_keys()
        if not self.CHECK_STATE:
            return []
        lines = [f"assert eng.num_free_blocks == {m.num_free_blocks}"]
        if self.CHECK_TRACKING_KEYS:
            lines.append(f"assert eng.tracking_keys() == {keys if keys else 'set()'}")
        for uid in sorted(m.live):
            start = m.decode_start(uid)
            lines += [f"assert eng.block_refs({uid}) == {m.block_refs(uid)}",
                      f"assert eng.decode_start({uid}) "
                      + ("is None" if start is None else f"== {start}"),
                      f"assert eng.cpu_rows({uid}) == {m.cpu_rows(uid)}"]
        return lines

    # -- helpers ------------------------------------------------------------------------------

    def _copy_streams(self) -> list[str]:
        return getattr(getattr(self, "eng", None), "copy_streams", list)()

    def _draw_request(self, data) -> tuple[int, int]:
        longest = min(3 * self.B + 1, self.world.num_cpu_blocks * self.B)
        return (draw_integer(data, 1, longest, "prompt_len"),
                draw_integer(data, 1, 3 * self.B, "max_new"))

    def _chunks_left(self, uid: int) -> int:
        live = self.model.live.get(uid)
        left = live.target - live.kv_len if live else self.model.seqs[uid].num_tokens
        return -(-left // self.B)

    def _prefillable(self) -> list[int]:
        if not hasattr(self, "model"):
            return []
        m = self.model
        return [u for u in sorted(self.requests)
                if (u in m.live and not m.is_prefilled(u))
                or (u not in m.live and m.can_allocate(u))]

    def _prefilled(self) -> list[int]:
        if not hasattr(self, "model"):
            return []
        return [u for u in sorted(self.model.live) if self.model.is_prefilled(u)]

    def _decodable(self) -> list[int]:
        m = self.model if hasattr(self, "model") else None
        if m is None:
            return []
        candidates = [self.owner] if self.owner is not None else self._prefilled()
        return [u for u in candidates if m.can_append(u)
                and m.seqs[u].num_tokens - self.requests[u].prompt_len <= self.requests[u].max_new
                and m.seqs[u].num_tokens < MAX_TOKENS]

    def _compare_reads(self, what: str, expect: list[list[int]], actual: list[list[int]]):
        self.check("attention-reads-agree", len(actual) == len(expect),
                   f"{what} read {len(actual)} layers, not {len(expect)}")
        for layer, (want, got) in enumerate(zip(expect, actual, strict=True)):
            self._compare_rows("attention-reads-agree", f"{what} layer {layer}", want, got)

    def _compare_rows(self, prop: str, what: str, want: list[int], got: list[int]) -> None:
        """Report the first bad position and the (sequence, layer, position) actually read."""
        if got == want:
            return
        for p, (w, g) in enumerate(zip(want, got, strict=False)):
            if w != g:
                self.fail(prop, f"{what} position {p}: read {kv_origin(g)}, expected "
                          f"{kv_origin(w)} (read {got}, expected {want})")
        self.fail(prop, f"{what}: read {len(got)} rows, expected {len(want)} "
                  f"(read {got}, expected {want})")
