"""Minimizer candidates for the tiered-lookup machine: simpler (world, program) pairs.

The harness deletes runs of adjacent steps by itself; these candidates add what it cannot do
alone: a smaller primary or a simpler secondary tier, a store (or load) deleted together
with its completion wherever that is, one key fewer in a store and its completion (also with
a chunk fewer), a reset replaced by the job completion it stands for, shorter key lists,
shorter scans and narrower windows, keys renumbered in order of first appearance.
"""

from __future__ import annotations

from attrs import evolve

from properties.tiered_lookup_worlds import TieredWorld


def simpler_worlds(world: TieredWorld, actions: list[tuple]):
    """A smaller primary, a simpler secondary tier; a store or load deleted together with
    its completion (they need not be adjacent); a reset replaced by what it does to the
    secondary tier (its jobs complete); shorter key lists."""
    if world.num_chunks > 1:
        yield evolve(world, num_chunks=world.num_chunks - 1), actions
    for i in range(len(world.preloaded)):
        yield evolve(world, preloaded=world.preloaded[:i] + world.preloaded[i + 1:]), actions
    simpler = {"probe": "memory", "memory": "none"}.get(world.secondary)
    if simpler:
        yield evolve(world, secondary=simpler,
                     preloaded=world.preloaded if simpler != "none" else ()), actions
    if world.eviction_policy != "lru":
        yield evolve(world, eviction_policy="lru"), actions
    if world.store_threshold > 1:
        yield evolve(world, store_threshold=1, max_tracker_size=64_000), actions
    if world.max_tracker_size < 64_000:
        yield evolve(world, max_tracker_size=64_000), actions
    if world.unpositioned:                       # every request with its positions
        yield evolve(world, unpositioned=()), actions
    if world.store_threshold > 2:
        yield evolve(world, store_threshold=2), actions
    pairs = {"prepare_store": "complete_store", "prepare_load": "complete_load"}
    smaller = evolve(world, num_chunks=world.num_chunks - 1) if world.num_chunks > 1 \
        else None
    for j, (name, *args) in enumerate(actions):
        if name == "complete_job" and len(args) > 1:      # a failed copy: succeed instead
            yield world, [*actions[:j], (name, args[0]), *actions[j + 1:]]
        if name == "reset_cache":
            yield world, [*actions[:j], ("complete_job", 0), *actions[j + 1:]]
        if name not in pairs:
            continue
        done = next((k for k in range(j + 1, len(actions))
                     if actions[k][0] == pairs[name] and actions[k][1] == args[0]), None)
        if done is None:
            continue
        yield world, [a for k, a in enumerate(actions) if k not in (j, done)]
        for i in range(len(args[0]) if len(args[0]) > 1 else 0):
            # One key fewer in both the store and its completion, in this world and in
            # one with a chunk fewer (the same pressure with less of everything).
            keys = args[0][:i] + args[0][i + 1:]
            fewer = list(actions)
            fewer[j] = (name, keys, *args[1:])
            fewer[done] = (actions[done][0], keys, *actions[done][2:])
            yield world, fewer
            if smaller is not None:
                yield smaller, fewer
    for j, (name, *args) in enumerate(actions):
        if name in ("prepare_store", "touch", "prepare_load") and len(args[0]) > 1:
            for k in range(len(args[0])):
                shorter = args[0][:k] + args[0][k + 1:]
                yield world, [*actions[:j], (name, shorter), *actions[j + 1:]]
        if name in SCANS and len(args[0]) > 1:           # a scan over a key fewer
            for k in range(len(args[0])):
                shorter = (name, args[0][:k] + args[0][k + 1:], *args[1:])
                yield world, [*actions[:j], shorter, *actions[j + 1:]]
        if name == "sliding_window_lookup" and args[1] > 1:     # a narrower window
            window = args[1] - 1
            narrower = (name, args[0], window, None if args[2] is None else window + 1)
            yield world, [*actions[:j], narrower, *actions[j + 1:]]
    yield from _fewer_requests(world, actions)
    names = _key_names(actions, world.requests)
    renamed = _keys_in_order(actions, names)
    if renamed != actions:
        requests = tuple(tuple(names[k] for k in chain) for chain in world.requests)
        yield evolve(world, requests=requests), renamed


def _fewer_requests(world: TieredWorld, actions: list[tuple]):
    """The last request slot dropped when no step uses it; a chain's tail key dropped."""
    slots = len(world.requests)
    if slots > 2 and all(a != ("use_request", slots - 1) for a in actions):
        yield evolve(world, requests=world.requests[:-1],
                     unpositioned=tuple(r for r in world.unpositioned if r < slots - 1)), actions
    for r, chain in enumerate(world.requests):
        if len(chain) > 1:
            shorter = (*world.requests[:r], chain[:-1], *world.requests[r + 1:])
            yield evolve(world, requests=shorter), actions


SCANS = ("maximal_prefix_lookup", "sliding_window_lookup")
KEY_LISTS = ("prepare_store", "complete_store", "prepare_load", "complete_load", "touch", *SCANS)


def _key_names(actions: list[tuple], requests: tuple[tuple[int, ...], ...]) -> dict[int, int]:
    """Keys numbered 0, 1, ... in order of first appearance in the steps, then in the
    requests' chains (whose positions must follow their keys)."""
    names: dict[int, int] = {}
    for name, *args in actions:
        if name in KEY_LISTS:
            for k in args[0]:
                names.setdefault(k, len(names))
        elif name == "lookup":
            names.setdefault(args[0], len(names))
    for chain in requests:
        for k in chain:
            names.setdefault(k, len(names))
    return names


def _keys_in_order(actions: list[tuple], names: dict[int, int]) -> list[tuple]:
    """Keys renumbered 0, 1, ... in order of first appearance: a key is an opaque block
    hash, so one bug comes out of the minimizer as one program (and one finding id)."""
    out = []
    for name, *args in actions:
        if name in KEY_LISTS:
            args[0] = tuple(names.setdefault(k, len(names)) for k in args[0])
        elif name == "lookup":
            args[0] = names.setdefault(args[0], len(names))
        out.append((name, *args))
    return out
