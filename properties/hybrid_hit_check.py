"""Checks of a hybrid Mamba model's prefix cache, read off the pool (no model of it):

- ``hit-is-longest-cached``: a lookup returns the longest hit the pool's cached set serves
  (``models/prefix_cache_hybrid_hit.py``), no longer and no shorter, within its cap; alone,
  it holds of a pool that caches nothing;
- ``hit-blocks-cached``: the hit's blocks are the ones cached there;
- ``state-computed-before-read``: no request is scheduled on a state cached in the same step;
- ``kept-state-cached``: where a prompt's chunk ends on a state the cache keeps, a repeat of
  the prompt is served up to there;
- ``kept-state-reachable``: and under sparse retention the cache keeps no state where no
  later request can resume.

Each reads a recorded lookup (``Lookup`` in ``models/prefix_cache_values.py``) or the cached
set, so this module imports neither vLLM nor torch."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from models.prefix_cache_hybrid_hit import longest_hit, may_keep_state_at
from properties.scenarios import holds

HIT = "hit-is-longest-cached"


def check_lookup(lookup: Any, block: int, *, full_groups: Sequence[int],
                 state_groups: Sequence[int], unit: int | None = None,
                 name: Callable[[Any], str] = str) -> None:
    """``lookup``: request_id, prefixes (one key per ``unit`` tokens: the block's, unless
    given), cap_tokens, cached, hit_tokens. ``name`` shows a key."""
    unit = unit or block
    want = unit * longest_hit(lookup.prefixes, lookup.cached, full_groups=full_groups,
                              state_groups=state_groups, cap_units=lookup.cap_tokens // unit,
                              units_per_block=block // unit)
    holds(HIT, lookup.hit_tokens == want, lambda: (
        f"{lookup.request_id}'s lookup hit {lookup.hit_tokens} tokens where the pool served "
        f"{want} (cap {lookup.cap_tokens}); cached of its prefixes: " + ", ".join(
            f"group {g} {name(key)}" for g, key in sorted(
                (g, key) for g, key in lookup.cached if key in lookup.prefixes))))


KEPT = "kept-state-cached"


def replay_boundary(keys: Sequence[Any], prompt_tokens: int, unit: int) -> int:
    """The longest prefix a repeat of the prompt may hit, in tokens: on a key's end, below
    the prompt's last token (whose logits a repeat must compute)."""
    return unit * min((prompt_tokens - 1) // unit, len(keys))


def check_kept_state(request_id: str, keys: Sequence[Any], position: int, cached: Any,
                     block: int, *, full_groups: Sequence[int], state_groups: Sequence[int],
                     unit: int | None = None, name: Callable[[Any], str] = str) -> None:
    """At the step ``request_id``'s prompt chunk ends on ``position``, a state the cache keeps
    (``keeps_state_at``), a repeat of the prompt is served up to there in every group.
    ``keys``: the prompt's, one per ``unit`` tokens. (Later the state may be evicted: the
    request moves past it.)"""
    unit = unit or block
    got = unit * longest_hit(keys, cached, full_groups=full_groups, state_groups=state_groups,
                             cap_units=position // unit, units_per_block=block // unit)
    holds(KEPT, got == position, lambda: (
        f"{request_id}'s prompt chunk ended on {position}, where the cache keeps the state, "
        f"and a repeat of the prompt is served {got} tokens; cached of its prefixes: "
        + ", ".join(f"group {g} {name(key)}" for g, key in sorted(
            (g, key) for g, key in cached if key in keys))))


BLOCKS = "hit-blocks-cached"


def check_hit_blocks(lookup: Any, block: int, *, full_groups: Sequence[int],
                     state_groups: Sequence[int], unit: int | None = None) -> None:
    """Each group's blocks in the hit cover it block by block: a full-attention group's
    ``i``-th block is one the pool cached under a prefix that ends inside that block, no
    earlier than the block's share of the hit (its tokens hold the share); a Mamba group's
    are the null block, then one cached under the hit's own prefix (its state there).
    ``lookup.hit_blocks``: block ids per group, None for null."""
    unit = unit or block
    hit, caching = lookup.hit_tokens, lookup.caching
    count = -(-hit // block)
    def cached_as(group: int, end: int, upto: int | None = None) -> frozenset:
        ends = range(end, min(upto or end, unit * len(lookup.prefixes)) + 1, unit)
        return frozenset().union(*(caching.get((group, lookup.prefixes[e // unit - 1]), ())
                                   for e in ends))
    wrong = []
    for group, blocks in enumerate(lookup.hit_blocks):
        if len(blocks) != count:
            wrong.append(f"group {group} holds {len(blocks)} blocks for {count}")
        if len(blocks) != count or not count:
            continue
        if group in full_groups:
            wrong += [f"group {group} block {i} ({b}) is not cached under its prefix"
                      for i, b in enumerate(blocks)
                      if b not in cached_as(group, min((i + 1) * block, hit),
                                            (i + 1) * block)]
        elif group in state_groups:
            if any(b is not None for b in blocks[:-1]):
                wrong.append(f"group {group} holds {blocks[:-1]} before its state's block")
            if blocks[-1] not in cached_as(group, hit):
                wrong.append(f"group {group}'s last block ({blocks[-1]}) is not cached under "
                             "the hit's prefix")
    holds(BLOCKS, not wrong, lambda: f"{lookup.request_id}'s hit of {hit} tokens: "
          + "; ".join(wrong))


STATE_READ = "state-computed-before-read"


def check_state_computed(lookup: Any, cached_before_step: Any, scheduled: bool, *,
                         state_groups: Sequence[int], unit: int) -> None:
    """A request is scheduled on a Mamba state only once the step that computes it has run:
    a hit on a state first cached in the same step (by a request scheduled ahead of it,
    whose forward pass writes it) waits for the next step. ``cached_before_step``: the
    (group, key) pairs cached when the step began."""
    if not scheduled or not lookup.hit_tokens:
        return
    key = lookup.prefixes[lookup.hit_tokens // unit - 1]
    fresh = [g for g in state_groups if (g, key) not in cached_before_step]
    holds(STATE_READ, not fresh, lambda: (
        f"{lookup.request_id} was scheduled on a hit of {lookup.hit_tokens} tokens whose "
        f"state in group(s) {fresh} was first cached in the same step, before any step "
        "computed it"))


REACHABLE = "kept-state-reachable"


def check_kept_reachable(key: Any, position: int, keepers: Sequence[tuple[str, int, int]],
                         block: int, *, unit: int, retention_interval: int | None,
                         name: Callable[[Any], str] = str) -> None:
    """A Mamba state the pool newly caches under ``key`` (``position`` tokens), sparse
    retention on, is one a later request can resume at (``may_keep_state_at``) for one of
    the requests whose prefix it is (``keepers``: request, prompt tokens, its lookup's
    junction)."""
    holds(REACHABLE, any(may_keep_state_at(position, prompt, block, unit, retention_interval,
                                           junction) for _, prompt, junction in keepers),
          lambda: (f"the pool keeps the Mamba state at {name(key)} ({position} tokens) under "
                   f"retention {retention_interval}, where none of its requests can resume: "
                   + ", ".join(f"{rid} (prompt {prompt}, junction {junction})"
                               for rid, prompt, junction in keepers)))
