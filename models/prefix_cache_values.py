"""Values of the prefix-caching KV block cache, shared by model, targets and reproducers.

A cached block's hash is named by what it hashes: the request's tokens from the first one to
the block's last (and, with lookahead block hashes, the tokens after it that its hash
covers), after the request's cache salt where it has one and the multimodal items that
start in it (``BlockKey``), so a failure says which prefix a block was found under, and a
hash can be checked against the tokens its block holds. Targets translate their own hashes
(vLLM's chained sha256 values) into these keys.
"""

from __future__ import annotations

from typing import Any

from attrs import evolve, field, frozen

# The prefix a block hash names: (salt, tokens...) or (tokens...), after the multimodal items
# that start in it, ("mm", identifier, offset) each (``PrefixRequest.mm_items``).
BlockKey = tuple

# What the one group's events name besides the blocks (vLLM's spelling): the device pool's
# medium, the group's index and its spec kind (full attention, sliding window or chunked
# local attention).
MEDIUM_GPU = "GPU"
# Block 0 is vLLM's null block: never free, never held, never cached; a table holds it in
# place of a block behind a sliding window.
NULL_BLOCK = 0
FULL_ATTENTION = "full_attention"
SLIDING_WINDOW = "sliding_window"
CHUNKED_LOCAL_ATTENTION = "chunked_local_attention"
# The optional fields of the events; a release's events carry some of them (a target's
# ``event_fields`` lists which, a removal's with a ``removed.`` prefix), the rest are None.
STORED_OPTIONAL = ("extra_keys", "block_size", "medium", "group_idx", "kv_cache_spec_kind",
                   "kv_cache_spec_sliding_window", "lookahead_token_ids")
REMOVED_OPTIONAL = ("medium", "group_idx")
EVENT_FIELDS = frozenset(STORED_OPTIONAL) | {f"removed.{f}" for f in REMOVED_OPTIONAL}


@frozen
class PrefixRequest:
    """A request as the KV cache manager sees it: an id and its prompt's token ids. Tokens it
    samples later are appended by ``append_token_ids``.

    ``cache_salt``: the salt vLLM mixes into the first block's hash (a tenant's prefixes are
    shared only with requests of the same salt). ``prompt_logprobs``: the request asks for
    its prompt's logprobs, so it never reads the prefix cache (every prompt token must be
    computed) but still caches what it computes.

    ``mm_items``: each multimodal item's identifier and placeholder offset, in offset order.
    vLLM mixes both into the hash of every block the item overlaps, so a block of placeholder
    tokens is found only by a request with the same items at the same places. A prefix
    names, before its salt, each item that starts inside it: the blocks an item overlaps
    follow from its offset wherever an identifier always names a placeholder of one length
    (vLLM's hash leaves the length out; the scheduler-pass worlds that cache keep it so).

    ``kv_cache_report_mode``: what the KV events report of it (vLLM's per-request
    ``sampling_params.extra_args["kv_cache_report_mode"]``): ``"incremental"``, the blocks it
    caches; ``"full"``, those and, when its lookup hits, the cached blocks it reuses (so a
    consumer mirroring the cache learns a prefix it never saw stored)."""

    request_id: str
    prompt: tuple[int, ...]
    cache_salt: str | None = None
    prompt_logprobs: bool = False
    mm_items: tuple[tuple[str, int], ...] = ()
    kv_cache_report_mode: str = "incremental"

    def key(self, tokens) -> BlockKey:
        """The key of the prefix ``tokens`` of this request."""
        tokens = tuple(tokens)
        items = tuple(("mm", *item) for item in self.mm_items if item[1] < len(tokens))
        return (*items, self.cache_salt, *tokens) if self.cache_salt else (*items, *tokens)


@frozen
class Hit:
    """``get_computed_blocks``' answer: the cached blocks of the request's longest hit (one
    tuple per group where there are several), the tokens they cover, and where a group that
    keeps only a window's blocks reached less than full attention, the end of full
    attention's run (vLLM's ``shared_prefix_boundary``: 0 with one group, or none)."""

    block_ids: tuple = ()
    num_computed_tokens: int = 0
    shared_prefix_boundary: int = 0


@frozen
class BlockStored:
    """KV event: blocks cached, in table order (``keys``), after the block of ``parent`` (None:
    from the prompt's start), holding ``token_ids``; or, for a request reporting in full, the
    cached blocks its hit reuses (``reused``: not part of the event a consumer sees, it tells a
    fold to take them as cached already, not as blocks cached again); ``extra_keys``: what else
    each block's hash covers, one entry per block (the salt on a salted request's first block,
    else None); ``block_size``, ``medium``, ``group_idx`` and the group's spec kind and sliding
    window: what a consumer classifies the blocks by; ``lookahead_token_ids``: with lookahead
    block hashes, the tokens past each block its hash covers (one tuple per block), else None.
    Each optional field is None where the release's events carry no such field."""

    keys: tuple[BlockKey, ...]
    parent: BlockKey | None
    token_ids: tuple[int, ...]
    extra_keys: tuple | None = None
    block_size: int | None = None
    medium: str | None = None
    group_idx: int | None = None
    kv_cache_spec_kind: str | None = None
    kv_cache_spec_sliding_window: int | None = None
    lookahead_token_ids: tuple[tuple[int, ...], ...] | None = None
    reused: bool = field(default=False, eq=False, repr=False)


@frozen
class BlockRemoved:
    """KV event: the block cached under ``key`` was evicted (its hash dropped), from the
    pool of ``medium``, in group ``group_idx`` (None where the release's events lack them)."""

    key: BlockKey
    medium: str | None = None
    group_idx: int | None = None


@frozen
class AllBlocksCleared:
    """KV event: the prefix cache was reset."""


Event = BlockStored | BlockRemoved | AllBlocksCleared


def in_release_shape(event: Event, fields: frozenset[str]) -> Event:
    """``event`` as a release whose events carry ``fields`` reports it: every optional field
    it lacks set to None."""
    if isinstance(event, BlockStored):
        return evolve(event, **{f: None for f in STORED_OPTIONAL if f not in fields})
    if isinstance(event, BlockRemoved):
        return evolve(event, **{f: None for f in REMOVED_OPTIONAL
                                if f"removed.{f}" not in fields})
    return event


@frozen
class Lookup:
    """One prefix-cache lookup of a hybrid model, as ``sim/vllm/hybrid_world.py`` records
    it (``properties/hybrid_hit_check.py`` judges it): the request's prefix keys as events
    carry them (the first unit's, the first two units', ...), the cap on the hit in tokens,
    the (group, key) pairs the pool cached just before, the hit vLLM returned in tokens and
    in blocks per group (None for the null block), and which blocks cached each (group,
    key) just before."""

    request_id: str
    prefixes: tuple
    cap_tokens: int
    cached: frozenset
    hit_tokens: int
    hit_blocks: tuple = ()
    caching: Any = None           # {(group, key): the block ids caching it}
