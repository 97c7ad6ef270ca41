"""Release differences of vLLM's V1 ``Scheduler`` driven offline (one scheduling pass at a
time), one small function each: its configs and constructor, the requests and runner
outputs it takes, preemption and resets, and the rules a release's pass follows that the
model does not (reported missing, never modelled twice).

Every function is tagged with the releases it covers (``# vLLM <version>:``); where a boundary
falls between releases we did not install, the function detects the feature on the installed
classes instead of trusting a version table (0.10.2, 0.20.0, 0.26.0, 0.33.0, 0.34.0 installed
and run; 0.11.0, 0.13.0, 0.22.0-0.32.0 read from the released wheels). The encoder cache manager
the scheduler holds has its own differences, in ``encoder_cache_compat``.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

from sim.errors import CapabilityMissing
from sim.vllm import release

# -- the scheduler's encoder-cache calls, preemption (vllm/v1/core/sched/scheduler.py) ---------


def reset_encoder_cache(scheduler: Any, reset_manager: Callable[[Any], Any]) -> None:
    """The scheduler's part of an engine-level encoder-cache reset (weights updated).

    # vLLM 0.33.0 (absent in 0.14.0): ``Scheduler.reset_encoder_cache()`` resets its manager.
    # vLLM 0.10.2-0.14.x: no such method; the manager is reset or replaced by
    #   ``reset_manager`` (``encoder_cache_compat.reset``: the manager's own differences stay
    #   there), the state the later method produces.
    """
    method = getattr(scheduler, "reset_encoder_cache", None)
    if method is not None:
        method()
        return
    scheduler.encoder_cache_manager = reset_manager(scheduler.encoder_cache_manager)


def can_preempt(scheduler: Any) -> bool:
    """Whether ``preempt`` can drive this release (see there)."""
    return hasattr(scheduler, "_preempt_request")


def refuses_reused_identifier(scheduler: Any) -> bool:
    """Whether the release refuses a request whose multimodal identifier is resident with
    another embed count (``_reject_on_encoder_cache_embed_mismatch``; 0.14.0 has none: it
    takes the resident entry as the item's)."""
    return hasattr(scheduler, "_reject_on_encoder_cache_embed_mismatch")


def ec_connector_per_item() -> bool:
    """Whether the release's encoder-cache connector is asked per item and told of frees.

    # vLLM >=0.30.0: ``has_cache_item(identifier)`` and ``update_state_after_free``.
    # vLLM 0.18.0-0.26.x: ``has_cache_item`` but no free notice (read in 0.18.0, 0.22.0,
    #   0.24.0, 0.26.0). 0.14.0: ``has_caches(request)``, one answer list per request.
    # 0.10.2: no EC connector. Only the first is the spec's connector; the others are
    #   reported absent.
    """
    try:
        base_module = release.import_module("vllm.distributed.ec_transfer.ec_connector.base")
    except Exception:  # noqa: BLE001 - the release has no EC connector package
        return False
    base = getattr(base_module, "ECConnectorBase", None)
    return base is not None and hasattr(base, "has_cache_item") \
        and hasattr(base, "update_state_after_free")


def kv_blocks_held(scheduler: Any) -> dict[str, int]:
    """The KV blocks each open request holds, where it holds any (one full-attention group).

    # vLLM 0.10.2-0.33.0: ``KVCacheManager.get_block_ids(request_id)``, a list per group.
    """
    manager = scheduler.kv_cache_manager
    held = {rid: sum(map(len, manager.get_block_ids(rid))) for rid in scheduler.requests}
    return {rid: n for rid, n in held.items() if n}


def preempt(scheduler: Any, request: Any) -> None:
    """Preempt a running request between passes, as ``schedule()`` does to the last running
    request when it runs out of KV blocks, and ``reset_prefix_cache`` to every running one
    between steps: pop it from ``running``, then ``_preempt_request`` (frees its KV blocks
    and encoder inputs, computed tokens to 0, head of the waiting queue).

    # vLLM 0.14.0 and 0.33.0: ``_preempt_request(request, timestamp)`` (0.33.0 adds an
    #   optional ``drop_stale_output``).
    # Releases without it preempt inline in ``schedule()``: the rule cannot be driven there
    #   (the machine draws no preemption where ``can_preempt`` is False).
    """
    method = getattr(scheduler, "_preempt_request", None)
    if method is None:
        raise CapabilityMissing(f"preemption: vLLM {release.release()} has no "
                                "Scheduler._preempt_request; run worlds without preemption")
    scheduler.running.remove(request)
    method(request, 0.0)
    # Preempted between passes, it may be resumed by the very next one: act as if it was not
    # scheduled in the prior step, as vLLM 0.33.0's ``reset_prefix_cache(
    # reset_running_requests=True)`` does after preempting between steps (0.14.0 asserts
    # that a resumed request was not scheduled in the previous step).
    getattr(scheduler, "prev_step_scheduled_req_ids", set()).discard(request.request_id)


def kv_free_blocks(scheduler: Any) -> int:
    """The KV pool's free blocks (cached or not; the null block is never free).

    # vLLM 0.10.2-0.33.0: ``BlockPool.get_num_free_blocks()``, the pool the manager's
    #   coordinator built (read there, as ``prefix_cache_compat.block_pool`` reads it).
    """
    return scheduler.kv_cache_manager.coordinator.block_pool.get_num_free_blocks()


# -- prefix caching: the request block hasher (vllm/v1/core/kv_cache_utils.py) ----------------

PREFIX_CACHING_FROM = "0.20.0"


def drives_prefix_caching() -> bool:
    """Whether the release's block hashes tell multimodal items apart as the model's keys do
    (``PrefixRequest.mm_items``): each item's identifier and its offset, in the hash of every
    block the item overlaps.

    # vLLM >=0.20.0: identifier and offset (read in 0.20.0, 0.23.0-0.33.0; 0.32.0 on tag
    #   them ``"mm"``).
    # vLLM 0.10.2-0.14.x: the identifier alone (read in both): one image at two places in
    #   otherwise equal prompts shares its blocks, a rule the model does not follow: reported
    #   missing. 0.15-0.19 unread, taken as the older kind. By release, not by the hasher's
    #   text: a mutated hasher must be driven, not reported absent.
    """
    return release.at_least(PREFIX_CACHING_FROM)


def request_block_hasher(vllm_config: Any, block_size: int) -> Any:
    """The block hasher the engine gives each request with prefix caching on
    (``EngineCore.__init__``): its hash function by the cache config's name, the "none" hash
    seeded with it, blocks of ``block_size`` tokens.

    # vLLM >=0.14.0: ``vllm.utils.hashing.get_hash_fn_by_name`` (only asked where
    #   ``drives_prefix_caching``); ``get_request_block_hasher(size, fn)`` by position.
    """
    utils = release.import_module("vllm.v1.core.kv_cache_utils")
    hashing = release.import_module("vllm.utils.hashing")
    hash_fn = hashing.get_hash_fn_by_name(vllm_config.cache_config.prefix_caching_hash_algo)
    utils.init_none_hash(hash_fn)
    return utils.get_request_block_hasher(block_size, hash_fn)


# -- the drafter's prefill lookahead (vllm/v1/core/sched/scheduler.py) -------------------------

PREFILL_LOOKAHEAD_FROM = "0.33.0"


MAMBA_ALIGN_FROM = "0.33.0"


def mamba_align_split(scheduler_cls: type) -> None:
    """Raise unless the ``Scheduler`` class aligns a hybrid Mamba model's prefill chunks by the
    rules ``models/scheduler_pass_mamba.py`` states.

    # vLLM >=0.33.0: ``_mamba_block_aligned_split``, its last checkpoint leaving
    #   ``max(1, num_hash_lookahead_tokens)`` tokens (the drafter's hash lookahead, with
    #   prefix caching on; the EAGLE block drop is then off).
    # vLLM 0.22.0-0.32.x: a ``_mamba_block_aligned_split`` is there, but a drafter's
    #   checkpoint drops the whole last block instead (no ``num_hash_lookahead_tokens``; read
    #   in 0.32.0, the earlier ones not triaged): reported missing, not modelled twice.
    """
    driven = release.at_least(MAMBA_ALIGN_FROM)
    if not driven or not hasattr(scheduler_cls, "_mamba_block_aligned_split"):
        raise CapabilityMissing(
            f"Mamba align-mode split: vLLM {release.release()} aligns a hybrid model's "
            "chunks under other rules (or not at all); the model follows 0.33.0's: run "
            "worlds with mamba_block_size=0 there")


def prefill_lookahead_attribute(scheduler: Any) -> str:
    """The ``Scheduler`` attribute holding how many prefill tokens past a chunk the drafter
    reads (the encoder window's shift, the unchunked roll-back, the chunk's runway).

    # vLLM >=0.33.0: ``num_prefill_lookahead`` (``VllmConfig.num_prefill_lookahead_tokens``);
    #   an input is freed once its tokens are computed, as without a drafter.
    # vLLM 0.30.0-0.32.x: the same attribute, but ``_free_encoder_inputs`` keeps each input
    #   until the lookahead has passed it too (read in 0.30.0 and 0.32.0): a rule the model
    #   does not follow, reported missing.
    # vLLM 0.12.0-0.26.x: ``shift_computed_tokens=1 if self.use_eagle`` (EAGLE only, no MTP
    #   runway) with the same deferred free (read 0.14.0-0.26.0): missing.
    # Before 0.12.0 (0.10.2 read): no shift at all: missing.
    """
    driven = release.at_least(PREFILL_LOOKAHEAD_FROM)
    if not driven or not hasattr(scheduler, "num_prefill_lookahead"):
        raise CapabilityMissing(
            f"drafter prefill lookahead: vLLM {release.release()} shifts the encoder window "
            f"under other rules (or not at all); the model follows {PREFILL_LOOKAHEAD_FROM}'s: "
            "run worlds with read_ahead=0 there")
    return "num_prefill_lookahead"


# -- the V1 Scheduler, offline (vllm/v1/core/sched/scheduler.py) ------------------------------


def scheduler_kwargs(scheduler_cls: type, block_size: int) -> dict[str, Any]:
    """Keywords the ``Scheduler`` takes beyond the configs.

    # vLLM >=0.12.0: ``block_size`` (the KV block size, hashed blocks follow it).
    # vLLM 0.10.2-0.11.x: none (read from ``cache_config.block_size``).
    """
    params = inspect.signature(scheduler_cls.__init__).parameters
    return {"block_size": block_size} if "block_size" in params else {}


def request_kwargs(request_cls: type) -> dict[str, Any]:
    """Keywords a ``Request`` needs beyond id, prompt, sampling, pooling and features.

    # vLLM 0.10.2-0.17.x: ``eos_token_id`` is required (None: ``ignore_eos`` anyway).
    # vLLM >=0.18.0 (after 0.16.0): no such parameter.
    """
    params = inspect.signature(request_cls.__init__).parameters
    return {"eos_token_id": None} if "eos_token_id" in params else {}


def runner_output(outputs: Any, ids: list[str], sampled: list[list[int]]) -> Any:
    """A ``ModelRunnerOutput`` sampling ``sampled[i]`` for ``ids[i]`` (nothing else).

    # vLLM >=0.34.0: no ``req_id_to_index``: the scheduler indexes ``req_ids`` by position.
    # vLLM >=0.14.0: every field but the ids has a default.
    # vLLM 0.10.2-0.13.x: ``logprobs``, ``prompt_logprobs_dict`` and ``pooler_output`` are
    #   required too (None, {}, and no pooler output).
    """
    params = inspect.signature(outputs.ModelRunnerOutput).parameters
    extra = {name: value for name, value in (("logprobs", None), ("prompt_logprobs_dict", {}),
                                             ("pooler_output", []))
             if name in params and params[name].default is inspect.Parameter.empty}
    if "req_id_to_index" in params:
        extra["req_id_to_index"] = {rid: k for k, rid in enumerate(ids)}
    return outputs.ModelRunnerOutput(req_ids=ids, sampled_token_ids=sampled, **extra)


def hash_lookahead_tokens(vllm_config: Any) -> int:
    """``VllmConfig.num_hash_lookahead_tokens`` for the config's switches as they stand now.

    # vLLM >=0.34.0: a field, resolved when the config is validated
    #   (``_resolve_num_hash_lookahead_tokens``): a switch set since is seen only by resolving
    #   it again, as ``VllmConfig`` itself does after it updates its configs.
    # vLLM earlier: a property, computed on each read.
    """
    resolve = getattr(vllm_config, "_resolve_num_hash_lookahead_tokens", None)
    return resolve() if resolve is not None else vllm_config.num_hash_lookahead_tokens


def layer_kv_cache_specs(vllm_config: Any) -> dict[str, Any]:
    """Each layer's KV cache spec, as the CPU worker's model runner reads it from the built
    model (``get_kv_cache_spec``, called with the fields it reads).

    # vLLM >=0.34.0: the CPU worker on x86 runs ``CPUModelRunner``, a V2 model runner
    #   (``vllm/v1/worker/cpu/model_runner.py`` over ``vllm/v1/worker/gpu/``); its method reads
    #   the config, and the speculator and DCP size only to mark a replicated draft cache
    #   (neither here: no draft model runner, no DCP). ``gpu_model_runner`` is gone.
    # vLLM 0.2x-0.33.x: ``GPUModelRunner.get_kv_cache_spec``
    #   (``vllm/v1/worker/gpu_model_runner.py``), reading the config and the shared layers.
    """
    if release.has_module("vllm.v1.worker.gpu_model_runner"):
        runner = release.import_module("vllm.v1.worker.gpu_model_runner").GPUModelRunner
        return runner.get_kv_cache_spec(SimpleNamespace(vllm_config=vllm_config,
                                                        shared_kv_cache_layers={}))
    runner = release.import_module("vllm.v1.worker.cpu.model_runner").CPUModelRunner
    return runner.get_kv_cache_spec(SimpleNamespace(vllm_config=vllm_config, speculator=None,
                                                    dcp_size=1))


def async_scheduler_cls(sched_module: Any) -> type | None:
    """The release's ``AsyncScheduler`` where it holds an input ending at the prompt's end
    until the request's first sample is known (``models/scheduler_pass.py``), else None.

    # vLLM >=0.30.0: ``_free_encoder_inputs`` keeps ``num_output_placeholders`` positions
    #   unsettled (read in 0.30.0, 0.32.0; run in 0.33.0).
    # vLLM 0.10.2-0.26.x: an ``AsyncScheduler`` whose update frees an input once its
    #   positions are scheduled (read in 0.10.2, 0.14.0, 0.18.0, 0.22.0, 0.26.0): not the
    #   spec's; 0.27.0-0.29.x unread, taken as the older kind. By release, not by the
    #   method's text: a mutated method must be driven, not reported absent.
    """
    module = release.import_module("vllm.v1.core.sched.async_scheduler")
    cls = getattr(module, "AsyncScheduler", None)
    if cls is None or not release.at_least("0.30.0"):
        return None
    assert issubclass(cls, sched_module.Scheduler), "AsyncScheduler is a Scheduler"
    return cls


def mid_prefill(request: Any) -> bool:
    """Whether ``schedule()`` left ``request`` inside its prompt (a runner samples nothing).

    # vLLM >=0.12.0 (after 0.11.0): ``request.is_prefill_chunk``, set by the scheduler.
    # vLLM 0.10.2-0.11.x: computed: fewer tokens computed (scheduled ones included) than the
    #   prompt holds, as the GPU runner decided when it discarded a partial prefill's sample.
    """
    flag = getattr(request, "is_prefill_chunk", None)
    if flag is not None:
        return bool(flag)
    return request.num_computed_tokens < request.num_prompt_tokens


def attention_spec(kv: Any, dtype: Any) -> Any:
    """The one KV cache group's spec (a tiny full-attention layer; KV pressure is not this
    subsystem's).

    # vLLM >=0.11.0: ``FullAttentionSpec(block_size, num_kv_heads, head_size, dtype)``.
    # vLLM 0.10.x: ``use_mla`` is required too (False).
    """
    params = inspect.signature(kv.FullAttentionSpec).parameters
    extra = {"use_mla": False} if "use_mla" in params \
        and params["use_mla"].default is inspect.Parameter.empty else {}
    return kv.FullAttentionSpec(block_size=16, num_kv_heads=1, head_size=1, dtype=dtype,
                                **extra)


def scheduler_config_kwargs(config_cls: type, disable_chunked_mm_input: bool,
                            scheduler_cls: str | None) -> dict[str, Any]:
    """``SchedulerConfig`` keywords for the chunked-input switch and the scheduler class,
    given to the constructor (which validates them) rather than set after it.

    # vLLM >=0.14.0 (read; earlier releases not): both are fields. A release without one
    #   cannot be given that setting: CapabilityMissing names it.
    """
    fields = getattr(config_cls, "__dataclass_fields__", {})
    kwargs: dict[str, Any] = {}
    if disable_chunked_mm_input:
        if "disable_chunked_mm_input" not in fields:
            raise CapabilityMissing(f"disable_chunked_mm_input: vLLM {release.release()}'s "
                                    "SchedulerConfig has no such field")
        kwargs["disable_chunked_mm_input"] = True
    if scheduler_cls is not None:
        if "scheduler_cls" not in fields:
            raise CapabilityMissing(f"scheduler_cls: vLLM {release.release()}'s "
                                    "SchedulerConfig cannot name a scheduler class")
        kwargs["scheduler_cls"] = scheduler_cls
    return kwargs


def has_admission_gate(config_cls: type) -> bool:
    """Whether the release's scheduler can admit a waiting request only when its whole
    sequence fits in the KV pool, not just its first chunk.

    # vLLM >=0.20.0 (read in 0.20.0, 0.24.0, 0.27.0, 0.30.0, 0.32.0, 0.33.0):
    #   ``SchedulerConfig.scheduler_reserve_full_isl`` (default True), which
    #   ``Scheduler.schedule`` passes to ``allocate_slots(full_sequence_must_fit=...)``.
    # vLLM 0.10.2-0.14.x (read): no such field; a waiting request is admitted when the
    #   blocks its first chunk needs are free.
    """
    return "scheduler_reserve_full_isl" in getattr(config_cls, "__dataclass_fields__", {})


def has_watermark(config_cls: type) -> bool:
    """Whether the release's scheduler keeps a share of the KV pool free when it admits a
    waiting request while another runs.

    # vLLM >=0.24.0 (read in 0.24.0, 0.27.0, 0.30.0, 0.32.0, 0.33.0): the field
    #   ``SchedulerConfig.watermark`` (default 0.0), handed to the ``KVCacheManager``, whose
    #   ``allocate_slots(has_scheduled_reqs=bool(self.running))`` applies
    #   ``int(watermark * num_blocks)`` to waiting and preempted requests.
    # vLLM 0.14.0 and 0.20.0 (read): no such field; nothing is kept free. 0.21-0.23 unread:
    #   asked of the class.
    """
    return "watermark" in getattr(config_cls, "__dataclass_fields__", {})


def admission_gate_kwargs(config_cls: type, reserve_full_isl: bool,
                          watermark: float) -> dict[str, Any]:
    """``SchedulerConfig`` keywords for the admission gates (``has_admission_gate``,
    ``has_watermark``): each setting where the release has its field, nothing where it has
    none (the adapter reports those through ``drives_reserve_full_isl`` and
    ``drives_watermark``)."""
    kwargs: dict[str, Any] = {}
    if has_admission_gate(config_cls):
        kwargs["scheduler_reserve_full_isl"] = reserve_full_isl
    if watermark and has_watermark(config_cls):
        kwargs["watermark"] = watermark
    return kwargs


def scheduler_cls(scheduler_config: Any, sched_module: Any) -> type:
    """The class the engine builds: ``SchedulerConfig.get_scheduler_cls()`` (the one named in
    ``scheduler_cls``, else by ``async_scheduling``).

    # vLLM >=0.14.0 (read): the method. Earlier releases without it: ``Scheduler``.
    """
    get = getattr(scheduler_config, "get_scheduler_cls", None)
    return get() if get is not None else sched_module.Scheduler
