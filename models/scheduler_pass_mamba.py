"""The prefill chunk of a hybrid model with Mamba layers whose states are cached per block
(vLLM's ``mamba_cache_mode="align"``, on with prefix caching), as the scheduler-pass model
computes it.

A Mamba layer keeps one running state per request, not one entry per token, so its state can
be cached (and reused by a later request with the same prefix) only where a chunk ends: the
scheduler makes chunk ends fall on block boundaries (vLLM 0.33.0
``Scheduler._mamba_block_aligned_split``). Stated as what a prefill chunk ``[start, end)``
of a request with ``num_tokens`` known tokens may be, ``block`` the block size:

1. Decoding is free: once ``start`` reaches the prefill's end (the prompt, or the known
   tokens but the last for a preempted request replaying its outputs) nothing is aligned.
2. A chunk that leaves the prefill unfinished ends on a block boundary: its end goes down to
   the last boundary in it. When that leaves no token and a block is wider than the pass's
   whole token budget (no pass could ever reach the boundary) the chunk keeps its end.
3. A chunk never runs past the next boundary when it starts between two (it re-aligns), nor
   past the last checkpoint: the last boundary that leaves ``max(1, lookahead)`` known tokens
   after it (the token whose logits the step computes, and the tokens the drafter's block
   hashes read past the boundary: ``num_hash_lookahead_tokens``).
4. A chunk left with no token is no chunk: the request judges no encoder input at all this
   pass (``_try_schedule_encoder_inputs`` returns before its window when it has no token), a
   running request is passed over, and a waiting one stops the waiting queue.

Not modelled (the harness's worlds have none): prefix-cache hits (every lookup misses: the
prompts are new), internal checkpoint blocks, partial hash-block hits and the shared-prefix
junction stop; and async scheduling, encoder-decoder models and unchunked multimodal input
(vLLM refuses align mode with ``disable_chunked_mm_input``).
"""

from __future__ import annotations


def last_checkpoint(num_tokens: int, block: int, lookahead: int) -> int:
    """The last block boundary with ``max(1, lookahead)`` known tokens after it."""
    proven = num_tokens - max(1, lookahead)
    return max(0, proven - proven % block)


def aligned_chunk(start: int, wanted: int, *, num_tokens: int, prompt_len: int, block: int,
                  token_budget: int, lookahead: int) -> int:
    """How many of the ``wanted`` tokens from ``start`` the aligned chunk keeps (rules 1-3)."""
    prefill_end = max(prompt_len, num_tokens - 1)
    if start >= prefill_end:
        return wanted
    end = start + wanted
    if end < prefill_end:
        boundary = end - end % block
        if boundary > start or block <= token_budget:
            end = boundary
    walls = [last_checkpoint(num_tokens, block, lookahead)]
    if start % block:
        walls.append(start - start % block + block)
    inside = [w for w in walls if start < w < end]
    return max(0, min(inside, default=end) - start)
