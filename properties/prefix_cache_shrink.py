"""Simpler worlds for the prefix-cache minimizer (``properties/run.py:minimize``).

Actions are the machine's ``(name, *args)`` steps, a request index first where they take one.
Each candidate may fail the same way with a smaller world or calmer draws; the minimizer keeps
the ones that do.
"""

from __future__ import annotations

from attrs import evolve

from models.prefix_cache_values import PrefixRequest
from properties.prefix_cache_worlds import BLOCK_SIZES
from properties.shrink_steps import without_request

REQUEST_ACTIONS = ("add_request", "schedule_waiting", "allocate_slots", "append_token_ids",
                   "free", "preempt", "finish_load", "probe_waiting")
# (r, num_new_tokens, lookahead), and for schedule_waiting the connector's tokens and whether
# it loads them asynchronously after them
SIZED_ACTIONS = ("schedule_waiting", "allocate_slots")
# The most blocks a dropped request's pressure is replaced by: a short request in a pool of
# up to four groups, two blocks each.
PRESSURE_BLOCKS = 8


def simpler_worlds(world, actions: list[tuple]):
    """Drop a request (and its steps; also with the pool shrunk by the blocks it held), trim a
    prompt's last token, drop a request's salt, prompt logprobs or full KV event report (or
    the first two alone), shrink the pool, the block size or the length cap, turn EAGLE or
    its lookahead hashes off, the drafter in full attention alone, one DCP rank, one block
    size, no second window, one local group for several, one group for two, turn caching and
    events back on and the admission gates off, full attention for a sliding window, no KV
    connector (the default world), make a resent prompt a fresh request, fold a sampled
    token into the prompt, merge a request's two steps, lower a step's chunk, lookahead or
    connector load."""
    requests = world.requests
    for k in range(len(requests)):
        if len(requests) > 1:
            kept = requests[:k] + requests[k + 1:]
            yield (evolve(world, requests=_renamed(kept)),
                   without_request(actions, k, REQUEST_ACTIONS))
    # A request that only took blocks (the pressure that evicts another's prefix) goes with
    # the blocks it held, one per group and block: without it the pool must be that much
    # smaller for the same eviction, and neither change alone fails the same way.
    for k in range(len(requests)):
        if len(requests) > 1:
            kept = requests[:k] + requests[k + 1:]
            for fewer in range(1, min(world.num_blocks - 2, PRESSURE_BLOCKS) + 1):
                yield (evolve(world, requests=_renamed(kept),
                              num_blocks=world.num_blocks - fewer),
                       without_request(actions, k, REQUEST_ACTIONS))
    for k, req in enumerate(requests):
        if len(req.prompt) > 1:
            trimmed = evolve(req, prompt=req.prompt[:-1])
            yield evolve(world, requests=requests[:k] + (trimmed,) + requests[k + 1:]), actions
    for k, req in enumerate(requests):
        full = req.kv_cache_report_mode != "incremental"
        if req.cache_salt or req.prompt_logprobs or full:
            plain = PrefixRequest(req.request_id, req.prompt)
            yield evolve(world, requests=requests[:k] + (plain,) + requests[k + 1:]), actions
        if full and (req.cache_salt or req.prompt_logprobs):    # the report mode kept
            plain = evolve(req, cache_salt=None, prompt_logprobs=False)
            yield evolve(world, requests=requests[:k] + (plain,) + requests[k + 1:]), actions
    if world.num_blocks > 2:
        yield evolve(world, num_blocks=world.num_blocks - 1), actions
    if world.replicated_draft:      # the target alone
        yield evolve(world, replicated_draft=False), actions
    if world.dcp_world_size > 1:    # one rank holding the whole block: the same blocks
        yield evolve(world, block_size=world.block_size * world.dcp_world_size,
                     dcp_world_size=1, replicated_draft=False), actions
    # A smaller block size with the same room in tokens: the steps keep their meaning (they
    # count tokens), and a one-token block reaches a block boundary with fewer tokens.
    for smaller in (size for size in BLOCK_SIZES if size < world.block_size):
        factor = world.block_size // smaller
        yield evolve(world, block_size=smaller,
                     num_blocks=1 + (world.num_blocks - 1) * factor), actions
    if world.max_model_len > max(len(r.prompt) for r in requests):
        yield evolve(world, max_model_len=world.max_model_len - 1), actions
    if world.use_eagle:
        yield evolve(world, use_eagle=False, eagle_groups=(0,)), actions
    if world.hash_lookahead:
        yield evolve(world, hash_lookahead=0), actions
    for switch in ("enable_caching", "enable_kv_cache_events"):
        if not getattr(world, switch):
            yield evolve(world, **{switch: True}), actions
    if world.reserve_full_isl:
        yield evolve(world, reserve_full_isl=False), actions
    if world.watermark:
        yield evolve(world, watermark=0.0), actions
    if world.kv_connector:
        yield evolve(world, kv_connector=False), _without_loads(actions)
    if world.max_in_flight_tokens is not None:
        yield evolve(world, max_in_flight_tokens=None), actions
    if world.retention is not None:
        yield evolve(world, retention=None), actions
    if world.eagle_groups != (0,):
        yield evolve(world, eagle_groups=(0,)), actions
    if world.second_window is not None:
        yield evolve(world, second_window=None,
                     eagle_groups=_regrouped(world, world.local_groups, False)), actions
    if world.local_groups > 1:
        yield evolve(world, local_groups=1,
                     eagle_groups=_regrouped(world, 1, world.second_window)), actions
    if world.full_block_size is not None:           # one block size
        yield evolve(world, full_block_size=None), actions
    if world.attention_chunk_size is not None:       # the window in the chunk's place
        yield evolve(world, attention_chunk_size=None,
                     sliding_window=world.attention_chunk_size), actions
    if world.hybrid:        # a chunked-local model without it: full attention alone
        yield evolve(world, hybrid=False, retention=None, attention_chunk_size=None,
                     local_groups=1, second_window=None, eagle_groups=(0,),
                     full_block_size=None), actions
    if world.sliding_window is not None:
        yield evolve(world, sliding_window=None, max_in_flight_tokens=None, hybrid=False,
                     retention=None, local_groups=1, second_window=None,
                     eagle_groups=(0,), full_block_size=None), actions
    yield from _resends_made_fresh(world, actions)
    yield from _sampled_into_prompt(world, actions)
    yield from _steps_merged(world, actions)
    for j, action in enumerate(actions):
        if action[0] in SIZED_ACTIONS:
            for pos in (5, 4, 3, 2)[6 - len(action):]:
                if action[pos] > (0 if pos > 2 else 1):
                    lower = (*action[:pos], action[pos] - 1, *action[pos + 1:])
                    yield world, [*actions[:j], lower, *actions[j + 1:]]


def _resends_made_fresh(world, actions: list[tuple]):
    """A finished request sent again becomes a new request with the same prompt, arriving
    where the resend did: the ``free`` before the resend goes (the first request may then
    still hold its blocks), and the resend's later steps name the new request."""
    n = len(world.requests)
    arrived, last_free = 0, {}
    for i, (name, *args) in enumerate(actions):
        if name == "free":
            last_free[args[0]] = i
        if name != "add_request":
            continue
        k = args[0]
        if k == arrived:
            arrived += 1
            continue
        if arrived < n or k not in last_free:
            continue
        fresh = evolve(world.requests[k], request_id=f"r{n}")
        later = [(a[0], n, *a[2:]) if a[0] in REQUEST_ACTIONS and a[1] == k else a
                 for a in actions[i + 1:]]
        free_at = last_free[k]
        yield (evolve(world, requests=(*world.requests, fresh)),
               [a for j, a in enumerate(actions[:i]) if j != free_at]
               + [("add_request", n)] + later)


def _sampled_into_prompt(world, actions: list[tuple]):
    """A request's first sampled token becomes its prompt's last: its first step computes
    one token more and the sampled tokens lose that one. What a decode reaches, a longer
    prompt reaches in fewer calls (the chunk lowering and step merging cannot fold them)."""
    requests = world.requests
    for k, req in enumerate(requests):
        steps = [j for j, a in enumerate(actions) if a[0] in REQUEST_ACTIONS and a[1] == k]
        first = next((j for j in steps if actions[j][0] == "schedule_waiting"), None)
        sample = next((j for j in steps if actions[j][0] == "append_token_ids"
                       and first is not None and j > first), None)
        if sample is None:
            continue
        token, *rest = actions[sample][2]
        longer = evolve(req, prompt=(*req.prompt, token))
        step = actions[first]
        changed = {first: (*step[:2], step[2] + 1, *step[3:]),
                   sample: ("append_token_ids", k, tuple(rest)) if rest else None}
        yield (evolve(world, requests=requests[:k] + (longer,) + requests[k + 1:]),
               [changed.get(j, a) for j, a in enumerate(actions) if changed.get(j, a)])


def _steps_merged(world, actions: list[tuple]):
    """A request's step and the ``allocate_slots`` right after it become one step of both
    chunks (the later one's lookahead): what a request computes over two steps, in one. The
    chunk lowering alone cannot reach it, and a bug met after a request's prompt is computed
    is then met in fewer calls."""
    for j in range(len(actions) - 1):
        first, then = actions[j], actions[j + 1]
        if first[0] in SIZED_ACTIONS and then[0] == "allocate_slots" and first[1] == then[1]:
            merged = (first[0], first[1], first[2] + then[2], then[3], *first[4:])
            yield world, [*actions[:j], merged, *actions[j + 2:]]


def _without_loads(actions: list[tuple]) -> list[tuple]:
    """The steps with no connector load (a scheduling step's last two arguments), and no
    load finishing."""
    return [(*a[:4], 0, 0) if a[0] == "schedule_waiting" else a for a in actions
            if a[0] != "finish_load"]


def _renamed(requests: tuple[PrefixRequest, ...]) -> tuple[PrefixRequest, ...]:
    return tuple(evolve(r, request_id=f"r{k}") for k, r in enumerate(requests))




def _regrouped(world, local_groups: int, second_window) -> tuple[int, ...]:
    """The world's drafter groups with ``local_groups`` local groups and a second window or
    none: a local group's mark on the last of them, the second window's after them (or
    gone with it); full attention's where none is left."""
    marked = []
    for g in world.eagle_groups:
        if g == 0:
            marked.append(0)
        elif g <= world.local_groups:
            marked.append(min(g, local_groups))
        elif second_window:
            marked.append(local_groups + 1)
    return tuple(dict.fromkeys(marked)) or (0,)
