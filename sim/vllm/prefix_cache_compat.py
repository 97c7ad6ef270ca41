"""Release differences of vLLM's prefix-caching KV block cache, one small function each.

Every function is tagged with the releases it covers (``# vLLM <version>:``), read in the
wheels of 0.10.2, 0.14.0, 0.20.0, 0.24.0, 0.26.0, 0.30.0 and 0.33.0 (``vllm/v1/core``);
a release between two read ones is taken as the older one's unless a probe below tells.
"""

from __future__ import annotations

import dataclasses
import inspect
from typing import Any

from models.prefix_cache_values import REMOVED_OPTIONAL, STORED_OPTIONAL
from sim.vllm import release

# The constructor's documented defaults of the switches (the same in every release read):
# a switch equal to its default is left out, as a caller relying on it leaves it out. Read
# from here, not from the signature, so a changed default in the code is seen.
MANAGER_DEFAULTS = {"enable_caching": True, "use_eagle": False, "enable_kv_cache_events": False,
                    "watermark": 0.0, "max_in_flight_tokens": None,
                    "num_hash_lookahead_tokens": 0, "dcp_world_size": 1}


def manager_kwargs(manager_cls: type, block_size: int, max_model_len: int,
                   scheduler_block_size: int | None = None, **switches: Any) -> dict[str, Any]:
    """The ``KVCacheManager`` keywords beyond the config for groups of ``block_size``
    tokens (a hybrid pool's full attention may have blocks of ``scheduler_block_size``, a
    multiple: the engine's ``resolve_kv_cache_block_sizes`` then passes the sizes' LCM and
    GCD), and of ``switches`` (``enable_caching``, ``use_eagle``,
    ``enable_kv_cache_events``, ``watermark``) those that differ from the documented
    defaults (``MANAGER_DEFAULTS``; vLLM's own tests build it so).

    # vLLM >=0.24.0: ``scheduler_block_size`` and ``hash_block_size`` are required (one
    #   group: both the block size).
    # vLLM 0.14.0-0.23.x: ``hash_block_size`` is required (read in 0.14.0, 0.20.0).
    # vLLM 0.10.2-0.13.x: neither (hashes are always per block).
    # vLLM 0.20.0-0.24.x: ``max_num_batched_tokens`` (optional), 0.26.0 on
    #   ``max_in_flight_tokens`` (optional): left to their defaults (the length cap).
    """
    params = inspect.signature(manager_cls.__init__).parameters
    wanted = {"scheduler_block_size": scheduler_block_size or block_size,
              "hash_block_size": block_size}
    switched = {name: value for name, value in switches.items()
                if params[name].default is inspect.Parameter.empty
                or MANAGER_DEFAULTS[name] != value}
    return {name: value for name, value in wanted.items() if name in params} | \
        {"max_model_len": max_model_len} | switched


def admission_gates(manager_cls: type) -> frozenset[str]:
    """The scheduler's admission gates the release's ``KVCacheManager`` takes:
    ``full_sequence_must_fit`` (an ``allocate_slots`` keyword, from
    ``SchedulerConfig.scheduler_reserve_full_isl``) and ``watermark`` (a constructor keyword,
    applied with ``allocate_slots``' ``has_scheduled_reqs``; the one without the other is
    taken as absent).

    # vLLM 0.33.0 (read): both. Releases before were not read for them: the probe reads the
    #   signatures rather than a version.
    """
    init = inspect.signature(manager_cls.__init__).parameters
    alloc = inspect.signature(manager_cls.allocate_slots).parameters
    gates = {"full_sequence_must_fit"} & set(alloc)
    if "watermark" in init and "has_scheduled_reqs" in alloc:
        gates.add("watermark")
    return frozenset(gates)


def sliding_window(manager_cls: type, window: int | None,
                   max_in_flight_tokens: int | None) -> tuple[int | None, int | None]:
    """The group the release is driven with: ``(sliding_window, max_in_flight_tokens)``.

    # vLLM 0.33.0 (read): a ``SlidingWindowSpec`` group goes to the unitary coordinator's
    #   ``SlidingWindowManager`` (hit from the right, blocks behind the window given back in
    #   ``allocate_slots``, admissions capped by ``max_admission_blocks_per_request``, which
    #   ``max_in_flight_tokens`` sizes). Releases before 0.33.0 were not read for the
    #   sliding window (it changed: the admission cap, when skipped blocks are given back):
    #   they are driven with the full-attention group, and ``max_in_flight_tokens`` left out.
    #   Told by the constructor's ``max_in_flight_tokens`` keyword (0.26.0 on) and the
    #   release number, as the keyword alone does not tell 0.26.0-0.32.x apart.
    """
    params = inspect.signature(manager_cls.__init__).parameters
    if window is None or "max_in_flight_tokens" not in params or \
            not release.at_least("0.33.0"):
        return None, None
    return window, max_in_flight_tokens


def connector_loads(manager_cls: type, kv_connector: bool) -> bool:
    """Whether the release is driven with a KV connector's synchronous loads
    (``allocate_slots(num_external_computed_tokens=...)``).

    # vLLM 0.33.0 (read): the connector's tokens past the hit get new blocks after the hit's
    #   (``allocate_external_computed_blocks``), move the window's skipped blocks, and are
    #   cached with the step's. Releases before 0.33.0 were not read for it: driven without
    #   a connector (the keyword's presence alone does not say they behave so).
    """
    params = inspect.signature(manager_cls.allocate_slots).parameters
    return kv_connector and "num_external_computed_tokens" in params \
        and release.at_least("0.33.0")


def computed_blocks(answer: Any) -> tuple[Any, int, int] | None:
    """``get_computed_blocks(request)``'s blocks, hit length and shared-prefix boundary (0
    where the release reports none); None when the answer is not of the release's shape (the
    adapter then reports the answer itself: a scheduler unpacking it would fail, so it is a
    wrong answer, not an adapter error).

    # vLLM >=0.26.0: ``(blocks, num_computed_tokens, shared_prefix_boundary)``; the boundary
    #   is 0 with one group (no sparse group can lag the hit).
    # vLLM 0.10.2-0.24.x: ``(blocks, num_computed_tokens)``.
    """
    if not isinstance(answer, tuple) or len(answer) not in (2, 3):
        return None
    return answer[0], answer[1], answer[2] if len(answer) == 3 else 0


def hybrid_groups(hybrid: bool) -> bool:
    """Whether the release is driven with a full-attention group beside a local one, a
    sliding window's or a chunked-local group's (vLLM's ``HybridKVCacheCoordinator``).

    # vLLM 0.33.0 (read): the hybrid coordinator takes full attention's run first, then the
    #   local group's hit within it (a window's: one block past it with EAGLE, which it
    #   drops; a chunked-local group's: the null block up to the chunk holding the run's end,
    #   then the cached blocks from there; ``ChunkedLocalAttentionManager`` refuses EAGLE,
    #   its skipped tokens are the computed ones down to a chunk's start, its admission cap
    #   a chunk and the in-flight tokens, with no extra block), cuts the
    #   full-attention blocks to it and reports the run's end as ``shared_prefix_boundary``
    #   where the window's hit is shorter; every step takes each group's hits, then a
    #   connector's blocks, then new blocks, group by group. Releases before 0.33.0 were not
    #   read for it: driven with the sliding window alone (a chunked-local world: full
    #   attention alone, as vLLM builds one without the hybrid coordinator).
    """
    return hybrid and release.at_least("0.33.0")


def replicated_draft(kv: Any, wanted: bool) -> bool:
    """Whether the release is driven with a draft model's replicated cache beside a
    context-parallel target's (a spec of ``dcp_sharded=False``, a group of its own).

    # vLLM 0.33.0 (read): ``KVCacheSpec.dcp_sharded`` (``AttentionSpec``'s default True);
    #   the V2 model runner marks a ``draft_model`` speculator's layers unsharded where the
    #   target runs DCP and the draft does not; the manager of such a group keeps the spec's
    #   block size (only sharded specs are scaled by the ranks); the hybrid coordinator takes
    #   full-attention, Mamba and replicated groups under DCP; the engine hashes per the
    #   groups' GCD (``resolve_kv_cache_block_sizes``) and lands hits on their LCM. 0.32.0
    #   has the field too, but releases before 0.33.0 were not read for the hybrid
    #   coordinator (``hybrid_groups``).
    """
    return wanted and hybrid_groups(True) and any(
        f.name == "dcp_sharded" for f in dataclasses.fields(kv.AttentionSpec))


def block_pool(manager: Any) -> Any:
    """The pool the manager's coordinator built, read for the checks.

    # vLLM 0.10.2-0.33.0 (read in both): ``KVCacheCoordinator.__init__`` builds the
    #   ``BlockPool``; ``KVCacheManager.block_pool`` is an alias the manager's own methods
    #   and the scheduler read. The adapter reads the coordinator's, so a manager that lost
    #   its alias fails in its own methods (a finding), not in the adapter's reads.
    """
    return manager.coordinator.block_pool


def uncached_first(utils: Any, pool_cls: Any) -> bool:
    """Whether a block released without a cached hash goes to the free queue's front.

    # vLLM >=0.24.0: yes: ``free_blocks(ordered_blocks)`` prepends blocks without a hash
    #   (reused next, LIFO) and appends cached ones (LRU), with the queue's ``prepend_n``.
    # vLLM 0.23.x: no: the queue has ``prepend_n``, but ``free_blocks(ordered_blocks,
    #   prepend=False)`` prepends only where a caller asks (sliding-window and Mamba blocks
    #   dropped mid-request); a full-attention release appends (read in 0.23.0; the probe
    #   on ``prepend_n`` alone took 0.23.0 for the newer rule, and history reported the
    #   difference as a divergence).
    # vLLM 0.10.2-0.22.x: no: every released block is appended (read in 0.10.2, 0.14.0,
    #   0.20.0, 0.22.1).
    """
    caller_chooses = "prepend" in inspect.signature(pool_cls.free_blocks).parameters
    return hasattr(utils.FreeKVCacheBlockQueue, "prepend_n") and not caller_chooses


def engine_hash_block_size(block_size: int, dcp_world_size: int) -> int:
    """The block the release's engine hashes a request's tokens in, for one full-attention
    group of ``block_size`` tokens per rank decoded over ``dcp_world_size`` ranks: the
    scheduler's block (``block_size * dcp_world_size``), or, in a release whose engine core
    hashes in the cache config's block size whatever the ranks, ``block_size``.

    # vLLM 0.10.2-0.11.0 (read, v1/engine/core.py): ``get_request_block_hasher(
    #   cache_config.block_size, ...)``, while the scheduler and the managers scale the block
    #   by the ranks (upstream PR #26296, merged 2025-10-06, hashes in the scaled block).
    # vLLM 0.11.1, 0.14.0 (read): the hasher takes the scheduler block size (block_size *
    #   dcp * pcp); >=0.20.0: ``resolve_kv_cache_block_sizes``' hash block size (one group:
    #   the same).
    The probe reads the engine core's source for either (it is not imported: importing it
    needs the whole engine), not a version.
    """
    if dcp_world_size == 1:
        return block_size
    text = release.module_source("vllm.v1.engine.core")
    scales = "decode_context_parallel_size" in text or "resolve_kv_cache_block_sizes" in text
    return block_size * dcp_world_size if scales else block_size


def block_hasher(utils: Any, block_size: int, hash_fn: Any, lookahead: int = 0) -> Any:
    """The request block hasher for blocks of ``block_size`` tokens, each hash covering
    ``lookahead`` tokens past its block (only asked of a release that has them:
    ``hash_lookahead``).

    # vLLM >=0.33.0: ``get_request_block_hasher(hash_block_size, fn,
    #   num_hash_lookahead_tokens=0)``.
    # vLLM 0.10.2-0.32.x: ``get_request_block_hasher(block_size, fn)``.
    Both take the size and the function first, by position.
    """
    if lookahead:
        return utils.get_request_block_hasher(block_size, hash_fn,
                                              num_hash_lookahead_tokens=lookahead)
    return utils.get_request_block_hasher(block_size, hash_fn)


def hash_lookahead(manager_cls: type, lookahead: int) -> int:
    """The lookahead block hashes the release is driven with (0: none).

    # vLLM 0.33.0 (read): ``KVCacheManager(num_hash_lookahead_tokens=...)`` and the request
    #   hasher's keyword of that name; a hash covers its block and the tokens after it, a
    #   block is cached once they exist, ``BlockStored.lookahead_token_ids`` lists them; the
    #   scheduler uses them for EAGLE by default (``VllmConfig.num_hash_lookahead_tokens``)
    #   and then drops no hit block. Releases before 0.33.0 were not read for them: driven
    #   without (the EAGLE block drop stays off in such a world).
    """
    params = inspect.signature(manager_cls.__init__).parameters
    if not lookahead or "num_hash_lookahead_tokens" not in params or \
            not release.at_least("0.33.0"):
        return 0
    return lookahead


def cached_entries(pool: Any) -> list[tuple[bytes, list[Any]]]:
    """The pool's hash map as (hash with group id, the blocks caching it, first first).

    # vLLM >=0.34.0 (read in 0.34.0): ``BlockHashToBlockMap._cache`` maps a key to one block
    #   id, the one a lookup finds, and ``_dup_ids`` a key several blocks cache to all their
    #   ids in insertion order: listed here from the lookup's block, then the others.
    # vLLM 0.14.0-0.33.x (read in 0.14.0, 0.33.0): ``BlockHashToBlockMap``, whose ``_cache``
    #   maps a key to one block, or to a dict of them by block id (several blocks caching one
    #   prefix).
    # vLLM 0.10.2-0.13.x: a ``defaultdict(dict)``: key -> {block id: block}.
    """
    table = pool.cached_block_hash_to_block
    duplicates = getattr(table, "_dup_ids", None)
    if duplicates is not None:
        return [(key, [pool.blocks[i] for i in dict.fromkeys(
                    [found, *duplicates.get(key, ())])])
                for key, found in table._cache.items()]
    table = getattr(table, "_cache", table)
    return [(key, list(blocks.values()) if isinstance(blocks, dict) else [blocks])
            for key, blocks in table.items() if blocks]


def carried_hash(block: Any) -> bytes | None:
    """The hash (with group id) a block carries, None when it carries none.

    # vLLM 0.10.2-0.33.0 (read in 0.10.2 and 0.33.0): the ``block_hash`` property over
    #   ``_block_hash``, set when the block is cached, cleared when it is evicted or reset.
    """
    return block.block_hash


def cached_tokens_estimate(manager: Any) -> Any:
    """``KVCacheManager.estimate_cached_tokens`` (a request's cached tokens, read by the
    scheduler for a prefill's stats), None where the release has none.

    # vLLM >=0.26.0 (read in 0.26.0, 0.30.0 and 0.33.0): over each block's
    #   ``block_hash_num_tokens`` (the largest per group; from 0.34.0, read there, the last
    #   hashed block's, the same where a table's hashes grow along it).
    # vLLM 0.24.0 and before (read in 0.10.2, 0.14.0, 0.20.0, 0.24.0): absent; 0.25.x was not
    #   read: the probe looks for the method.
    """
    return getattr(manager, "estimate_cached_tokens", None)


def cached_tokens_probe(manager: Any) -> Any:
    """``KVCacheManager.get_num_cached_tokens`` (the hit a waiting request would get, taking
    nothing: the scheduler's cache-aware order of its waiting queue), None where absent.

    # vLLM >=0.34.0 (read in 0.34.0): present.
    # vLLM 0.33.0 and before (read in 0.33.0): absent.
    """
    return getattr(manager, "get_num_cached_tokens", None)


def request_status(request_module: Any, name: str) -> Any:
    """``RequestStatus.<name>`` (RUNNING, PREEMPTED): the same in every release read."""
    return getattr(request_module.RequestStatus, name)


def touch(pool: Any, blocks: list[Any]) -> None:
    """``BlockPool.touch`` of ``blocks`` (one group).

    # vLLM >=0.14.0 (read in 0.14.0): a flat sequence of blocks.
    # vLLM 0.10.2-0.13.x: a tuple of per-group lists.
    """
    param = next(iter(inspect.signature(pool.touch).parameters.values()))
    per_group = "tuple" in str(param.annotation)
    pool.touch((blocks,) if per_group else blocks)


def event_extra_keys(event: Any) -> tuple | None:
    """A ``BlockStored`` event's extra keys, one entry per block (a tuple, or None), or None
    where the release's events have no such field.

    # vLLM 0.33.0 (read): ``extra_keys``, untagged by ``to_event_extra_keys`` (a salt as the
    #   bare string; None for a block with none); the list is None only when no block was
    #   stored. Releases before 0.33.0 were not read for this field: where an event has it
    #   the same shape is taken.
    """
    keys = getattr(event, "extra_keys", None)
    return None if keys is None else tuple(None if k is None else tuple(k) for k in keys)


def event_fields(events_module: Any) -> frozenset[str]:
    """The optional event fields (``models.prefix_cache_values.EVENT_FIELDS``) the release's
    ``BlockStored`` and ``BlockRemoved`` carry (msgspec structs: their fields are in
    ``__struct_fields__``; a removal's with a ``removed.`` prefix).

    # vLLM 0.33.0 (read): all of them: ``extra_keys``, ``block_size``, ``medium``,
    #   ``group_idx`` on both, ``kv_cache_spec_kind`` and ``kv_cache_spec_sliding_window``
    #   set by ``KVCacheManager.take_events`` from the group's spec. Older releases carry
    #   fewer: the probe reads each struct rather than a version.
    """
    stored = set(getattr(events_module.BlockStored, "__struct_fields__", ()))
    removed = getattr(events_module.BlockRemoved, "__struct_fields__", ())
    return frozenset(stored & set(STORED_OPTIONAL)) | \
        {f"removed.{f}" for f in REMOVED_OPTIONAL if f in removed}


def reads_report_mode() -> bool:
    """Whether the release's ``Request`` reads ``kv_cache_report_mode`` from its sampling
    parameters' extra arguments (``"full"``: the hit's reused blocks are reported too).

    # vLLM >=0.26.0 (read in 0.26.0, 0.27.0, 0.32.0, 0.33.0, 0.34.0; upstream PR #45261):
    #   ``Request.kv_cache_report_mode``, which ``KVCacheManager.get_computed_blocks`` reads.
    # vLLM 0.25.0 and before (read in 0.10.2, 0.20.0, 0.23.0, 0.24.0, 0.25.0): absent; the
    #   extra argument is carried and ignored.
    The probe reads the request module's source for the key, not a version.
    """
    return "kv_cache_report_mode" in release.module_source("vllm.v1.request")


def sampling_params(sampling_module: Any, max_tokens: int, prompt_logprobs: bool,
                    kv_cache_report_mode: str = "incremental") -> Any:
    """Sampling parameters of a request that decodes to ``max_tokens`` and may ask for its
    prompt's logprobs (which makes vLLM skip reading the prefix cache for it) or for its KV
    events in full (an extra argument, as a client sends it; every release read takes
    ``extra_args``).

    # vLLM 0.33.0 (read): ``SamplingParams.skip_reading_prefix_cache`` is set from
    #   ``prompt_logprobs``; ``KVCacheManager`` reads the request's flag.
    # vLLM 0.11.0 (seen in its kv_cache_manager.py): ``get_computed_blocks`` reads
    #   ``sampling_params.prompt_logprobs`` itself. Either way one parameter says it.
    """
    extra = {"kv_cache_report_mode": kv_cache_report_mode} \
        if kv_cache_report_mode != "incremental" else None
    return sampling_module.SamplingParams(max_tokens=max_tokens, ignore_eos=True,
                                          prompt_logprobs=1 if prompt_logprobs else None,
                                          extra_args=extra)


# -- the block pool on its own (prefix_cache.block_pools) ----------------------------------------

def pool_kwargs(pool_cls: type, block_size: int) -> dict:
    """The keywords that build a ``BlockPool`` with caching on and events off.

    # vLLM >=0.14.0 (read in 0.14.0-0.33.0): ``hash_block_size`` names the block size its
    #   hashes are taken over; 0.10.2 takes no block size.
    """
    params = inspect.signature(pool_cls.__init__).parameters
    kwargs = {"enable_caching": True}
    if "hash_block_size" in params:
        kwargs["hash_block_size"] = block_size
    return kwargs


def unpins_blocks(pool_cls: type) -> bool:
    """Whether the pool lets a caller release blocks that stay readable until reused.

    # vLLM >=0.30.0 (read in 0.30.0, 0.32.0, 0.33.0): ``unpin_blocks(blocks, on_reuse)``
    #   (HiSparse's host pool); a method, so a mutant cannot hide it. 0.10.2-0.27.0: absent,
    #   the rule is reported missing.
    """
    return hasattr(pool_cls, "unpin_blocks")


def blocks_know_their_pool(block_cls: type) -> bool:
    """Whether a block names the pool that built it, so one pool frees another's blocks.

    # vLLM >=0.30.0 (read in 0.30.0, 0.33.0): ``KVCacheBlock.pool`` (deferred frees list
    #   several pools' blocks; from 0.34.0, read there, a weak reference to it).
    #   0.10.2-0.27.0: absent, each pool is freed only its own blocks, and that is noted.
    """
    return "pool" in getattr(block_cls, "__dataclass_fields__", {})


NULL_LEFT_ALONE_FROM = "0.33.0"


def null_left_alone() -> bool:
    """Whether ``touch`` and ``free_blocks`` skip the null block when a caller lists it.

    # vLLM 0.33.0: both skip it ("never pooled"). 0.10.2-0.32.0 (read in 0.10.2, 0.14.0,
    #   0.27.0, 0.30.0, 0.32.0): they keep a count on it that nothing reads, so the null
    #   block is not listed there, and that is noted. By release, not by the methods' text:
    #   a mutant that drops the skip must be driven.
    """
    return release.at_least(NULL_LEFT_ALONE_FROM)
