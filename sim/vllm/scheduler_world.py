"""Which settings of a scheduler-pass world the ``vllm`` target cannot build through vLLM's
own config objects, each said as the reason a result there is "outside what vLLM builds".

The target builds the rest through ``VllmConfig`` / ``ModelConfig`` / ``SchedulerConfig`` /
``CacheConfig`` (``sim/vllm/scheduler_pass.py``). What it cannot, it still drives (the
comparison with the model means something there), and it says so: a divergence in such a
world is a disagreement between the model and vLLM's classes in a world no deployment has,
never a finding against vLLM. The machine carries the reasons into the failure message, the
outcome record and the reproducer (``sim.outcomes.outside_label``, ``properties/run.py``).

Not labelled, and not derived either: the text and Whisper worlds' KV cache config is one
full-attention group of 16-token blocks, sized by hand (``_kv_cache_config``), where vLLM
derives it from the model's layers and the memory left (as ``hybrid_world`` does). One
group is what vLLM makes of a model with one kind of attention layer, and the block size is
the CacheConfig's; the number of blocks only matters under KV pressure, which these worlds
never reach. Deriving it too is left to do.
"""

from __future__ import annotations


def encoder_budgets(cache_size: int, compute_budget: int, encoder_decoder: bool) -> str:
    source = ("Whisper's processor (here a stub answering one token per item)"
              if encoder_decoder else "a multimodal model's processor, and builds none for "
              "the text-only OPT scheduled here")
    return (f"encoder compute budget {compute_budget} and cache {cache_size} set on the built "
            f"Scheduler (vLLM 0.33.0 derives both as max(max_num_batched_tokens, the largest "
            f"item's tokens) from {source}; neither is configurable)")


def drafter(read_ahead: int) -> str:
    which = ("an EAGLE head over OPT" if read_ahead == 1
             else f"a {read_ahead}-module MTP drafter over DeepSeek-V3")
    return (f"drafter lookahead {read_ahead} set on a Scheduler built without a "
            f"SpeculativeConfig (vLLM's number for {which}, not for the model scheduled)")


def mamba(block_size: int) -> str:
    return (f"a hand-built MambaSpec of block size {block_size} beside OPT's attention, align "
            "mode with prefix caching off (vLLM builds a hybrid model's groups from its own "
            "layers, computes the block size from their pages, and sets mamba_cache_mode "
            "'none' without prefix caching: sim/vllm/hybrid_world.py builds that world)")


def running_cap(max_num_seqs: int, token_budget: int) -> str:
    return (f"more requests open than max_num_seqs {max_num_seqs} (vLLM requires "
            f"max_num_seqs <= max_num_batched_tokens {token_budget}; the model caps no "
            "running requests)")
