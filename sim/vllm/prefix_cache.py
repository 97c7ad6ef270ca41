"""The ``vllm`` target's prefix cache: the installed vLLM's real ``KVCacheManager``.

One group (a ``KVCacheConfig`` as vLLM's own tests build it): full attention, or a sliding
window where the release's manager is read for it (``prefix_cache_compat.sliding_window``;
the coordinator is then vLLM's unitary one over a ``SlidingWindowManager``), prefix caching
and KV events on or off as the world says (a keyword equal to the constructor's default is
left out, as a caller relying on it leaves it), driven the way the scheduler drives it:
``get_computed_blocks`` for a waiting request, ``allocate_slots`` with that hit, the
request's computed tokens advanced as the scheduler advances them after a step, sampled
tokens appended to the real ``Request`` (its block hasher extends ``block_hashes``), ``free``
on finish, ``free`` and a reset of the computed tokens on preemption. Requests are real
``vllm.v1.request.Request`` objects, with their cache salt and prompt logprobs.

Hashes are vLLM's own (chained over a deterministic sha256 of their inputs); the adapter
translates each into the prefix of tokens it names (``BlockKey``), from every request's
``block_hashes``, so events and the hash map compare with the model's.

Observation only: the reads for the checks (reference counts, the free queue, the hash map)
are of the pool's own structures; ``free_blocks`` is wrapped on the instance to record what
each call lists (vLLM issue #42571: a block listed twice), then calls the real method.
"""

from __future__ import annotations

import dataclasses
import hashlib
from typing import Any

from models.prefix_cache_values import (
    REMOVED_OPTIONAL,
    STORED_OPTIONAL,
    AllBlocksCleared,
    BlockKey,
    BlockRemoved,
    BlockStored,
    Hit,
    PrefixRequest,
)
from sim.vllm import prefix_cache_compat, release, scheduler_pass_compat


def _sha256(value: Any) -> bytes:
    """A deterministic block hash: sha256 of the repr of (parent, tokens, extra keys)."""
    return hashlib.sha256(repr(value).encode()).digest()


class VllmPrefixCache:
    """The prefix-cache port over a real ``KVCacheManager`` with one group, or with a
    full-attention group beside a local one, the sliding window's or (``attention_chunk_size``)
    a chunked-local group's (``hybrid``: vLLM's hybrid coordinator; tables, hits and new
    blocks then by group)."""

    def __init__(self, num_blocks: int, block_size: int, max_model_len: int,
                 use_eagle: bool = False, enable_caching: bool = True,
                 enable_kv_cache_events: bool = True, reserve_full_isl: bool = False,
                 watermark: float = 0.0, sliding_window: int | None = None,
                 max_in_flight_tokens: int | None = None, kv_connector: bool = False,
                 hash_lookahead: int = 0, hybrid: bool = False,
                 retention: int | None = None, attention_chunk_size: int | None = None,
                 local_groups: int = 1, second_window: int | None = None,
                 eagle_groups: tuple[int, ...] = (0,), full_block_size: int | None = None,
                 dcp_world_size: int = 1, replicated_draft: bool = False):
        import torch
        self._utils = release.import_module("vllm.v1.core.kv_cache_utils")
        kv = release.import_module("vllm.v1.kv_cache_interface")
        manager_mod = release.import_module("vllm.v1.core.kv_cache_manager")
        self._request_mod = release.import_module("vllm.v1.request")
        self._sampling = release.import_module("vllm.sampling_params")
        events = release.import_module("vllm.distributed.kv_events")
        self.release = release.release()
        self.block_size, self.max_model_len = block_size, max_model_len
        self._utils.init_none_hash(_sha256)
        cls = manager_mod.KVCacheManager
        # Decode context parallelism: the spec keeps a rank's block, the manager scales it
        # (its block is every rank's share), and the engine's scheduler block is the scaled
        # one; the request hasher's block is the release engine's (prefix_cache_compat).
        self.dcp_world_size = dcp_world_size
        scheduler_block = block_size * dcp_world_size
        # A draft model's replicated cache beside the target's: two full-attention groups,
        # hashed per the draft's block (the groups' GCD), hits on the target's (their LCM).
        self.replicated_draft = prefix_cache_compat.replicated_draft(kv, replicated_draft)
        self.hash_size = block_size if self.replicated_draft else \
            prefix_cache_compat.engine_hash_block_size(block_size, dcp_world_size)
        self.hash_lookahead = prefix_cache_compat.hash_lookahead(cls, hash_lookahead)
        # An EAGLE world of lookahead hashes on a release without them: that release's EAGLE
        # (the block drop), as its scheduler builds it.
        self.use_eagle = use_eagle = use_eagle or bool(hash_lookahead and
                                                       not self.hash_lookahead)
        # The engine builds a request block hasher only with prefix caching on (or a KV
        # connector): without it a request has no block hashes.
        self._hasher = prefix_cache_compat.block_hasher(
            self._utils, self.hash_size, _sha256, self.hash_lookahead) \
            if enable_caching else None
        # The group the release is driven with (the model takes it, as it takes the gates).
        self.sliding_window, self.max_in_flight_tokens = \
            prefix_cache_compat.sliding_window(cls, sliding_window, max_in_flight_tokens)
        self.kv_connector = prefix_cache_compat.connector_loads(cls, kv_connector)
        self.hybrid = self.replicated_draft or prefix_cache_compat.hybrid_groups(
            hybrid and (self.sliding_window is not None or attention_chunk_size is not None))
        # vLLM 0.33.0 builds a chunked-local model's groups so (full attention beside chunked
        # local) by default (VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE=1) and
        # without EAGLE; unset, or without the hybrid coordinator, the model's chunked-local
        # layers are full attention: the world is full attention alone.
        self.attention_chunk_size = attention_chunk_size if self.hybrid else None
        # The hybrid allocator's groups of the local spec (one per as many layers as full
        # attention has): the hybrid coordinator looks a block up in all of them at once.
        self.local_groups = local_groups if self.hybrid else 1
        self.second_window = second_window if self.hybrid and self.sliding_window else None
        # Full-attention blocks larger than the windows' (Gemma 4's): vLLM's engine builds
        # them when full attention's page per token is the smaller one.
        self.full_block_size = full_block_size if self.hybrid and self.sliding_window \
            else scheduler_block if self.replicated_draft else None
        if self.attention_chunk_size is not None:   # it caps the chunked group's admissions
            self.max_in_flight_tokens = max_in_flight_tokens    # (0.33.0 has the keyword)
        # A world option the release is not driven with (its rules were not read): the
        # machine notes it and runs the world without it, a scenario needing it is skipped.
        self.drives_sliding_window = sliding_window is None or self.sliding_window is not None
        self.drives_kv_connector = not kv_connector or self.kv_connector
        self.drives_hash_lookahead = not hash_lookahead or bool(self.hash_lookahead)
        self.drives_hybrid = not hybrid or self.hybrid
        self.drives_replicated_draft = not replicated_draft or self.replicated_draft
        self.why_no_replicated_draft = "absent: no replicated draft group beside a " \
            f"context-parallel target of vLLM 0.33.0's rules (vLLM {self.release}: " + (
                "no dcp_sharded spec)" if prefix_cache_compat.hybrid_groups(True) else
                "releases before 0.33.0 not read for the hybrid coordinator)")
        self.why_no_hybrid = "absent: no full-attention group beside a local one of " \
            f"vLLM 0.33.0's rules (vLLM {self.release}: releases before 0.33.0 not read for " \
            "the hybrid coordinator)"
        self.why_no_hash_lookahead = "absent: no lookahead block hashes of vLLM 0.33.0's " \
            f"rules (vLLM {self.release}: releases before 0.33.0 not read for them)"
        self.why_no_sliding_window = "absent: no sliding-window group of vLLM 0.33.0's rules " \
            f"(vLLM {self.release}: releases before 0.33.0 not read for it)"
        self.why_no_kv_connector = "absent: no KV connector loads of vLLM 0.33.0's rules " \
            f"(vLLM {self.release}: releases before 0.33.0 not read for them)"
        full = spec = _full_attention(kv, block_size, torch.float32)
        if self.sliding_window is not None:
            spec = _sliding_window(kv, spec, self.sliding_window)
        if self.full_block_size is not None and not self.replicated_draft:
            # (a DCP target's spec keeps a rank's block: its manager scales it)
            full = dataclasses.replace(full, block_size=self.full_block_size)
        if self.attention_chunk_size is not None:
            spec = _chunked_local(kv, spec, self.attention_chunk_size)
        if self.replicated_draft:       # the target's layers sharded, the draft's not
            spec = dataclasses.replace(spec, dcp_sharded=False)
        groups = [kv.KVCacheGroupSpec(["layer"], spec)]
        # full attention is group 0, as a hybrid model's config has it (a replicated draft's
        # the one local group)
        if self.hybrid:
            groups = [(["full"], full)] + [([f"local{i}"], spec)
                                           for i in range(self.local_groups)]
            if self.second_window is not None:
                groups.append((["second"], _sliding_window(kv, spec, self.second_window)))
            # With EAGLE the drafter's layers sit in the groups of their specs, which the
            # engine marks (vLLM 0.33.0's kv_cache_planning: the groups holding a draft
            # layer's spec, is_eagle_group): those groups' specs drop an EAGLE block.
            # Unmarked, vLLM would fall back to every group dropping one, a layout the
            # engine does not build.
            marked = tuple(eagle_groups) if use_eagle else ()
            groups = [kv.KVCacheGroupSpec(names + ["draft"], group_spec, is_eagle_group=True)
                      if g in marked else kv.KVCacheGroupSpec(names, group_spec)
                      for g, (names, group_spec) in enumerate(groups)]
        # A hybrid pool's retention, as the engine passes CacheConfig's (vLLM 0.33.0: 0).
        self.retention = retention if self.hybrid else None
        extra = {} if self.retention is None else \
            {"prefix_cache_retention_interval": self.retention}
        config = kv.KVCacheConfig(num_blocks=num_blocks, kv_cache_tensors=[],
                                  kv_cache_groups=groups, **extra)
        self._blocks_cls = manager_mod.KVCacheBlocks
        # The admission gates the release has (the model takes these, as it takes the
        # free-queue order): a gate the release lacks is off, as its scheduler has none.
        gates = prefix_cache_compat.admission_gates(cls)
        self.reserve_full_isl = reserve_full_isl and "full_sequence_must_fit" in gates
        self.watermark = watermark if "watermark" in gates else 0.0
        switches = dict(enable_caching=enable_caching, use_eagle=use_eagle,
                        enable_kv_cache_events=enable_kv_cache_events)
        if self.watermark:
            switches["watermark"] = self.watermark
        if self.max_in_flight_tokens is not None:
            switches["max_in_flight_tokens"] = self.max_in_flight_tokens
        if self.hash_lookahead:
            switches["num_hash_lookahead_tokens"] = self.hash_lookahead
        if dcp_world_size > 1:
            switches["dcp_world_size"] = dcp_world_size
        self.manager = cls(config, **prefix_cache_compat.manager_kwargs(
            cls, block_size if self.replicated_draft else scheduler_block, max_model_len,
            self.full_block_size, **switches))
        self.pool = prefix_cache_compat.block_pool(self.manager)
        self._estimate = prefix_cache_compat.cached_tokens_estimate(self.manager)
        self.estimates_cached_tokens = self._estimate is not None
        self._probe = prefix_cache_compat.cached_tokens_probe(self.manager)
        self.probes_cached_tokens = self._probe is not None
        self.uncached_first = prefix_cache_compat.uncached_first(self._utils,
                                                                 type(self.pool))
        self.event_fields = prefix_cache_compat.event_fields(events)
        self.reports_reused = prefix_cache_compat.reads_report_mode()
        # A scenario of full reports runs where the release has them (a machine runs every
        # release: one without them must report such a request incrementally).
        self.drives_report_mode = self.reports_reused
        self.why_no_report_mode = "absent: no kv_cache_report_mode (vLLM " \
            f"{self.release}: the full report came in 0.26.0)"
        self._running = prefix_cache_compat.request_status(self._request_mod, "RUNNING")
        self.requests: dict[str, Any] = {}
        self.sent: dict[str, PrefixRequest] = {}
        self._keys: dict[Any, BlockKey] = {}
        self.free_calls: list[tuple[tuple[int, ...], dict[int, int]]] = []
        real_free = self.pool.free_blocks

        def free_blocks(ordered_blocks: Any, *args: Any, **kwargs: Any) -> None:
            listed = list(ordered_blocks)
            self.free_calls.append((tuple(b.block_id for b in listed if not b.is_null),
                                    {b.block_id: b.ref_cnt for b in listed}))
            real_free(listed, *args, **kwargs)     # 0.23.x callers may pass prepend
        self.pool.free_blocks = free_blocks

    # -- the port -----------------------------------------------------------------------------

    @property
    def num_free_blocks(self) -> int:
        return self.pool.get_num_free_blocks()

    def add_request(self, request: PrefixRequest) -> None:
        params = prefix_cache_compat.sampling_params(self._sampling, self.max_model_len,
                                                     request.prompt_logprobs,
                                                     request.kv_cache_report_mode)
        cls = self._request_mod.Request
        req = cls(request_id=request.request_id, prompt_token_ids=list(request.prompt),
                  sampling_params=params, pooling_params=None, block_hasher=self._hasher,
                  cache_salt=request.cache_salt, **scheduler_pass_compat.request_kwargs(cls))
        self.requests[request.request_id] = req
        self.sent[request.request_id] = request
        self._learn(req)

    def get_computed_blocks(self, request_id: str) -> Hit | Any:
        """The hit as a ``Hit``; an answer not of the release's shape as it came (the
        machine compares it with the model's and reports it)."""
        answer = self.manager.get_computed_blocks(self.requests[request_id])
        unpacked = prefix_cache_compat.computed_blocks(answer)
        if unpacked is None:
            return answer
        blocks, num_tokens, boundary = unpacked
        # The scheduler keeps the boundary on the request: a window's retention keeps the
        # run below it (``Request.shared_prefix_boundary``, where the release has it).
        req = self.requests[request_id]
        if hasattr(req, "shared_prefix_boundary"):
            req.shared_prefix_boundary = boundary
        return Hit(self._shaped(blocks.get_block_ids()), num_tokens, boundary)

    def allocate_slots(self, request_id: str, num_new_tokens: int, hit: Hit | None = None,
                       num_lookahead_tokens: int = 0, num_external_computed_tokens: int = 0,
                       delay_cache_blocks: bool = False,
                       reserved_blocks: int = 0) -> tuple[int, ...] | None:
        """The scheduler's call for one step; ``num_external_computed_tokens``: a KV
        connector's load past the hit, synchronous, or asynchronous with
        ``delay_cache_blocks`` (the request then waits for the remote KV, holding its
        blocks, and ``reserved_blocks`` stay free for the prefills in flight)."""
        hit = hit or Hit(self._shaped([[]] * len(self.manager.kv_cache_config.kv_cache_groups)))
        req = self.requests[request_id]
        groups = hit.block_ids if self.hybrid else (hit.block_ids,)
        computed = None if not any(groups) else \
            self._blocks_cls(tuple([self.pool.blocks[b] for b in group] for group in groups))
        # Keywords at their defaults are left out (a caller relying on them leaves them out).
        given = dict(num_new_computed_tokens=hit.num_computed_tokens,
                     new_computed_blocks=computed, num_lookahead_tokens=num_lookahead_tokens,
                     num_external_computed_tokens=num_external_computed_tokens,
                     delay_cache_blocks=delay_cache_blocks, reserved_blocks=reserved_blocks)
        given = {k: v for k, v in given.items() if v}
        if self.reserve_full_isl and req.status != self._running:
            # The scheduler's waiting loop asks every admission (a new or preempted request)
            # to fit whole; ``allocate_slots`` applies it as it applies the watermark, to
            # requests that wait.
            given["full_sequence_must_fit"] = True
        if self.watermark and not any(
                r.status == self._running for rid, r in self.requests.items()
                if rid != request_id):
            given["has_scheduled_reqs"] = False      # the scheduler's bool(self.running)
        new = self.manager.allocate_slots(req, num_new_tokens, **given)
        if new is None:
            return None
        # What the scheduler does after a step is scheduled: the hit and the new tokens count
        # as computed (their KV is written by the forward pass), and the request runs; an
        # asynchronous load counts them too, and the request waits for the remote KV.
        req.num_computed_tokens += hit.num_computed_tokens + num_external_computed_tokens \
            + num_new_tokens
        req.status = prefix_cache_compat.request_status(
            self._request_mod, "WAITING_FOR_REMOTE_KVS" if delay_cache_blocks else "RUNNING")
        return self._shaped(new.get_block_ids())

    def finish_load(self, request_id: str) -> None:
        """``Scheduler._update_waiting_for_remote_kv`` after a successful load: the blocks
        are cached up to the computed tokens, a load that reached the last token leaves it
        to compute, and the request waits again (``_handle_blocked_waiting_request``)."""
        req = self.requests[request_id]
        self.manager.cache_blocks(req, req.num_computed_tokens)
        req.num_computed_tokens = min(req.num_computed_tokens, req.num_tokens - 1)
        req.status = prefix_cache_compat.request_status(self._request_mod, "WAITING")

    def append_token_ids(self, request_id: str, token_ids: tuple[int, ...]) -> None:
        req = self.requests[request_id]
        req.append_output_token_ids(list(token_ids))
        self._learn(req)

    def connector_finished(self, request_id: str) -> tuple[int, ...]:
        """``Scheduler._connector_finished``'s part for the KV cache: the blocks behind the
        window of the processed tokens are given back (no step is in flight here), then
        the connector is handed the blocks covering the computed tokens."""
        req = self.requests[request_id]
        self.manager.remove_skipped_blocks(request_id, req.num_computed_tokens,
                                           num_prompt_tokens=req.num_prompt_tokens)
        return self._shaped(self.manager.get_block_ids_for_computed_tokens(
            request_id, req.num_computed_tokens))

    def free(self, request_id: str) -> None:
        """The request finished: its blocks go back (``Scheduler._free_request``)."""
        req = self.requests.pop(request_id)
        req.status = prefix_cache_compat.request_status(self._request_mod,
                                                        "FINISHED_STOPPED")
        self.manager.free(req)

    def preempt(self, request_id: str) -> None:
        """``Scheduler._preempt_request``'s part for the KV cache."""
        req = self.requests[request_id]
        self.manager.free(req)
        req.status = prefix_cache_compat.request_status(self._request_mod, "PREEMPTED")
        req.num_computed_tokens = 0

    def reset_prefix_cache(self) -> bool:
        return bool(self.manager.reset_prefix_cache())

    def take_events(self) -> tuple | Any:
        """The events translated; an answer that is not a list of them as it came (the
        machine compares it with the model's and reports it)."""
        events = self.manager.take_events()
        if not isinstance(events, list):
            return events
        return tuple(self._event(e) for e in events)

    # -- reads for the checks -----------------------------------------------------------------

    def get_block_ids(self, request_id: str) -> tuple:
        return self._shaped(self.manager.get_block_ids(request_id))

    def _shaped(self, per_group) -> tuple | Any:
        """vLLM's per-group block ids as the port gives them: one tuple per group, or, with
        one group, that group's. An answer with nothing to iterate is returned as it came:
        a scheduler iterating it would fail, so the machine reports it as a wrong answer
        (``tables-agree``, ``connector-blocks-agree``), not as the adapter's error."""
        try:
            shaped = tuple(tuple(ids) for ids in per_group)
        except TypeError:
            return per_group
        return shaped if self.hybrid else shaped[0]

    def ref_cnt(self, block_id: int) -> int:
        return self.pool.blocks[block_id].ref_cnt

    def get_num_cached_tokens(self, request_id: str) -> int:
        """The manager's probe of a waiting request's hit (where the release has it:
        ``probes_cached_tokens``)."""
        return self._probe(self.requests[request_id])

    def estimate_cached_tokens(self, request_id: str) -> int:
        """The manager's estimate of the request's cached tokens (where the release has it:
        ``estimates_cached_tokens``)."""
        return self._estimate(self.requests[request_id])

    def free_queue(self) -> tuple[int, ...]:
        return tuple(b.block_id for b in self.pool.free_block_queue.get_all_free_blocks())

    def cached_blocks(self) -> dict[BlockKey | str, tuple[int, ...]]:
        """The hash map: prefix -> the blocks caching it (the first is the one a lookup
        finds). A hash no request of this run made is shown as its hex."""
        return {self._map_key(key): tuple(b.block_id for b in blocks)
                for key, blocks in prefix_cache_compat.cached_entries(self.pool)}

    def block_hashes(self) -> dict[int, BlockKey | str]:
        """Block id -> the prefix whose hash the block itself carries (null block left out)."""
        return {b.block_id: self._map_key(h) for b in self.pool.blocks
                if not b.is_null and (h := prefix_cache_compat.carried_hash(b)) is not None}

    def _map_key(self, hash_with_group: Any) -> Any:
        """A hash-map key as the model names it: the prefix, with its group where there are
        several (``models.prefix_cache.PrefixCacheModel.map_key``)."""
        key = self._key(self._utils.get_block_hash(hash_with_group))
        return (self._utils.get_group_id(hash_with_group), key) if self.hybrid else key

    def cached(self) -> dict[BlockKey | str, int]:
        return {key: blocks[0] for key, blocks in self.cached_blocks().items()}

    def free_block_calls(self) -> list[tuple[tuple[int, ...], dict[int, int]]]:
        """Each ``free_blocks`` call since the last read: the blocks listed (null ones left
        out) and every listed block's reference count before the call."""
        calls, self.free_calls = self.free_calls, []
        return calls

    def check_valid(self) -> None:
        """The free queue's own promise (``FreeKVCacheBlockQueue``): ``check_free_list``."""
        check_free_list(self.pool.free_block_queue, self.pool.blocks)

    # -- translation --------------------------------------------------------------------------

    def _learn(self, req: Any) -> None:
        tokens = list(req.all_token_ids)
        convert = self._utils.maybe_convert_block_hash
        request = self.sent[req.request_id]
        for i, block_hash in enumerate(req.block_hashes):
            key = request.key(tokens[:(i + 1) * self.hash_size + self.hash_lookahead])
            self._keys[block_hash] = key
            self._keys[convert(block_hash)] = key

    def _key(self, block_hash: Any) -> BlockKey | str:
        found = self._keys.get(block_hash)
        return found if found is not None else f"unknown hash {bytes(block_hash).hex()[:12]}"

    def _event(self, event: Any) -> Any:
        name = type(event).__name__
        if name == "BlockStored":
            parent = None if event.parent_block_hash is None else \
                self._key(event.parent_block_hash)
            ahead = getattr(event, "lookahead_token_ids", None)
            return BlockStored(tuple(self._key(h) for h in event.block_hashes), parent,
                               tuple(event.token_ids),
                               prefix_cache_compat.event_extra_keys(event),
                               **{f: getattr(event, f, None) for f in STORED_OPTIONAL
                                  if f not in ("extra_keys", "lookahead_token_ids")},
                               lookahead_token_ids=None if ahead is None
                               else tuple(tuple(t) for t in ahead))
        if name == "BlockRemoved":
            keys = [self._key(h) for h in event.block_hashes]
            return BlockRemoved(keys[0] if len(keys) == 1 else tuple(keys),
                                **{f: getattr(event, f, None) for f in REMOVED_OPTIONAL})
        if name == "AllBlocksCleared":
            return AllBlocksCleared()
        return name

    def __repr__(self) -> str:
        ranks = f", dcp_world_size={self.dcp_world_size}" if self.dcp_world_size > 1 else ""
        ranks += ", replicated_draft=True" if self.replicated_draft else ""
        return f"VllmPrefixCache(vllm=={self.release}, block_size={self.block_size}{ranks})"


def _block_ids(answer: Any) -> tuple[int, ...] | Any:
    """The ids of the blocks a queue listed; an answer that lists nothing as it came (the
    machine compares it with the model's and reports it)."""
    try:
        return tuple(b.block_id for b in answer)
    except (TypeError, AttributeError):
        return answer


def check_free_list(queue: Any, blocks: list[Any]) -> None:
    """A free queue's structure: a doubly linked list from its fake head to its fake tail
    whose links agree both ways, as long as its count, and a block taken off it keeps no
    links (vLLM's own queue tests assert the same). Read only: the links are the queue's."""
    head, tail = queue.fake_free_list_head, queue.fake_free_list_tail
    listed, prev, block = [], head, head.next_free_block
    while block is not None and block is not tail and len(listed) <= len(blocks):
        assert block.prev_free_block is prev, \
            f"free list: block {block.block_id}'s prev link skips block {prev.block_id}"
        listed.append(block.block_id)
        prev, block = block, block.next_free_block
    assert block is tail and tail.prev_free_block is prev, \
        f"free list: {listed} does not end at its tail"
    assert len(listed) == queue.num_free_blocks, \
        f"free list links {len(listed)} blocks, num_free_blocks says {queue.num_free_blocks}"
    linked = [b.block_id for b in blocks if b.block_id not in set(listed)
              and (b.prev_free_block is not None or b.next_free_block is not None)]
    assert not linked, f"blocks {linked} are off the free list but keep free-list links"


class VllmFreeQueue:
    """``prefix_cache.free_queue``'s vLLM target: a real ``FreeKVCacheBlockQueue`` over real
    ``KVCacheBlock`` objects (ids 0..n-1, in id order as the pool builds it), called by block
    id; ``popleft`` on an empty queue answers None where vLLM raises ``ValueError`` (any
    other raise is the queue's own)."""

    def __init__(self, num_blocks: int):
        utils = release.import_module("vllm.v1.core.kv_cache_utils")
        self.blocks = [utils.KVCacheBlock(i) for i in range(num_blocks)]
        self.queue = utils.FreeKVCacheBlockQueue(list(self.blocks))

    @property
    def num_free_blocks(self) -> int:
        return self.queue.num_free_blocks

    def popleft(self) -> int | None:
        try:
            block = self.queue.popleft()
        except ValueError:
            return None
        return block.block_id

    def popleft_n(self, n: int) -> tuple[int, ...]:
        return tuple(b.block_id for b in self.queue.popleft_n(n))

    def remove(self, block: int) -> None:
        self.queue.remove(self.blocks[block])

    def append(self, block: int) -> None:
        self.queue.append(self.blocks[block])

    def append_n(self, blocks: tuple[int, ...]) -> None:
        self.queue.append_n([self.blocks[b] for b in blocks])

    def prepend_n(self, blocks: tuple[int, ...]) -> None:
        self.queue.prepend_n([self.blocks[b] for b in blocks])

    def get_all_free_blocks(self) -> tuple[int, ...] | Any:
        return _block_ids(self.queue.get_all_free_blocks())

    def iter_blocks_after(self, cursor: int | None) -> tuple[int, ...] | Any:
        start = None if cursor is None else self.blocks[cursor]
        return _block_ids(self.queue.iter_blocks_after(start))

    def check_valid(self) -> None:
        check_free_list(self.queue, self.blocks)


def _full_attention(kv: Any, block_size: int, dtype: Any) -> Any:
    """A one-layer full-attention spec (``scheduler_pass_compat.attention_spec``'s) of
    ``block_size``."""
    return dataclasses.replace(scheduler_pass_compat.attention_spec(kv, dtype),
                               block_size=block_size)


def _sliding_window(kv: Any, full: Any, window: int) -> Any:
    """The full-attention spec ``full`` as a sliding-window spec of ``window`` tokens."""
    shared = {g.name for g in dataclasses.fields(kv.SlidingWindowSpec)} - {"sliding_window"}
    fields = {f.name: getattr(full, f.name) for f in dataclasses.fields(full)
              if f.name in shared}
    return kv.SlidingWindowSpec(**fields, sliding_window=window)


def _chunked_local(kv: Any, full: Any, chunk: int) -> Any:
    """The full-attention spec ``full`` as a chunked-local spec of ``chunk`` tokens."""
    shared = {g.name for g in dataclasses.fields(kv.ChunkedLocalAttentionSpec)} - \
        {"attention_chunk_size"}
    fields = {f.name: getattr(full, f.name) for f in dataclasses.fields(full)
              if f.name in shared}
    return kv.ChunkedLocalAttentionSpec(**fields, attention_chunk_size=chunk)


def make_prefix_cache(num_blocks: int, block_size: int, max_model_len: int,
                      use_eagle: bool = False, enable_caching: bool = True,
                      enable_kv_cache_events: bool = True, reserve_full_isl: bool = False,
                      watermark: float = 0.0, sliding_window: int | None = None,
                      max_in_flight_tokens: int | None = None,
                      kv_connector: bool = False, hash_lookahead: int = 0,
                      hybrid: bool = False, retention: int | None = None,
                      attention_chunk_size: int | None = None,
                      local_groups: int = 1, second_window: int | None = None,
                      eagle_groups: tuple[int, ...] = (0,),
                      full_block_size: int | None = None,
                      dcp_world_size: int = 1,
                      replicated_draft: bool = False) -> VllmPrefixCache:
    """The ``vllm`` target's prefix cache (``sim.targets`` routes here)."""
    return VllmPrefixCache(num_blocks, block_size, max_model_len, use_eagle, enable_caching,
                           enable_kv_cache_events, reserve_full_isl, watermark,
                           sliding_window, max_in_flight_tokens, kv_connector, hash_lookahead,
                           hybrid, retention, attention_chunk_size, local_groups,
                           second_window, eagle_groups, full_block_size, dcp_world_size,
                           replicated_draft)
