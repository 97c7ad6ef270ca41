"""What a hybrid model's Mamba group holds of a request (vLLM's align mode).

A Mamba layer carries one state forward: after ``n`` tokens it needs the state after the
``n``-th and nothing before it. Align mode keeps that state in the block the ``n``-th token
falls in, block ``(n - 1) // block_size``. So once a step has allocated for a request that
had processed ``n`` tokens:

- the request holds that block: the source the step's kernel reads the state from;
- it holds no block before it: no later step reads an earlier state, so the table keeps the
  null block in its place (a cached copy stays in the pool, unreferenced, until evicted).

The blocks after it, for the states the step writes and its speculative tokens, are not
constrained here. Nothing here follows vLLM's bookkeeping (the index it retired up to, the
block it allocated a step ago): the holdings are read off the count of processed tokens
alone.
"""

from __future__ import annotations

from collections.abc import Sequence


def live_state_block(processed_tokens: int, block_size: int) -> int | None:
    """The index of the block holding the state after ``processed_tokens`` tokens; None
    before the first token (no state yet)."""
    return (processed_tokens - 1) // block_size if processed_tokens > 0 else None


def passed_states_held(table: Sequence[int | None], processed_tokens: int,
                       block_size: int) -> dict[int, int]:
    """Index -> block, for each block ``table`` (None: the null block) holds before the live
    state's."""
    live = live_state_block(processed_tokens, block_size) or 0
    return {i: b for i, b in enumerate(table[:live]) if b is not None}


def live_state_held(table: Sequence[int | None], processed_tokens: int,
                    block_size: int) -> bool:
    """Whether ``table`` holds the block of the state after ``processed_tokens`` (trivially,
    before the first token)."""
    live = live_state_block(processed_tokens, block_size)
    return live is None or live < len(table) and table[live] is not None
