"""A hybrid (attention + Mamba-like) model's scheduling world exactly as vLLM builds it,
offline on CPU, and a driver that prefills prompts through its real ``Scheduler``.

Nothing of the world is written by hand: the steps are the engine's own, in its order
(``vllm/v1/engine/core.py`` ``EngineCore.__init__`` and ``_initialize_kv_caches``), called on
the configs vLLM validated:

1. ``ModelConfig`` of a local ``config.json`` (no weights, no tokenizer), a
   ``SpeculativeConfig`` of the drafter (``method="mtp"``: the checkpoint's own MTP modules),
   ``SchedulerConfig`` (token budget, ``max_num_seqs``, chunked prefill) and ``CacheConfig``
   (prefix caching on), all through ``VllmConfig``: its hybrid-model hooks
   (``MambaModelConfig.verify_and_update_config``: align mode under prefix caching) and the
   CPU platform's ``check_and_update_config`` run there (as in vLLM's CPU build:
   ``release.cpu_build``).
2. The target model and the draft model are constructed (``initialize_model``: the layers,
   with uninitialised parameters; nothing is loaded and nothing runs), in a one-process
   ``gloo`` group, as a CPU worker does before loading weights. The draft model's attention
   layers are marked as the proposer's ``load_model`` marks them.
3. ``Platform.update_block_size_for_backend``: vLLM's attention-page / Mamba-page
   alignment, which sets the block size (and the Mamba block size in align mode).
4. Each layer's own ``get_kv_cache_spec`` (the CPU worker's model runner's method, called
   with the fields it reads: ``scheduler_pass_compat.layer_kv_cache_specs``), then the
   core's grouping, layout resolution, KV cache config, block sizes and hash block size.
5. ``SchedulerConfig.get_scheduler_cls()`` built as the core builds it, with the request
   block hasher the core gives requests (prefix caching on).

The platform is the CPU one (``VLLM_TARGET_DEVICE=cpu``): its attention backend's kernel
block sizes enter step 3 and its GDN backend exports no mid-prefill checkpoint, so the
world is what vLLM builds *on CPU*: on one declared CPU (``CPU_ISA``: x86 with AVX-512 BF16),
whatever host runs the harness, since the platform reads the instruction set. A CUDA
deployment picks other backends (FlashInfer's GDN prefill exports checkpoints on Hopper), and
with them another block size and another ``MambaSpec``: not shown by this world.

The driver plays the model runner only as the harness always does: after each
``schedule()`` a ``ModelRunnerOutput`` samples one token for every request that is not in
the middle of its prefill, and proposes no draft tokens.
"""

from __future__ import annotations

import contextlib
import functools
import json
import tempfile
from collections import deque
from pathlib import Path
from types import SimpleNamespace
from typing import Any
from unittest import mock

from attrs import frozen

from models.prefix_cache_values import Lookup
from models.scheduler_pass_values import SchedulerOutputView
from sim.engine_turn import engine_turn
from sim.errors import AdapterError, HarnessError, TargetUnavailable
from sim.vllm import release, scheduler_pass_compat

SAMPLED_TOKEN = 7
DRAFT_TOKEN = 11
KV_CACHE_MEMORY = 8 << 30     # bytes "available" for the KV cache (KV pressure is not studied)
# Modules a hybrid Qwen3-Next build imports beyond the scheduler's: named before the model
# is inspected, whose subprocess would only say "failed to be inspected".
MODEL_MODULES = ("vllm.model_executor.models.qwen3_next",
                 "vllm.model_executor.models.qwen3_next_mtp")


@frozen
class HybridWorld:
    """What the engine hands its ``Scheduler``, and what a report says about it."""

    vllm_config: Any
    kv_cache_config: Any
    block_size: int                 # the scheduler's block size (the Mamba block in align mode)
    hash_block_size: int
    mamba_spec: Any                 # the first Mamba group's spec, as its layer made it
    groups: tuple[tuple[str, int, int], ...]   # (spec class, block size, layers) per group

    def facts(self) -> dict:
        """The settings a finding names, read back from vLLM's objects."""
        vc = self.vllm_config
        spec = self.mamba_spec
        return {
            "architecture": vc.model_config.architecture,
            "speculative_method": vc.speculative_config.method,
            "num_speculative_tokens": vc.speculative_config.num_speculative_tokens,
            "multi_module_mtp": vc.speculative_config.use_multi_module_mtp(),
            "num_prefill_lookahead_tokens": vc.num_prefill_lookahead_tokens,
            "num_hash_lookahead_tokens": vc.num_hash_lookahead_tokens,
            "enable_prefix_caching": vc.cache_config.enable_prefix_caching,
            "mamba_cache_mode": vc.cache_config.mamba_cache_mode,
            "block_size": self.block_size,
            "mamba_block_size": vc.cache_config.mamba_block_size,
            "hash_block_size": self.hash_block_size,
            "max_num_batched_tokens": vc.scheduler_config.max_num_batched_tokens,
            "max_num_seqs": vc.scheduler_config.max_num_seqs,
            "enable_chunked_prefill": vc.scheduler_config.enable_chunked_prefill,
            "scheduler": vc.scheduler_config.get_scheduler_cls().__name__,
            "mamba_spec": {"shapes": [list(s) for s in spec.shapes],
                           "dtypes": [str(d) for d in spec.dtypes],
                           "num_speculative_blocks": spec.num_speculative_blocks,
                           "num_prefill_checkpoint_blocks": spec.num_prefill_checkpoint_blocks,
                           "prefill_checkpoint_alignment": spec.prefill_checkpoint_alignment},
            "kv_cache_groups": [list(g) for g in self.groups],
            "platform": type(_platform()).__name__,
        }


@functools.cache
def variant(model_dir: str, **fields: Any) -> str:
    """A copy of ``model_dir``'s ``config.json`` with ``fields`` changed, in a fresh
    directory (a checkpoint of the same architecture that differs there: e.g. one MTP module,
    ``num_nextn_predict_layers=1``). Not ``hf_overrides``: the draft model's config is read
    from the directory again, without the target's overrides."""
    config = json.loads((Path(model_dir) / "config.json").read_text())
    config.update(fields)
    folder = Path(tempfile.mkdtemp(prefix="lch-hybrid-"))
    (folder / "config.json").write_text(json.dumps(config))
    return str(folder)


# The CPU every world is built for. vLLM's CPU platform reads the host's instruction set while
# it finalizes the configs (on an AVX-512 BF16 host it keeps the SSM state in float32, hence a
# larger Mamba page and block: 1152 tokens for the catalogue's Qwen3-Next against 640 without
# it), so the same configs built on another host are another world, and a reproducer written
# on one host would not build its world on the next. The probes are answered for one declared
# host, whatever runs the test: x86 with AVX-512 and BF16, without AMX tiles.
CPU_ISA = {"_is_avx512_supported": True, "_is_avx512_bf16_supported": True,
           "_is_amx_tile_supported": False}


@contextlib.contextmanager
def declared_cpu():
    """vLLM sees the host of ``CPU_ISA`` (torch's ISA probes answered) inside this block."""
    import torch
    with contextlib.ExitStack() as stack:
        for probe, answer in CPU_ISA.items():
            stack.enter_context(mock.patch.object(torch.cpu, probe,
                                                  functools.partial(bool, answer)))
        yield


def _platform() -> Any:
    return release.import_module("vllm.platforms").current_platform


def _check_imports() -> None:
    for name in MODEL_MODULES:
        release.import_module(name)      # TargetUnavailable names the missing package


@functools.cache
def build(model_dir: str, token_budget: int, max_num_seqs: int, num_speculative_tokens: int,
          max_model_len: int = 8192, kv_events: bool = False,
          num_gpu_blocks: int | None = None, retention_interval: int | None = 0,
          prefix_match_unit: int | None = None, async_scheduling: bool = False) -> HybridWorld:
    """The world of the model in ``model_dir`` (a ``config.json``) with an MTP drafter of
    ``num_speculative_tokens``, prefix caching and chunked prefill on, the given token budget
    and ``max_num_seqs``; ``kv_events``: KV cache events on (``KVEventsConfig``, the null
    publisher: ``HybridScheduler`` keeps what the scheduler publishes); ``num_gpu_blocks``:
    the pool that many blocks (``CacheConfig.num_gpu_blocks_override``, the user's option), so
    that requests press on it; ``retention_interval``: which Mamba states the prefix cache
    keeps (``prefix_cache_retention_interval``: 0, vLLM's default, the prompt's replay boundary
    and shared-prefix junctions; None, every state computed; N, one per N tokens);
    ``prefix_match_unit``: the tokens a prefix-cache key covers where it is finer than the
    block (``CacheConfig.prefix_match_unit``: hits, and the Mamba states kept, land on its
    multiples inside a block; None, vLLM's choice, the groups' common block);
    ``async_scheduling``: the engine's ``AsyncScheduler``, as a GPU's engine runs it beside an
    MTP drafter (the CPU platform turns ``async_scheduling`` off in the config, so the class
    is named in ``SchedulerConfig.scheduler_cls``, as ``sim/vllm/scheduler_pass.py`` does;
    ``HybridScheduler`` then keeps a step in flight while it schedules the next). Every
    value passes vLLM's validators (a bad one raises there: fewer blocks than the model's
    length needs, say).
    One build per process and key (~15 s; the first per architecture also inspects the
    model, ~30 s). A build that fails is ``unavailable`` (``AdapterError``), never a finding:
    there is no world to find anything in."""
    _check_imports()
    try:
        with declared_cpu():
            return _build(model_dir, token_budget, max_num_seqs, num_speculative_tokens,
                          max_model_len, kv_events, num_gpu_blocks, retention_interval,
                          prefix_match_unit, async_scheduling)
    except HarnessError:
        raise
    except Exception as error:  # noqa: BLE001 - whatever stopped vLLM building the world
        from sim.outcomes import classify
        verdict = classify(error)
        raise AdapterError(
            f"vLLM {release.release()} could not build the hybrid world of {model_dir} "
            f"(token budget {token_budget}, max_num_seqs {max_num_seqs}, "
            f"{num_speculative_tokens} speculative tokens"
            + (f", {num_gpu_blocks} blocks" if num_gpu_blocks is not None else "")
            + f"): {verdict.detail} "
            f"(at {verdict.where})") from error


def _build(model_dir: str, token_budget: int, max_num_seqs: int, num_speculative_tokens: int,
           max_model_len: int, kv_events: bool, num_gpu_blocks: int | None,
           retention_interval: int | None, prefix_match_unit: int | None,
           async_scheduling: bool) -> HybridWorld:
    import torch
    config = release.import_module("vllm.config")
    async_cls = scheduler_pass_compat.async_scheduler_cls(
        release.import_module("vllm.v1.core.sched.scheduler")) if async_scheduling else None
    if async_scheduling and async_cls is None:
        raise TargetUnavailable(f"vLLM {release.release()} has no AsyncScheduler of the kind "
                                "this world drives")
    model_config = config.ModelConfig(
        model=model_dir, seed=0, skip_tokenizer_init=True, max_model_len=max_model_len)
    parallel = config.ParallelConfig()
    speculative_config = config.SpeculativeConfig(
        method="mtp", num_speculative_tokens=num_speculative_tokens,
        target_model_config=model_config, target_parallel_config=parallel)
    scheduler_config = config.SchedulerConfig(
        max_num_seqs=max_num_seqs, max_num_batched_tokens=token_budget,
        max_model_len=max_model_len, enable_chunked_prefill=True,
        is_encoder_decoder=model_config.is_encoder_decoder,
        **({} if async_cls is None else
           {"scheduler_cls": f"{async_cls.__module__}.{async_cls.__qualname__}"}))
    with release.cpu_build():
        vllm_config = config.VllmConfig(
            model_config=model_config, parallel_config=parallel,
            speculative_config=speculative_config, scheduler_config=scheduler_config,
            cache_config=config.CacheConfig(
                enable_prefix_caching=True, num_gpu_blocks_override=num_gpu_blocks,
                # each named only when asked: a release before the option has the default's
                # behaviour
                **({} if retention_interval == 0 else
                   {"prefix_cache_retention_interval": retention_interval}),
                **({} if prefix_match_unit is None else
                   {"prefix_match_unit": prefix_match_unit})),
            kv_events_config=config.KVEventsConfig(enable_kv_cache_events=True,
                                                   publisher="null") if kv_events else None,
            load_config=config.LoadConfig(load_format="dummy"))
    loader = release.import_module("vllm.model_executor.model_loader.utils")
    torch_utils = release.import_module("vllm.utils.torch_utils")
    layers = release.import_module("vllm.config.vllm")
    attention_base = release.import_module(
        "vllm.model_executor.layers.attention_layer_base").AttentionLayerBase
    with config.set_current_vllm_config(vllm_config):
        _one_process_group()
        with torch_utils.set_default_torch_dtype(model_config.dtype), torch.device("cpu"):
            loader.initialize_model(vllm_config=vllm_config)
            target_layers = set(layers.get_layers_from_vllm_config(vllm_config,
                                                                   attention_base))
            loader.initialize_model(
                vllm_config=vllm_config,
                model_config=vllm_config.speculative_config.draft_model_config)
        for name, layer in layers.get_layers_from_vllm_config(vllm_config,
                                                              attention_base).items():
            if name not in target_layers:          # as the proposer's load_model marks them
                layer.is_draft_layer = True
        _platform().update_block_size_for_backend(vllm_config)
        specs = scheduler_pass_compat.layer_kv_cache_specs(vllm_config)
        return _kv_cache_world(vllm_config, specs)


def _one_process_group() -> None:
    """A world-size-1 ``gloo`` group (what a CPU worker initialises), once per process."""
    state = release.import_module("vllm.distributed.parallel_state")
    if state.model_parallel_is_initialized():
        return
    state.init_distributed_environment(1, 0, "file://" + tempfile.mktemp(prefix="lch-gloo-"),
                                       0, "gloo")
    state.ensure_model_parallel_initialized(1, 1)


def _kv_cache_world(vllm_config: Any, specs: dict) -> HybridWorld:
    """``EngineCore._initialize_kv_caches`` from the specs on, for one worker."""
    from vllm.v1.attention.backends.utils import resolve_kv_cache_layout
    from vllm.v1.core import kv_cache_planning as planning
    from vllm.v1.core import kv_cache_utils as utils
    from vllm.v1.core.single_type_kv_cache_manager import register_all_kvcache_specs
    from vllm.v1.kv_cache_interface import MambaSpec
    from vllm.v1.worker.worker_base import WorkerBase
    register_all_kvcache_specs(vllm_config)
    layouts = WorkerBase.get_supported_kv_cache_layouts(SimpleNamespace(
        vllm_config=vllm_config))
    resolve_kv_cache_layout(vllm_config, [layouts], list(specs.values()))
    groups = planning.get_global_kv_cache_groups(vllm_config, [specs])
    vllm_config.adjust_dcp_kv_cache_interleave_size(groups)
    configs = planning.get_kv_cache_configs(vllm_config, [specs], [KV_CACHE_MEMORY], groups)
    for one in configs:
        one.kv_cache_layout = vllm_config.cache_config.kv_cache_layout
    kv = utils.generate_scheduler_kv_cache_config(configs)
    cache = vllm_config.cache_config
    cache.num_gpu_blocks = kv.num_blocks
    participating = [g.kv_cache_spec.block_size for g in kv.kv_cache_groups
                     if g.kv_cache_spec.prefix_cacheable]
    cache.block_size = min(participating or [g.kv_cache_spec.block_size
                                             for g in kv.kv_cache_groups])
    utils.update_kv_cache_capacity(vllm_config, kv)
    vllm_config.validate_block_size()
    block_size, hash_block_size = utils.resolve_kv_cache_block_sizes(kv, vllm_config)
    kv.hash_block_size = hash_block_size
    kv.cache_hit_alignment_tokens = utils.resolve_cache_hit_alignment_tokens(
        kv, vllm_config, block_size, hash_block_size)
    mamba = [g.kv_cache_spec for g in kv.kv_cache_groups
             if isinstance(g.kv_cache_spec, MambaSpec)]
    if not mamba:
        raise TargetUnavailable(f"{vllm_config.model_config.architecture}: vLLM built no "
                                "Mamba group for it; name a hybrid model's config.json")
    return HybridWorld(vllm_config, kv, block_size, hash_block_size, mamba[0], tuple(
        (type(g.kv_cache_spec).__name__, g.kv_cache_spec.block_size, len(g.layer_names))
        for g in kv.kv_cache_groups))


class HybridScheduler:
    """A fresh ``Scheduler`` of ``world`` and the runner's part of each step."""

    def __init__(self, world: HybridWorld):
        vllm_config = world.vllm_config
        sched_mod = release.import_module("vllm.v1.core.sched.scheduler")
        structured = release.import_module("vllm.v1.structured_output")
        utils = release.import_module("vllm.v1.core.kv_cache_utils")
        hashing = release.import_module("vllm.utils.hashing")
        self._request = release.import_module("vllm.v1.request")
        self._sampling = release.import_module("vllm.sampling_params")
        self._outputs = release.import_module("vllm.v1.outputs")
        scheduler_cls = vllm_config.scheduler_config.get_scheduler_cls()
        assert issubclass(scheduler_cls, sched_mod.Scheduler), scheduler_cls
        self.scheduler = scheduler_cls(
            vllm_config=vllm_config, kv_cache_config=world.kv_cache_config,
            structured_output_manager=structured.StructuredOutputManager(vllm_config),
            log_stats=False, block_size=world.block_size,
            hash_block_size=world.hash_block_size)
        hash_fn = hashing.get_hash_fn_by_name(vllm_config.cache_config.prefix_caching_hash_algo)
        utils.init_none_hash(hash_fn)
        self._hasher = utils.get_request_block_hasher(
            world.hash_block_size, hash_fn, vllm_config.num_hash_lookahead_tokens)
        self._utils = utils
        self.published: list[Any] = []
        self.lookups: list[Lookup] = []
        self.verified: dict[str, int] = {}     # request -> drafts the last pass verified
        # Steps scheduled and run whose outputs are not applied yet, oldest first, each with
        # what its runner samples (fixed when it is scheduled: a later pass moves on).
        self.pipelined = issubclass(scheduler_cls, release.import_module(
            "vllm.v1.core.sched.async_scheduler").AsyncScheduler)
        self._in_flight: deque[tuple[Any, list[str], list[list[int]]]] = deque()
        self._accepted: int | None = None
        if self.scheduler.enable_kv_cache_events:
            # The engine's seam for its events: the scheduler publishes each step's batch
            # (``update_from_output``) to this object, as it would to a ZMQ publisher.
            self.scheduler.kv_event_publisher = SimpleNamespace(
                publish=lambda batch: self.published.extend(batch.events),
                shutdown=lambda: None)

    def add_request(self, request_id: str, prompt_len: int, max_tokens: int = 1) -> None:
        """A text request; its tokens differ from every other request's from the first on
        (no prefix-cache hit between them)."""
        salt = sum(map(ord, request_id))
        self.add_prompt(request_id, [(salt * 31 + i * 7) % 251 + 3 for i in range(prompt_len)],
                        max_tokens)

    def add_prompt(self, request_id: str, tokens: list[int], max_tokens: int = 1,
                   report_full: bool = False) -> None:
        """A text request of ``tokens``; ``report_full``: it asks for its KV events in full
        (``kv_cache_report_mode``), so its lookup reports the cached blocks it reuses."""
        extra = {"kv_cache_report_mode": "full"} if report_full else None
        self.scheduler.add_request(self._request.Request(
            request_id=request_id, prompt_token_ids=list(tokens),
            sampling_params=self._sampling.SamplingParams(max_tokens=max_tokens,
                                                          ignore_eos=True, extra_args=extra),
            pooling_params=None, block_hasher=self._hasher))

    def watch_lookups(self) -> None:
        """Record every prefix-cache lookup the scheduler makes (``get_computed_blocks``)
        from now on, with what the pool cached just before it: ``take_lookups``."""
        manager = self.scheduler.kv_cache_manager
        lookup = manager.get_computed_blocks

        def recorded(request: Any, max_cache_hit_length: int | None = None) -> Any:
            caching = self.caching_blocks()
            answer = lookup(request, max_cache_hit_length)
            self.lookups.append(Lookup(
                request.request_id, self.prefix_keys(request.request_id),
                request.num_tokens - 1 if max_cache_hit_length is None
                else max_cache_hit_length, frozenset(caching), answer[1],
                tuple(tuple(None if b.is_null else b.block_id for b in group)
                      for group in answer[0].blocks), caching))
            return answer
        manager.get_computed_blocks = recorded

    def prefix_keys(self, request_id: str) -> tuple:
        """The request's prefix keys as events carry them: the first unit's, the first two
        units', ... (as far as its tokens go)."""
        convert = self._utils.maybe_convert_block_hash
        return tuple(convert(h) for h in self.scheduler.requests[request_id].block_hashes)

    def take_lookups(self) -> list[Lookup]:
        lookups, self.lookups = self.lookups, []
        return lookups

    def group_indices(self, spec: str) -> tuple[int, ...]:
        """The KV cache groups whose spec class is named ``spec`` (``MambaSpec``, ...)."""
        return tuple(i for i, g in enumerate(self.scheduler.kv_cache_config.kv_cache_groups)
                     if type(g.kv_cache_spec).__name__ == spec)

    def take_published(self) -> list[Any]:
        """The KV events the scheduler published since the last call, in order."""
        events, self.published = self.published, []
        return events

    def cached_prefixes(self) -> set[tuple[int, Any]]:
        """What the pool caches: (group index, the prefix's hash as events carry it)."""
        return set(self.caching_blocks())

    def caching_blocks(self) -> dict[tuple[int, Any], frozenset[int]]:
        """(group index, the prefix's hash as events carry it) -> the blocks caching it."""
        from sim.vllm import prefix_cache_compat
        utils = self._utils
        return {(utils.get_group_id(key), utils.maybe_convert_block_hash(
                    utils.get_block_hash(key))): frozenset(b.block_id for b in blocks)
                for key, blocks in prefix_cache_compat.cached_entries(
                    self.scheduler.kv_cache_manager.block_pool)}

    def reset_prefix_cache(self) -> bool:
        return self.scheduler.reset_prefix_cache()

    def ref_counts(self) -> dict[int, int]:
        """Every block's reference count (the null block left out)."""
        return {b.block_id: b.ref_cnt for b in self.scheduler.kv_cache_manager.block_pool.blocks
                if not b.is_null}

    def holders(self) -> dict[int, int]:
        """Per block, how many request tables hold it, over every group's manager."""
        counts: dict[int, int] = {}
        for manager in self.scheduler.kv_cache_manager.coordinator.single_type_managers:
            for blocks in manager.req_to_blocks.values():
                for block in blocks:
                    if not block.is_null:
                        counts[block.block_id] = counts.get(block.block_id, 0) + 1
        return counts

    def tables(self, group: int) -> dict[str, tuple[int | None, ...]]:
        """Each request's blocks in ``group``, in table order (None for the null block)."""
        manager = self.scheduler.kv_cache_manager.coordinator.single_type_managers[group]
        return {rid: tuple(None if b.is_null else b.block_id for b in blocks)
                for rid, blocks in manager.req_to_blocks.items()}

    def free_queue(self) -> tuple[int, ...]:
        return tuple(b.block_id for b in self.scheduler.kv_cache_manager.block_pool
                     .free_block_queue.get_all_free_blocks())

    def step(self, accepted: int | None = None) -> dict[str, int]:
        """One engine turn (``sim/engine_turn.py``: scheduled, run, and the oldest output
        applied as the engine would, at once or, pipelined, once two steps are in flight);
        returns the tokens the turn's pass scheduled per request.

        ``accepted``: the drafter runs. Each pass's verification accepts the first
        ``accepted`` of the drafts it scheduled and rejects the rest (the scheduler rolls its
        computed tokens back). Synchronously the engine hands the scheduler each decoding
        request's drafts after the output (``update_draft_token_ids``); pipelined, the
        scheduler schedules placeholders for them itself. None: no drafter runs (no draft
        is ever scheduled)."""
        self._accepted = accepted
        turn = engine_turn(self, open_requests=self.scheduler.has_requests(),
                           async_scheduling=self.pipelined,
                           in_flight=lambda: len(self._in_flight),
                           apply_oldest=self._apply_oldest)
        return dict(turn.output.num_scheduled_tokens)

    def schedule(self) -> SchedulerOutputView:
        out = self.scheduler.schedule()
        ids = list(out.num_scheduled_tokens)
        drafts = out.scheduled_spec_decode_tokens
        self.verified = {r: len(d) for r, d in drafts.items() if d}
        accepted = self._accepted or 0
        self._in_flight.append((out, ids, [
            [] if self.scheduler.requests[r].is_prefill_chunk else
            [SAMPLED_TOKEN] * (1 + min(accepted, len(drafts.get(r, ())))) for r in ids]))
        return SchedulerOutputView(dict(out.num_scheduled_tokens), {}, ())

    def execute_model(self, output: SchedulerOutputView) -> tuple:
        return ()                   # no worker: the runner's output is made up when applied

    def _apply_oldest(self) -> tuple[str, ...]:
        out, ids, sampled = self._in_flight.popleft()
        self.scheduler.update_from_output(
            out, scheduler_pass_compat.runner_output(self._outputs, ids, sampled))
        if self._accepted is not None and not self.pipelined:
            width = self.scheduler.num_spec_tokens
            self.scheduler.update_draft_token_ids(self._outputs.DraftTokenIds(
                ids, [[DRAFT_TOKEN] * width for _ in ids]))
        return ()

    def processed(self, request_id: str) -> int:
        """The request's computed tokens whose step's output was applied (a pipelined step in
        flight has moved ``num_computed_tokens`` on already)."""
        request = self.scheduler.requests[request_id]
        return request.num_computed_tokens - request.num_in_flight_tokens

    def computed(self, request_id: str) -> int | None:
        """The request's computed tokens, None once it finished."""
        request = self.scheduler.requests.get(request_id)
        return None if request is None else request.num_computed_tokens

    def unfinished(self) -> int:
        return self.scheduler.get_num_unfinished_requests()

    def run(self, max_passes: int, quiet: int = 3) -> list[dict[str, int]]:
        """Step until every request finished, or ``quiet`` passes in a row schedule nothing
        while requests are unfinished (then no state changed between them, and none will:
        the pass is deterministic), or ``max_passes``; the tokens of every pass."""
        passes: list[dict[str, int]] = []
        while self.unfinished() and len(passes) < max_passes:
            passes.append(self.step())
            if len(passes) >= quiet and not any(passes[-quiet:]):
                break
        return passes
