"""The drafter's prefill lookahead, as the scheduler-pass model computes it.

A speculative drafter that reads the target's hidden states (EAGLE-family, MTP) reads, in a
prefill chunk ``[c, c + k)``, the known tokens just past it: ``lookahead`` of them (vLLM 0.33.0
``VllmConfig.num_prefill_lookahead_tokens``: 1 for an EAGLE-family drafter, the number of
speculative tokens for a multi-module MTP drafter, 0 without a drafter). The scheduler
promises three things for it (vLLM 0.33.0 ``Scheduler._try_schedule_encoder_inputs`` and
``_reserve_prefill_lookahead``); the model derives each from positions, not from a walk:

1. The encoder judges the window ``[c, c + w + lookahead)`` (``w`` the tokens wanted): the
   items there are placed like those of the chunk, so an item only the drafter reaches is
   encoded in the same pass. An item that cannot be placed cuts the chunk right before it
   (``[c, offset)``, never shortened by the lookahead: vLLM lets the drafter fall back to
   token embeddings for it), or not at all when it starts inside the window's lookahead part.
2. With ``disable_chunked_mm_input``, an item starting at or after ``c`` that ``[c, c + w)``
   does not cover whole (one starting inside the lookahead part included) moves the chunk's
   end ``lookahead`` tokens before the item (``stop_before_item``), so the drafter's read
   ends at the item's start too.
3. A chunk never ends within ``lookahead`` tokens of the known tokens' end: it finishes the
   prefill or leaves the drafter a full lookahead (``with_runway``; it matters from a
   lookahead of 2, an MTP drafter's).

What the drafter may read of the encoder output (``reach``) is the output's
``num_read_ahead_tokens``: the lookahead, cut at the first embed of an item the request
does not hold after the pass.
"""

from __future__ import annotations

from models.scheduler_pass_values import PlacedItem, SchedRequest


def stop_before_item(request: SchedRequest, c: int, wanted: int,
                     lookahead: int) -> PlacedItem | None:
    """The item the unchunked rule stops the chunk at: the first in the window that starts
    at or after ``c`` and ends past ``c + wanted`` (it would be split, or only read by the
    drafter). None when no such item is in the window."""
    window_end = min(c + wanted + lookahead, request.prompt_len)
    return next((x for x in request.items
                 if c <= x.offset < window_end and x.end > c + wanted), None)


def with_runway(c: int, tokens: int, num_tokens: int, lookahead: int) -> int:
    """``tokens`` moved back so the chunk does not end inside the last ``lookahead`` known
    tokens (the drafter would have fewer than its lookahead to read): an end there goes back
    to ``lookahead`` before the known end; an end at the known end stays."""
    end = c + tokens
    if num_tokens - lookahead < end < num_tokens:
        end = num_tokens - lookahead
    return max(0, end - c)


def reach(request: SchedRequest, start: int, lookahead: int, held: set[int]) -> int:
    """How many tokens past ``start`` (the chunk's end) the drafter reads: ``lookahead``,
    cut at the first embed, at or after ``start``, of an input the request does not hold."""
    stop = start + lookahead
    for input_id, item in enumerate(request.items):
        if input_id not in held:
            first = first_embed_at(item, start)
            if first is not None:
                stop = min(stop, first)
    return max(0, stop - start)


def first_embed_at(item: PlacedItem, position: int) -> int | None:
    """The first token position at or after ``position`` that takes one of ``item``'s
    embeds, or None when there is none."""
    lo = max(position, item.offset)
    mask = item.is_embed or (True,) * item.length
    return next((item.offset + i for i in range(lo - item.offset, item.length) if mask[i]),
                None)
