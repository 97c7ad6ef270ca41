"""Simpler worlds for the encoder-cache minimizer (``properties/run.py:minimize``).

A world is an ``EncoderCacheWorld``; actions are the machine's ``(name, *args)`` steps, with
a request index first and an input index second where they take them. Each candidate may fail
the same way with a smaller or calmer program; the minimizer keeps the ones that do.
"""

from __future__ import annotations

from attrs import evolve

from models.encoder_cache_values import MmItem, ReqView
from properties.encoder_cache_worlds import EncoderCacheWorld as W
from properties.shrink_steps import without_request

REQUEST_ACTIONS = ("check_and_update_cache", "can_allocate", "free_encoder_input", "free")
INPUT_ACTIONS = ("check_and_update_cache", "can_allocate", "free_encoder_input")


def simpler_worlds(world, actions: list[tuple]):
    """Smaller worlds and calmer draws that may fail the same way (for the minimizer):
    merge or drop requests, drop unused items, shrink the cache or an item, lower the
    drawn slack, rename hashes in order of appearance, free a whole request for one input.
    The manager stays the world's."""
    for simpler, acts in _simpler_worlds(world, actions):
        yield evolve(simpler, manager=world.manager), acts


def _simpler_worlds(world, actions: list[tuple]):
    cache_size, requests = world.cache_size, world.requests
    for k in range(len(requests)):
        for j in (j for j in range(len(requests)) if j != k):   # k's steps done by j
            merged = [(n, j if n in REQUEST_ACTIONS and a and a[0] == k else a[0], *a[1:])
                      if a else (n,) for n, *a in actions]
            yield W(cache_size, _renamed(requests[:k] + requests[k + 1:])), \
                without_request(merged, k, REQUEST_ACTIONS)
    for k, req in enumerate(requests):
        used = max((a[2] for a in actions if a[0] in INPUT_ACTIONS and a[1] == k), default=-1)
        if len(req.items) > max(1, used + 1):
            trimmed = ReqView(req.request_id, req.items[:-1])
            yield W(cache_size, requests[:k] + (trimmed,) + requests[k + 1:]), actions
    calmer = [(a[0], *a[1:4], max(0, a[4] - 1)) if a[0] == "can_allocate" else a
              for a in actions]
    for smaller in sorted({cache_size - 1, cache_size // 2, 1} - {0, cache_size}):
        for acts in (actions, calmer):
            yield W(smaller, _resized(requests, lambda n, c=smaller: min(n, c))), acts
    for mm_hash in sorted({it.mm_hash for r in requests for it in r.items}):
        yield W(cache_size, _resized(requests, lambda n: n, shrink=mm_hash)), actions
    for j, action in enumerate(actions):
        if action[0] == "can_allocate":
            for pos in (3, 4):
                if action[pos] > 0:
                    lower = (*action[:pos], action[pos] - 1, *action[pos + 1:])
                    yield world, [*actions[:j], lower, *actions[j + 1:]]
    yield W(cache_size, _hashes_in_order(requests)), actions
    for j, action in enumerate(actions):        # one input freed -> the whole request freed
        if action[0] == "free_encoder_input":   # (one spelling per bug: hunts name findings
            yield world, [*actions[:j], ("free", action[1]), *actions[j + 1:]]  # by program)
    for k, req in enumerate(requests):          # reorder a request's items
        for a in range(len(req.items)):
            for b in range(a + 1, len(req.items)):
                yield _swapped(world, actions, k, a, b)


def _renamed(requests: tuple[ReqView, ...]) -> tuple[ReqView, ...]:
    return tuple(ReqView(f"r{k}", r.items) for k, r in enumerate(requests))


def _resized(requests, size_of, shrink: str | None = None) -> tuple[ReqView, ...]:
    def item(it: MmItem) -> MmItem:
        n = max(1, it.num_embeds - 1) if it.mm_hash == shrink else size_of(it.num_embeds)
        return MmItem(it.mm_hash, n)
    return tuple(ReqView(r.request_id, tuple(item(it) for it in r.items)) for r in requests)


def _swapped(world, actions: list[tuple], k: int, a: int, b: int):
    """The world with request k's items a and b swapped, and the actions following them."""
    cache_size, requests = world.cache_size, world.requests
    items = list(requests[k].items)
    items[a], items[b] = items[b], items[a]
    swap = {a: b, b: a}
    moved = [(x[0], k, swap.get(x[2], x[2]), *x[3:])
             if x[0] in INPUT_ACTIONS and x[1] == k else x for x in actions]
    requests = requests[:k] + (ReqView(requests[k].request_id, tuple(items)),) + requests[k + 1:]
    return W(cache_size, requests), moved


def _hashes_in_order(requests: tuple[ReqView, ...]) -> tuple[ReqView, ...]:
    names: dict[str, str] = {}
    for r in requests:
        for it in r.items:
            names.setdefault(it.mm_hash, f"img{len(names)}")
    return tuple(ReqView(r.request_id, tuple(MmItem(names[it.mm_hash], it.num_embeds)
                                             for it in r.items)) for r in requests)
