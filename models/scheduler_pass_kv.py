"""KV blocks in the scheduler pass (vLLM 0.33.0, full attention, no prefix caching), a pool of
``kv_blocks`` blocks of ``B`` tokens: (1) a started request holds ``ceil(upto / B)`` blocks,
``upto`` where its scheduled tokens reach, a waiting one none; (2) while the pool lacks what a
running request's grant reaches, the running request started last is preempted, the request
itself last (then it gets no token and no one after it is served); (3) a waiting request is
admitted only if its whole sequence fits the free blocks, else it and all after it wait, its
encoder holds given up, and a pass that preempted admits none."""

from __future__ import annotations

from models.scheduler_pass_grant import Grant, unallocated

HELD = ("kv", "preempted")      # the limits of a grant the pool took every token from


def held(state, size: int) -> int:
    return 0 if state.started_at is None else -(-state.scheduled_upto // size)


def admit(model, state, grant: Grant) -> tuple[Grant, list[str]]:
    """``grant`` as the pool lets it stand, and the requests preempted for it, in order; one
    left no token (``HELD``) keeps its evictions, not its holds (vLLM frees them)."""
    B, running = model.kv_block_size, model.requests.values()

    def short(tokens: int) -> bool:                 # rule (1) for what reaching tokens needs
        return -(-tokens // B) - held(state, B) > model.kv_blocks - sum(held(s, B) for s in running)
    waiting, victims = state.started_at is None, []
    while short(state.num_tokens if waiting else state.scheduled_upto + grant.tokens):
        victim = state if waiting else max(
            (s for s in running if s.started_at is not None), key=lambda s: s.started_at)
        if not waiting:
            victims.append(victim.request.request_id)
            model.preempt_request(victim.request.request_id)
        if victim is state:
            (cache := unallocated(grant)).free(state.request)
            return Grant(state.request, grant.start, grant.wanted, cache=cache,
                         limit="kv" if waiting else "preempted"), victims
        grant.cache.free(victim.request)     # the grant's own cache loses the victim's holds
    return grant, victims
