"""Simpler worlds for the scheduler-pass minimizer (``properties/run.py:minimize``).

Actions are the machine's ``(name, *args)`` steps: ``("add_request", template, id)``,
``("step",)``, ``("finish_request", id)``, ``("preempt_request", id)``,
``("reset_encoder_cache",)``. Each candidate may fail the same way with a calmer
configuration, smaller templates or fewer requests; the minimizer keeps those that do.
"""

from __future__ import annotations

from attrs import evolve

from models.scheduler_pass_values import SchedRequest
from properties.scheduler_pass_worlds import SchedWorld, with_drafter_room


def simpler_worlds(world: SchedWorld, actions: list[tuple]):
    """Calmer configurations and smaller templates that may fail the same way, each kept
    live under its drafter's lookahead (``with_drafter_room``: a shorter prompt or budget
    could otherwise stall it, which is not the failure being shrunk)."""
    for simpler, acts in _simpler_worlds(world, actions):
        simpler = with_drafter_room(simpler)
        if (simpler, acts) != (world, actions):
            yield simpler, acts


def _simpler_worlds(world: SchedWorld, actions: list[tuple]):
    largest = world.largest_item
    # Encoder-decoder worlds keep the cache at least the compute budget (see the worlds).
    for name, low in (("cache_size", world.encoder_compute_budget if world.encoder_decoder
                       else largest), ("encoder_compute_budget", largest),
                      # Encoder-decoder budgets cover every whole request too (no chunked
                      # prefill: vLLM requires the budget to cover max_model_len).
                      ("token_budget", max(world.longest_item, world.longest_request)
                       if world.encoder_decoder else world.longest_item
                       if world.disable_chunked_mm_input else 1),
                      ("read_ahead", 0)):
        if getattr(world, name) > low:
            yield evolve(world, **{name: low}), actions
            yield evolve(world, **{name: getattr(world, name) - 1}), actions
    if world.disable_chunked_mm_input:
        yield evolve(world, disable_chunked_mm_input=False), actions
    if world.async_scheduling:
        yield evolve(world, async_scheduling=False), actions
    if world.enable_prefix_caching:
        yield evolve(world, enable_prefix_caching=False), actions
    if not world.reserve_full_isl:      # vLLM's default admission gate
        yield evolve(world, reserve_full_isl=True), actions
    if world.watermark:
        yield evolve(world, watermark=0.0), actions
    for name, verb in (("preempts", "preempt_request"), ("resets", "reset_encoder_cache")):
        if getattr(world, name):
            yield evolve(world, **{name: False}), [a for a in actions if a[0] != verb]
    if world.ec_cached:            # no connector, then a connector holding fewer hashes
        yield evolve(world, ec_cached=()), actions
        for mm_hash in world.ec_cached if len(world.ec_cached) > 1 else ():
            yield evolve(world, ec_cached=tuple(h for h in world.ec_cached
                                                if h != mm_hash)), actions
    # A larger token budget is a smaller program: prefills take fewer passes, so each run
    # of steps may halve with it (a long prefill before another request arrives).
    yield evolve(world, token_budget=2 * world.token_budget), actions
    if (halved := _halved_step_runs(actions)) != actions:
        yield evolve(world, token_budget=2 * world.token_budget), halved
        # So are a larger encoder budget and cache beside it, where a prefill's chunks
        # stopped before the items the encoder had no room for.
        yield evolve(world, token_budget=2 * world.token_budget,
                     encoder_compute_budget=2 * world.encoder_compute_budget,
                     cache_size=2 * world.cache_size), halved
    for mm_hash in sorted({it.mm_hash for t in world.templates for it in t.items}):
        unmasked = tuple(evolve(t, items=tuple(evolve(it, is_embed=None)
                                               if it.mm_hash == mm_hash else it
                                               for it in t.items)) for t in world.templates)
        if unmasked != world.templates:
            yield evolve(world, templates=unmasked), actions
        shorter = tuple(_shortened(t, mm_hash) for t in world.templates)
        if shorter != world.templates:
            yield evolve(world, templates=shorter), actions
    for fewer in _fewer_requests(actions):
        yield world, fewer
    used = sorted({a[1] for a in actions if a[0] == "add_request"})
    if used != list(range(len(used))):           # unused templates go, indexes follow
        index = {t: k for k, t in enumerate(used)}
        templates = tuple(evolve(world.templates[t], request_id=f"t{k}")
                          for k, t in enumerate(used))
        yield evolve(world, templates=templates), \
            [(n, index[a[0]], a[1]) if n == "add_request" else (n, *a) for n, *a in actions]
    for k, t in enumerate(world.templates):
        for simpler in _simpler_templates(t, world.encoder_decoder):
            yield evolve(world, templates=(*world.templates[:k], simpler,
                                           *world.templates[k + 1:])), actions


def _simpler_templates(t: SchedRequest, encoder_decoder: bool = False):
    if t.max_tokens > 1:
        yield evolve(t, max_tokens=1)
    if encoder_decoder:            # its one input stays at 0; the decoder prompt shrinks
        if t.prompt_len > 1:
            yield evolve(t, prompt_len=t.prompt_len - 1)
        return
    end = t.items[-1].end if t.items else 1
    if t.prompt_len > max(1, end):
        yield evolve(t, prompt_len=max(1, end))
    if t.items:
        last = t.items[-1]
        yield evolve(t, items=t.items[:-1], prompt_len=max(1, last.offset))
        shifted = tuple(evolve(it, offset=it.offset - 1) for it in t.items)
        if t.items[0].offset > 0:
            yield evolve(t, items=shifted, prompt_len=t.prompt_len - 1)


def _halved_step_runs(actions: list[tuple]) -> list[tuple]:
    """``actions`` with every run of consecutive steps half as long (rounded up)."""
    out: list[tuple] = []
    run = 0
    for action in [*actions, None]:
        if action == ("step",):
            run += 1
            continue
        out += [("step",)] * -(-run // 2)
        run = 0
        if action is not None:
            out.append(action)
    return out


def _fewer_requests(actions):
    """Candidates: a request added and aborted removed with its abort (the two are seldom
    adjacent, which step deletion needs); request ids renumbered densely."""
    added = [a for a in actions if a[0] == "add_request"]
    for _, t, n in added:
        if ("finish_request", n) in actions:
            yield [a for a in actions if a not in (("add_request", t, n), ("finish_request", n),
                                                   ("preempt_request", n))]
    ids = {a[2]: k for k, a in enumerate(added)}
    if any(n != k for n, k in ids.items()):
        yield [(a[0], a[1], ids[a[2]]) if a[0] == "add_request"
               else (a[0], ids.get(a[1], a[1])) if a[0] in ("finish_request", "preempt_request")
               else a for a in actions]


def _shortened(t: SchedRequest, mm_hash: str) -> SchedRequest:
    """``t`` with every ``mm_hash`` item one embed shorter (later items move up one)."""
    items, shift = [], 0
    for it in t.items:
        mask = it.is_embed
        # One position fewer; a mask drops its last position unless that leaves no embed.
        cut = it.mm_hash == mm_hash and it.length > 1 and (mask is None or any(mask[:-1]))
        mask = mask[:-1] if cut and mask is not None else mask
        items.append(evolve(it, offset=it.offset - shift, length=it.length - cut,
                            is_embed=None if mask is not None and all(mask) else mask))
        shift += cut
    return evolve(t, items=tuple(items), prompt_len=max(1, t.prompt_len - shift))
