"""The ``vllm`` target's tiered lookup: the installed vLLM's real ``CPUOffloadingManager``
(LRU) and the connector's real ``_maximal_prefix_lookup`` / ``_sliding_window_lookup``,
called unbound on a stub ``self`` (``specs/vllm-drive.md`` sections 2 and 3).

Scope: the primary tier only (``secondary="none"``); the tiering manager's example tier
completes its jobs at submit, which the machine's job queue cannot drive yet. The harness
plays the GPU worker: a successful ``complete_store`` writes the key's bytes into the chunk id
vLLM chose in ``prepare_store``, and ``read_chunk`` reads them back through the chunk id the
manager reports for the key, so a chunk handed to two live keys shows up as wrong bytes.
Keys are our small integers; vLLM sees ``make_offload_key(i.to_bytes(8, "big"), 0)``.
"""

from __future__ import annotations

from collections.abc import Sequence
from types import SimpleNamespace

from models.lookup_values import Job, LookupResult, Scan, StoreOutput
from sim.errors import HarnessError
from sim.vllm import release

CHUNK_WORDS = 4


class VllmTieredLookup:
    """The tiered-lookup port over ``vllm.v1.kv_offload.cpu.manager.CPUOffloadingManager``."""

    def __init__(self, num_chunks: int, secondary: str = "none"):
        if secondary != "none":
            raise HarnessError(f"the vllm target drives the primary tier only; secondary="
                               f"{secondary!r} is not supported yet (use secondary='none')")
        base = release.import_module("vllm.v1.kv_offload.base")
        cpu = release.import_module("vllm.v1.kv_offload.cpu.manager")
        connector = release.import_module(
            "vllm.distributed.kv_transfer.kv_connector.v1.offloading.scheduler")
        self.release = release.release()
        self.num_chunks = num_chunks
        self._base = base
        self._scheduler_cls = connector.OffloadingConnectorScheduler
        self.manager = cpu.CPUOffloadingManager(num_chunks=num_chunks, cache_policy="lru")
        self._ctx = base.ReqContext(req_id="r0")
        self.manager.on_new_request(self._ctx)
        self._keys: dict[int, object] = {}
        self._ints: dict[object, int] = {}
        self._chunks = [[0] * CHUNK_WORDS for _ in range(num_chunks)]   # the worker's memory
        self._store_chunk: dict[int, int] = {}      # pending key -> chunk id being written

    # -- keys and results ---------------------------------------------------------------------

    def _key(self, i: int):
        if i not in self._keys:
            key = self._base.make_offload_key(i.to_bytes(8, "big"), 0)
            self._keys[i], self._ints[key] = key, i
        return self._keys[i]

    def _vkeys(self, keys: Sequence[int]) -> list:
        return [self._key(i) for i in keys]

    @staticmethod
    def _result(answer) -> LookupResult:
        return LookupResult[answer.name]

    def _chunk(self, i: int):
        # vLLM 0.33.0: chunks live in the policy (``_policy.get(key)`` -> ChunkStatus).
        return self.manager._policy.get(self._key(i))

    # -- the port ------------------------------------------------------------------------------

    @property
    def num_free_chunks(self) -> int:
        return self.manager._get_num_free_chunks()       # vLLM 0.33.0: private helper

    def ref_cnt(self, key: int) -> int | None:
        chunk = self._chunk(key)
        return None if chunk is None else int(chunk.ref_cnt)

    def read_chunk(self, key: int) -> int | None:
        chunk = self._chunk(key)
        if chunk is None or chunk.ref_cnt < 0:
            return None
        row = self._chunks[int(chunk.chunk_id)]
        owner = (row[0] - 1) // CHUNK_WORDS
        return owner if owner >= 0 and row == _payload(owner) else -1

    def pending_jobs(self) -> tuple[Job, ...]:
        return ()

    def secondary_keys(self) -> tuple[int, ...]:
        return ()

    def prepare_store(self, keys: Sequence[int]) -> StoreOutput | None:
        out = self.manager.prepare_store(self._vkeys(keys), self._ctx)
        if out is None:
            return None
        stored = tuple(self._ints[k] for k in out.keys_to_store)
        for i, chunk_id in zip(stored, out.store_spec.block_ids, strict=True):
            self._store_chunk[i] = int(chunk_id)
        return StoreOutput(stored, tuple(self._ints[k] for k in out.evicted_keys))

    def complete_store(self, keys: Sequence[int], success: bool = True) -> None:
        if success:
            for i in keys:
                if i in self._store_chunk and self.ref_cnt(i) == -1:
                    self._chunks[self._store_chunk[i]] = _payload(i)   # the GPU's copy lands
        for i in keys:
            self._store_chunk.pop(i, None)
        self.manager.complete_store(self._vkeys(keys), self._ctx, success=success)

    def prepare_load(self, keys: Sequence[int]) -> None:
        self.manager.prepare_load(self._vkeys(keys), self._ctx)

    def complete_load(self, keys: Sequence[int]) -> None:
        self.manager.complete_load(self._vkeys(keys), self._ctx)

    def touch(self, keys: Sequence[int]) -> None:
        self.manager.touch(self._vkeys(keys), self._ctx)

    def lookup(self, key: int) -> LookupResult:
        return self._result(self.manager.lookup(self._key(key), self._ctx))

    def on_schedule_end(self) -> None:
        self.manager.on_schedule_end(
            self._base.ScheduleEndContext(new_req_ids=(), preempted_req_ids=()))

    def complete_job(self, job_id: int) -> None:
        raise HarnessError("the primary tier alone has no secondary jobs")

    def reset_cache(self) -> None:
        self._store_chunk.clear()
        self.manager.reset_cache()

    def on_reset_flushed(self) -> None:
        self.manager.on_reset_flushed()

    # -- the connector's lookups, vLLM's own code on a stub self ----------------------------

    def _stub(self, made: list[tuple[int, LookupResult]]) -> SimpleNamespace:
        def lookup(key, ctx):
            answer = self.manager.lookup(key, ctx)
            made.append((self._ints[key], self._result(answer)))
            return answer
        return SimpleNamespace(
            manager=SimpleNamespace(lookup=lookup),
            _events_tracker=SimpleNamespace(record_lookup=lambda req, g, idx, key: None))

    def maximal_prefix_lookup(self, keys: Sequence[int]) -> Scan:
        made: list[tuple[int, LookupResult]] = []
        result = self._scheduler_cls._maximal_prefix_lookup(
            self._stub(made), self._vkeys(keys), self._ctx, None, None, 0)
        return _scan(result, made)

    def sliding_window_lookup(self, keys: Sequence[int], window: int,
                              initial_window: int | None = None) -> Scan:
        made: list[tuple[int, LookupResult]] = []
        result = self._scheduler_cls._sliding_window_lookup(
            self._stub(made), self._vkeys(keys), window, self._ctx, initial_window)
        return _scan(result, made)


def _payload(key: int) -> list[int]:
    base = key * CHUNK_WORDS + 1
    return list(range(base, base + CHUNK_WORDS))


def _scan(result: int | None, made: list[tuple[int, LookupResult]]) -> Scan:
    return Scan(result, tuple(k for k, _ in made), tuple(a for _, a in made))


def make_tiered_lookup(num_chunks: int, secondary: str = "none") -> VllmTieredLookup:
    return VllmTieredLookup(num_chunks, secondary)
