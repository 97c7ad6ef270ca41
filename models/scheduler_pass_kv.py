"""KV blocks in the scheduler pass (vLLM 0.33.0, full attention), a pool of ``kv_blocks`` blocks
of 16 tokens: the prefix cache's model (``models/prefix_cache.py``) as the scheduler drives it,
caching on or off. (1) A waiting request starts at its longest cached prefix (with caching),
its prompt's tokens 0 and its samples 1, blocks told apart by the multimodal items in them; a
window that starts past an input's embeds leaves it unencoded. (2) While the pool refuses what
a running request's grant reaches, the running request started last is preempted, the request
itself last (then it gets no token and no one after it is served). (3) A waiting request is
admitted only if its whole sequence (``reserve_full_isl``; else its chunk) fits beside its hit
and, while another request runs, the ``watermark``'s share of the pool, else it and all after
wait, its encoder holds given up, and a pass that preempted admits none."""

from __future__ import annotations

from attrs import evolve

from models.prefix_cache import PrefixCacheModel
from models.prefix_cache_values import PrefixRequest
from models.scheduler_pass_grant import Grant, unallocated

HELD = ("kv", "preempted")      # the limits of a grant the pool took every token from
SAMPLED = 1                     # every sample's token (rule 1)


def pool(model) -> PrefixCacheModel:
    n, size = model.kv_blocks, model.kv_block_size      # n blocks and the null block
    return PrefixCacheModel(n + 1, size, n * size, reserve_full_isl=model.reserve_full_isl,
                            watermark=model.watermark, enable_caching=model.enable_prefix_caching)


def request(r) -> PrefixRequest:
    return PrefixRequest(r.request_id, (0,) * r.prompt_len, mm_items=tuple(
        (x.mm_hash, x.offset) for x in r.items))


def look_up(model, state):
    """Rule (1): the hit a waiting request starts from (until the pass ends, if not admitted)."""
    hit = model.pool.get_computed_blocks(state.request.request_id)
    state.num_computed_tokens = hit.num_computed_tokens
    return hit


def admit(model, state, grant: Grant, hit=None) -> tuple[Grant, list[str]]:
    """``grant`` as the pool lets it stand (``revived``: its hit took a free cached block),
    and the requests preempted for it, in order; one left no token (``HELD``) keeps its
    evictions, not its holds (vLLM frees them)."""
    waiting, victims, rid = state.started_at is None, [], state.request.request_id
    revived = hit is not None and any(model.pool.ref_cnt(b) == 0 for b in hit.block_ids)
    while model.pool.allocate_slots(rid, grant.tokens, hit) is None:
        victim = state if waiting else max(model.requests.values(),
                                           key=lambda s: s.started_at or 0)
        if not waiting:
            victims.append(victim.request.request_id)
            model.preempt_request(victim.request.request_id)
        if victim is state:
            (cache := unallocated(grant)).free(state.request)
            return Grant(state.request, grant.start, grant.wanted, cache=cache,
                         limit="kv" if waiting else "preempted"), victims
        grant.cache.free(victim.request)     # the grant's own cache loses the victim's holds
    return evolve(grant, revived=revived), victims
