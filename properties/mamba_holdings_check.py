"""Checks of what a hybrid model's Mamba group holds of each request, read off its tables
against ``models/prefix_cache_mamba_holdings.py``:

- ``passed-states-retired``: once a step allocated for a request, it holds no Mamba block
  before the one of its last processed token's state;
- ``live-state-held``: it holds that one.

A retirement that never happens shows only as a pool that fills sooner (no lookup, event or
reference count is wrong), and a live state retired shows only on a device, where the
kernel reads a freed block: both are read here off the table itself. This module imports
neither vLLM nor torch."""

from __future__ import annotations

from collections.abc import Sequence

from models.prefix_cache_mamba_holdings import (
    live_state_block,
    live_state_held,
    passed_states_held,
)
from properties.scenarios import holds

RETIRED = "passed-states-retired"
LIVE = "live-state-held"


def check_holdings(request_id: str, group: int, table: Sequence[int | None],
                   processed_tokens: int, block_size: int) -> None:
    """``table``: the request's blocks in Mamba group ``group`` after a step allocated for
    it (None: the null block); ``processed_tokens``: what it had processed when the step
    allocated (its computed tokens before the step, or the prefix hit it was admitted on)."""
    passed = passed_states_held(table, processed_tokens, block_size)
    live = live_state_block(processed_tokens, block_size)
    holds(RETIRED, not passed, lambda: (
        f"{request_id} had processed {processed_tokens} tokens, its state in block {live} "
        f"of group {group}, and still holds {passed} (index: block) before it"))
    holds(LIVE, live_state_held(table, processed_tokens, block_size), lambda: (
        f"{request_id} had processed {processed_tokens} tokens, and holds no block at index "
        f"{live} of group {group}, where the state after them is: {tuple(table)}"))
