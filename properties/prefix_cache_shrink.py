"""Simpler worlds for the prefix-cache minimizer (``properties/run.py:minimize``).

Actions are the machine's ``(name, *args)`` steps, a request index first where they take one.
Each candidate may fail the same way with a smaller world or calmer draws; the minimizer keeps
the ones that do.
"""

from __future__ import annotations

from attrs import evolve

from models.prefix_cache_values import PrefixRequest
from properties.shrink_steps import without_request

REQUEST_ACTIONS = ("add_request", "schedule_waiting", "allocate_slots", "append_token_ids",
                   "free", "preempt")
SIZED_ACTIONS = ("schedule_waiting", "allocate_slots")      # (r, num_new_tokens, lookahead)


def simpler_worlds(world, actions: list[tuple]):
    """Drop a request (and its steps), trim a prompt's last token, drop a request's salt or
    prompt logprobs, shrink the pool or the length cap, turn EAGLE off, turn caching and
    events back on (the default world), lower a step's chunk or lookahead."""
    requests = world.requests
    for k in range(len(requests)):
        if len(requests) > 1:
            kept = requests[:k] + requests[k + 1:]
            yield (evolve(world, requests=_renamed(kept)),
                   without_request(actions, k, REQUEST_ACTIONS))
    for k, req in enumerate(requests):
        if len(req.prompt) > 1:
            trimmed = evolve(req, prompt=req.prompt[:-1])
            yield evolve(world, requests=requests[:k] + (trimmed,) + requests[k + 1:]), actions
    for k, req in enumerate(requests):
        if req.cache_salt or req.prompt_logprobs:
            plain = PrefixRequest(req.request_id, req.prompt)
            yield evolve(world, requests=requests[:k] + (plain,) + requests[k + 1:]), actions
    if world.num_blocks > 2:
        yield evolve(world, num_blocks=world.num_blocks - 1), actions
    if world.max_model_len > max(len(r.prompt) for r in requests):
        yield evolve(world, max_model_len=world.max_model_len - 1), actions
    if world.use_eagle:
        yield evolve(world, use_eagle=False), actions
    for switch in ("enable_caching", "enable_kv_cache_events"):
        if not getattr(world, switch):
            yield evolve(world, **{switch: True}), actions
    for j, action in enumerate(actions):
        if action[0] in SIZED_ACTIONS:
            for pos in (3, 2):
                if action[pos] > (0 if pos == 3 else 1):
                    lower = (*action[:pos], action[pos] - 1, *action[pos + 1:])
                    yield world, [*actions[:j], lower, *actions[j + 1:]]


def _renamed(requests: tuple[PrefixRequest, ...]) -> tuple[PrefixRequest, ...]:
    return tuple(evolve(r, request_id=f"r{k}") for k, r in enumerate(requests))


