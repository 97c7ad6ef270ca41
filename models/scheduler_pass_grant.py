"""A request's grant: the longest chunk its model's statement admits after those served
before it; ``DecoderOnly`` is the statement, ``EncoderDecoder`` and ``Mamba`` variants. From
``c`` a request wants ``w`` tokens (those left, at most the budget left); its drafter reads
``s`` past a prefill chunk (vLLM ``num_prefill_lookahead_tokens``), so the encoder judges
``[c, c + w + s)``. (1) A window's items fit when the cache holds them together: a resident
one held, one with an embed in the window encoded (loaded if the EC connector holds it: room,
no compute), one without judged for room and compute alike (vLLM asks ``can_allocate``
first); room comes from evicting freeable entries oldest first. (2) The chunk is the longest
prefix of the window whose items fit, at most ``w``. (3) An identifier resident when reached
with another embed count (a UUID reused for other content) refuses the request. (4) Unchunked
input: the first item from ``c`` on that ``[c, c + w)`` does not cover stops the chunk ``s``
before it. (5) No chunk ends within ``s`` of the known end (an MTP drafter reads ``s`` known
tokens on). (6) The drafter reads ``s`` on, to an input not held. No token: nothing
allocated; holds and evictions stay."""

from __future__ import annotations

import copy

from attrs import evolve, frozen

from models.scheduler_pass_values import SchedRequest


@frozen(eq=False)
class Grant:
    """A request's share of a pass, and what kept it from more (``limit``: ``room``, an item
    did not fit; ``refused``; ``aligned``; ``stopped``, the waiting queue stops here)."""

    request: SchedRequest
    start: int
    wanted: int                    # what the chunk rules allowed, before the encoder judged
    tokens: int = 0
    read_ahead: int = 0
    encoded: tuple[int, ...] = ()
    loaded: tuple[int, ...] = ()   # through the EC connector
    limit: str | None = None
    cache: object = None           # the cache it leaves (None: untouched)
    samples: bool = False          # set by the pass: it reaches the known end
    revived: bool = False          # its prefix hit took a free cached KV block (``_kv.py``)


@frozen
class DecoderOnly:
    def wanted(self, model, state, tokens_left: int) -> int:
        return min(state.num_tokens_left, tokens_left)

    def grant(self, model, state, tokens_left: int, compute_left: int) -> Grant:
        request, c, s = state.request, state.scheduled_upto, model.read_ahead
        if not (w := self.wanted(model, state, tokens_left)):
            return Grant(request, c, 0)            # nothing judged (vLLM returns first)
        stop = next((x for x in request.items if c <= x.offset < min(c + w + s, request.prompt_len)
                     and x.end > c + w), None) if model.disable_chunked_mm_input else None
        top = c + w + s if stop is None else stop.offset
        ends = sorted({c, top, *(x.offset for x in request.items if c < x.offset < top)})
        end, fit = next((end, f) for end in reversed(ends)
                        if (f := _fit(model, request, c, end, compute_left)) is not None)
        limit = fit.limit or ("room" if end < top else None)
        chunk = max(0, top - s - c) if stop and end == top else min(w, end - c)
        tokens = 0 if limit == "refused" else self.runway(model, state, chunk)
        if not tokens:
            return Grant(request, c, w, limit=limit, cache=unallocated(fit))
        held = fit.cache.get_cached_input_ids(request)
        stops = [p - c - tokens for i, x in enumerate(request.items) if i not in held
                 for p in x.embed_positions if p >= c + tokens]
        return evolve(fit, wanted=w, tokens=tokens, read_ahead=min([s, *stops]), limit=limit)

    def runway(self, model, state, tokens: int) -> int:
        c, n, s = state.scheduled_upto, state.num_tokens, model.read_ahead
        return max(0, n - s - c) if n - s < c + tokens < n else tokens

    def windows(self, model, g: Grant, k: int, read_ahead: int):
        """The promises' ranges: the encoder's window, the reads, the cuts (rules 1-2, 4-5)."""
        c, s, known = g.start, model.read_ahead, model.requests[g.request.request_id].num_tokens
        ends = {x.offset - lag for x in g.request.items for lag in {0, s}} | {known - s}
        return (c, c + k + s), (c, c + k + read_ahead), ends


def _fit(model, request: SchedRequest, c: int, end: int, compute_left: int) -> Grant | None:
    """Rules 1 and 3 for ``[c, end)`` on a copy of the cache (None: an item does not fit)."""
    cache, made = copy.deepcopy(model.cache), {"encoded": [], "loaded": []}
    for i in request.inputs_in(c, end):
        if cache.get_cached_num_encoder_embeds(request, i) not in (None, request.num_embeds(i)):
            made["limit"] = "refused"
            break
        if cache.check_and_update_cache(request, i):
            continue
        spent = sum(map(request.num_embeds, made["encoded"]))
        if not cache.can_allocate(request, i, compute_left - spent, 0):
            return None
        if request.items[i].has_embed_in(c, end):     # else judged only, not encoded
            cache.allocate(request, i)
            made["loaded" if request.mm_hash(i) in model.ec_cached_mm_hashes else "encoded"] += [i]
    return Grant(request, c, 0, cache=cache, limit=made.pop("limit", None),
                 **{kind: tuple(inputs) for kind, inputs in made.items()})


def unallocated(fit: Grant):
    """``fit``'s cache without what it allocated, keeping its holds and evictions."""
    cache, rid, made = fit.cache, fit.request.request_id, {
        fit.request.mm_hash(i) for i in (*fit.encoded, *fit.loaded)}
    for mm_hash in made:
        del cache.entries[mm_hash]
    if kept := {i: h for i, h in cache.recorded.pop(rid, {}).items() if h not in made}:
        cache.recorded[rid] = kept
    return cache


@frozen
class EncoderDecoder:
    """Whisper: a request's first pass encodes all its inputs, or it gets no token (nothing
    shared or evicted); later passes need no encoder. A waiting one that does not fit whole
    (prefill is not chunked) stops the queue."""

    def grant(self, model, state, tokens_left: int, compute_left: int) -> Grant:
        request, c, left = state.request, state.scheduled_upto, state.num_tokens_left
        w, inputs = min(left, tokens_left), tuple(range(len(request.items))) if c == 0 else ()
        if state.started_at is None and w < left:
            return Grant(request, c, 0, limit="stopped")
        if sum(map(request.num_embeds, inputs)) > min(compute_left, model.cache.num_free_slots):
            return Grant(request, c, w, limit="room")
        cache = copy.deepcopy(model.cache)
        for i in inputs:
            cache.allocate(request, i)
        return Grant(request, c, w, w, 0, inputs, cache=cache)

    def windows(self, model, g: Grant, k: int, read_ahead: int):
        """Encoded by the first pass only; its outputs are read whole; never cut."""
        return (0, 0 if g.start else 1 << 62), (g.start, g.start), set()
