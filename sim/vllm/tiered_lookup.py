"""The ``vllm`` target's tiered lookup: the installed vLLM's real offload managers and the
connector's real ``_maximal_prefix_lookup`` / ``_sliding_window_lookup``, called unbound on a
stub ``self`` (``docs/specs/tiered-lookup.md``, "How the vllm target drives vLLM").

- ``secondary="none"``: ``CPUOffloadingManager`` (LRU, or ARC: ``eviction_policy``) alone,
  with one request per slot of ``requests`` running at once, each with its own ``ReqContext``
  carrying its keys' positions as the connector records them
  (``tiered_lookup_compat.set_key_positions``);
  ``use_request`` picks the request that makes the next calls; ``finish_request`` ends it
  (``on_request_finished``) and starts the next one in its slot with a fresh context.
- ``secondary="memory"`` / ``"probe"``: ``TieringOffloadingManager`` over a
  ``CPUPrimaryTierOffloadingManager`` (an anonymous mmap as its region) and one secondary tier
  that the harness plays, the way ``docs/specs/tiered-lookup.md`` describes a tier: it
  holds byte copies, its jobs run only when ``complete_job`` says so (the manual job queue),
  and the "probe" variant answers RETRY until its existence probe is flushed at
  ``on_schedule_end``. The real code under test is vLLM's: polling, cascades and their pins,
  promotions, the reset hold, eviction. Every manager call holds ``manager.lock``.

The harness plays the GPU worker: a successful ``complete_store`` writes the key's bytes into
the chunk vLLM chose in ``prepare_store``; ``read_chunk`` reads the chunk the manager reports
for the key. Keys are our small integers; vLLM sees ``make_offload_key(i.to_bytes(8, "big"),
0)`` (the hash bytes alone before 0.20.0). Every call whose shape differs between releases
goes through one function of ``tiered_lookup_compat.py`` (the CPU manager from 0.11.0, the
tiering manager from 0.22.0, the connector's scans from 0.20.0; before, the manager's own
prefix count).
"""

from __future__ import annotations

import contextlib
import mmap
from collections.abc import Sequence
from typing import Any

import numpy as np

from models.tiered_lookup_stats import CacheStats
from models.tiered_lookup_values import Job, LookupResult, OffloadEvent, Scan, StoreOutput
from sim.errors import HarnessError
from sim.vllm import harness_tier, release, tiered_lookup_compat

CHUNK_WORDS = 4
CHUNK_BYTES = mmap.PAGESIZE


class _Region:
    """What ``CPUPrimaryTierOffloadingManager`` needs of a ``SharedOffloadRegion``."""

    def __init__(self, num_chunks: int, released: list[str] | None = None):
        self.mm, self.n = mmap.mmap(-1, num_chunks * CHUNK_BYTES), num_chunks
        self.released = released if released is not None else []

    def create_kv_memoryview(self) -> memoryview:
        return memoryview(self.mm).cast("B", (self.n, CHUNK_BYTES))

    def cleanup(self) -> None:
        self.released.append("primary")


def lookup_api():
    """The offload value types' module (``base``, or ``abstract`` before 0.21.0)."""
    return tiered_lookup_compat.offload_base()


class VllmTieredLookup:
    """The tiered-lookup port over vLLM's ``CPUOffloadingManager`` (``LRUOffloadingManager``
    before 0.19.0) or ``TieringOffloadingManager`` (from 0.22.0)."""

    def __init__(self, num_chunks: int, secondary: str = "none", eviction_policy: str = "lru",
                 store_threshold: int = 1, max_tracker_size: int = 64_000,
                 preloaded: Sequence[int] = (), polled: bool = False,
                 requests: Sequence[Sequence[int]] = (), enable_events: bool = True,
                 unpositioned: Sequence[int] = ()):
        self._base = tiered_lookup_compat.offload_base()
        self.release = release.release()
        self.num_chunks = num_chunks
        self.secondary = secondary
        self.tier = None
        if (eviction_policy != "lru" or store_threshold > 1) and secondary != "none":
            raise HarnessError("the harness drives ARC and the store threshold on the CPU "
                               "manager alone (secondary=\"none\")")
        if secondary == "none":
            self.manager = tiered_lookup_compat.primary_manager(
                num_chunks, eviction_policy, enable_events, store_threshold=store_threshold,
                max_tracker_size=max_tracker_size)
            # Behind 0.18-0.21's store filter.
            self.primary = tiered_lookup_compat.backing(self.manager)
            self._chunks = np.zeros((num_chunks, CHUNK_BYTES), dtype=np.uint8)
        elif secondary in ("memory", "probe"):
            manager = tiered_lookup_compat.tiering_manager_module()
            cls = manager.CPUPrimaryTierOffloadingManager
            self._released: list[str] = []
            self.primary = cls(**{tiered_lookup_compat.count_kwarg(cls): num_chunks},
                               mmap_region=_Region(num_chunks, self._released),
                               enable_events=True)
            view = self.primary.get_kv_memoryview()
            self._chunks = np.asarray(view)               # writable (num_chunks, bytes) uint8
            # Not the primary's HOST: a hit this tier supplied must be told from a primary
            # hit. A tier that serves peers asks to be polled between steps too (``polled``):
            # the manager then runs its tier-poll thread (vLLM 0.33.0), taking its lock.
            self.tier = harness_tier.tier_class()(
                view, "manual", released=self._released, released_as="secondary",
                probe=secondary == "probe", source=tiered_lookup_compat.tier_hit_source(),
                medium=tiered_lookup_compat.tier_medium(), polled=polled)
            self.manager = tiered_lookup_compat.tiering_manager(manager, self.primary, [self.tier])
        else:
            raise HarnessError(f"unknown secondary tier {secondary!r}")
        if preloaded and self.tier is None:
            raise HarnessError("preloaded keys need a secondary tier to hold them")
        self._scans = tiered_lookup_compat.connector_scans()
        self.missing_calls = tiered_lookup_compat.missing_offload_calls(self.manager, self._scans)
        self.model_options = tiered_lookup_compat.model_semantics(self.release)
        self._keys: dict[int, object] = {}
        self._ints: dict[object, int] = {}
        self._requests = 0
        self._chains = [tuple(chain) for chain in requests] or [()]
        self._unpositioned = frozenset(unpositioned)
        self._policies: dict[int, str | None] = {}  # slot -> how its request is offloaded
        self._finished: dict[int, object] = {}      # slot -> its last finished request's context
        self._contexts = [self._start_request(n) for n in range(len(self._chains))]
        self._slot = 0
        self._ctx = self._contexts[0]
        self._store_chunk: dict[int, int] = {}      # pending key -> chunk id being written
        for i in preloaded:                         # copies an earlier run left in the tier
            row = np.zeros(CHUNK_BYTES, dtype=np.uint8)
            row[:8 * CHUNK_WORDS] = np.frombuffer(_bytes(_payload(i)), dtype=np.uint8)
            self.tier.copies[self._key(i)] = row

    def _start_request(self, slot: int):
        ctx = tiered_lookup_compat.request_context(self._base, f"r{self._requests}")
        self._requests += 1
        if slot not in self._unpositioned:          # a peer's read carries no positions
            tiered_lookup_compat.set_key_positions(ctx, {self._key(k): 16 * (i + 1)
                                           for i, k in enumerate(self._chains[slot])})
        with self._locked():
            self._policies[slot] = tiered_lookup_compat.start_request(self.manager, ctx)
        return ctx

    def use_request(self, slot: int) -> None:
        self._slot, self._ctx = slot, self._contexts[slot]

    def finish_request(self) -> None:
        with self._locked():
            self.manager.on_request_finished(self._ctx)
        self._finished[self._slot] = self._ctx
        self._ctx = self._contexts[self._slot] = self._start_request(self._slot)

    def refinish_request(self) -> None:
        """``on_request_finished`` again for the slot's last finished request."""
        ctx = self._finished.get(self._slot)
        if ctx is None:
            raise HarnessError("refinish_request: no request of this slot has finished")
        with self._locked():
            self.manager.on_request_finished(ctx)

    def _locked(self):
        lock = getattr(self.manager, "lock", None)  # vLLM 0.33.0: callers hold it
        return lock if lock is not None else contextlib.nullcontext()

    # -- keys -------------------------------------------------------------------------------

    def _key(self, i: int):
        if i not in self._keys:
            key = tiered_lookup_compat.offload_key(self._base, i)
            self._keys[i], self._ints[key] = key, i
        return self._keys[i]

    def _vkeys(self, keys: Sequence[int]) -> list:
        return [self._key(i) for i in keys]

    def _chunk(self, i: int):
        return tiered_lookup_compat.chunk_status(self.primary, self._key(i))

    # -- observables ------------------------------------------------------------------------

    @property
    def num_free_chunks(self) -> int:
        return tiered_lookup_compat.num_free_chunks(self.primary)

    def ref_cnt(self, key: int) -> int | None:
        chunk = self._chunk(key)
        return None if chunk is None else int(chunk.ref_cnt)

    def arc_memory(self) -> tuple[tuple[int, ...], tuple[int, ...], float] | None:
        memory = tiered_lookup_compat.arc_memory(self.primary)
        if memory is None:
            return None
        b1, b2, target = memory
        return (tuple(self._ints[k] for k in b1), tuple(self._ints[k] for k in b2), target)

    def request_policy(self) -> str | None:
        """How ``on_new_request`` said to offload the current slot's request."""
        return self._policies[self._slot]

    def eviction_order(self) -> tuple[int, ...] | str:
        """The primary's policy (a deep copy) asked to evict every chunk whose ref count is 0;
        what it answers, or raises, as the check's text."""
        count = sum(self.ref_cnt(k) == 0 for k in self._keys)
        try:
            order = tiered_lookup_compat.eviction_order(self.primary, count)
        except Exception as error:  # noqa: BLE001 - the policy's own failure, reported
            return f"evict({count}) raised {type(error).__name__}: {error}"
        if order is None:
            return f"evict({count}) found fewer than {count} chunks to evict"
        return tuple(self._ints[k] for k in order)

    def recency_order(self) -> tuple[int, ...] | str:
        """The primary's policy (a deep copy, its readers released) asked to evict every
        written chunk; what it answers, or raises, as the check's text."""
        count = sum(self.ref_cnt(k) not in (None, -1) for k in self._keys)
        try:
            order = tiered_lookup_compat.recency_order(self.primary, self._keys.values())
        except Exception as error:  # noqa: BLE001 - the policy's own failure, reported
            return f"evict({count}) with no reader raised {type(error).__name__}: {error}"
        if order is None:
            return f"evict({count}) with no reader found fewer than {count} chunks to evict"
        return tuple(self._ints[k] for k in order)

    def read_chunk(self, key: int) -> int | None:
        chunk = self._chunk(key)
        if chunk is None or chunk.ref_cnt < 0:
            return None
        row = _words(self._chunks[tiered_lookup_compat.chunk_index(chunk)])
        owner = (row[0] - 1) // CHUNK_WORDS
        return owner if owner >= 0 and row == _payload(owner) else -1

    def pending_jobs(self) -> tuple[Job, ...]:
        if self.tier is None:
            return ()
        return tuple(Job(j, "promote" if job.is_promotion else "store",
                         tuple(self._ints[k] for k in job.keys))
                     for j, job in sorted(self.tier.queued.items()))

    def secondary_keys(self) -> tuple[int, ...]:
        return () if self.tier is None else tuple(sorted(self._ints[k] for k in self.tier.copies))

    # -- the manager's API ------------------------------------------------------------------

    def prepare_store(self, keys: Sequence[int]) -> StoreOutput | None:
        with self._locked():
            out = tiered_lookup_compat.keyed_call(self.manager, "prepare_store",
                                                  self._vkeys(keys), self._ctx)
        if out is None:
            return None
        to_store, evicted, chunk_ids = tiered_lookup_compat.store_output(out)
        stored = tuple(self._ints[k] for k in to_store)
        for i, chunk_id in zip(stored, chunk_ids, strict=True):
            self._store_chunk[i] = chunk_id
        return StoreOutput(stored, tuple(self._ints[k] for k in evicted))

    def complete_store(self, keys: Sequence[int], success: bool = True) -> None:
        for i in keys:
            chunk_id = self._store_chunk.pop(i, None)
            if success and chunk_id is not None and self.ref_cnt(i) == -1:
                self._chunks[chunk_id, :8 * CHUNK_WORDS] = np.frombuffer(
                    _bytes(_payload(i)), dtype=np.uint8)                       # GPU copy
        # The connector passes ``success`` only for a failed store (the default is success).
        outcome = {} if success else {"success": False}
        with self._locked():
            tiered_lookup_compat.keyed_call(self.manager, "complete_store", self._vkeys(keys),
                                            self._ctx, **outcome)

    def get_stats(self) -> CacheStats:
        """The manager's metrics payload and static facts, as counts of chunks."""
        with self._locked():
            stats = self.manager.get_stats()
            info = self.manager.config_info()
        types, values = stats.metric_sections()
        names = tiered_lookup_compat.cpu_metric_names()

        def gauge(name: str) -> int:
            return round(values[names[name]][()] * self.num_chunks)
        skipped = values.get(names["skipped"], {}).get(())
        return CacheStats(gauge("usage"), gauge("write"), gauge("read"),
                          tuple(values.get(names["allocation"], {}).get((), ())),
                          None if skipped is None else int(skipped),
                          tuple(tuple(sorted(series.items())) for series in info))

    def take_events(self) -> list[OffloadEvent]:
        with self._locked():
            events = list(self.manager.take_events())
        return [self._event(e) for e in events]

    def _event(self, event) -> OffloadEvent:
        keys = tuple(self._ints[k] for k in tiered_lookup_compat.event_keys(event))
        # A failed store's removal (``metadata_only``, 0.33.0 on) names a set of keys: the
        # tiering manager gathers a partly failed job's keys in a Python set, whose order
        # follows the bytes' hashes and so changes from run to run. They are named in key
        # order, as the model names them.
        if getattr(event, "metadata_only", False):
            keys = tuple(sorted(keys))
        return OffloadEvent(keys, bool(event.removed))

    def prepare_load(self, keys: Sequence[int]) -> None:
        with self._locked():
            tiered_lookup_compat.keyed_call(self.manager, "prepare_load", self._vkeys(keys),
                                            self._ctx)

    def complete_load(self, keys: Sequence[int]) -> None:
        with self._locked():
            tiered_lookup_compat.keyed_call(self.manager, "complete_load", self._vkeys(keys),
                                            self._ctx)

    def touch(self, keys: Sequence[int]) -> None:
        with self._locked():
            tiered_lookup_compat.keyed_call(self.manager, "touch", self._vkeys(keys), self._ctx)

    def lookup(self, key: int) -> LookupResult:
        with self._locked():
            answer = tiered_lookup_compat.lookup_one(self.manager, self._key(key), self._ctx)
            return LookupResult[answer]

    def on_schedule_end(self) -> None:
        if self.tier is not None and not hasattr(self.manager, "on_schedule_end"):
            self.tier.on_schedule_end()     # vLLM 0.22.x: the tier's step end is ours to play
        with self._locked():
            tiered_lookup_compat.end_step(self.manager, self._base)

    def complete_job(self, job_id: int, failed: Sequence[int] = ()) -> None:
        if self.tier is None:
            raise HarnessError("the primary tier alone has no secondary jobs")
        with self._locked():            # a tier-poll thread may be reading the tier's lists
            self.tier.complete(job_id, {self._key(k) for k in failed})

    def reset_cache(self) -> None:
        self._store_chunk.clear()
        with self._locked():
            self.manager.reset_cache()

    def tier_touches(self) -> list[tuple[int, ...]]:
        return [] if self.tier is None else [tuple(self._ints[k] for k in keys)
                                             for keys in self.tier.touches]

    def has_pending_work(self) -> bool:
        with self._locked():
            return bool(self.manager.has_pending_work())

    def shutdown(self) -> tuple[str, ...]:
        """``manager.shutdown()`` (without the lock: it takes it itself); what it released,
        in order. Our views of the primary's memory go first: the primary releases it."""
        self._chunks = None
        if self.tier is None:
            self.manager.shutdown()
            return ("primary",)
        self.tier.rows = None
        before = len(self._released)
        self.manager.shutdown()
        return tuple(self._released[before:])

    def load_source(self, key: int) -> str:
        with self._locked():
            source = self.manager.get_load_source(self._key(key), self._ctx)
        if self.tier is not None and source == self.tier.cache_hit_source:
            return "secondary"
        # The connector wraps the answer in ``CacheHitSource``: anything but HOST here is not
        # a source the CPU manager can have supplied.
        if source == tiered_lookup_compat.host_hit_source():
            return "primary"
        return f"unknown {source!r}"

    def on_reset_flushed(self) -> None:
        if not hasattr(self.manager, "on_reset_flushed"):
            return                          # before 0.33.0 a reset holds nothing to release
        with self._locked():
            self.manager.on_reset_flushed()

    # -- the connector's lookups, vLLM's own code on a stub self ----------------------------

    def _stub(self, made: list[tuple[int, LookupResult]]) -> Any:
        def lookup(key, ctx):
            answer = self.manager.lookup(key, ctx)
            made.append((self._ints[key], LookupResult[tiered_lookup_compat.lookup_answer(answer)]))
            return answer
        return tiered_lookup_compat.scan_self(lookup)

    def maximal_prefix_lookup(self, keys: Sequence[int]) -> Scan:
        made: list[tuple[int, LookupResult]] = []
        with self._locked():
            if self._scans is None:         # vLLM 0.11.0-0.19.x: the manager's prefix count
                result, answers = tiered_lookup_compat.manager_prefix_scan(self.manager,
                                                                           self._vkeys(keys))
                made = [(k, LookupResult[a]) for k, a in zip(keys, answers, strict=False)]
            else:
                result = tiered_lookup_compat.prefix_scan(self._scans, self._stub(made),
                                                          self._vkeys(keys), self._ctx)
        return _scan(result, made)

    def sliding_window_lookup(self, keys: Sequence[int], window: int,
                              initial_window: int | None = None) -> Scan:
        made: list[tuple[int, LookupResult]] = []
        with self._locked():
            result = tiered_lookup_compat.window_scan(self._scans, self._stub(made),
                                                      self._vkeys(keys), window, self._ctx,
                                                      initial_window)
        return _scan(result, made)


def _payload(key: int) -> list[int]:
    base = key * CHUNK_WORDS + 1
    return list(range(base, base + CHUNK_WORDS))


def _bytes(words: list[int]) -> bytes:
    return b"".join(w.to_bytes(8, "little") for w in words)


def _words(chunk) -> list[int]:
    raw = chunk[:8 * CHUNK_WORDS].tobytes()
    return [int.from_bytes(raw[8 * i:8 * i + 8], "little") for i in range(CHUNK_WORDS)]


def _scan(result: int | None, made: list[tuple[int, LookupResult]]) -> Scan:
    return Scan(result, tuple(k for k, _ in made), tuple(a for _, a in made))


def make_tiered_lookup(num_chunks: int, secondary: str = "none", eviction_policy: str = "lru",
                       store_threshold: int = 1, max_tracker_size: int = 64_000,
                       preloaded: Sequence[int] = (),
                       requests: Sequence[Sequence[int]] = (),
                       enable_events: bool = True,
                       unpositioned: Sequence[int] = ()) -> VllmTieredLookup:
    return VllmTieredLookup(num_chunks, secondary, eviction_policy, store_threshold,
                            max_tracker_size, preloaded, requests=requests,
                            enable_events=enable_events, unpositioned=unpositioned)
