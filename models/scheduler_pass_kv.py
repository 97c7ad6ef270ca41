"""KV blocks in the scheduler pass (vLLM 0.33.0, full attention, no prefix caching): what a
grant must find free in a pool of ``kv_blocks`` blocks of ``B`` tokens.

(1) A started request holds the blocks its scheduled tokens reach, ``ceil(upto / B)``; a
waiting one holds none (blocks go back on finishing and on preemption, never otherwise).
(2) A running request's grant needs the blocks its new tokens reach beyond those. While the
pool cannot supply them, the running request started last gives its place up: preempted,
its blocks, encoder holds and computed tokens lost, back at the head of the waiting queue.
When that is the request itself it gets no token, and the pass serves no one after it.
(3) A waiting request is admitted only if its whole sequence (prompt and outputs so far)
fits in the free blocks; if not, it and every request after it wait, its encoder holds
given up. A pass that preempted admits no waiting request.
"""

from __future__ import annotations

import copy

from attrs import evolve

from models.scheduler_pass_grant import Grant, unallocated


def blocks(tokens: int, block_size: int) -> int:
    return -(-tokens // block_size)


def held(state, block_size: int) -> int:
    """(1): what a request holds now, computed from where its scheduled tokens reach."""
    return 0 if state.started_at is None else blocks(state.scheduled_upto, block_size)


def free_blocks(model) -> int:
    return model.kv_blocks - sum(held(s, model.kv_block_size) for s in model.requests.values())


def admit(model, state, grant: Grant) -> tuple[Grant, list[str]]:
    """``grant`` as the pool lets it stand, and the requests preempted for it, in order
    (rules 2 and 3). A grant the pool refuses keeps no token: ``limit`` says "kv" (a waiting
    request held back) or "preempted" (the request gave its own place up)."""
    size, request = model.kv_block_size, state.request
    if state.started_at is None:
        if blocks(state.num_tokens, size) <= free_blocks(model):
            return grant, []
        return _refused(model, grant, "kv"), []
    victims: list[str] = []
    while blocks(state.scheduled_upto + grant.tokens, size) - held(state, size) \
            > free_blocks(model):
        victim = max((s for s in model.requests.values() if s.started_at is not None),
                     key=lambda s: s.started_at)
        victims.append(victim.request.request_id)
        if victim is state:
            model.cache = _refused(model, grant, "preempted").cache
            model.preempt_request(request.request_id)
            return evolve(grant, tokens=0, read_ahead=0, encoded=(), loaded=(), cache=None,
                          limit="preempted"), victims
        model.preempt_request(victim.request.request_id)
        if grant.cache is not None:          # the grant's own cache loses the victim's holds
            grant.cache.free(victim.request)
    return grant, victims


def _refused(model, grant: Grant, limit: str) -> Grant:
    """No token: the grant's cache without what it allocated and without the request's
    holds, older ones too (vLLM frees a refused request's encoder inputs); its evictions
    stay."""
    cache = copy.deepcopy(model.cache) if grant.cache is None else unallocated(grant)
    cache.free(grant.request)
    return Grant(grant.request, grant.start, grant.wanted, limit=limit, cache=cache)
