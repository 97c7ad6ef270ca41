"""Native prefix-caching KV block cache: a block pool the way an engine keeps one.

Written from what vLLM's ``KVCacheManager`` promises (``models/prefix_cache.py`` states it),
not from its code: reference counts in an array, the free queue an ``OrderedDict`` moved
from both ends, a hash map from prefix to the blocks caching it, and per request a block
table with a count of its blocks already cached, all updated in place; so the model, which
recomputes everything from facts, is a second opinion. The KV contents are a torch tensor
(one token id per slot), written as tokens are computed, so a hash cached on a block whose
contents changed is seen as wrong data. A sliding-window pool scans for a hit from the right
(the first run of cached blocks as long as the window wins) and drops a running request's
blocks behind the window into the null block's slot before it counts what a step needs.
A chunked-local group (beside full attention) scans forward like full attention, but from
the first block of the chunk the lookup's end falls in, and drops the chunks a request has
left as the window drops what falls behind it.
With lookahead block hashes a block's key runs on past its last token, so a block whose
next token does not exist yet has no key: it is neither found nor cached.
With full-attention blocks larger than the windows' (``full_block_size``), each group keys
its blocks at its own size, a hit is searched again below itself until it ends on a
multiple of the larger size, and a group caches its blocks only up to such a multiple.
A replicated draft beside a context-parallel target (``replicated_draft``) is served the
same way, its group a full-attention one of the smaller blocks.
Catalogued bugs (``fixtures/known_bugs.py``) can be
switched back on:

- ``pc-evict-keeps-hash``: a cached block reused for new tokens keeps its map entry.
- ``pc-hit-last-token``: a hit may cover the whole prompt (no token left to sample from).
- ``pc-free-head-first``: a finished request's blocks are released head first.
- ``pc-touch-keeps-queued``: a hit on a free block does not take it off the free queue.
- ``pc-revived-uncounted``: the fit check does not count hit blocks taken off the queue.
- ``pc-removed-not-reported``: an eviction emits no ``BlockRemoved`` event.
- ``pc-reset-counts-null``: the reset takes the null block for a held one: never succeeds.
- ``pc-eagle-keeps-last``: an EAGLE hit keeps its last block.
- ``pc-window-keeps-skipped``: a sliding-window request keeps the blocks behind its window.
- ``pc-hybrid-run-uncut``: a hybrid pool's hit keeps full attention's whole run where the
  window's hit is shorter.
- ``pc-watermark-on-running``: a running request's next step must leave the watermark free
  too.
- ``pc-chunk-boundary-keeps-chunk``: a chunked-local request whose computed tokens end just
  at a chunk's end keeps that chunk's blocks (it counts the chunks before its last computed
  token, not before its next one).
- ``pc-eagle-mark-unmerged``: with EAGLE, a hybrid pool drops a block only in the groups
  holding the drafter's layers, not in the other groups of their spec.
- ``pc-window-aligns-before-drop``: with full-attention blocks larger than the windows', a
  window holding the drafter's layer whose cached run from the first block is shorter than
  its reach rounds that run down to the alignment before it drops EAGLE's block (so it
  drops a block the hit needed, and rounds down again).
- ``pc-caches-past-alignment``: with full-attention blocks larger than the windows', a group
  caches every full computed block, past the last multiple of the alignment.
- ``pc-prompt-end-unkeyed``: full attention with blocks larger than the hash's does not key
  the block holding the prompt's last hash boundary at that boundary.
- ``pc-full-report-placeholders``: a request reporting in full has its hit reported with a
  block for every slot of a group's hit, the null block in a window's or a chunk's place
  included (the hashes of blocks the hit does not hold).
- ``pc-full-report-rank-block``: with decode context parallelism a full report names the
  target's reused blocks in one rank's share of a block: the prefixes of that many tokens.
- ``pc-dcp-hash-per-rank``: with decode context parallelism, each block is keyed by the
  prefix of as many tokens as one rank holds per block (block ``i`` by the first ``(i + 1) *
  block_size`` tokens), not by the whole block's.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import NamedTuple

import torch

from models.prefix_cache_values import (
    CHUNKED_LOCAL_ATTENTION,
    EVENT_FIELDS,
    FULL_ATTENTION,
    MEDIUM_GPU,
    NULL_BLOCK,
    SLIDING_WINDOW,
    AllBlocksCleared,
    BlockRemoved,
    BlockStored,
    Hit,
    PrefixRequest,
)

EMPTY_SLOT = -1


class Attention(NamedTuple):
    """One group's attention as the pool serves it."""

    kind: str                       # FULL_ATTENTION, SLIDING_WINDOW, CHUNKED_LOCAL_ATTENTION
    span: int | None = None         # the window or the chunk, in tokens
    hit_blocks: int | None = None   # a window's hit: the cached run it ends in (EAGLE: +1)
    most_held: int | None = None    # the blocks a request holds at once (a local group)
    block_size: int = 1             # the group's tokens per block


class NativePrefixCache:
    event_fields = EVENT_FIELDS     # its events carry every optional field
    estimates_cached_tokens = probes_cached_tokens = True
    reports_reused = True           # it reads a request's kv_cache_report_mode

    def __init__(self, num_blocks: int, block_size: int, max_model_len: int,
                 use_eagle: bool = False, uncached_first: bool = True,
                 enable_caching: bool = True, enable_kv_cache_events: bool = True,
                 reserve_full_isl: bool = False, watermark: float = 0.0,
                 sliding_window: int | None = None, max_in_flight_tokens: int | None = None,
                 kv_connector: bool = False, hash_lookahead: int = 0, hybrid: bool = False,
                 retention: int | None = None, attention_chunk_size: int | None = None,
                 local_groups: int = 1, second_window: int | None = None,
                 eagle_groups: tuple[int, ...] = (0,), full_block_size: int | None = None,
                 dcp_world_size: int = 1, replicated_draft: bool = False,
                 bugs: frozenset[str] = frozenset()):
        # With decode context parallelism each rank keeps ``block_size`` tokens of a block:
        # the pool here is the scheduler's, whose block is all ranks' share of it. A draft
        # model's replicated cache beside it keeps blocks of ``block_size`` tokens: a second
        # full-attention group, the hashes per its block, the target's the larger blocks.
        if replicated_draft:
            hybrid, full_block_size = True, block_size * dcp_world_size
        self.num_blocks, self.block_size, self.max_model_len = num_blocks, \
            block_size * (1 if replicated_draft else dcp_world_size), max_model_len
        self.dcp_world_size, self.replicated_draft = dcp_world_size, replicated_draft
        self.use_eagle, self.uncached_first, self.bugs = use_eagle, uncached_first, bugs
        self.enable_caching, self.enable_kv_cache_events = enable_caching, enable_kv_cache_events
        self.reserve_full_isl, self.watermark = reserve_full_isl, watermark
        self.headroom = int(watermark * num_blocks)    # kept free by admissions while others run
        self.sliding_window, self.max_in_flight_tokens = sliding_window, max_in_flight_tokens
        self.kv_connector, self.hash_lookahead = kv_connector, hash_lookahead
        self.hybrid, self.retention = hybrid, retention
        self.attention_chunk_size, self.local_groups = attention_chunk_size, local_groups
        self.second_window, self.full_block_size = second_window, full_block_size
        # Where hits end and caching stops: every group's block size divides it.
        self.alignment = full_block_size or self.block_size
        self.junction: dict[str, int] = {}    # each request's last hit's shared-prefix end
        # The local groups by spec, looked up together: after full attention's group in a
        # hybrid pool, the local spec's, then a second window's.
        self.specs = [tuple(range(1, 1 + local_groups))] + \
            ([(local_groups + 1,)] if second_window else [])
        # With EAGLE the groups whose hit search drops a block: the one group, or in a hybrid
        # pool every group of a spec one of whose groups holds the drafter's layers.
        self.dropping = set() if not use_eagle else {0} if not hybrid else {
            g for spec in [(0,), *self.specs] if set(spec) & set(eagle_groups) for g in spec
            if g in eagle_groups or "pc-eagle-mark-unmerged" not in bugs}
        # Per group: full attention first in a hybrid pool, then its local groups (one spec).
        local = [self._chunked(attention_chunk_size) if attention_chunk_size else
                 self._window(sliding_window, g in self.dropping)
                 for g in (range(1, 1 + local_groups) if hybrid else [0])]
        self.groups = [Attention(FULL_ATTENTION, block_size=self.alignment)] + local \
            if hybrid else local
        if second_window:       # another window's group, last
            self.groups.append(self._window(second_window, local_groups + 1 in self.dropping))
        self.refs = [0] * num_blocks
        self.queue: OrderedDict[int, None] = OrderedDict.fromkeys(range(1, num_blocks))
        self.hash_of: list[tuple | None] = [None] * num_blocks     # as cached_blocks names it
        self.hash_tokens = [0] * num_blocks     # the tokens a block's hash covers (0: none)
        self.by_hash: dict[tuple, list[int]] = {}
        self.extra_names: dict[int, list[tuple]] = {}    # a block's names besides its own
        self.kv = torch.full((num_blocks, self.alignment), EMPTY_SLOT, dtype=torch.long)
        self.tokens: dict[str, list[int]] = {}
        self.sent: dict[str, PrefixRequest] = {}       # its salt and whether it reads
        self.computed: dict[str, int] = {}
        self.table: dict[str, list[list[int]]] = {}    # request -> its blocks, by group
        self.num_cached: dict[str, list[int]] = {}
        self.pending: list = []
        # The scheduler's queues as the gates see them: admissions are of waiting requests;
        # a request loading asynchronously neither waits nor runs.
        self.waiting: set[str] = set()
        self.loading: set[str] = set()

    def _window(self, window: int | None, drops: bool) -> Attention:
        if window is None:
            return Attention(FULL_ATTENTION, block_size=self.block_size)
        # A window that drops EAGLE's block finds one block more before dropping it.
        hit_blocks = -(-(window - 1) // self.block_size) + drops
        most_held = -(-min(window - 1 + (self.max_in_flight_tokens or self.max_model_len),
                           self.max_model_len) // self.block_size) + 1
        return Attention(SLIDING_WINDOW, window, hit_blocks, most_held, self.block_size)

    def _chunked(self, chunk: int) -> Attention:
        # A chunk starts at a block boundary: what it reads and one step's tokens, no more.
        most_held = -(-min(chunk + (self.max_in_flight_tokens or self.max_model_len),
                           self.max_model_len) // self.block_size)
        return Attention(CHUNKED_LOCAL_ATTENTION, chunk, None, most_held, self.block_size)

    # -- the port -----------------------------------------------------------------------------

    @property
    def num_free_blocks(self) -> int:
        return len(self.queue)

    def add_request(self, request: PrefixRequest) -> None:
        self.tokens[request.request_id] = list(request.prompt)
        self.computed[request.request_id] = 0
        self.sent[request.request_id] = request
        self.waiting.add(request.request_id)

    def get_computed_blocks(self, request_id: str) -> Hit:
        hit = self._find_hit(request_id)
        if self.hybrid:
            self.junction[request_id] = hit.shared_prefix_boundary
        if hit.num_computed_tokens and self.sent[request_id].kv_cache_report_mode == "full":
            self._announce_hit(request_id, self._by_group(hit.block_ids))
        return hit

    def _announce_hit(self, request_id: str, columns: tuple) -> None:
        """A request reporting in full tells a consumer the blocks its hit reuses: each
        group's column of cached blocks, reported as the run from the prompt's first block
        to the hit's end (the null block in a window's or a chunk's place is no block)."""
        tokens, salt = self.tokens[request_id], self.sent[request_id].cache_salt
        for g, column in enumerate(columns):
            kind, span, _, _, size = self.groups[g]
            if "pc-full-report-rank-block" in self.bugs and g == 0:
                size //= self.dcp_world_size       # the spec's per-rank block
            slots = [i for i, block in enumerate(column) if block != NULL_BLOCK or
                     "pc-full-report-placeholders" in self.bugs]
            if not slots:
                continue
            self._emit(BlockStored(
                tuple(self._key(request_id, (i + 1) * size) for i in slots), None,
                tuple(tokens[:len(column) * size]),
                tuple((salt,) if salt and i == 0 else None for i in slots),
                block_size=size, medium=MEDIUM_GPU, group_idx=g, kv_cache_spec_kind=kind,
                kv_cache_spec_sliding_window=span if kind == SLIDING_WINDOW else None,
                lookahead_token_ids=tuple(
                    tuple(tokens[(i + 1) * size:(i + 1) * size + self.hash_lookahead])
                    for i in slots) if self.hash_lookahead else None, reused=True))

    def get_num_cached_tokens(self, request_id: str) -> int:
        """The probe (vLLM 0.34.0's ``get_num_cached_tokens``): the hit's length, nothing
        taken or recorded."""
        return self._find_hit(request_id).num_computed_tokens

    def _find_hit(self, request_id: str) -> Hit:
        tokens, size = self.tokens[request_id], self.block_size
        if not self.enable_caching or self.sent[request_id].prompt_logprobs:
            return Hit(self._shape([[] for _ in self.groups]))
        limit = len(tokens) if "pc-hit-last-token" in self.bugs else len(tokens) - 1
        if not self.hybrid:
            found = [b for b, in self._hit_in((0,), request_id, limit // size)]
            if self.dropping:
                found = self._dropped(found)
            return Hit(tuple(found), len(found) * size)
        # Full attention's run, then the local groups' hit within it, the run cut to that;
        # with EAGLE each spec holding the drafter's layers searches one block past its
        # bound (within the hashes) and drops it.
        hashed = (len(tokens) - self.hash_lookahead) // size
        full_size, full_drops = self.groups[0].block_size, 0 in self.dropping
        found = [b for b, in self._hit_in((0,), request_id,
                                          min(limit // full_size + full_drops,
                                              (len(tokens) - self.hash_lookahead) // full_size))]
        if full_drops:
            found = self._dropped(found)
        # Each spec in turn cuts the candidate length (in window blocks) to its own hit
        # within it, until a whole round leaves it (a window's hit at a shorter length may
        # need other blocks).
        length = len(found) * full_size // size
        while True:
            hits = []
            for spec in self.specs:
                hits.append(self._aligned_hit(spec, request_id, length, hashed))
                length = len(hits[-1])
            if len(self.specs) == 1 or all(len(hit) == length for hit in hits):
                break
        boundary = len(found) * full_size if len(found) * full_size > length * size else 0
        if "pc-hybrid-run-uncut" not in self.bugs:
            found = found[:length * size // full_size]
        columns = []
        for spec, local in zip(self.specs, hits, strict=True):
            # One column per group of the spec (every index holds one block of each).
            columns += zip(*local, strict=True) if local else [() for _ in spec]
        return Hit((tuple(found), *map(tuple, columns)), length * size, boundary)

    def _aligned_hit(self, spec: tuple[int, ...], request_id: str, length: int,
                     hashed: int) -> list[tuple[int, ...]]:
        """The local ``spec``'s hit of at most ``length`` blocks that ends on a multiple of
        the alignment: its hit, searched again below itself while it ends elsewhere (a
        spec that drops EAGLE's block searches one block further and drops it)."""
        step = self.alignment // self.block_size
        drops = spec[0] in self.dropping
        while True:
            hit = self._hit_in(spec, request_id, min(length + drops, hashed))
            if drops and "pc-window-aligns-before-drop" in self.bugs and \
                    len(hit) < self.groups[spec[0]].hit_blocks:
                hit = hit[:len(hit) // step * step]
            if drops:
                hit = hit[:-1]
            if len(hit) % step == 0:
                return hit
            length = len(hit) // step * step

    def _dropped(self, found: list[int]) -> list[int]:
        if found and "pc-eagle-keeps-last" not in self.bugs:
            found.pop()
        return found

    def _hit_in(self, groups: tuple[int, ...], request_id: str,
                num_blocks: int) -> list[tuple[int, ...]]:
        """The cached run of ``groups`` (of one spec) among the first ``num_blocks`` blocks,
        each block index as the blocks of the groups (cached only where all cache it): from
        the first block (full attention), or from the right the first run as long as the
        window reads, the null block before it, failing that the (shorter) run from the
        first block."""
        kind, span, hit_blocks, _, size = self.groups[groups[0]]
        null = (NULL_BLOCK,) * len(groups)
        if kind != SLIDING_WINDOW:
            # Forward from the first block read: the first (full attention), or the first of
            # the chunk holding the lookup's end (the null block in the slots before it).
            start = 0 if kind == FULL_ATTENTION else num_blocks * size // span * span // size
            found = [null] * start
            for n in range(start, num_blocks):
                blocks = self._lookup(groups, request_id, (n + 1) * size)
                if blocks is None:
                    break
                found.append(blocks)
            return found
        run: list[tuple[int, ...]] = []
        for n in range(num_blocks - 1, -1, -1):
            blocks = self._lookup(groups, request_id, (n + 1) * size)
            run = [blocks, *run] if blocks is not None else []
            if len(run) == hit_blocks:
                return [null] * n + run
        return run          # the scan ended at the first block: the run from it

    def _lookup(self, groups: tuple[int, ...], request_id: str,
                end: int) -> tuple[int, ...] | None:
        """The block each of ``groups`` finds the request's first ``end`` tokens cached in,
        or None where one of them has none."""
        found = []
        for group in groups:
            blocks = self.by_hash.get(self._named(group, request_id, end))
            if not blocks:
                return None
            found.append(blocks[0])
        return tuple(found)

    def _behind_window(self, group: int, num_computed: int, giving_back: bool = False) -> int:
        """Blocks no next token of ``group`` reads: behind the window, or in the chunks
        before the next token's (``giving_back``: counted to give a running request's
        back)."""
        kind, span, _, _, _ = self.groups[group]
        if kind == SLIDING_WINDOW:
            return max(0, num_computed - span + 1) // self.block_size
        if kind == CHUNKED_LOCAL_ATTENTION:
            if giving_back and "pc-chunk-boundary-keeps-chunk" in self.bugs:
                num_computed = max(num_computed - 1, 0)
            return num_computed // span * span // self.block_size
        return 0

    def allocate_slots(self, request_id: str, num_new_tokens: int, hit: Hit | None = None,
                       num_lookahead_tokens: int = 0, num_external_computed_tokens: int = 0,
                       delay_cache_blocks: bool = False, reserved_blocks: int = 0):
        hit = hit or Hit(self._shape([[] for _ in self.groups]))
        external, hits = num_external_computed_tokens, self._by_group(hit.block_ids)
        tables = self.table.get(request_id) or [[] for _ in self.groups]
        holding = any(tables)
        done = min(self.computed[request_id] + hit.num_computed_tokens + external,
                   self.max_model_len)
        end = min(done + num_new_tokens + num_lookahead_tokens, self.max_model_len)
        skipped = [0 if holding else self._behind_window(g, hit.num_computed_tokens + external)
                   for g in range(len(self.groups))]
        revived = sum(b != NULL_BLOCK and self.refs[b] == 0
                      for g, found in enumerate(hits) for b in found[skipped[g]:]) \
            if "pc-revived-uncounted" not in self.bugs else 0
        held = [len(t) if holding else max(skipped[g], len(hits[g]))
                for g, t in enumerate(tables)]
        room = len(self.queue)
        others_run = any(rid not in self.waiting and rid not in self.loading
                         for rid, blocks in self.table.items()
                         if any(blocks) and rid != request_id)
        if others_run and "pc-watermark-on-running" in self.bugs \
                and request_id not in self.waiting:
            room -= self.headroom
        if request_id in self.waiting:     # gated as the scheduler's waiting queue gates it
            if others_run:
                room -= self.headroom
            if self.reserve_full_isl:       # the whole sequence must fit too
                whole = min(len(self.tokens[request_id]), self.max_model_len)
                if sum(max(min(-(-whole // size), most or whole) - held[g], 0)
                       for g, (_, _, _, most, size) in enumerate(self.groups)) + revived \
                        > room:
                    return None
        if holding and "pc-window-keeps-skipped" not in self.bugs:
            room += self._drop_behind_window(request_id, done)
        if sum(max(-(-end // attention.block_size) - h, 0)
               for h, attention in zip(held, self.groups, strict=True)) + revived > \
                room - reserved_blocks:
            return None
        tables = self.table.setdefault(request_id, tables)
        cached = self.num_cached.setdefault(request_id, [0] * len(self.groups))
        # Every group holds its hit before any takes a block; behind the window, the null.
        for g, table in enumerate(tables):
            if table:
                continue
            kept = hits[g][skipped[g]:]
            for block in kept:
                if self.refs[block] == 0 and "pc-touch-keeps-queued" not in self.bugs:
                    del self.queue[block]
                self.refs[block] += 1
            table.extend([NULL_BLOCK] * skipped[g])
            table.extend(kept)
            cached[g] = len(table)
        if external:        # the connector's tokens land in blocks of their own first
            for table, attention in zip(tables, self.groups, strict=True):
                table.extend(self._pop_free() for _ in range(-(-done // attention.block_size)
                                                              - len(table)))
        new = []
        for table, attention in zip(tables, self.groups, strict=True):
            new.append([self._pop_free() for _ in
                        range(max(-(-end // attention.block_size) - len(table), 0))])
            table.extend(new[-1])
        self.computed[request_id] += hit.num_computed_tokens + external + num_new_tokens
        self.waiting.discard(request_id)
        if delay_cache_blocks:          # the connector writes them; cached when it is done
            self.loading.add(request_id)
            return self._shape(new)
        self._write(request_id)
        self._commit(request_id)
        return self._shape(new)

    def finish_load(self, request_id: str) -> None:
        self.loading.remove(request_id)
        self.waiting.add(request_id)
        self._write(request_id)
        self._commit(request_id)
        self.computed[request_id] = min(self.computed[request_id],
                                        len(self.tokens[request_id]) - 1)

    def append_token_ids(self, request_id: str, token_ids: tuple[int, ...]) -> None:
        self.tokens[request_id].extend(token_ids)

    def connector_finished(self, request_id: str):
        """The blocks a KV connector is handed at finish: the window's dropped first."""
        done = self.computed[request_id]
        if request_id in self.table and "pc-window-keeps-skipped" not in self.bugs:
            self._drop_behind_window(request_id, done)
        return self._shape(t[:-(-done // attention.block_size)] for t, attention in
                           zip(self.table.get(request_id, [[] for _ in self.groups]),
                               self.groups, strict=True))

    def free(self, request_id: str) -> None:
        self._release(request_id)
        del self.tokens[request_id], self.computed[request_id], self.sent[request_id]
        self.waiting.discard(request_id)
        self.junction.pop(request_id, None)

    def preempt(self, request_id: str) -> None:
        self._release(request_id)
        self.computed[request_id] = 0
        self.waiting.add(request_id)

    def _release(self, request_id: str) -> None:
        self.num_cached.pop(request_id, None)
        for table in self.table.pop(request_id, []):
            self._give_back(table if "pc-free-head-first" in self.bugs else table[::-1])

    def _drop_behind_window(self, request_id: str, done: int) -> int:
        """Give back, group by group, the request's blocks behind the window, the last
        first, leaving the null block in their slots; returns how many became free."""
        before = len(self.queue)
        for g, table in enumerate(self.table[request_id]):
            dropped = []
            for i in range(min(self._behind_window(g, done, giving_back=True), len(table)) - 1,
                           -1, -1):
                if table[i] == NULL_BLOCK:
                    break
                dropped.append(table[i])
                table[i] = NULL_BLOCK
            self._give_back(dropped)
        return len(self.queue) - before

    def _give_back(self, order: list[int]) -> None:
        to_front = []
        for block in order:
            if block == NULL_BLOCK:
                continue
            self.refs[block] -= 1
            if self.refs[block] > 0:
                continue
            if self.uncached_first and self.hash_of[block] is None:
                to_front.append(block)
            else:
                self.queue[block] = None                 # the back: reused last
        for block in reversed(to_front):
            self.queue[block] = None
            self.queue.move_to_end(block, last=False)    # the front: reused next

    def reset_prefix_cache(self) -> bool:
        in_use = self.num_blocks - len(self.queue)
        if in_use != (0 if "pc-reset-counts-null" in self.bugs else 1):
            return False
        self.by_hash.clear()
        self.extra_names.clear()
        self.hash_of = [None] * self.num_blocks
        self.hash_tokens = [0] * self.num_blocks
        self._emit(AllBlocksCleared())
        return True

    def take_events(self) -> tuple:
        taken, self.pending = tuple(self.pending), []
        return taken

    # -- reads for the checks -----------------------------------------------------------------

    def get_block_ids(self, request_id: str):
        return self._shape(self.table.get(request_id, [[] for _ in self.groups]))

    def ref_cnt(self, block_id: int) -> int:
        return self.refs[block_id]

    def estimate_cached_tokens(self, request_id: str) -> int:
        """The tokens the request's cached blocks cover, in the group that covers fewest."""
        return min(max((self.hash_tokens[b] for b in table), default=0)
                   for table in self.table.get(request_id) or [[]])

    def free_queue(self) -> tuple[int, ...]:
        return tuple(self.queue)

    def cached(self) -> dict[tuple, int]:
        return {key: blocks[0] for key, blocks in self.by_hash.items()}

    def cached_blocks(self) -> dict[tuple, tuple[int, ...]]:
        return {key: tuple(blocks) for key, blocks in self.by_hash.items()}

    def block_hashes(self) -> dict[int, tuple]:
        return {b: key for b, key in enumerate(self.hash_of) if key is not None}

    def block_contents(self, block_id: int) -> tuple[int, ...]:
        """The token ids in the block's slots (written ones only)."""
        return tuple(t for t in self.kv[block_id].tolist() if t != EMPTY_SLOT)

    def check_valid(self) -> None:
        tables = [t for per_group in self.table.values() for t in per_group]
        held = {b for t in tables for b in t}
        assert set(self.queue) == {b for b in range(1, self.num_blocks) if self.refs[b] == 0}, \
            "free queue == unreferenced blocks"
        assert all(self.refs[b] == sum(b in t for t in tables)
                   for b in range(1, self.num_blocks)), "ref counts == holders"
        assert not held & set(self.queue), "no held block is free"
        for key, blocks in self.by_hash.items():
            assert all(self.hash_of[b] == key or key in self.extra_names.get(b, ())
                       for b in blocks), "map and block hashes agree"

    # -- helpers ------------------------------------------------------------------------------

    def _shape(self, per_group):
        """One tuple per group, or, with one group, its own (the port's shape)."""
        per_group = tuple(tuple(blocks) for blocks in per_group)
        return per_group if self.hybrid else per_group[0]

    def _by_group(self, shaped) -> tuple:
        return tuple(shaped) if self.hybrid else (tuple(shaped),)

    def _pop_free(self) -> int:
        if not self.queue:
            raise RuntimeError("no free block left to allocate: the fit check let through "
                               "more than the pool holds")
        block, _ = self.queue.popitem(last=False)
        if "pc-evict-keeps-hash" not in self.bugs:
            self._forget(block)
        self.refs[block] += 1
        self.kv[block].fill_(EMPTY_SLOT)
        return block

    def _forget(self, block: int) -> None:
        """Drop every name the block is cached under, its own first, each reported."""
        named = self.hash_of[block]
        if named is None:
            return
        self.hash_of[block] = None
        self.hash_tokens[block] = 0
        for name in [named, *self.extra_names.pop(block, [])]:
            self.by_hash[name].remove(block)
            if not self.by_hash[name]:
                del self.by_hash[name]
            group, key = name if self.hybrid else (0, name)
            if "pc-removed-not-reported" not in self.bugs:
                self._emit(BlockRemoved(key, medium=MEDIUM_GPU, group_idx=group))

    def _write(self, request_id: str) -> None:
        tokens, done = self.tokens[request_id], self.computed[request_id]
        for table, attention in zip(self.table[request_id], self.groups, strict=True):
            size = attention.block_size
            for i, block in enumerate(table):
                row = tokens[i * size:min((i + 1) * size, done)]
                if row and block != NULL_BLOCK:
                    self.kv[block, :len(row)] = torch.tensor(row, dtype=torch.long)

    def _commit(self, request_id: str) -> None:
        if not self.enable_caching:
            return
        tokens, done = self.tokens[request_id], self.computed[request_id]
        # A hit ends on a multiple of the alignment, so nothing past the last one is cached
        # (a group that drops EAGLE's block keeps the one block past it that a hit reads).
        floor = done if "pc-caches-past-alignment" in self.bugs else \
            done - done % self.alignment
        upto = [min(done, floor + attention.block_size) if floor and g in self.dropping
                else floor for g, attention in enumerate(self.groups)]
        for g, attention in enumerate(self.groups):
            size = attention.block_size
            full = min(upto[g], len(tokens) - self.hash_lookahead) // size
            start = self.num_cached[request_id][g]
            if full > start:
                self._commit_run(request_id, g, start, full)
            if g == 0 and self.hybrid and size > self.block_size and \
                    "pc-prompt-end-unkeyed" not in self.bugs:
                self._name_prompt_end(request_id, upto[0])

    def _commit_run(self, request_id: str, g: int, start: int, full: int) -> None:
        """Name group ``g``'s blocks ``start``..``full`` of the request (those kept) and
        report the run."""
        tokens, table = self.tokens[request_id], self.table[request_id][g]
        salt, size = self.sent[request_id].cache_salt, self.groups[g].block_size
        keys, extra, ahead = [], [], []
        kept = self._kept(request_id, g)
        for i in range(start, full):
            if table[i] == NULL_BLOCK or i not in kept:
                continue
            key = self._key(request_id, (i + 1) * size)
            self._forget(table[i])      # named at the prompt's end while it filled
            self.hash_of[table[i]] = self._name(g, key)
            self.hash_tokens[table[i]] = (i + 1) * size
            self.by_hash.setdefault(self._name(g, key), []).append(table[i])
            keys.append(key)
            extra.append((salt,) if salt and i == 0 else None)
            ahead.append(tuple(tokens[(i + 1) * size:(i + 1) * size + self.hash_lookahead]))
        self.num_cached[request_id][g] = full
        parent = self._key(request_id, start * size) if start else None
        kind, span, _, _, _ = self.groups[g]
        window = span if kind == SLIDING_WINDOW else None
        self._emit(BlockStored(tuple(keys), parent, tuple(tokens[start * size:full * size]),
                               tuple(extra) or None, block_size=size, medium=MEDIUM_GPU,
                               group_idx=g, kv_cache_spec_kind=kind,
                               kv_cache_spec_sliding_window=window,
                               lookahead_token_ids=tuple(ahead) if self.hash_lookahead
                               else None))

    def _name_prompt_end(self, request_id: str, upto: int) -> None:
        """Full-attention blocks larger than the hash's: the block holding the prompt's
        last hash boundary (the whole prompt with EAGLE's drop, else one token short of it,
        down to a multiple of the hash's tokens) is named at that boundary too, once the
        tokens up to it are cacheable and unless a block end is there."""
        unit, size = self.block_size, self.groups[0].block_size
        tokens, table = self.tokens[request_id], self.table[request_id][0]
        prompt = len(self.sent[request_id].prompt)
        reach = prompt if 0 in self.dropping else prompt - 1
        end = min(reach, len(tokens) - self.hash_lookahead) // unit * unit
        if end == 0 or end > upto or end % size == 0 or end // size >= len(table):
            return
        block, name = table[end // size], self._named(0, request_id, end)
        if self.hash_of[block] == name or name in self.extra_names.get(block, ()):
            return
        if self.hash_of[block] is not None and self.hash_tokens[block] < end:
            self._forget(block)
        if self.hash_of[block] is None:
            self.hash_of[block], self.hash_tokens[block] = name, end
        else:
            self.extra_names.setdefault(block, []).append(name)
        self.by_hash.setdefault(name, []).append(block)
        salt = self.sent[request_id].cache_salt
        self._emit(BlockStored((self._key(request_id, end),),
                               self._key(request_id, end - unit) if end > unit else None,
                               tuple(tokens[end - unit:end]),
                               ((salt,) if salt and end == unit else None,), block_size=unit,
                               medium=MEDIUM_GPU, group_idx=0,
                               kv_cache_spec_kind=FULL_ATTENTION,
                               kv_cache_spec_sliding_window=None,
                               lookahead_token_ids=(tuple(tokens[end:end + self.hash_lookahead]),)
                               if self.hash_lookahead else None))

    def _kept(self, request_id: str, g: int):
        """The block indices group ``g`` caches: every one, but in a hybrid pool's window
        under a retention, the runs ending at the retained boundaries (the prompt's replay
        points, the request's junction) and, with an interval, one run per interval; a
        window that drops EAGLE's block, the block past each too, and the run a block
        before the junction."""
        kind, window, need, _, size = self.groups[g]
        top = len(self.tokens[request_id]) // size + 1
        if not self.hybrid or kind != SLIDING_WINDOW:
            return range(top)
        past, align = int(g in self.dropping), self.alignment
        # Unset (dense), a run before every multiple of the alignment: with one block size,
        # every block.
        per_segment = (align if self.retention is None else self.retention) // size
        if per_segment and need >= per_segment:
            return range(top)
        kept = {i for i in range(past, top) if (i - past) % per_segment >= per_segment - need} \
            if per_segment else set()
        if self.retention is None:
            return kept
        prompt = len(self.sent[request_id].prompt)
        points = [prompt - 1] if not self.use_eagle else \
            [max((prompt - 1) // align * align - align, 0),
             max(prompt // align * align - align, 0)]
        if self.junction.get(request_id):
            # A window that drops EAGLE's block also keeps the run a block before it.
            points += [self.junction[request_id]] + [self.junction[request_id] - size] * past
        for p in points:
            end = p // align * align // size + past
            kept.update(range(end - need, end))
        return kept

    def _key(self, request_id: str, end: int) -> tuple:
        """The hash of the request's first ``end`` tokens and the lookahead tokens after them
        (the salt first, where it has one)."""
        if "pc-dcp-hash-per-rank" in self.bugs:     # one rank's block's worth per block
            end //= self.dcp_world_size
        return self.sent[request_id].key(self.tokens[request_id][:end + self.hash_lookahead])

    def _name(self, group: int, key: tuple) -> tuple:
        """How the hash map names ``key`` in ``group``: with several groups, with the group."""
        return (group, key) if self.hybrid else key

    def _named(self, group: int, request_id: str, end: int) -> tuple:
        return self._name(group, self._key(request_id, end))

    def _emit(self, event) -> None:
        if self.enable_kv_cache_events:
            self.pending.append(event)


class NativeFreeQueue:
    """The free-block queue on its own (``prefix_cache.free_queue``'s native target): an
    ``OrderedDict`` of block ids moved from both ends, as ``NativePrefixCache`` keeps its own."""

    def __init__(self, num_blocks: int, bugs: frozenset[str] = frozenset()):
        self.queue: OrderedDict[int, None] = OrderedDict.fromkeys(range(num_blocks))

    @property
    def num_free_blocks(self) -> int:
        return len(self.queue)

    def popleft(self) -> int | None:
        return self.queue.popitem(last=False)[0] if self.queue else None

    def popleft_n(self, n: int) -> tuple[int, ...]:
        return tuple(self.queue.popitem(last=False)[0] for _ in range(n))

    def remove(self, block: int) -> None:
        del self.queue[block]

    def append(self, block: int) -> None:
        self.queue[block] = None

    def append_n(self, blocks: tuple[int, ...]) -> None:
        self.queue.update(dict.fromkeys(blocks))

    def prepend_n(self, blocks: tuple[int, ...]) -> None:
        for block in reversed(blocks):
            self.queue[block] = None
            self.queue.move_to_end(block, last=False)

    def get_all_free_blocks(self) -> tuple[int, ...]:
        return tuple(self.queue)

    def iter_blocks_after(self, cursor: int | None) -> tuple[int, ...]:
        order = tuple(self.queue)
        return order if cursor is None else order[order.index(cursor) + 1:]
