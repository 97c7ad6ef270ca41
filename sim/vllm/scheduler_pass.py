"""The ``vllm`` target's scheduler pass: the installed vLLM's real V1 ``Scheduler``, offline on
CPU (``docs/specs/scheduler-pass.md``), with the native worker playing the GPU part.

The scheduler is built from a tiny local OPT ``config.json`` (no weights, no tokenizer),
``skip_tokenizer_init=True``, prefix caching off and a large KV pool, except in the
KV-pressure worlds (below). The world's scheduler settings go to
the constructors that validate them: ``SchedulerConfig(max_num_batched_tokens=budget,
max_num_seqs=min(16, budget), disable_chunked_mm_input=..., scheduler_cls=...)`` inside a
``VllmConfig``, one per process and settings (the first ``ModelConfig`` per architecture
inspects the model in a subprocess, ~24 s, cached in ``$VLLM_CACHE_ROOT``); each target gets
a fresh ``Scheduler`` (about 2 ms).

What cannot be built that way is still driven, and the target says why its results are
outside what vLLM builds (``outside_vllm``, the reasons of ``sim/vllm/scheduler_world.py``):
a text model gets no multimodal budget, so the world's encoder budget and a real
``EncoderCacheManager`` of its size are set on the built Scheduler (vLLM derives both, and
only from a multimodal model's processor); a drafter's lookahead is set without its
``SpeculativeConfig``; a Mamba group is hand-built; and more requests open than the
``max_num_seqs`` a small budget allows is a cap the model does not have. The Mamba + MTP
world vLLM does build is ``sim/vllm/hybrid_world.py``'s.

Requests are real ``vllm.v1.request.Request`` objects with one ``MultiModalFeatureSpec`` per
item. After ``schedule()`` a fake model runner output samples token 7 for every request that
is not in the middle of its prefill, as a real runner would.

A world's ``read_ahead`` is a speculative drafter's prefill lookahead (``_drafter_lookahead``:
1 stands for an EAGLE head with one speculative token, 2 or more for a multi-module MTP
drafter with that many modules and speculative tokens). vLLM computes the number from a real
``SpeculativeConfig`` built offline (``VllmConfig.num_prefill_lookahead_tokens``) and the
Scheduler, built without it, is given that number (see ``_give_drafter``: outside what vLLM
builds). Through
the worker, the drafter reads that many tokens past each chunk, up to the first embed of
an item whose output the worker will not hold: vLLM's drafter falls back to token embeddings
there. Releases that shift under other rules report the world missing
(``scheduler_pass_compat.prefill_lookahead_attribute``).
An item's ``is_embed`` mask goes to ``PlaceholderRange.is_embed`` as a torch bool tensor; the
worker maps scheduled positions to rows of the encoder output through the range's own
``get_embeds_indices_in_range``, as vLLM's GPU model runner does.

An encoder-cache connector (``ec_cached_mm_hashes``) is the recording connector of
``sim/vllm/ec_connector.py``, named in ``ec_transfer_config`` while this target's ``Scheduler``
is built, so the Scheduler creates it through ``ECConnectorFactory`` as it would any
connector; the test then tells it which hashes it holds. Its metadata names the inputs the
worker loads (the native worker stores the same output the encoder would have made).

An encoder-decoder world (``encoder_decoder``) builds the Scheduler from a tiny local Whisper
``config.json`` (``ModelConfig.is_encoder_decoder`` is then true: the Scheduler takes its
encoder-decoder path and ``EncoderDecoderCacheManager``). Whisper is multimodal, so
``MultiModalBudget`` asks the registry for a processor, which needs a tokenizer; a stub
registry answers instead (one token per audio item), and the budgets and the manager are
then set as for the text model (outside what vLLM builds). Without chunked prefill (vLLM
turns it off for these models) the budget must cover ``max_model_len``, which is therefore
the budget. Requests carry one audio feature at offset
0; the worker's decoder reads each encoded output whole in the step that encodes it
(cross-attention). A release without ``EncoderDecoderCacheManager`` reports the world absent
(``drives_encoder_decoder``); one that has it and fails to build is unavailable.

An async-scheduling world (``async_scheduling``) builds the release's ``AsyncScheduler`` (the
CPU platform turns ``async_scheduling`` off in the config, so the class is named in
``SchedulerConfig.scheduler_cls`` and built by ``get_scheduler_cls()``, as the engine does)
and drives it as the engine's batch queue does: ``step()``
schedules a step and the worker runs it at once (it runs steps in order), and the oldest
step's output is applied once two are in flight. The fake runner output of each step is
decided when it is scheduled (whether the request was left inside its prompt), since a
later pass has moved the request on by the time the output is applied. A release whose
async scheduler frees an input as soon as its tokens are scheduled (before 0.30.0) is not
the spec's: the target reports the world absent (``drives_async_scheduling``).

A hybrid Mamba world (``mamba_block_size``) builds the Scheduler over a KV cache config with a
Mamba group beside the attention group, both of that block size, and its own copy of the
cache config in align mode (``mamba_cache_mode="align"``): the Scheduler then splits prefill
chunks at block boundaries (``_mamba_block_aligned_split``). Align mode runs with prefix
caching in vLLM; here the KV manager keeps it off (the prompts are all alike) and the
drafter's hash lookahead is set as a caching engine would have it (``_drafter_hash_lookahead``).
The spec and the cache mode are set by hand: outside what vLLM builds. Releases whose split
follows other rules report the world absent (``drives_mamba``).

``preempt_request`` does what ``schedule()`` does to the last running request when it runs
out of KV blocks (pop it from ``running``, then ``_preempt_request``); outside the
KV-pressure worlds the pool is too large for that to happen on its own, so the rule calls the
same two steps between passes. ``reset_encoder_cache`` is the engine's: the scheduler's
(``Scheduler.reset_encoder_cache``) and the model runner's (it drops its encoder outputs).

A KV-pressure world (``kv_blocks``) sizes the pool to that many blocks and ``max_model_len``
to what they hold; with ``enable_prefix_caching`` the ``CacheConfig`` turns prefix caching on
and each request gets the block hasher the engine gives it
(``scheduler_pass_compat.request_block_hasher``), which mixes each item's identifier and
offset into its blocks' hashes. Prompt tokens are all 0, so two requests share a block
exactly where their items agree. A release whose hashes leave the offset out reports the
world without prefix caching (``drives_prefix_caching``). A request the pass starts at a
prefix hit is gathered from the hit on (its computed tokens after the pass, less those
scheduled).
"""

from __future__ import annotations

import copy
import functools
import json
import os
import tempfile
from collections import deque
from types import SimpleNamespace
from typing import Any

from models.scheduler_pass_values import Gathered, SchedRequest, SchedulerOutputView, StepView
from sim.encoder_worker import EncoderCacheMiss, EncoderWorker
from sim.engine_turn import engine_turn
from sim.errors import CapabilityMissing, HarnessError
from sim.vllm import (
    encoder_cache_compat,
    encoder_decoder_cache_compat,
    release,
    scheduler_pass_compat,
    scheduler_world,
)

MAX_MODEL_LEN = 4096
KV_BLOCK_SIZE = 16
MAX_NUM_SEQS = 16
SAMPLED_TOKEN = 7

TINY_OPT = {
    "architectures": ["OPTForCausalLM"], "model_type": "opt", "hidden_size": 16,
    "ffn_dim": 32, "num_attention_heads": 2, "num_hidden_layers": 1, "vocab_size": 128,
    "word_embed_proj_dim": 16, "max_position_embeddings": MAX_MODEL_LEN,
    "torch_dtype": "float16", "bos_token_id": 2, "eos_token_id": 2, "pad_token_id": 1,
}


TINY_WHISPER = {
    "architectures": ["WhisperForConditionalGeneration"], "model_type": "whisper",
    "d_model": 16, "encoder_layers": 1, "decoder_layers": 1, "encoder_attention_heads": 2,
    "decoder_attention_heads": 2, "encoder_ffn_dim": 32, "decoder_ffn_dim": 32,
    "vocab_size": 128, "num_mel_bins": 8, "max_source_positions": 16,
    "max_target_positions": MAX_MODEL_LEN, "is_encoder_decoder": True,
    "torch_dtype": "float16", "bos_token_id": 2, "eos_token_id": 2, "pad_token_id": 1,
    "decoder_start_token_id": 3,
}


class _StubAudioRegistry:
    """What ``MultiModalBudget`` reads of a multimodal registry, for one audio per prompt;
    one token per item, so its checks against the token budget pass for any world (the
    adapter sets the real budgets on the built Scheduler)."""

    def create_processor(self, model_config: Any, *args: Any, **kwargs: Any) -> Any:
        info = SimpleNamespace(
            supported_mm_limits={"audio": 1}, allowed_mm_limits={"audio": 1},
            ctx=SimpleNamespace(model_config=model_config),
            get_mm_max_tokens_per_item=lambda seq_len, mm_counts: {"audio": 1})
        return SimpleNamespace(info=info)


# An EAGLE head for the tiny OPT (one llama-shaped layer, the same hidden size and vocab).
TINY_EAGLE = {
    "architectures": ["EagleLlamaForCausalLM"], "model_type": "llama", "hidden_size": 16,
    "intermediate_size": 32, "num_attention_heads": 2, "num_key_value_heads": 2,
    "num_hidden_layers": 1, "vocab_size": 128, "max_position_embeddings": MAX_MODEL_LEN,
    "torch_dtype": "float16", "rms_norm_eps": 1e-5,
}

# A target whose checkpoint carries MTP modules (``num_nextn_predict_layers``, set per
# lookahead): a tiny DeepSeek-V3, the commonest multi-module MTP target.
TINY_DEEPSEEK_V3 = {
    "architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3", "hidden_size": 16,
    "intermediate_size": 32, "num_attention_heads": 2, "num_key_value_heads": 2,
    "num_hidden_layers": 1, "vocab_size": 128, "max_position_embeddings": MAX_MODEL_LEN,
    "torch_dtype": "float16", "rms_norm_eps": 1e-5, "kv_lora_rank": 8, "q_lora_rank": 8,
    "qk_rope_head_dim": 4, "qk_nope_head_dim": 4, "v_head_dim": 8, "n_routed_experts": 2,
    "num_experts_per_tok": 1, "moe_intermediate_size": 8, "first_k_dense_replace": 1,
    "n_group": 1, "topk_group": 1, "bos_token_id": 2, "eos_token_id": 2,
}


def _model_dir(config: dict, prefix: str) -> str:
    model_dir = tempfile.mkdtemp(prefix=prefix)
    with open(os.path.join(model_dir, "config.json"), "w") as handle:
        json.dump(config, handle)
    return model_dir


@functools.cache
def _drafter_config(read_ahead: int) -> Any:
    """A real configuration, built offline, of the drafter ``read_ahead`` stands for: an
    EAGLE head with one speculative token over the tiny OPT (1), or a multi-module MTP
    drafter with ``read_ahead`` modules and speculative tokens over a tiny DeepSeek-V3
    (more). One per process and lookahead (~10 s: the draft model's
    config is inspected as the target's is)."""
    config_mod = release.import_module("vllm.config")
    mtp = read_ahead > 1
    target = config_mod.ModelConfig(
        model=_model_dir({**TINY_DEEPSEEK_V3, "num_nextn_predict_layers": read_ahead}
                         if mtp else TINY_OPT, "lch-tiny-target-"),
        dtype="float16", seed=42, skip_tokenizer_init=True, max_model_len=MAX_MODEL_LEN)
    speculative = config_mod.SpeculativeConfig(
        method="mtp" if mtp else "eagle",
        model=None if mtp else _model_dir(TINY_EAGLE, "lch-tiny-eagle-"),
        num_speculative_tokens=read_ahead, target_model_config=target,
        target_parallel_config=config_mod.ParallelConfig())
    scheduler_config = config_mod.SchedulerConfig(
        max_num_seqs=16, max_num_batched_tokens=MAX_MODEL_LEN, max_model_len=MAX_MODEL_LEN,
        enable_chunked_prefill=True, is_encoder_decoder=False)
    cache_config = config_mod.CacheConfig(block_size=16, gpu_memory_utilization=0.9,
                                          cache_dtype="auto", enable_prefix_caching=False)
    with release.cpu_build():
        vllm_config = config_mod.VllmConfig(
            model_config=target, speculative_config=speculative,
            scheduler_config=scheduler_config, cache_config=cache_config)
    return vllm_config


def _drafter_lookahead(read_ahead: int) -> int:
    """The prefill lookahead of the drafter ``read_ahead`` stands for (``_drafter_config``),
    checked to be ``read_ahead``."""
    vllm_config = _drafter_config(read_ahead)
    speculative = vllm_config.speculative_config
    lookahead = vllm_config.num_prefill_lookahead_tokens
    if lookahead != read_ahead:
        raise HarnessError(f"vLLM {release.release()} gives {speculative!r} a prefill "
                           f"lookahead of {lookahead}, not {read_ahead}: see "
                           "VllmConfig.num_prefill_lookahead_tokens and pick the drafter "
                           "that reads read_ahead tokens in _drafter_lookahead")
    return lookahead


def _drafter_hash_lookahead(read_ahead: int) -> int:
    """The tokens past a block that the drafter's block hashes cover once prefix caching is
    on (``VllmConfig.num_hash_lookahead_tokens``: align mode runs with prefix caching),
    checked to be ``read_ahead`` with the EAGLE block drop off, as the Mamba model has it
    (``models/scheduler_pass_mamba.py``)."""
    vllm_config = _drafter_config(read_ahead)
    vllm_config.cache_config.enable_prefix_caching = True
    try:
        hashes = scheduler_pass_compat.hash_lookahead_tokens(vllm_config)
    finally:
        vllm_config.cache_config.enable_prefix_caching = False
    if hashes != read_ahead:
        raise HarnessError(f"vLLM {release.release()} hashes {hashes} tokens past a block "
                           f"for a drafter reading {read_ahead}: the Mamba model's last "
                           "checkpoint assumes they agree (VllmConfig.num_hash_lookahead_tokens)")
    return hashes


@functools.cache
def _model_config(encoder_decoder: bool, max_model_len: int) -> Any:
    """One ``ModelConfig`` per process, model and length (the first inspection is slow)."""
    config_mod = release.import_module("vllm.config")
    model_dir = _model_dir(TINY_WHISPER if encoder_decoder else TINY_OPT,
                           "lch-tiny-whisper-" if encoder_decoder else "lch-tiny-opt-")
    return config_mod.ModelConfig(model=model_dir, dtype="float16", seed=42,
                                  skip_tokenizer_init=True, max_model_len=max_model_len)


def max_num_seqs(token_budget: int) -> int:
    """The most running requests the world's ``SchedulerConfig`` allows: vLLM requires
    ``max_num_seqs <= max_num_batched_tokens``."""
    return min(MAX_NUM_SEQS, token_budget)


@functools.cache
def _vllm_config(encoder_decoder: bool = False, token_budget: int = MAX_MODEL_LEN,
                 disable_chunked_mm_input: bool = False, scheduler_cls: str | None = None,
                 kv_blocks: int = 0, enable_prefix_caching: bool = False,
                 reserve_full_isl: bool = True, watermark: float = 0.0) -> Any:
    """One ``VllmConfig`` per process and scheduler settings, every setting given to the
    constructors that validate it: the token budget with a ``max_num_seqs`` it allows, the
    chunked-input switch, and the scheduler class (``AsyncScheduler``: named, as the CPU
    platform turns ``async_scheduling`` itself off). An encoder-decoder model runs without
    chunked prefill, where vLLM requires the budget to cover ``max_model_len``: its
    ``max_model_len`` is the budget (the worlds' requests fit it, ``add_request`` checks).
    Called with no argument (``lch/suites.py`` warms a mutation worker so): the text model's
    config at a budget of ``MAX_MODEL_LEN``. A KV pool of ``kv_blocks`` blocks (0: a pool that
    never runs out) bounds ``max_model_len`` to what it holds, as the engine requires of the
    KV cache it sizes (``check_enough_kv_cache_memory``)."""
    config_mod = release.import_module("vllm.config")
    max_model_len = token_budget if encoder_decoder else \
        kv_blocks * KV_BLOCK_SIZE if kv_blocks else MAX_MODEL_LEN
    model_config = _model_config(encoder_decoder, max_model_len)
    scheduler_config = config_mod.SchedulerConfig(
        max_num_seqs=max_num_seqs(token_budget), max_num_batched_tokens=token_budget,
        max_model_len=max_model_len, enable_chunked_prefill=True,
        is_encoder_decoder=model_config.is_encoder_decoder,
        **scheduler_pass_compat.scheduler_config_kwargs(config_mod.SchedulerConfig,
                                         disable_chunked_mm_input, scheduler_cls),
        **scheduler_pass_compat.admission_gate_kwargs(config_mod.SchedulerConfig,
                                                      reserve_full_isl, watermark))
    cache_config = config_mod.CacheConfig(block_size=KV_BLOCK_SIZE, gpu_memory_utilization=0.9,
                                          cache_dtype="auto",
                                          enable_prefix_caching=enable_prefix_caching)
    with release.cpu_build():
        vllm_config = config_mod.VllmConfig(scheduler_config=scheduler_config,
                                            model_config=model_config, cache_config=cache_config)
    # What the engine sets once it has sized the KV cache (``_initialize_kv_caches``).
    vllm_config.cache_config.num_gpu_blocks = _num_blocks(kv_blocks)
    return vllm_config


def warm() -> None:
    """Build every config (the first ModelConfig per architecture inspects it, ~24 s): what a
    forked mutation worker should find done. A release without the Whisper path or the
    drafters the worlds draw is left to report it absent."""
    _model_config(False, MAX_MODEL_LEN)
    for build in (lambda: _model_config(True, MAX_MODEL_LEN), lambda: _drafter_lookahead(1),
                  lambda: _drafter_lookahead(2)):
        try:
            build()
        except Exception:  # noqa: BLE001, S110 - the target says why when it is built
            pass


def _ec_transfer_config() -> Any:
    """Names the recording connector (``sim/vllm/ec_connector.py``) for the factory; a
    consumer: this instance loads what others encoded."""
    from sim.vllm import ec_connector
    config_mod = release.import_module("vllm.config")
    return config_mod.ECTransferConfig(ec_connector=ec_connector.CLASS_NAME,
                                       ec_connector_module_path=ec_connector.__name__,
                                       ec_role="ec_consumer")


def _num_blocks(kv_blocks: int) -> int:
    """The pool's size: a large one, or ``kv_blocks`` usable beside the null block (vLLM's
    ``BlockPool`` keeps block 0 as a placeholder no request is given)."""
    return kv_blocks + 1 if kv_blocks else 1000


def _kv_cache_config(mamba_block_size: int = 0, kv_blocks: int = 0) -> Any:
    """One full-attention group; a hybrid model (``mamba_block_size``) has a Mamba group
    beside it, cached per block ("align"), both of that block size."""
    import torch
    kv = release.import_module("vllm.v1.kv_cache_interface")
    spec = scheduler_pass_compat.attention_spec(kv, torch.float32)
    if not mamba_block_size:
        return kv.KVCacheConfig(num_blocks=_num_blocks(kv_blocks), kv_cache_tensors=[],
                                kv_cache_groups=[kv.KVCacheGroupSpec(["layer"], spec)])
    attention = kv.FullAttentionSpec(block_size=mamba_block_size, num_kv_heads=1, head_size=1,
                                     dtype=torch.float32)
    state = kv.MambaSpec(block_size=mamba_block_size, shapes=((2,),), dtypes=(torch.float32,),
                         mamba_cache_mode="align")
    return kv.KVCacheConfig(num_blocks=1000, kv_cache_tensors=[], kv_cache_groups=[
        kv.KVCacheGroupSpec(["attention"], attention), kv.KVCacheGroupSpec(["mamba"], state)])


class VllmSchedulerPass:
    """The scheduler-pass port over a real ``Scheduler`` and the native ``EncoderWorker``."""

    # What the port returns that vLLM does not compute: the machine names these "computed
    # by the harness" where it compares them, and its worker checks "judged on the
    # harness's worker".
    HARNESS_COMPUTED = {"num_read_ahead_tokens": "the drafter's reach past vLLM's scheduled "
                        "range, computed by the adapter; vLLM's scheduler reports no such "
                        "number, its GPU runner reads that far"}
    HARNESS_WORKER = "sim/encoder_worker.py plays vLLM's GPU model runner"

    def __init__(self, cache_size: int, token_budget: int, encoder_compute_budget: int,
                 read_ahead: int = 0, disable_chunked_mm_input: bool = False,
                 ec_cached_mm_hashes: frozenset[str] = frozenset(),
                 encoder_decoder: bool = False, async_scheduling: bool = False,
                 mamba_block_size: int = 0, kv_blocks: int = 0,
                 enable_prefix_caching: bool = False, reserve_full_isl: bool = True,
                 watermark: float = 0.0):
        self.kv_blocks = kv_blocks
        # A release without the whole-sequence gate admits a request when its first chunk
        # fits, one without a watermark keeps nothing free: the machine runs the model so and
        # notes it (``drives_reserve_full_isl``, ``drives_watermark``).
        config_cls = release.import_module("vllm.config").SchedulerConfig \
            if kv_blocks else None
        self.drives_reserve_full_isl = not reserve_full_isl or not kv_blocks or \
            scheduler_pass_compat.has_admission_gate(config_cls)
        self.reserve_full_isl = reserve_full_isl and self.drives_reserve_full_isl
        self.drives_watermark = not watermark or \
            bool(kv_blocks) and scheduler_pass_compat.has_watermark(config_cls)
        self.watermark = watermark if self.drives_watermark else 0.0
        # Where the release's block hashes do not tell items apart as the model's keys do,
        # the world runs without prefix caching and the machine notes it.
        self.drives_prefix_caching = not enable_prefix_caching or \
            scheduler_pass_compat.drives_prefix_caching()
        self.enable_prefix_caching = enable_prefix_caching and self.drives_prefix_caching
        self._hasher = None
        # Steps scheduled and not yet applied, oldest first: (vLLM's output, our view of it,
        # where each request's tokens started, what the runner samples for each).
        self._in_flight: deque[tuple[Any, SchedulerOutputView, dict[str, int],
                                     list[list[int]]]] = deque()
        # Where the release has no async scheduler of the spec's kind the machine reports
        # the world absent (it never runs the world on the synchronous one).
        self.async_scheduling = self.drives_async_scheduling = async_scheduling and \
            scheduler_pass_compat.async_scheduler_cls(
                release.import_module("vllm.v1.core.sched.scheduler")) is not None
        self.read_ahead, self.drives_read_ahead = 0, True
        # Why a result of this world is outside what vLLM builds (``scheduler_world``): the
        # settings known now, and those the requests bring (``add_request``).
        self.outside_vllm: list[str] = []
        self.max_num_seqs = max_num_seqs(token_budget)
        self._budgets = (cache_size, encoder_compute_budget)
        self.encoder_decoder = self.drives_encoder_decoder = encoder_decoder
        if encoder_decoder:
            # Absent only where the release lacks the class; a build that fails is
            # unavailable, with its error (``targets.make`` turns it into AdapterError).
            try:
                encoder_decoder_cache_compat.encoder_decoder_manager_cls(
                    release.import_module("vllm.v1.core.encoder_cache_manager"))
            except CapabilityMissing as why:
                self.drives_encoder_decoder, self.encoder_decoder = False, False
                self.why_no_encoder_decoder = str(why)
            else:
                self._build(cache_size, token_budget, encoder_compute_budget, False,
                            frozenset(), True)
                self._outside(scheduler_world.encoder_budgets(cache_size,
                                                              encoder_compute_budget, True))
                return
        self.drives_mamba = True
        if mamba_block_size:
            try:
                scheduler_pass_compat.mamba_align_split(
                    release.import_module("vllm.v1.core.sched.scheduler").Scheduler)
            except CapabilityMissing as why:
                self.drives_mamba, self.why_no_mamba = False, str(why)
                mamba_block_size = 0       # built as a plain model; the machine rejects it
        self._build(cache_size, token_budget, encoder_compute_budget,
                    disable_chunked_mm_input, ec_cached_mm_hashes, False, mamba_block_size)
        if mamba_block_size:
            self._outside(scheduler_world.mamba(mamba_block_size))
        if read_ahead:
            self._give_drafter(read_ahead)
            if self.read_ahead:
                self._outside(scheduler_world.drafter(read_ahead))
            if mamba_block_size and self.read_ahead:
                # Align mode runs with prefix caching, under which vLLM hashes the drafter's
                # lookahead past each block (and drops no EAGLE block): the last checkpoint
                # leaves that many tokens.
                self.scheduler.num_hash_lookahead_tokens = _drafter_hash_lookahead(read_ahead)
                self.scheduler.use_eagle_block_drop = False

    def _outside(self, reason: str) -> None:
        if reason not in self.outside_vllm:
            self.outside_vllm.append(reason)

    def _give_drafter(self, read_ahead: int) -> None:
        """Give the Scheduler the prefill lookahead of the drafter ``read_ahead`` stands for.

        The Scheduler is not built with that ``SpeculativeConfig``: it would also pad a new
        one-token request to ``1 + num_speculative_tokens`` tokens and schedule the drafts'
        slots, speculative decoding the model does not cover. What is set is the number its
        ``__init__`` reads from the drafter's config, and everything vLLM derives from it in
        a pass: the encoder window's shift, the unchunked roll-back and the chunk's runway
        (``_try_schedule_encoder_inputs``, ``_reserve_prefill_lookahead``). Not driven: no
        draft token is proposed or verified, no lookahead KV slot is reserved, the KV
        manager keeps no re-prefillable tail (prefix caching is off here anyway)."""
        try:
            attribute = scheduler_pass_compat.prefill_lookahead_attribute(self.scheduler)
        except CapabilityMissing as why:
            self.drives_read_ahead, self.why_no_read_ahead = False, str(why)
            return
        setattr(self.scheduler, attribute, _drafter_lookahead(read_ahead))
        self.read_ahead = read_ahead

    def _build(self, cache_size: int, token_budget: int, encoder_compute_budget: int,
               disable_chunked_mm_input: bool, ec_cached_mm_hashes: frozenset[str],
               encoder_decoder: bool, mamba_block_size: int = 0) -> None:
        sched_mod = release.import_module("vllm.v1.core.sched.scheduler")
        async_cls = (scheduler_pass_compat.async_scheduler_cls(sched_mod)
                     if self.async_scheduling else None)
        vllm_config = _vllm_config(
            encoder_decoder, token_budget, disable_chunked_mm_input and not encoder_decoder,
            None if async_cls is None else f"{async_cls.__module__}.{async_cls.__qualname__}",
            self.kv_blocks, self.enable_prefix_caching, self.reserve_full_isl, self.watermark)
        if self.enable_prefix_caching:
            self._hasher = scheduler_pass_compat.request_block_hasher(vllm_config,
                                                                      KV_BLOCK_SIZE)
        block_size = mamba_block_size or 16
        if mamba_block_size:
            # Its own cache config (the Scheduler reads the block size and the cache mode from
            # it at every pass). Prefix caching stays off in the KV manager: the prompts are all
            # alike, and a hit would be a world the model does not have (every lookup of a new
            # prompt misses in a prefix-caching engine too); the split reads positions only.
            # Set after validation: outside what vLLM builds (``scheduler_world.mamba``).
            vllm_config = copy.copy(vllm_config)
            vllm_config.cache_config = copy.copy(vllm_config.cache_config)
            vllm_config.cache_config.block_size = mamba_block_size
            vllm_config.cache_config.mamba_cache_mode = "align"
        structured = release.import_module("vllm.v1.structured_output")
        self._mods = SimpleNamespace(
            request=release.import_module("vllm.v1.request"),
            inputs=release.import_module("vllm.multimodal.inputs"),
            sampling=release.import_module("vllm.sampling_params"),
            outputs=release.import_module("vllm.v1.outputs"))
        self.drives_ec_connector = (bool(ec_cached_mm_hashes)
                                    and scheduler_pass_compat.ec_connector_per_item())
        # The config is shared by every target of the process: the connector is named only
        # while this Scheduler is built (it reads ec_transfer_config in __init__ alone).
        if self.drives_ec_connector:
            vllm_config.ec_transfer_config = _ec_transfer_config()
        scheduler_cls = scheduler_pass_compat.scheduler_cls(vllm_config.scheduler_config, sched_mod)
        try:
            self.scheduler = scheduler_cls(
                vllm_config=vllm_config,
                kv_cache_config=_kv_cache_config(mamba_block_size, self.kv_blocks),
                log_stats=False,
                structured_output_manager=structured.StructuredOutputManager(vllm_config),
                **scheduler_pass_compat.scheduler_kwargs(sched_mod.Scheduler, block_size),
                **({"mm_registry": _StubAudioRegistry()} if encoder_decoder else {}))
        finally:
            vllm_config.ec_transfer_config = None
        if self.drives_ec_connector:
            self.scheduler.ec_connector.external = frozenset(ec_cached_mm_hashes)
        # The tiny OPT is a text model, so the Scheduler built no multimodal budget: give it
        # the world's encoder budget and a real EncoderCacheManager of the world's size.
        # vLLM would derive both from a multimodal model's processor (the Whisper stub
        # answers one token): a multimodal request makes the world outside what vLLM builds
        # (``scheduler_world.encoder_budgets``).
        ecm = release.import_module("vllm.v1.core.encoder_cache_manager")
        self.scheduler.max_num_encoder_input_tokens = encoder_compute_budget
        self.scheduler.encoder_cache_manager = encoder_cache_compat.make_manager(
            encoder_decoder_cache_compat.encoder_decoder_manager_cls(ecm) if encoder_decoder
            else ecm.EncoderCacheManager, cache_size, vllm_config)
        self.release = release.release()
        self.worker = EncoderWorker()
        self._requests: dict[str, SchedRequest] = {}
        self.last_gathered_tensors: list = []

    # -- the port ------------------------------------------------------------------------

    def add_request(self, request: SchedRequest) -> None:
        max_model_len = self.scheduler.max_model_len
        if request.prompt_len + request.max_tokens > max_model_len:
            raise HarnessError(f"{request.request_id}: {request.prompt_len} prompt + "
                               f"{request.max_tokens} new tokens exceed max_model_len "
                               f"{max_model_len} (an encoder-decoder world's is its token "
                               "budget, which vLLM requires to cover it): use a larger budget")
        self._requests[request.request_id] = request
        self.scheduler.add_request(self._vllm_request(request))
        if request.items:
            self._outside(scheduler_world.encoder_budgets(*self._budgets,
                                                          self.encoder_decoder))
        unfinished = self.scheduler.get_num_unfinished_requests()
        if unfinished > self.max_num_seqs:
            self._outside(scheduler_world.running_cap(
                self.max_num_seqs, self.scheduler.scheduler_config.max_num_batched_tokens))

    def finish_request(self, request_id: str) -> None:
        status = self._mods.request.RequestStatus.FINISHED_ABORTED
        self.scheduler.finish_requests(request_id, status)
        self._requests.pop(request_id, None)

    @property
    def counts_embeds(self) -> bool:
        return encoder_cache_compat.counts_embeds(self._mods.request.Request,
                                    self._mods.inputs.PlaceholderRange)

    @property
    def can_preempt(self) -> bool:
        return scheduler_pass_compat.can_preempt(self.scheduler)

    @property
    def refuses_reused_identifier(self) -> bool:
        return scheduler_pass_compat.refuses_reused_identifier(self.scheduler)

    def preempt_request(self, request_id: str) -> None:
        scheduler_pass_compat.preempt(self.scheduler, self.scheduler.requests[request_id])

    def reset_encoder_cache(self) -> None:
        scheduler_pass_compat.reset_encoder_cache(self.scheduler, encoder_cache_compat.reset)
        self.worker.encoder_cache.clear()          # the model runner's part of the reset

    def schedule(self) -> SchedulerOutputView:
        out = self.scheduler.schedule()
        # Where each request's tokens start: past its prefix hit, if the pass found one.
        starts = {rid: self.scheduler.requests[rid].num_computed_tokens - n
                  for rid, n in out.num_scheduled_tokens.items()}
        meta = getattr(out, "ec_connector_metadata", None)
        view = SchedulerOutputView(
            num_scheduled_tokens=dict(out.num_scheduled_tokens),
            scheduled_encoder_inputs={r: tuple(ids)
                                      for r, ids in out.scheduled_encoder_inputs.items()},
            free_encoder_mm_hashes=tuple(out.free_encoder_mm_hashes),
            num_read_ahead_tokens={r: self._drafter_reach(r, starts[r] + n)
                                   for r, n in out.num_scheduled_tokens.items()}
            if self.read_ahead else {},
            loaded_encoder_inputs=dict(meta.loads) if meta is not None else {})
        # What the runner samples is fixed now: a request left inside its prompt samples
        # nothing (under async scheduling a later pass moves it on before the update).
        sampled = [[] if scheduler_pass_compat.mid_prefill(self.scheduler.requests[rid])
                   else [SAMPLED_TOKEN] for rid in view.num_scheduled_tokens]
        self._in_flight.append((out, view, starts, sampled))
        return view

    def _drafter_reach(self, rid: str, start: int) -> int:
        """How far past ``start`` (the chunk's end) the drafter reads encoder output: its
        lookahead, up to the first embed of an item whose output the worker will not hold
        after this output (not resident in the manager): vLLM's drafter takes the token
        embedding there (``GPUModelRunner._gather_mm_embeddings``, shifted)."""
        resident = self.resident_mm_hashes()
        features = self.scheduler.requests[rid].mm_features or ()
        for position in range(start, start + self.read_ahead):
            for feature in features:
                span = feature.mm_position
                at = position - span.offset
                if 0 <= at < span.length and feature.identifier not in resident:
                    lo, hi = encoder_cache_compat.embeds_in_range(span, at, at + 1)
                    if hi > lo:
                        return position - start
        return self.read_ahead

    def execute_model(self, output: SchedulerOutputView) -> tuple[Gathered, ...]:
        """The native worker runs the output (delete, encode, gather), as on a GPU."""
        self.worker.free(list(output.free_encoder_mm_hashes))
        for rid, input_ids in output.scheduled_encoder_inputs.items():
            for input_id in input_ids:
                self.worker.encode(self._requests[rid].items[input_id].mm_item())
        for rid, input_ids in output.loaded_encoder_inputs.items():   # the connector's loads
            for input_id in input_ids:
                self.worker.load(self._requests[rid].items[input_id].mm_item())
        gathered, tensors = [], []
        if self.encoder_decoder:      # the decoder's cross-attention reads them whole
            for rid in output.num_scheduled_tokens:
                for input_id in output.scheduled_encoder_inputs.get(rid, ()):
                    item = self._requests[rid].items[input_id].mm_item()
                    tensors.append(self.worker.gather(item))
                    gathered.append(Gathered(rid, item.mm_hash, 0, item.num_embeds))
            self.last_gathered_tensors = tensors
            return tuple(gathered)
        starts = self._in_flight[-1][2]        # the newest step's: the worker runs it now
        for rid, n in output.num_scheduled_tokens.items():
            start = starts[rid]
            stop = start + n + output.num_read_ahead_tokens.get(rid, 0)   # and the drafter's
            features = self.scheduler.requests[rid].mm_features or ()
            for item, feature in zip(self._requests[rid].items, features, strict=True):
                if item.end <= start or item.offset >= stop:
                    continue
                lo, hi = encoder_cache_compat.embeds_in_range(
                    feature.mm_position, max(start, item.offset) - item.offset,
                    min(stop, item.end) - item.offset)
                if lo == hi:
                    continue                   # only non-embed positions are scheduled
                if item.mm_hash not in self.worker.encoder_cache:
                    raise EncoderCacheMiss(f"Encoder cache miss for {item.mm_hash} "
                                           f"(request {rid}, rows {lo}:{hi})")
                tensors.append(self.worker.gather(item.mm_item(), lo, hi))
                gathered.append(Gathered(rid, item.mm_hash, lo, hi))
        self.last_gathered_tensors = tensors
        return tuple(gathered)

    def update_from_output(self, output: SchedulerOutputView) -> tuple[str, ...]:
        """Apply the oldest step in flight (``output`` must be it)."""
        if not self._in_flight or self._in_flight[0][1] != output:
            raise HarnessError("update_from_output applies the oldest output in flight first")
        out, _, _, sampled = self._in_flight.popleft()
        ids = list(output.num_scheduled_tokens)
        runner_output = scheduler_pass_compat.runner_output(self._mods.outputs, ids, sampled)
        open_before = set(self.scheduler.requests)
        self.scheduler.update_from_output(out, runner_output)
        gone = open_before - set(self.scheduler.requests)
        # The step's own requests first, in its order (a request aborted while the step was
        # in flight is not among them); then a request refused for a reused multimodal
        # identifier, which the update finishes with an error (vLLM 0.33.0
        # encoder_cache_mismatch_reqs). By id: vLLM finishes them in a set's order.
        finished = (*(rid for rid in ids if rid in gone),
                    *sorted(rid for rid in gone if rid not in output.num_scheduled_tokens))
        for rid in finished:
            self._requests.pop(rid, None)
        return finished

    def step(self) -> StepView:
        """One engine turn, in the engine's order (``sim/engine_turn.py``)."""
        return engine_turn(self, open_requests=bool(self.scheduler.get_num_unfinished_requests()),
                           async_scheduling=self.async_scheduling,
                           in_flight=lambda: len(self._in_flight),
                           apply_oldest=lambda: self.update_from_output(self._in_flight[0][1]))

    def resident_mm_hashes(self) -> set[str]:
        manager = self.scheduler.encoder_cache_manager
        if self.encoder_decoder:      # allocated this pass, or the last (not yet reported)
            return set(manager.allocated) | set(manager.to_free)
        return set(manager.cached)

    def manager_slots(self) -> tuple[int, int]:
        manager = self.scheduler.encoder_cache_manager
        if self.encoder_decoder:      # no freeable count: reserved or free
            return manager.num_free_slots, manager.num_free_slots
        return manager.num_free_slots, manager.num_freeable_slots

    def freeable_order(self) -> list[str]:
        """Resident entries no request holds, oldest first (the next evicted first)."""
        return list(self.scheduler.encoder_cache_manager.freeable)

    def kv_blocks_held(self) -> dict[str, int]:
        return scheduler_pass_compat.kv_blocks_held(self.scheduler)

    @property
    def why_no_prefix_caching(self) -> str:
        # Asked only where the release was read (drives_prefix_caching): building the adapter
        # imports no vLLM before the world needs it.
        return (f"absent: vLLM {release.release()} hashes a multimodal item's identifier "
                "without its offset (see scheduler_pass_compat.drives_prefix_caching)")

    def kv_free_blocks(self) -> int:
        return scheduler_pass_compat.kv_free_blocks(self.scheduler)

    def chunk_starts(self) -> dict[str, int]:
        """The newest pass's starts: each scheduled request's computed tokens after it, less
        those it scheduled (a prefix hit shows as the start of a request the pass started)."""
        return dict(self._in_flight[-1][2]) if self._in_flight else {}

    def worker_mm_hashes(self) -> set[str]:
        return self.worker.resident_hashes()

    def get_num_unfinished_requests(self) -> int:
        return self.scheduler.get_num_unfinished_requests()

    def ec_notifications(self) -> list[tuple[str, str, int]]:
        """What the recording connector heard since the last call, sorted."""
        connector = self.scheduler.ec_connector
        if not self.drives_ec_connector:
            return []
        heard, connector.notices = sorted(connector.notices), []
        return heard

    # -- translation ---------------------------------------------------------------------

    def _vllm_request(self, request: SchedRequest) -> Any:
        import torch
        inputs = self._mods.inputs
        features = [inputs.MultiModalFeatureSpec(
            data=None, modality="audio" if self.encoder_decoder else "image",
            identifier=item.mm_hash,
            mm_position=inputs.PlaceholderRange(
                offset=item.offset, length=item.length,
                is_embed=None if item.is_embed is None
                else torch.tensor(item.is_embed, dtype=torch.bool)))
            for item in request.items]
        params = self._mods.sampling.SamplingParams(max_tokens=request.max_tokens,
                                                    ignore_eos=True)
        request_cls = self._mods.request.Request
        return request_cls(
            request_id=request.request_id, prompt_token_ids=[0] * request.prompt_len,
            sampling_params=params, pooling_params=None, mm_features=features or None,
            block_hasher=self._hasher, **scheduler_pass_compat.request_kwargs(request_cls))

    def __repr__(self) -> str:
        return f"VllmSchedulerPass(vllm=={self.release})"
