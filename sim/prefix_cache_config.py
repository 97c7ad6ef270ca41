"""The prefix cache's configuration, checked once for every target (``sim/targets.py``)."""

from __future__ import annotations

from sim.errors import HarnessError


def prefix_cache_config(num_blocks: int, block_size: int, max_model_len: int,
                        use_eagle: bool = False, uncached_first: bool = True,
                        enable_caching: bool = True,
                        enable_kv_cache_events: bool = True, reserve_full_isl: bool = False,
                        watermark: float = 0.0, sliding_window: int | None = None,
                        max_in_flight_tokens: int | None = None,
                        kv_connector: bool = False, hash_lookahead: int = 0,
                        hybrid: bool = False, retention: int | None = None,
                        attention_chunk_size: int | None = None,
                        local_groups: int = 1, second_window: int | None = None,
                        eagle_groups: tuple[int, ...] = (0,),
                        full_block_size: int | None = None,
                        dcp_world_size: int = 1, replicated_draft: bool = False) -> dict:
    """A pool of ``num_blocks`` blocks (block 0 is the null block) of ``block_size`` tokens;
    ``uncached_first``: where a block released without a cached hash goes in the free queue
    (vLLM's target takes its release's answer and ignores it); ``enable_caching`` and
    ``enable_kv_cache_events``: vLLM's ``enable_prefix_caching`` and ``enable_kv_cache_events``
    switches; ``reserve_full_isl`` and ``watermark``: the admission gates of vLLM's
    ``SchedulerConfig`` (``scheduler_reserve_full_isl``: a waiting request is admitted only
    if its whole sequence fits; ``watermark``: that fraction of the pool's blocks is kept
    free when a waiting request is admitted while others run); ``sliding_window``: the one
    group is a sliding-window group of that many tokens (None: full attention);
    ``max_in_flight_tokens``: what the scheduler passes (``max_concurrent_batches *
    max_num_batched_tokens``; None: left out, as vLLM's own tests leave it), which caps a
    sliding-window admission; ``kv_connector``: a KV connector loads some requests' tokens
    past their hit on their first step (synchronously, or asynchronously); ``hash_lookahead``:
    vLLM's ``num_hash_lookahead_tokens``, the tokens past each block its hash covers (1: an
    EAGLE drafter's lookahead block hashes, vLLM 0.33.0's default for EAGLE, which then drops
    no hit block: ``use_eagle`` must be off); ``hybrid``: a full-attention group (group 0)
    beside the sliding window's (group 1), as a hybrid model's config has them (tables, hits
    and new blocks are then one tuple per group); ``retention``: a hybrid pool's
    ``prefix_cache_retention_interval`` (None: its window caches every block; 0, vLLM's
    default: only the blocks a hit at a retained boundary reads; a multiple of the block
    size: those and one run per interval); ``attention_chunk_size``: with ``hybrid``, group
    1 is a chunked-local group of chunks of that many tokens instead of a sliding window (a
    Llama 4 model's, as vLLM 0.33.0 builds it by default: without EAGLE, which makes vLLM
    serve such a model with full attention alone); ``local_groups``: with ``hybrid``, the
    groups of the local spec after full attention's (vLLM's hybrid allocator gives each
    group as many layers as the full-attention group has: Llama 4 Scout's 48 layers are one
    full-attention group of 12 and three chunked-local groups of 12); ``second_window``: with
    ``hybrid`` and a ``sliding_window``, one more group, a sliding window of another size
    (vLLM's hybrid coordinator then searches the hit over three specs); ``eagle_groups``:
    with ``use_eagle`` and ``hybrid``, the groups holding the drafter's layers, which vLLM's
    engine marks ``is_eagle_group`` (a drafter's full-attention layer joins group 0, a
    sliding-window layer of the window's size a window's group): their specs drop EAGLE's
    block; ``full_block_size``: with ``hybrid`` and a ``sliding_window``, the full-attention
    group's block size, a multiple of ``block_size`` (None: ``block_size``). vLLM grows the
    block size of the layers with the smaller page until every page is one size
    (``unify_kv_cache_spec_page_size``), so a model whose full-attention
    layers keep less per token than its window layers (Gemma 4: full-attention blocks of 32
    beside window blocks of 16) has groups of two block sizes. Its engine then hashes per
    ``block_size`` tokens (``hash_block_size``, the groups' GCD) and lands hits on
    multiples of ``full_block_size`` (``scheduler_block_size``, their LCM);
    ``dcp_world_size``: full attention alone decoded with context parallelism over that many
    ranks (vLLM's ``decode_context_parallel_size``), each holding ``block_size`` tokens of
    every block, so the scheduler's block, the hashes and the hits are of ``block_size *
    dcp_world_size`` tokens; ``replicated_draft``: with ``dcp_world_size``, a draft model's
    layers beside full attention, run without context parallelism, so every rank keeps the
    whole draft cache (vLLM's ``dcp_sharded=False`` spec, as its model runner marks a
    ``draft_model`` speculator's layers under a DCP target): a second full-attention group
    (group 1) of blocks of ``block_size`` tokens beside the target's of ``block_size *
    dcp_world_size``, so the engine hashes per ``block_size`` tokens (the groups' GCD) and
    lands hits on multiples of the target's block (their LCM), as in Gemma 4's layout."""
    for name, value, minimum in (("num_blocks", num_blocks, 2), ("block_size", block_size, 1),
                                 ("max_model_len", max_model_len, 1)):
        if not isinstance(value, int) or value < minimum:
            raise HarnessError(f"{name} must be an integer >= {minimum}, got {value!r}")
    if not isinstance(watermark, (int, float)) or not 0.0 <= watermark < 1.0:
        raise HarnessError(f"watermark must be a fraction in [0.0, 1.0) as vLLM's "
                           f"SchedulerConfig takes it, got {watermark!r}")
    # A window of one token attends to nothing before it: no model has one, and vLLM's hit
    # search asks for no cached block then.
    for name, value, minimum in (("sliding_window", sliding_window, 2),
                                 ("max_in_flight_tokens", max_in_flight_tokens, 1)):
        if value is not None and (not isinstance(value, int) or value < minimum):
            raise HarnessError(f"{name} must be None or an integer >= {minimum}, got "
                               f"{value!r}")
    if hash_lookahead not in (0, 1) or (hash_lookahead and use_eagle):
        raise HarnessError(f"hash_lookahead must be 0 or 1 (an EAGLE drafter reads the next "
                           f"token), and 1 only with use_eagle off (lookahead hashes replace "
                           f"the EAGLE block drop), got {hash_lookahead!r} with use_eagle="
                           f"{use_eagle!r}")
    if hybrid and (sliding_window is None) == (attention_chunk_size is None):
        raise HarnessError("hybrid pairs full attention with one local group: give "
                           "sliding_window or attention_chunk_size, not both")
    if attention_chunk_size is not None and (
            not hybrid or not isinstance(attention_chunk_size, int) or attention_chunk_size < 2
            or attention_chunk_size % block_size or use_eagle or hash_lookahead):
        # vLLM's chunked-local attention backend asserts the chunk is a multiple of the block
        # size (make_local_attention_virtual_batches): no other world runs.
        raise HarnessError(f"attention_chunk_size must be None, or with hybrid=True and "
                           f"neither use_eagle nor hash_lookahead (vLLM serves a chunked-local "
                           f"model with EAGLE by full attention alone) a multiple >= 2 of the "
                           f"block size ({block_size}, as vLLM's attention backend requires), "
                           f"got {attention_chunk_size!r}")
    if not isinstance(local_groups, int) or local_groups < 1 or (local_groups > 1 and
                                                                  not hybrid):
        raise HarnessError(f"local_groups must be 1, or with hybrid=True an integer >= 1 (the "
                           f"groups of the local spec beside full attention), got "
                           f"{local_groups!r}")
    if second_window is not None and (
            not hybrid or sliding_window is None or not isinstance(second_window, int)
            or second_window < 2 or second_window == sliding_window):
        raise HarnessError(f"second_window must be None, or with hybrid=True and a "
                           f"sliding_window, an integer >= 2 other than the first window "
                           f"({sliding_window!r}), got {second_window!r}")
    if attention_chunk_size is not None and retention:
        raise HarnessError(f"retention must be None or 0 beside a chunked-local group: vLLM "
                           f"refuses a prefix_cache_retention_interval where no group is a "
                           f"sliding window's (it has no effect), got {retention!r}")
    if retention is not None and (not hybrid or not isinstance(retention, int) or retention < 0
                                  or retention % block_size):
        raise HarnessError(f"retention must be None, or with hybrid=True 0 or a multiple of "
                           f"the block size ({block_size}) as vLLM's prefix_cache_retention_"
                           f"interval takes it, got {retention!r}")
    eagle_groups = tuple(eagle_groups) if isinstance(eagle_groups, (tuple, list)) \
        else eagle_groups
    windows = ({*range(1, local_groups + 1)} if sliding_window is not None else set(),
               {local_groups + 1} if second_window is not None else set())
    if eagle_groups != (0,) and not (
            use_eagle and hybrid and isinstance(eagle_groups, tuple) and eagle_groups
            and all(isinstance(g, int) for g in eagle_groups)
            and set(eagle_groups) <= {0}.union(*windows)
            and len(eagle_groups) == len(set(eagle_groups))
            and not all(set(eagle_groups) & w for w in windows)):
        # Both windows holding the drafter's layers is left out: vLLM's hybrid coordinator
        # then skips a verified window's drop after another window's cut (eagle_verified),
        # which the model does not follow.
        raise HarnessError(f"eagle_groups must be (0,), or with use_eagle=True and hybrid=True "
                           f"distinct groups among full attention's (0) and the windows' "
                           f"(1..{local_groups + (second_window is not None)}), in at most "
                           f"one window's spec, got {eagle_groups!r}")
    if full_block_size is not None and (
            not hybrid or sliding_window is None or not isinstance(full_block_size, int)
            or full_block_size <= block_size or full_block_size % block_size):
        raise HarnessError(f"full_block_size must be None, or with hybrid=True and a "
                           f"sliding_window a multiple of the block size ({block_size}) above "
                           f"it (vLLM scales a group's block size by a whole factor), got "
                           f"{full_block_size!r}")
    if full_block_size is not None and retention and retention % full_block_size:
        raise HarnessError(f"retention must be None, 0 or a multiple of full_block_size "
                           f"({full_block_size}): vLLM's prefix_cache_retention_interval must "
                           f"be a multiple of the scheduler block size, got {retention!r}")
    if not isinstance(dcp_world_size, int) or dcp_world_size < 1 or (
            dcp_world_size > 1 and (hybrid or sliding_window is not None)):
        # vLLM 0.10.2's managers assert it; 0.33.0's hybrid coordinator takes only full
        # attention, Mamba and replicated draft groups beside it.
        raise HarnessError(f"dcp_world_size must be an integer >= 1, and 1 beside a window's "
                           f"or a chunked-local group (vLLM refuses decode context "
                           f"parallelism there), got {dcp_world_size!r}")
    if replicated_draft not in (False, True) or (replicated_draft and (
            dcp_world_size == 1 or use_eagle or hash_lookahead)):
        # vLLM marks a draft's cache replicated only for a draft model (its own layers,
        # tokens in, no hidden states: no EAGLE drop, no lookahead hashes) under a DCP target.
        raise HarnessError(f"replicated_draft must be False, or True with dcp_world_size > 1 "
                           f"and neither use_eagle nor hash_lookahead (vLLM keeps a draft "
                           f"model's cache replicated under a context-parallel target), got "
                           f"{replicated_draft!r} with dcp_world_size={dcp_world_size!r}")
    return dict(num_blocks=num_blocks, block_size=block_size, max_model_len=max_model_len,
                use_eagle=bool(use_eagle), uncached_first=bool(uncached_first),
                enable_caching=bool(enable_caching),
                enable_kv_cache_events=bool(enable_kv_cache_events),
                reserve_full_isl=bool(reserve_full_isl), watermark=float(watermark),
                sliding_window=sliding_window, max_in_flight_tokens=max_in_flight_tokens,
                kv_connector=bool(kv_connector), hash_lookahead=hash_lookahead,
                hybrid=bool(hybrid), retention=retention,
                attention_chunk_size=attention_chunk_size, local_groups=local_groups,
                second_window=second_window, eagle_groups=eagle_groups,
                full_block_size=full_block_size, dcp_world_size=dcp_world_size,
                replicated_draft=bool(replicated_draft))


def as_scheduler_blocks(config: dict) -> dict:
    """A checked configuration as the model takes it: decode context parallelism changes no
    promise of the block cache but the block's size (each rank holds ``block_size`` of a
    block's tokens; the scheduler, the hashes, the hits and the tables count whole blocks),
    so the model is given blocks of ``block_size * dcp_world_size`` tokens. With a
    replicated draft it is given two groups of full attention, the target's blocks of that
    many tokens (``full_block_size``) beside the draft's of ``block_size``."""
    config = dict(config)
    ranks = config.pop("dcp_world_size", 1)
    if config.get("replicated_draft"):
        config.update(hybrid=True, full_block_size=config["block_size"] * ranks)
    else:
        config["block_size"] *= ranks
    return config
