"""Release differences of vLLM's KV offload as the tiered lookup drives it: the CPU
offloading manager (LRU, ARC, the store filter), the tiering manager over a scripted
secondary tier, and the offloading connector's scans; one small function each.

Every function is tagged with the releases it covers (``# vLLM <version>:``); generations were
read from the released wheels (0.11.0 ... 0.33.0), and boundaries between releases we did not
read are detected on the installed classes where a signature shows them.

Also the model semantics chosen per release (``model_semantics``, ``MODEL_OPTIONS``): where an
older release meant something else on purpose, the model checks it against its own meaning.
"""

from __future__ import annotations

import copy
import inspect
from collections.abc import Iterable
from types import SimpleNamespace
from typing import Any

from sim.errors import CapabilityMissing
from sim.vllm import release

# -- KV offload: the managers' home, construction and call shapes (vllm/v1/kv_offload) ---------
#
# Generations read from the released wheels (0.11.0 ... 0.33.0); boundaries between releases we
# did not read are detected on the installed classes where a signature shows them.


OFFLOAD_FROM = "0.11.0"


def offload_base() -> Any:
    """The module of the offload value types (``ReqContext``, ``LookupResult``, keys).

    # vLLM >=0.21.0: ``vllm.v1.kv_offload.base``.
    # vLLM 0.11.0-0.20.x: ``vllm.v1.kv_offload.abstract``.
    # vLLM 0.10.x: no KV offload (``CapabilityMissing``).
    """
    for name in ("vllm.v1.kv_offload.base", "vllm.v1.kv_offload.abstract"):
        if release.has_module(name):
            return release.import_module(name)
    raise CapabilityMissing(f"KV offload: vLLM {release.release()} has no vllm/v1/kv_offload "
                            f"(first in {OFFLOAD_FROM})")


def count_kwarg(manager_cls: type) -> str:
    """The constructor's capacity keyword.

    # vLLM >=0.30.0: ``num_chunks``.
    # vLLM 0.19.0-0.29.x: ``num_blocks`` (PR renaming blocks to chunks came in 0.30.0).
    """
    params = inspect.signature(manager_cls.__init__).parameters
    return "num_chunks" if "num_chunks" in params else "num_blocks"


ARC_SHIPPED = "0.11.1"       # ``arc_manager.ARCOffloadingManager``; ``cpu/policies/arc.py`` 0.19
STORE_FILTER_FROM = "0.18.0"  # ``reuse_manager.FilterReusedOffloadingManager``
STORE_FILTER_IN_MANAGER = "0.22.0"   # ``CPUOffloadingManager(store_threshold=...)``


def primary_manager(num_chunks: int, eviction_policy: str = "lru", enable_events: bool = True,
                    **admission: int) -> Any:
    """The CPU offloading manager alone, LRU or ARC, with events on unless ``enable_events``
    is False (the connector's default: KV cache events off), then built as the connector
    builds it, without the argument; with a store filter where ``store_threshold`` >= 2.

    # vLLM >=0.19.0: ``cpu.manager.CPUOffloadingManager(num_blocks|num_chunks=n,
    #   cache_policy=...)`` (0.19.x also takes the block size first).
    # vLLM 0.11.0-0.18.x: ``lru_manager.LRUOffloadingManager`` or (from 0.11.1)
    #   ``arc_manager.ARCOffloadingManager`` over ``CPUBackend(block_size, n)``: the manager
    #   over a pluggable backend that hands out block ids (ARC read and run in 0.14.0 and
    #   0.17.0; its meanings in ``model_semantics``; what it does wrong stays a divergence:
    #   0.14.0's ``touch`` of a chunk being written raises, its refused store evicts anyway).
    # The store filter: from 0.22.0 the manager's own (``store_threshold``,
    #   ``max_tracker_size``); 0.18.0-0.21.x ``reuse_manager.FilterReusedOffloadingManager``
    #   wrapped around the manager, as ``cpu.py`` / ``cpu/spec.py`` build it (``backing``
    #   unwraps it); before 0.18.0 there is none.
    """
    events = {"enable_events": True} if enable_events else {}
    threshold = admission.get("store_threshold", 1)
    if release.has_module("vllm.v1.kv_offload.cpu.manager"):
        cls = release.import_module("vllm.v1.kv_offload.cpu.manager").CPUOffloadingManager
        params = inspect.signature(cls.__init__).parameters
        sized = {count_kwarg(cls): num_chunks}
        if "block_size" in params:            # vLLM 0.19.x
            sized["block_size"] = 16
        policy = {} if eviction_policy == "lru" else {"cache_policy": eviction_policy}
        if threshold > 1 and "store_threshold" in params:
            return cls(**sized, **policy, **events, **admission)
        return _store_filter(cls(**sized, **policy, **events), admission)
    if eviction_policy != "lru":
        found = release.release()
        if not release.has_module("vllm.v1.kv_offload.arc_manager"):
            raise CapabilityMissing(f"ARC: vLLM {found} has no ARC policy (first in "
                                    f"{ARC_SHIPPED}: arc_manager.py)")
        managers = release.import_module("vllm.v1.kv_offload.arc_manager")
        manager_cls = managers.ARCOffloadingManager
    else:
        manager_cls = release.import_module("vllm.v1.kv_offload.lru_manager").LRUOffloadingManager
    backends = release.import_module("vllm.v1.kv_offload.backends.cpu")
    manager = manager_cls(backends.CPUBackend(block_size=16, num_blocks=num_chunks), **events)
    return _store_filter(manager, admission)


def _store_filter(manager: Any, admission: dict[str, int]) -> Any:
    """``manager`` behind the release's store filter when filtering is asked for (a threshold
    of 2 or more), as the connector's spec wraps it; the manager itself otherwise.

    # vLLM 0.18.0-0.21.x: ``FilterReusedOffloadingManager(backing, store_threshold,
    #   max_tracker_size)``. Older: no filter (``CapabilityMissing``: absent).
    """
    if admission.get("store_threshold", 1) <= 1:
        return manager
    if not release.has_module("vllm.v1.kv_offload.reuse_manager"):
        raise CapabilityMissing(f"store filter: vLLM {release.release()} has none "
                                f"(reuse_manager.py first ships in {STORE_FILTER_FROM})")
    reuse = release.import_module("vllm.v1.kv_offload.reuse_manager")
    return reuse.FilterReusedOffloadingManager(manager, **admission)


def backing(manager: Any) -> Any:
    """The manager that holds the chunks: the store filter's backing manager where the
    filter wraps one (vLLM 0.18.0-0.21.x), else ``manager`` itself. Private field."""
    return getattr(manager, "_backing", manager)


def cpu_metric_names() -> dict[str, str]:
    """The CPU manager's metric names in its ``get_stats`` payload.

    # vLLM >=0.33.0: ``cpu.common.CPUOffloadingMetrics`` (usage, write / read usage,
    #   allocation sizes, stores skipped).
    """
    metrics = release.import_module("vllm.v1.kv_offload.cpu.common").CPUOffloadingMetrics
    return {"usage": metrics.CPU_CACHE_USAGE_PERC, "write": metrics.CPU_CACHE_WRITE_USAGE_PERC,
            "read": metrics.CPU_CACHE_READ_USAGE_PERC,
            "allocation": metrics.CPU_ALLOCATION_SIZE, "skipped": metrics.STORES_SKIPPED}


def offload_key(base: Any, i: int) -> Any:
    """The key the manager files block ``i`` under.

    # vLLM >=0.20.0: ``make_offload_key(block_hash, group_idx)`` (hash bytes + group id).
    # vLLM 0.11.0-0.19.x: the block hash itself (``BlockHash``: bytes).
    """
    block_hash = i.to_bytes(8, "big")
    make = getattr(base, "make_offload_key", None)
    return make(block_hash, 0) if make is not None else block_hash


def request_context(base: Any, req_id: str) -> Any:
    """The per-request context passed to the manager's calls.

    # vLLM >=0.22.0: ``ReqContext(req_id=...)``.
    # vLLM 0.20.x-0.21.x: ``ReqContext()`` (kv_transfer_params only).
    # vLLM 0.11.0-0.19.x: none (calls take the keys alone).
    """
    cls = getattr(base, "ReqContext", None)
    if cls is None:
        return None
    params = inspect.signature(cls).parameters
    return cls(req_id=req_id) if "req_id" in params else cls()


KEY_POSITIONS_FROM = "0.33.0"


def set_key_positions(ctx: Any, positions: dict[Any, int]) -> None:
    """Record each key's end-token position on the request's context, as the connector does
    when it learns the request's block hashes (``models/tiered_lookup_access.py``).

    # vLLM >=0.33.0: ``ReqContext.set_offload_key_position(key, end_token)``; LRU ranks a
    #   running request's chunks by it (tails evicted before heads).
    # vLLM <0.33.0: not set (the model's ``request_positions=False``); releases before 0.33.0
    #   that have the method are unread: their LRU is not mapped to positions.
    """
    if ctx is None or not release.at_least(KEY_POSITIONS_FROM):
        return
    for key, end_token in positions.items():
        ctx.set_offload_key_position(key, end_token)


def keyed_call(manager: Any, name: str, keys: list, ctx: Any, **kwargs: Any) -> Any:
    """``manager.<name>(keys[, ctx], **kwargs)``, with the request context where it is taken.

    # vLLM >=0.22.0: every keyed call takes ``req_context`` after the keys.
    # vLLM 0.20.x-0.21.x: ``prepare_load`` / ``prepare_store`` take it; ``touch``,
    #   ``complete_load`` and ``complete_store`` do not.
    # vLLM 0.11.0-0.19.x: no call takes one.
    """
    method = getattr(manager, name)
    if "req_context" in inspect.signature(method).parameters:
        return method(keys, ctx, **kwargs)
    return method(keys, **kwargs)


def start_request(manager: Any, ctx: Any) -> str | None:
    """Announce the request before its first store; how the manager says to offload it:
    "chunk" (chunk by chunk), "request" (whole requests), "none" (it answered no context);
    None where there is no such call.

    # vLLM >=0.24.0: ``on_new_request(ctx)`` returns a ``RequestOffloadingContext`` whose
    #   ``policy`` the connector reads (the tiering manager needs the call before
    #   ``prepare_store``). Its per-chunk policy is ``CHUNK_LEVEL`` from 0.30.0,
    #   ``BLOCK_LEVEL`` before.
    # vLLM 0.11.0-0.23.x: no such call.
    """
    if not hasattr(manager, "on_new_request"):
        return None
    policy = getattr(manager.on_new_request(ctx), "policy", None)
    if policy is None:
        return "none"
    return "request" if policy.name == "REQUEST_LEVEL" else "chunk"


def lookup_answer(raw: Any) -> str:
    """A lookup's answer as a ``LookupResult`` name (``HIT``, ``HIT_PENDING``, ``RETRY``,
    ``MISS``): the shape differs by release, the vocabulary is translated.

    # vLLM >=0.25.0: ``LookupResult`` (PR #46363).
    # vLLM 0.15.0-0.24.x: ``None`` = retry later; 0.20.0-0.24.x per key ``True`` / ``False``.
    # vLLM 0.11.0-0.19.x: a prefix count; asked of one key (``lookup_one``) it is 1 or 0.
    """
    if raw is None:
        return "RETRY"
    name = getattr(raw, "name", None)
    if name is not None:
        return name
    return "HIT" if raw else "MISS"          # True / False, or a count of 1 / 0


def lookup_one(manager: Any, key: Any, ctx: Any) -> str:
    """Look one key up; its ``LookupResult`` name.

    # vLLM >=0.20.0: ``lookup(key, req_context)``, one key.
    # vLLM 0.11.0-0.19.x: ``lookup(block_hashes) -> int``, the length of the offloaded prefix:
    #   asked for the one-key prefix ``[key]`` it answers 1 (hit) or 0.
    """
    params = inspect.signature(manager.lookup).parameters
    if "req_context" in params:
        return lookup_answer(manager.lookup(key, ctx))
    return lookup_answer(manager.lookup([key]))


def store_output(out: Any) -> tuple[list, list, list[int]]:
    """``prepare_store``'s output: (keys to store, evicted keys, chunk ids written to).

    # vLLM >=0.20.0: ``keys_to_store`` / ``evicted_keys``.
    # vLLM 0.11.0-0.19.x: ``block_hashes_to_store`` / ``block_hashes_evicted``.
    # Every release: ``store_spec.block_ids`` (the CPU chunk ids).
    """
    stored = getattr(out, "keys_to_store", None)
    if stored is None:
        stored, evicted = out.block_hashes_to_store, out.block_hashes_evicted
    else:
        evicted = out.evicted_keys
    return list(stored), list(evicted), [int(c) for c in out.store_spec.block_ids]


def event_keys(event: Any) -> list:
    """An offloading event's keys.

    # vLLM >=0.20.0: ``keys``. vLLM 0.11.0-0.19.x: ``block_hashes``.
    """
    keys = getattr(event, "keys", None)
    return list(keys if keys is not None else event.block_hashes)


def eviction_order(manager: Any, count: int) -> list[Any]:
    """The keys the manager's eviction policy would evict, in order, were it asked for
    ``count`` chunks now with none protected: asked of a deep copy, so the real policy (and
    the chunks it shares with the manager) is untouched. Private fields.

    # vLLM >=0.19.0: ``manager._policy.evict(n, protected)`` returns (key, chunk) pairs, or
    #   None when fewer than n can go (LRU's lazy heap, ARC's T1 / T2 lists and target).
    # vLLM 0.11.0-0.18.x: eviction lives inside the manager's ``prepare_store``: a deep copy
    #   of the manager is asked to store as many fresh keys as its free chunks plus ``count``
    #   (keys of 9 bytes: no real block hash here has that length); what it evicts, in
    #   order, or None where it refuses the store.
    """
    policy = getattr(manager, "_policy", None)
    if policy is not None:
        victims = copy.deepcopy(policy).evict(count, set())
        return None if victims is None else [key for key, _ in victims]
    probe = copy.deepcopy(manager)
    fresh = [b"\xff" + i.to_bytes(8, "big") for i in range(num_free_chunks(probe) + count)]
    if not fresh:
        return []
    out = probe.prepare_store(fresh)
    return None if out is None else store_output(out)[1]


def recency_order(manager: Any, keys: Iterable[Any]) -> list[Any] | None:
    """As ``eviction_order`` over every written chunk of ``keys``, were nothing reading them:
    in the deep copy each read chunk's ref count drops to 0 and the policy is told it became
    evictable. Private fields.

    # vLLM >=0.33.0: ``ChunkStatus.ref_cnt`` (-1 write pending, n readers); LRU keeps a read
    #   chunk's rank (``mark_evictable`` pushes it back), ARC skips ref_cnt != 0 when it evicts.
    # vLLM <0.33.0: not read (``missing_offload_calls``: "eviction_order").
    """
    policy = copy.deepcopy(manager._policy)
    written = 0
    for key in keys:
        chunk = policy.get(key)
        if chunk is None or chunk.ref_cnt < 0:
            continue
        written += 1
        if chunk.ref_cnt > 0:
            chunk.ref_cnt = 0
            policy.mark_evictable(key)
    victims = policy.evict(written, set())
    return None if victims is None else [key for key, _ in victims]


def arc_memory(manager: Any) -> tuple[list[Any], list[Any], float] | None:
    """ARC's ghost lists, least recent first, and T1's target (None for another policy).
    Private fields.

    # vLLM >=0.19.0: ``ARCCachePolicy.b1`` / ``b2`` (ordered dicts) and ``target_t1_size``.
    # vLLM 0.11.1-0.18.x: the same fields on ``ARCOffloadingManager`` itself.
    """
    policy = getattr(manager, "_policy", manager)
    if not hasattr(policy, "target_t1_size"):
        return None
    return list(policy.b1), list(policy.b2), float(policy.target_t1_size)


def chunk_status(manager: Any, key: Any) -> Any:
    """The manager's record for ``key`` (``ref_cnt``; None when absent); private fields.

    # vLLM >=0.19.0: ``manager._policy.get(key)`` (the cache policy holds the chunks).
    # vLLM 0.11.0-0.18.x: ``manager.blocks.get(key)`` (LRU: an OrderedDict in LRU order);
    #   ARC's ``t1`` / ``t2`` (from 0.11.1).
    """
    policy = getattr(manager, "_policy", None)
    if policy is not None:
        return policy.get(key)
    if hasattr(manager, "blocks"):
        return manager.blocks.get(key)
    return manager.t1.get(key) or manager.t2.get(key)


def chunk_index(chunk: Any) -> int:
    """Where a chunk's bytes live.

    # vLLM >=0.30.0: ``chunk_id``. vLLM 0.11.0-0.29.x: ``block_id``.
    """
    index = getattr(chunk, "chunk_id", None)
    return int(index if index is not None else chunk.block_id)


def num_free_chunks(manager: Any) -> int:
    """Unallocated chunks (private helpers).

    # vLLM >=0.30.0: ``_get_num_free_chunks()``. 0.19.0-0.29.x: ``_get_num_free_blocks()``.
    # vLLM 0.11.0-0.18.x: ``backend.get_num_free_blocks()``.
    """
    for name in ("_get_num_free_chunks", "_get_num_free_blocks"):
        method = getattr(manager, name, None)
        if method is not None:
            return method()
    return manager.backend.get_num_free_blocks()


def end_step(manager: Any, base: Any) -> None:
    """The scheduler step ends.

    # vLLM >=0.26.0: ``on_schedule_end(ScheduleEndContext(new_req_ids, preempted_req_ids))``.
    # vLLM 0.24.x-0.25.x: ``on_schedule_end()``.
    # vLLM 0.11.0-0.23.x: no such call (the CPU manager has nothing to do at a step's end;
    #   0.22.x's tiering manager ends its step in ``take_events``, which the step calls next).
    """
    method = getattr(manager, "on_schedule_end", None)
    if method is None:
        return
    if "context" in inspect.signature(method).parameters:
        method(base.ScheduleEndContext(new_req_ids=(), preempted_req_ids=()))
    else:
        method()


# -- KV offload: tiering (vllm/v1/kv_offload/tiering, from 0.22.0) -----------------------------

TIERING_FROM = "0.22.0"


def tiering_manager_module() -> Any:
    """``vllm.v1.kv_offload.tiering.manager``.

    # vLLM >=0.22.0: present. vLLM 0.11.0-0.21.x: absent: a secondary tier cannot be driven
    #   (``CapabilityMissing``: the machine skips those worlds and reports why).
    """
    if not release.has_module("vllm.v1.kv_offload.tiering.manager"):
        raise CapabilityMissing(
            f"secondary tiers: vLLM {release.release()} has no TieringOffloadingManager "
            f"(vllm/v1/kv_offload/tiering/ first ships in {TIERING_FROM})")
    return release.import_module("vllm.v1.kv_offload.tiering.manager")


POLL_TIERS_FROM = "0.33.0"


def tier_facing_manager_module() -> Any:
    """The tiering manager's module, with the tier-facing API the tiering layer's machine
    drives (request-level tiers, peers served through a ``ParentManager``, ``poll_tiers``,
    the tiering metrics).

    # vLLM >=0.33.0: ``TieringOffloadingManager.poll_tiers``. Before: ``CapabilityMissing``.
    """
    module = tiering_manager_module()
    if not hasattr(module.TieringOffloadingManager, "poll_tiers"):
        raise CapabilityMissing(
            f"the tiering layer's tier-facing API: vLLM {release.release()}'s tiering manager "
            f"has no poll_tiers (peers served off-step, request-level tiers: from "
            f"{POLL_TIERS_FROM})")
    return module


def polled_tiering_manager(module: Any, primary: Any, tiers: list,
                           tier_poll_interval_s: float) -> Any:
    """``TieringOffloadingManager`` with its tier-poll thread's interval (0: no thread).

    # vLLM >=0.33.0: ``tier_poll_interval_s`` (``tier_facing_manager_module`` checks the
    #   release first).
    """
    return module.TieringOffloadingManager(primary, tiers,
                                           tier_poll_interval_s=tier_poll_interval_s)


def tiering_base() -> Any:
    """``vllm.v1.kv_offload.tiering.base`` (``SecondaryTierManager``, ``JobResult``); every
    release with tiering (0.22.0 on)."""
    return release.import_module("vllm.v1.kv_offload.tiering.base")


def tiering_manager(module: Any, primary: Any, tiers: list) -> Any:
    """``TieringOffloadingManager(primary, tiers)``.

    # vLLM 0.22.0-0.25.x: also ``enable_events`` (its own list, never filled: the primary's
    #   events are the ones yielded), left off.
    # vLLM >=0.33.0: also ``tier_poll_interval_s``; a poll thread starts only for tiers with
    #   ``tolerates_off_thread_polling`` (not the harness's).
    """
    return module.TieringOffloadingManager(primary, tiers)


def tier_answer(base: Any, found: bool | None) -> Any:
    """A secondary tier's lookup answer: found, absent, or None (probe unresolved).

    # vLLM >=0.25.0: ``LookupResult`` HIT / MISS / RETRY.
    # vLLM 0.22.0-0.24.x: True / False / None.
    """
    result = getattr(base, "LookupResult", None)
    if result is None:
        return found
    return result.RETRY if found is None else result.HIT if found else result.MISS


def job_chunk_ids(job: Any) -> Any:
    """The primary chunks a secondary job reads or writes.

    # vLLM >=0.30.0: ``chunk_ids``. vLLM 0.22.0-0.29.x: ``block_ids``.
    """
    ids = getattr(job, "chunk_ids", None)
    return ids if ids is not None else job.block_ids


# -- KV offload: the connector's scans (offloading/scheduler.py, from 0.20.0) ------------------

SCANS_FROM = "0.20.0"
SCANS_MODULE = "vllm.distributed.kv_transfer.kv_connector.v1.offloading.scheduler"


def connector_scans() -> Any:
    """``OffloadingConnectorScheduler`` with ``_maximal_prefix_lookup`` and
    ``_sliding_window_lookup``, or None.

    # vLLM >=0.20.0: the scans are the connector's own helpers over per-key lookups.
    # vLLM 0.11.0-0.19.x: None: the connector asks the manager for a prefix count
    #   (``manager_prefix_scan``) and has no sliding-window scan.
    """
    if not release.has_module(SCANS_MODULE):
        return None
    cls = release.import_module(SCANS_MODULE).OffloadingConnectorScheduler
    return cls if hasattr(cls, "_maximal_prefix_lookup") else None


def manager_prefix_scan(manager: Any, keys: list) -> tuple[int | None, list[str]]:
    """The maximal-prefix scan of a release before the connector had one: the manager's
    ``lookup(block_hashes) -> int`` (``-> int | None`` from 0.15.0), "the length of the
    maximal series of blocks, starting from the first one, that are all offloaded".

    # vLLM 0.11.0-0.19.x. Returns the count and the answers it implies: HIT for the counted
    #   keys and MISS for the one that stopped it (the count's meaning; the keys the manager
    #   examined are not observable). None (retry later) implies nothing about the keys.
    """
    count = manager.lookup(keys)
    if count is None:
        return None, []
    return count, ["HIT"] * count + (["MISS"] if count < len(keys) else [])


def scan_self(lookup: Any) -> Any:
    """The stub ``self`` the connector's scans run on, unbound: its manager looks keys up with
    ``lookup(key, req_context)``; the fields of the connector the scans read, nothing else.

    # vLLM >=0.28.0: the scans also record each hit on ``self._events_tracker`` (private):
    #   ``record_lookup(req, group_config, chunk_idx, key)``, a no-op here.
    # vLLM 0.20.0-0.27.x: ``self.manager`` alone.
    """
    return SimpleNamespace(
        manager=SimpleNamespace(lookup=lookup),
        _events_tracker=SimpleNamespace(record_lookup=lambda req, g, idx, key: None))


def prefix_scan(scans: Any, stub: Any, keys: list, ctx: Any) -> int | None:
    """``_maximal_prefix_lookup`` on a stub ``self``.

    # vLLM >=0.28.0: (keys, req_context, req, group_config, start_chunk_idx); it records
    #   each hit with ``self._events_tracker.record_lookup``.
    # vLLM 0.20.0-0.27.x: (keys, req_context).
    """
    params = inspect.signature(scans._maximal_prefix_lookup).parameters
    if "start_chunk_idx" in params:
        return scans._maximal_prefix_lookup(stub, keys, ctx, None, None, 0)
    return scans._maximal_prefix_lookup(stub, keys, ctx)


def window_scan(scans: Any, stub: Any, keys: list, window: int, ctx: Any,
                initial_window: int | None) -> int | None:
    """``_sliding_window_lookup`` on a stub ``self``.

    # vLLM >=0.30.0: (keys, sliding_window_size, req_context, initial_window_size).
    # vLLM 0.20.0-0.29.x: (keys, sliding_window_size, req_context): no larger first window
    #   (``missing_offload_calls`` says so, and the machine asks for none).
    """
    params = inspect.signature(scans._sliding_window_lookup).parameters
    if "initial_window_size" in params:
        return scans._sliding_window_lookup(stub, keys, window, ctx, initial_window)
    if initial_window is not None:
        raise CapabilityMissing(f"initial_window: vLLM {release.release()}'s sliding-window "
                                "scan takes no initial window (added in 0.30.0)")
    return scans._sliding_window_lookup(stub, keys, window, ctx)


def job_result(tiering: Any, job_id: int, copied: list, num_keys: int) -> Any:
    """A tier's ``JobResult`` for a job that copied ``copied`` of its ``num_keys`` keys.

    # vLLM >=0.28.0: ``successful_keys`` names what a failed job still copied.
    # vLLM 0.22.0-0.26.x: success or not, for the whole job (``missing_offload_calls`` says
    #   "partial_job_result", and the machine fails a job whole).
    """
    if len(copied) == num_keys:
        return tiering.JobResult(job_id=job_id, success=True)
    if copied:
        return tiering.JobResult(job_id=job_id, success=False, successful_keys=copied)
    return tiering.JobResult(job_id=job_id, success=False)


def host_hit_source() -> Any:
    """The cache-hit source of a hit the CPU manager itself supplied: HOST.

    # vLLM >=0.32.0: ``CacheHitSource.HOST``. vLLM <0.32.0: none (no ``get_load_source``).
    """
    if not release.has_module("vllm.v1.metrics.cache_hit_source"):
        return None
    return release.import_module("vllm.v1.metrics.cache_hit_source").CacheHitSource.HOST


def tier_hit_source(kind: str = "DISK") -> Any:
    """The cache-hit source a harness-played secondary tier reports (DISK unless told: the
    tiering world's two tiers report DISK and P2P, so a hit's source names its tier).

    # vLLM >=0.32.0: ``vllm.v1.metrics.cache_hit_source`` (``get_load_source``).
    # vLLM <0.32.0: none (``missing_offload_calls`` says "load_source").
    """
    if not release.has_module("vllm.v1.metrics.cache_hit_source"):
        return None
    return getattr(release.import_module("vllm.v1.metrics.cache_hit_source").CacheHitSource,
                   kind)


def tier_medium(kind: str = "CPU") -> Any:
    """A harness-played tier's ``medium`` (CPU unless told).

    # vLLM >=0.25.0: ``Medium`` (load tier filters match on it). Before: none (None).
    """
    medium = getattr(offload_base(), "Medium", None)
    return medium and getattr(medium, kind)


def told_job_result(tiering: Any, job_id: int, success: bool, copied: list,
                    transfer_bytes: int | None) -> Any:
    """A tier's ``JobResult`` as the test tells it: ``copied`` named only when it failed.

    # vLLM >=0.33.0 (the tiering world's release): ``successful_keys``, ``transfer_bytes``.
    """
    return tiering.JobResult(job_id=job_id, success=success,
                             successful_keys=None if success else copied,
                             transfer_bytes=transfer_bytes)


def tier_event(keys: list, medium: Any, tier: str) -> Any:
    """The event a tier yields for keys it stored, owned by ``tier``.

    # vLLM >=0.33.0 (the tiering world's release): ``OffloadingEvent(ownership=...)``.
    """
    return offload_base().OffloadingEvent(keys=keys, medium=medium, removed=False,
                                          ownership=tier)


def request_offloading_context(request_level: bool) -> Any:
    """A tier's ``on_new_request`` answer: its offload policy for the request.

    # vLLM >=0.33.0: ``RequestOffloadingContext(policy=...)``, chunk-level by default.
    # vLLM 0.22.0-0.32.x: no answer (None); a request-level tier needs 0.33.0.
    """
    base = offload_base()
    context = getattr(base, "RequestOffloadingContext", None)
    if context is None:
        return None
    return context(policy=base.OffloadPolicy.REQUEST_LEVEL) if request_level else context()


def connector_stats() -> Any:
    """An empty ``OffloadingConnectorStats``, for a tier's ``get_stats`` (0.33.0 on)."""
    return release.import_module(
        "vllm.distributed.kv_transfer.kv_connector.v1.offloading.metrics"
    ).OffloadingConnectorStats()


def backpressure_module() -> Any:
    """``vllm.v1.kv_offload.tiering.backpressure`` (``BackpressureDetector``,
    ``DropStorePolicy``), 0.33.0 on."""
    return release.import_module("vllm.v1.kv_offload.tiering.backpressure")


REQUEST_ACCESS_FROM = "0.33.0"    # request-scoped accesses, LRU ranks and metrics, as driven


def _not_mapped(release_has_it: bool, why: str) -> str:
    """A call the machine does not make: ``unavailable: ...`` where the release has it (the
    harness cannot drive it yet, ``NotDriven``'s word), else the bare reason (absent)."""
    return f"unavailable: {why}" if release_has_it else why


def missing_offload_calls(manager: Any, scans: Any) -> dict[str, str]:
    """Calls the machine may make that this release lacks: name -> reason.

    # vLLM 0.11.0-0.19.x: no sliding-window scan (the connector had none before 0.20.0).
    # vLLM 0.20.0-0.29.x: no initial (larger) window for the rightmost run.
    # vLLM 0.11.0-0.21.x: no ``reset_cache`` (0.24.0 for the tiering manager).
    # vLLM >=0.34.0: no ``touch``.
    (``on_reset_flushed``, from 0.33.0, is no gap: before it a reset held nothing to release,
    ``model_semantics``'s ``reset_holds_promotions``.)
    """
    found = release.release()
    missing: dict[str, str] = {}
    if scans is None:
        missing["sliding_window_lookup"] = (f"sliding_window_lookup: vLLM {found}'s connector "
                                            f"has no sliding-window scan (from {SCANS_FROM})")
    elif "initial_window_size" not in inspect.signature(scans._sliding_window_lookup).parameters:
        missing["initial_window"] = (f"initial_window: vLLM {found}'s sliding-window scan "
                                     "takes no larger first window (from 0.30.0)")
    # vLLM >=0.33.0: a finished request's accesses reorder the CPU manager's cache (what the
    #   model's ``finish_request`` states). 0.24.0-0.32.x have the hook with other meanings
    #   (a no-op on the base class; 0.31.0's first request-scoped version): not yet mapped,
    #   so ``unavailable``; before 0.24.0 there is no hook (absent).
    cpu = backing(manager)
    if not hasattr(manager, "get_stats") or not hasattr(manager, "config_info") or \
            not release.at_least(REQUEST_ACCESS_FROM, found):
        missing["get_stats"] = _not_mapped(
            hasattr(manager, "get_stats"), f"get_stats: vLLM {found}'s CPU manager metrics "
            f"are not mapped (the harness reads them from {REQUEST_ACCESS_FROM})")
    # The policy's eviction order, read after every step: ARC's on every release that has it
    #   (its T1 / T2 lists and target mean the same from 0.11.1, ``model_semantics``); LRU's
    #   from 0.33.0 only (0.22.0-0.32.x order by other rules: touches, evictable-only
    #   recency, a lazy heap). The tiering manager's primary is read too: it is a CPU
    #   manager, and the tiering manager must pass touches on to it.
    if arc_memory(cpu) is None and \
            not release.at_least(REQUEST_ACCESS_FROM, found):
        missing["eviction_order"] = _not_mapped(
            True, f"eviction_order: vLLM {found}'s LRU order is not read (the harness reads "
            f"LRU's from {REQUEST_ACCESS_FROM}; ARC's on every release)")
    if not release.at_least(REQUEST_ACCESS_FROM, found):
        missing["finish_request"] = _not_mapped(
            hasattr(cpu, "on_request_finished"), f"finish_request: vLLM {found}'s "
            f"request-scoped cache accesses are not mapped (the harness drives them from "
            f"{REQUEST_ACCESS_FROM})")
        missing["refinish_request"] = missing["finish_request"]
    tiering = release.import_module("vllm.v1.kv_offload.tiering.base") if hasattr(
        manager, "secondary_tiers") else None
    if tiering is not None and "successful_keys" not in getattr(
            tiering.JobResult, "__dataclass_fields__", {}):
        missing["partial_job_result"] = (f"partial_job_result: vLLM {found}'s tier reports a "
                                         "job's success whole (successful_keys from 0.28.0)")
    # vLLM 0.11.0-0.23.x: the CPU manager alone has no ``has_pending_work`` either (it runs
    #   no jobs of its own): not asked.
    if not hasattr(manager, "has_pending_work") and tiering is None:
        missing["has_pending_work"] = (f"has_pending_work: vLLM {found}'s CPU manager cannot "
                                       "say (from 0.24.0)")
    if tiering is not None and not hasattr(manager, "has_pending_work"):
        missing["has_pending_work"] = (f"has_pending_work: vLLM {found}'s tiering manager "
                                       "cannot say (from 0.24.0)")
    if not hasattr(manager, "get_load_source"):
        missing["load_source"] = (f"load_source: vLLM {found}'s offloading manager keeps no "
                                  "load source (get_load_source from 0.32.0)")
    if not hasattr(manager, "reset_cache"):
        missing["reset_cache"] = (f"reset_cache: vLLM {found}'s {type(manager).__name__} "
                                  "has no reset_cache")
    missing.update(missing_touch(manager))
    return missing


def missing_touch(manager: Any) -> dict[str, str]:
    """``{"touch": reason}`` where the manager (the CPU one, or the tiering one) has no
    ``touch``, else nothing.

    # vLLM >=0.34.0: removed: only a request's own accesses order the cache (its loads and
    #   offers, committed when it finishes: ``finish_request``).
    # vLLM 0.11.0-0.33.x: ``touch(keys[, req_context])``.
    """
    if hasattr(manager, "touch"):
        return {}
    return {"touch": f"touch: vLLM {release.release()}'s {type(manager).__name__} has no "
                     "touch (removed in 0.34.0: a request's loads and offers order the cache)"}


def scripted_answer(base: Any, name: str) -> Any:
    """What a manager of this release returns for the ``LookupResult`` ``name`` (a scripted
    manager's answer in the release's vocabulary).

    # vLLM >=0.25.0: the ``LookupResult`` itself.
    # vLLM 0.20.0-0.24.x: HIT True, MISS False, HIT_PENDING and RETRY None ("retry later":
    #   the one "not yet" answer the bool API had).
    """
    result = getattr(base, "LookupResult", None)
    if result is not None:
        return result[name]
    return {"HIT": True, "MISS": False}.get(name)


# -- model semantics chosen by the release ----------------------------------------------------
#
# Not an API shape: what the model itself checks. Where an older release meant something else
# on purpose, the adapter hands the model that release's meaning as a named option, so the
# release is checked against its own semantics rather than reported for a design it never had.
# That is a change of meaning, never a bug fix: a behaviour upstream later called a fix stays
# a divergence on the releases that have it, and ``MODEL_OPTIONS`` cites, for every option,
# the upstream change (or its absence) that makes it a meaning or a vocabulary.


def model_semantics(found: str) -> dict[str, Any]:
    """Model options for what release ``found`` meant (changed on purpose upstream), so the
    model checks an older release against its own semantics.

    - ``pending_lookup``: what a chunk whose write is in flight answers.
      # vLLM >=0.25.0: HIT_PENDING (PR #46363).
      # vLLM 0.22.0-0.24.x: None, "write in flight; retry": the API's word, not a meaning
      #   (``answer_vocabulary``); the scans' handling of it was the bug #46363 fixed.
      # vLLM 0.11.0-0.21.x: not ready is not offloaded (MISS).
    - ``answer_vocabulary``: "bool|None" where the lookup API returns ``bool | None``: its
      None says HIT_PENDING and RETRY alike. # vLLM 0.22.0-0.24.x (drivable with tiering).
    - ``promotion_answers_retry``: a promotion that starts answers RETRY, not HIT_PENDING.
      # vLLM 0.22.0-0.24.x: None ("retry later"; tiering answered bool | None).
      # vLLM 0.25.0-0.27.x: ``LookupResult.RETRY`` (seed 001's version of PR #46363; read in
      #   0.26.0, 0.25.x and 0.27.x unread). vLLM >=0.28.0: HIT_PENDING.
    - ``failed_store_events``: a failed store's removal is an event (``metadata_only``).
      # vLLM >=0.33.0. Older: no event.
    - ``reset_holds_promotions``: after ``reset_cache`` promotions wait for
      ``on_reset_flushed``. # vLLM >=0.33.0. Older: there is no hold.
    - ``store_poll_gated``: ``prepare_store`` polls finished jobs only if nothing polled since
      the step began. # vLLM 0.22.0-0.32.x (the connector called it first thing after
      ``on_schedule_end``; 0.33.0 moved that call to the step's end and polls always).
    - ``request_positions``: LRU ranks a running request's chunks by their key positions
      (``set_key_positions``). # vLLM >=0.33.0. Older: no positions are set.
    - ``threshold_counts_lookups``: the CPU manager's store threshold counts each ``lookup``
      of a key; ``prepare_store`` only filters. # vLLM 0.22.0-0.26.x (read); 0.27.x-0.29.x
      unread, taken as the same. vLLM >=0.30.0: ``prepare_store`` counts its offers
      (``_record_accesses``). Before 0.22.0 the filter is not driven.
    - ``offers_count_per_request``: a request's offers of a key count once toward the store
      threshold (``_RequestCacheAccess.counted_keys``). # vLLM >=0.34.0. vLLM 0.30.0-0.33.x:
      every offer counts.
    - ``recency_when_evictable``: LRU orders only evictable chunks; a chunk whose store or last
      load completes becomes the most recent, a touch of a pinned one is dropped.
      # vLLM 0.24.0-0.31.x (read in 0.24.0, 0.26.0, 0.30.0; 0.23.x unread, taken as 0.22.0).
      # vLLM 0.22.0: a touch orders every chunk. vLLM >=0.32.0: request ranks, a lazy heap.
    - ``load_polls``: the tiering manager's ``prepare_load`` notices finished jobs first (the
      step's once-per-step poll). # vLLM 0.22.0-0.24.x (read in 0.22.0 and 0.24.0; 0.23.x
      unread). vLLM >=0.26.0 (read; 0.25.x unread, taken as 0.26.0): lookups, step ends and
      stores poll, loads do not.
    - ``arc_store_miss_adapts``: ARC's target learns from a ghost a request offers to
      ``prepare_store`` (once per request). # vLLM >=0.31.0 (``on_store_miss``). vLLM
      0.11.1-0.30.x (read in 0.14.0, 0.17.0, 0.20.0, 0.24.0, 0.26.0, 0.30.0): only a
      ``touch`` of a ghost adapts; a store of one just removes it from its ghost list.
    - ``prefix_counts_every_key``: the store filter counts every key a prefix lookup is
      given, also those after the first miss. # vLLM 0.18.0-0.19.x (the filter's ``lookup``
      over the manager's ``lookup(block_hashes) -> int``; read in 0.18.0 and 0.19.0). From
      0.20.0 the connector looks keys up one by one, and only those are counted.
    """
    version = release.parse_release(found)
    options: dict[str, Any] = {}
    if version < (0, 22, 0):
        options["pending_lookup"] = "MISS"
    elif version < (0, 25, 0):
        # Not ``pending_lookup="RETRY"``: that made the model's window scan reset at a pending
        # block as these releases do, which is the pessimism PR #46363 fixed (seed 001,
        # ``lookup-pending-as-miss``). Only the word is the release's: None for both.
        options["answer_vocabulary"] = "bool|None"
    if (0, 22, 0) <= version < (0, 28, 0):
        options["promotion_answers_retry"] = True
    if version < (0, 33, 0):
        options["failed_store_events"] = False
        options["reset_holds_promotions"] = False
        options["store_poll_gated"] = True
        options["request_positions"] = False
    if version < (0, 30, 0):
        options["threshold_counts_lookups"] = True
    if version >= (0, 34, 0):
        options["offers_count_per_request"] = True
    if (0, 24, 0) <= version < (0, 32, 0):
        options["recency_when_evictable"] = True
    if (0, 22, 0) <= version < (0, 25, 0):
        options["load_polls"] = True
    if version < (0, 31, 0):
        options["arc_store_miss_adapts"] = False
    if (0, 18, 0) <= version < (0, 20, 0):
        options["prefix_counts_every_key"] = True
    return options


def tiering_semantics(found: str) -> dict[str, Any]:
    """Tiering-model options (``models/tiered_lookup_tiering.py``) for what release ``found``
    meant, as ``model_semantics`` gives the primary's model.

    - ``pending_work_while_polled``: ``has_pending_work`` is True whenever a tier is polled
      and no tier-poll thread is alive (the world runs none: the machine plays its rounds).
      # vLLM >=0.34.0. vLLM 0.33.0: jobs in flight, parked cascades and the tiers' own work.
    - ``deferred_release_gauge``: the payload has each tier's deferred-release gauge (a tier
      may defer the release of a failed promotion's chunks). # vLLM >=0.34.0.
    """
    if not release.at_least("0.34.0", found):
        return {}
    return {"pending_work_while_polled": True, "deferred_release_gauge": True}


# Why each model option adopts a release's behaviour: a change upstream made on purpose (a
# meaning, or a vocabulary), with where that was read. A change upstream calls a fix is never
# an option: the old behaviour stays a divergence on the releases that have it (PR #46363's
# window scan: the catalogue's lookup-pending-as-miss). ``properties/test_model_options.py`` lists
# every option ``model_semantics`` returns and requires its entry here.
MODEL_OPTIONS: dict[str, tuple[str, str]] = {
    "pending_lookup": (
        "meaning",
        "0.11.0-0.21.x: the manager's lookup counted ready blocks only (``is_ready``; read in "
        "0.14.0's ``lru_manager.py``): a block being written was not offloaded yet. "
        "Upstream reason for the later change: PR #46363's summary (seed 001) calls the "
        "scans' treatment of a pending write 'too pessimistic'; whether that also judges the "
        "0.11-0.21 MISS is not said there (not found): kept as a meaning"),
    "answer_vocabulary": (
        "vocabulary",
        "0.22.0-0.24.x: ``lookup -> bool | None``; PR #46363 replaced it by ``LookupResult`` "
        "to tell HIT_PENDING from RETRY (seed 001). Only the word is adopted; the scans' "
        "handling of a pending block, which that PR fixed, is not"),
    "promotion_answers_retry": (
        "meaning",
        "0.22.0-0.27.x: a promotion that starts answers None (0.22-0.24) or "
        "``LookupResult.RETRY`` (0.25-0.27; the docstring above: read in 0.26.0): the key "
        "is in another tier, which #46363 (seed 001) defines as RETRY. HIT_PENDING from "
        "0.28.0; the upstream change that moved it was not found, so whether it calls "
        "itself a fix is unknown"),
    "failed_store_events": (
        "meaning",
        "0.33.0 announces a failed store's removal as an event (``metadata_only``); older "
        "releases define no event for it (a feature added, per the docstring above). "
        "Upstream PR not found"),
    "reset_holds_promotions": (
        "meaning",
        "0.33.0 adds ``on_reset_flushed`` (a new API, ``kv_offload/base.py``): promotions "
        "wait for it after a reset; older releases have no such call. PR not found"),
    "store_poll_gated": (
        "meaning",
        "0.22.0-0.32.x: the connector polled right after ``on_schedule_end``, which began "
        "the step; 0.33.0 moved ``on_schedule_end`` to the step's end and polls always (the "
        "docstring above). A reordering of the step; PR not found"),
    "request_positions": (
        "meaning",
        "0.33.0 adds ``set_key_positions`` (a new API) and LRU ranks a running request's "
        "chunks by them; older releases set no positions (the docstring above). PR not found"),
    "threshold_counts_lookups": (
        "meaning",
        "0.22.0-0.29.x: the store threshold counted each ``lookup`` (the docstring above: "
        "read in 0.22.0-0.26.x); 0.30.0 counts ``prepare_store``'s offers "
        "(``_record_accesses``, read in 0.30.0's ``cpu/manager.py``). Upstream reason not "
        "found: taken as a change of policy, not named a fix anywhere read"),
    "offers_count_per_request": (
        "meaning",
        "0.34.0 counts a request's offers of a key once toward ``store_threshold`` (its "
        "comment: a retried or re-offered key 'is not another use of the content'); 0.30.0-"
        "0.33.x count every offer, as 0.33.0's ``cpu/spec.py`` documents the threshold ('how "
        "many times a chunk must be offered'). The 0.34.0 change was not found named a fix "
        "(PR #52022, which proposed once-per-request counting, was closed unmerged): taken "
        "as a change of meaning"),
    "pending_work_while_polled": (
        "meaning",
        "0.34.0's ``TieringOffloadingManager.has_pending_work`` reports work whenever a tier "
        "is polled and no live tier-poll thread (or more than one secondary tier) can finish "
        "it, and leaves out what a live thread finishes (its docstring: so an engine that "
        "only serves peers can go idle); 0.33.0 reported jobs, parked cascades and the "
        "tiers' own work. Upstream PR not found: taken as a change of meaning"),
    "deferred_release_gauge": (
        "meaning",
        "0.34.0 adds ``JobResult.deferred_release`` (a new API: a tier whose I/O may still "
        "write a failed promotion's chunks holds their release) and reports each tier's "
        "deferred chunks (``DEFERRED_RELEASE_CHUNKS``); 0.33.0 has neither. A feature "
        "added; PR not found"),
    "recency_when_evictable": (
        "meaning",
        "0.24.0-0.31.x: LRU orders only evictable chunks (the docstring above: read in "
        "0.24.0, 0.26.0, 0.30.0); 0.32.0 ranks requests in a lazy heap. A redesign; PR not "
        "found"),
    "load_polls": (
        "meaning",
        "0.22.0-0.24.x: the tiering manager's ``prepare_load`` polled finished jobs first "
        "(the docstring above: read in 0.22.0 and 0.24.0; gone in 0.26.0). PR not found"),
    "arc_store_miss_adapts": (
        "meaning",
        "0.11.1-0.30.x: the manager's API tells ARC of a ghost hit through ``touch`` only (each "
        "touch adapts the target); ``prepare_store`` of a ghost just drops it from its list "
        "(``insert``; read in 0.14.0, 0.17.0, 0.20.0, 0.24.0, 0.26.0, 0.30.0). vLLM PR #51787 "
        "(0.31.0, '[Bugfix][KV Offload] Track cache recency once per request') added the "
        "``on_store_miss`` hook: once per request at its store. The defect that PR names is "
        "the connector's: it touched a request's blocks at every lookup of it, adapting "
        "several times for one request; the harness drives the manager, not that connector "
        "loop, and 0.33.0's ``touch`` of a ghost still adapts every time. What the option "
        "absorbs is the hook's absence, a new API, not the connector defect"),
    "prefix_counts_every_key": (
        "meaning",
        "0.18.0-0.19.x: ``FilterReusedOffloadingManager.lookup(block_hashes)`` counts each "
        "hash it is given before the manager counts the offloaded prefix (its docstring: "
        "'records each visited block hash'; read in 0.18.0 and 0.19.0): a block seen in a "
        "request's lookup counts, reached or not. From 0.20.0 lookups are per key. A change "
        "of API, not named a fix anywhere read"),
}
