"""Reference model of vLLM's prefix-caching KV block cache: one full-attention group, one
sliding-window group, or a hybrid model's groups (full attention in group 0, then one or
more groups of one local spec, a sliding window or chunked local attention: vLLM's hybrid
coordinator).

Scope: what ``KVCacheManager`` (over its ``BlockPool``) promises a scheduler: which blocks a
request holds, the longest cached prefix a new request can reuse (and a probe of it that
changes nothing), how far a request's own blocks are cached, whether ``allocate_slots``
fits, the order free blocks are reused in, the hashes left cached, the KV events, and when
``reset_prefix_cache`` may succeed. Not in scope: KV tensors, Mamba groups, a chunked-local
group on its own (no model has one: vLLM's chunked-local models keep full-attention layers
too), partial-block hits (Mamba's align mode), groups of different block sizes other than
larger full-attention blocks beside windows or beside a replicated draft's full attention.

Groups of two block sizes (``full_block_size``: Gemma 4's full-attention blocks of twice its
window blocks): a block's hash names the prefix to its end whatever its size, hashes come
every ``block_size`` tokens, and a hit lands on a multiple of the larger size (vLLM's
scheduler block size, the sizes' LCM): the full-attention run is whole blocks of it, and
the windows' hit within it ends on such a multiple too. A group caches only the blocks
below the computed tokens rounded down to that multiple (one block past it in a group that
drops EAGLE's block, which its next hit reads and drops), and a window's retention keeps
tails ending on such multiples.

A decode-context-parallel target beside a draft model that keeps its whole cache on every
rank (``replicated_draft``) has two full-attention groups of two block sizes: the target's
blocks hold every rank's share (``full_block_size``), the draft's ``block_size`` tokens. The
rules above hold as they are: the draft's group, full attention, needs every block from the
first cached, and a hit is the longest run both groups serve, on a multiple of the target's
block.

A sliding-window group (``sliding_window``: the window in tokens) attends to the last
``sliding_window`` tokens only. So a hit needs only the blocks the window covers at its end
to be cached (the blocks before it are the null block in the hit), a running request gives
back, before each allocation, the blocks wholly behind the window (its table keeps the null
block in their place), and an admission that must fit whole is capped at what a request can
ever hold at once: the window and one step's tokens (``max_in_flight_tokens``, vLLM's
``max_concurrent_batches * max_num_batched_tokens``; unset: the length cap), plus one block.

A chunked-local group (``attention_chunk_size``: the chunk in tokens) splits the sequence
into chunks; a token attends only to the tokens of its own chunk before it. So a hit needs
only the blocks of the chunk its next token falls in to be cached (the blocks before that
chunk are the null block), a running request gives back the blocks of the chunks it has
left, and an admission that must fit whole is capped at a chunk and one step's tokens (no
extra block: a chunk starts at a block's start, the chunk being a multiple of the block size
as vLLM's chunked-local attention backend requires).

With several groups (``hybrid``) every request holds a table in each, drawn from one pool,
and each group caches its own blocks under its own hashes. vLLM's hybrid allocator gives
each group the same number of layers, so a model with more local layers than full ones
has several local groups of one spec (``local_groups``: Llama 4 Scout's three chunked-local
groups beside one full-attention group); a local block index counts as cached only where
every local group caches it. A hit is the longest prefix all can serve: the full-attention
run, then the local groups' hit within it, and the full-attention blocks cut to that;
where the local hit is shorter, the full-attention run's end is the shared-prefix boundary
vLLM reports (``Hit.shared_prefix_boundary``). A model may pair full attention with two
sliding windows of different sizes (``second_window``: one more group, after the first
window's): the hit is then the longest prefix within the run that both windows serve
(each needs the blocks its own window covers at the hit's end).
A step takes each group's blocks in group order (the hits first, then a connector's blocks,
then new blocks), caches the groups' blocks in group order, and a finished request releases
each group's blocks (last first) in group order. Tables, hits and new blocks are then one
tuple per group; with one group, the group's own.

The model keeps only facts: each request's block tables and tokens, the prefix cached on a
block (in which group, and when it was cached), the tokens written into each block, and for
each free block the moment (and end) at which it was released. Reference counts, the
free-block count, the free queue's order and the hash-to-block map are computed from those
facts on demand, never kept as a second free list.

A KV connector's tokens (``num_external_computed_tokens``, loaded on a request's first
step) are computed tokens past the hit held in new blocks. A synchronous load is cached with
the step. An asynchronous one (``delay_cache_blocks``) takes the blocks for the hit and the
load and nothing else, caches nothing, and leaves the request out of both queues until the
load finishes (``finish_load``): then its blocks are cached and it waits to be scheduled
again, holding them; its admission keeps ``reserved_blocks`` free for the prefills in
flight. World options (vLLM's ``CacheConfig`` and ``KVEventsConfig`` switches): ``enable_caching``
off: no lookup finds anything, nothing is cached, every released block is uncached;
``enable_kv_cache_events`` off: no event is queued. A request asking for its events in
full (``PrefixRequest.kv_cache_report_mode``) has a hit's reused blocks reported at its lookup,
where the release reads the mode (``reports_reused``). Admission (vLLM's ``SchedulerConfig``): a
waiting request (arrived, preempted, or back from an asynchronous load) is admitted only
if, past the ``watermark`` share of the pool kept free while another request runs, the free
blocks hold this step, and with ``reserve_full_isl`` the whole sequence (up to the length
cap).

Lookahead block hashes (``hash_lookahead``: vLLM's ``num_hash_lookahead_tokens``, 1 for an
EAGLE drafter by default from vLLM 0.33.0): a block's hash also covers the token after it, so
a block can be found, and is cached, only once that token exists (a decode that samples it
lets the next step cache the block); the hit then needs no EAGLE drop. A ``BlockStored``
lists each block's lookahead tokens.

Release differences are options (``sim/vllm/prefix_cache_compat.py`` reads them):
``uncached_first``: a block released without a cached prefix goes to the front of the free
queue (reused next, most recently released first; vLLM 0.24.0 on) instead of the back;
``event_fields``: the optional event fields the release's events carry (``EVENT_FIELDS``:
extra keys, block size, medium, group index and spec kind); the others are None.
"""

from __future__ import annotations

from typing import ClassVar

from attrs import define, field

from models.prefix_cache_values import (
    CHUNKED_LOCAL_ATTENTION,
    EVENT_FIELDS,
    FULL_ATTENTION,
    MEDIUM_GPU,
    NULL_BLOCK,
    SLIDING_WINDOW,
    AllBlocksCleared,
    BlockKey,
    BlockRemoved,
    BlockStored,
    Event,
    Hit,
    PrefixRequest,
    in_release_shape,
)

# Where a request stands with the scheduler: each request carries one of these, and the
# gates read the queues off them (``PrefixCacheModel.waiting``, ``.loading``).
WAITING, LOADING, RUNNING = "waiting", "loading", "running"


@define
class RequestState:
    request: PrefixRequest
    tokens: list[int]
    num_computed_tokens: int = 0
    phase: str = WAITING    # arrived, preempted or loaded: waiting; admitted: loading/running


@define
class PrefixCacheModel:
    """What a block pool of ``num_blocks`` blocks of ``block_size`` tokens must answer."""

    # The port's reads a release may lack: the model answers both.
    estimates_cached_tokens: ClassVar[bool] = True
    probes_cached_tokens: ClassVar[bool] = True

    num_blocks: int
    block_size: int
    max_model_len: int
    use_eagle: bool = False
    uncached_first: bool = True
    enable_caching: bool = True
    enable_kv_cache_events: bool = True
    event_fields: frozenset[str] = EVENT_FIELDS
    reserve_full_isl: bool = False
    watermark: float = 0.0
    sliding_window: int | None = None
    max_in_flight_tokens: int | None = None
    kv_connector: bool = False      # the world has one (its loads are allocate_slots' to take)
    hash_lookahead: int = 0         # tokens past a block its hash covers
    hybrid: bool = False            # a full-attention group (0) beside the local one (1)
    # vLLM's prefix_cache_retention_interval, for a hybrid pool's window: None caches every
    # block, 0 (vLLM's default) only the blocks a hit at a retained boundary reads, n > 0
    # those and one tail per n tokens.
    retention: int | None = None
    # A hybrid pool's local group attends within chunks of this many tokens instead of a
    # sliding window (vLLM's attention_chunk_size).
    attention_chunk_size: int | None = None
    local_groups: int = 1           # a hybrid pool's groups of the local spec
    second_window: int | None = None    # a hybrid pool's last group: another window
    # The groups holding the drafter's layers, as vLLM's engine marks them
    # (``KVCacheGroupSpec.is_eagle_group``): with EAGLE their specs drop a hit block.
    eagle_groups: tuple[int, ...] = (0,)
    # A hybrid window pool's full-attention block size, a multiple of ``block_size`` (the
    # windows' and the hashes'); None: ``block_size``.
    full_block_size: int | None = None
    # A hybrid pool of two full-attention groups: a decode-context-parallel target's blocks
    # of ``full_block_size`` tokens (group 0) beside a draft model's replicated cache, whose
    # blocks hold ``block_size`` (group 1).
    replicated_draft: bool = False
    # The release reads a request's kv_cache_report_mode (vLLM 0.26.0 on; before, a request
    # reporting in full is reported incrementally).
    reports_reused: bool = True
    requests: dict[str, RequestState] = field(factory=dict)
    tables: dict[str, list[list[int]]] = field(factory=dict)   # request -> its blocks, by group
    key_of: dict[int, BlockKey] = field(factory=dict)      # block -> prefix cached on it
    group_of: dict[int, int] = field(factory=dict)         # cached block -> its group
    cached_at: dict[int, int] = field(factory=dict)        # block -> when it was cached
    released: dict[int, int] = field(factory=dict)         # free block -> queue position
    written: dict[int, BlockKey] = field(factory=dict)     # block -> the prefix it holds
    # A cached block's further keys (with two block sizes, a prompt's last hash boundary
    # inside a full-attention block) -> when each was cached.
    also_of: dict[int, dict[BlockKey, int]] = field(factory=dict)
    # request -> per group, the blocks its caching has gone past (its hit, then each run it
    # cached or its window's retention passed over): a run is cached once
    cached_upto: dict[str, list[int]] = field(factory=dict)
    junction: dict[str, int] = field(factory=dict)   # its last hit's shared-prefix boundary
    events: list[Event] = field(factory=list)
    tick: int = 0
    front: int = 0                  # queue positions: released to the front go below this

    def __attrs_post_init__(self) -> None:
        if self.num_blocks < 2:
            raise ValueError(f"num_blocks must be at least 2 (one is the null block), got "
                             f"{self.num_blocks}")
        if self.replicated_draft and (not self.hybrid or self.full_block_size is None
                                      or self.sliding_window is not None
                                      or self.attention_chunk_size is not None
                                      or self.local_groups > 1):
            raise ValueError("a replicated draft's group comes alone beside full attention of "
                             "larger blocks: give hybrid and full_block_size, no local group")
        if self.hybrid and not self.replicated_draft and \
                (self.sliding_window is None) == (self.attention_chunk_size is None):
            raise ValueError("a hybrid pool pairs full attention with one local group: give "
                             "sliding_window or attention_chunk_size")
        if self.attention_chunk_size is not None and not self.hybrid:
            raise ValueError("a chunked-local group comes beside full attention: give hybrid")
        if self.second_window is not None and self.sliding_window is None:
            raise ValueError("a second window comes beside a first one: give sliding_window")
        if self.local_groups < 1 or (self.local_groups > 1 and not self.hybrid):
            raise ValueError("local_groups counts a hybrid pool's local groups: at least 1, "
                             "more only with hybrid")
        if self.full_block_size is not None and (
                (self.sliding_window is None and not self.replicated_draft) or not self.hybrid
                or self.full_block_size % self.block_size):
            raise ValueError("full_block_size is a hybrid window pool's full-attention block "
                             "size, a multiple of block_size")
        self.released = {b: b for b in range(1, self.num_blocks)}   # block id order
        self.tick = self.num_blocks

    # -- the groups ---------------------------------------------------------------------------

    @property
    def groups(self) -> tuple[tuple[str, int | None], ...]:
        """Each group's attention and its span in tokens, in group order: full attention
        (no span), a sliding window (its window) or chunked local attention (its chunk)."""
        if self.attention_chunk_size is not None:
            local = (CHUNKED_LOCAL_ATTENTION, self.attention_chunk_size)
        elif self.sliding_window is not None:
            local = (SLIDING_WINDOW, self.sliding_window)
        else:
            local = (FULL_ATTENTION, None)
        second = ((SLIDING_WINDOW, self.second_window),) if self.second_window else ()
        return ((FULL_ATTENTION, None),) + (local,) * self.local_groups + second \
            if self.hybrid else (local,)

    def size(self, group: int) -> int:
        """``group``'s block size in tokens."""
        return self.full_block_size if self.full_block_size and group == 0 \
            else self.block_size

    @property
    def alignment(self) -> int:
        """The tokens a hybrid pool's hit and cached prefix are multiples of (vLLM's
        scheduler block size): the largest block size, every other dividing it."""
        return self.full_block_size or self.block_size

    @property
    def local_specs(self) -> list[tuple[int, ...]]:
        """A hybrid pool's local groups, spec by spec (each spec's groups are looked up
        together)."""
        first = tuple(range(1, 1 + self.local_groups))
        return [first, (len(self.groups) - 1,)] if self.second_window else [first]

    def shaped(self, per_group):
        """A per-group answer as the port gives it: one tuple per group, or, with one group,
        that group's."""
        per_group = tuple(tuple(g) for g in per_group)
        return per_group if self.hybrid else per_group[0]

    def by_group(self, blocks) -> tuple[tuple[int, ...], ...]:
        """A shaped answer (a hit's blocks, say) back into one tuple per group."""
        return tuple(blocks) if self.hybrid else (tuple(blocks),)

    def map_key(self, group: int, key: BlockKey) -> BlockKey | tuple:
        """How the hash map names ``key`` cached in ``group``: the key itself with one
        group, ``(group, key)`` with several (each group caches its own blocks)."""
        return (group, key) if self.hybrid else key

    def contents_of(self, map_key) -> BlockKey:
        """The prefix a block cached under ``map_key`` holds: the key without its group and
        its lookahead."""
        key = map_key[1] if self.hybrid else map_key
        return key[:len(key) - self.hash_lookahead]

    # -- computed views (what the implementation counts) --------------------------------------

    def ref_cnt(self, block_id: int) -> int:
        if block_id == NULL_BLOCK:          # in tables for skipped blocks, never counted
            return 0
        return sum(block_id in table for tables in self.tables.values() for table in tables)

    @property
    def num_free_blocks(self) -> int:
        return len(self.released)

    def free_queue(self) -> tuple[int, ...]:
        """Free blocks in the order they are reused: the front is taken first."""
        return tuple(sorted(self.released, key=self.released.__getitem__))

    def cached_blocks(self) -> dict:
        """Each cached prefix (``map_key``) -> the blocks caching it (vLLM does not
        de-duplicate: two requests computing one prefix at once both cache it), the first
        cached first."""
        found: dict = {}
        for _, block, key in sorted(self._entries()):
            key = self.map_key(self.group_of[block], key)
            found[key] = found.get(key, ()) + (block,)
        return found

    def _entries(self) -> list[tuple[int, int, BlockKey]]:
        """Every cached (when, block, key): each block's key and its further ones."""
        return [(self.cached_at[b], b, k) for b, k in self.key_of.items()] + \
            [(at, b, k) for b, keys in self.also_of.items() for k, at in keys.items()]

    def carried(self) -> dict:
        """Each cached block -> the key it carries itself (``map_key``): the one it was
        first cached under, not a further one."""
        return {b: self.map_key(self.group_of[b], k) for b, k in self.key_of.items()}

    def cached(self) -> dict:
        """Each cached prefix -> the block a lookup finds: the first that cached it."""
        return {key: blocks[0] for key, blocks in self.cached_blocks().items()}

    def cached_in(self, group: int) -> dict[BlockKey, int]:
        """The prefixes cached in ``group`` -> the block a lookup there finds."""
        return {k: b for _, b, k in sorted(self._entries(), reverse=True)
                if self.group_of[b] == group}

    def holds(self, request_id: str) -> bool:
        return any(self.tables.get(request_id, ()))

    def get_block_ids(self, request_id: str):
        return self.shaped(self.tables.get(request_id, [[] for _ in self.groups]))

    def null_slots(self, request_id: str) -> int:
        """Slots of the request's tables that hold the null block (behind a window)."""
        return sum(t.count(NULL_BLOCK) for t in self.tables.get(request_id, ()))

    def estimate_cached_tokens(self, request_id: str) -> int:
        """How much of the request its own blocks have cached, as vLLM's scheduler reads it
        for a prefill's stats (``estimate_cached_tokens``): the longest prefix each group
        holds a block cached under (0 where it holds none), the shortest over the groups.
        A block's prefix is read off its key: the token ids in it, less its lookahead."""
        tables = self.tables.get(request_id) or [[]]
        longest = [max((self._tokens_in(self.key_of[b]) for b in table if b in self.key_of),
                       default=0) for table in tables]
        return min(longest)

    def num_tokens(self, request_id: str) -> int:
        return len(self.requests[request_id].tokens)

    def block_keys(self, request_id: str, size: int | None = None) -> list[BlockKey]:
        """The keys of the request's full blocks (of ``size`` tokens, default the block
        size) whose hashes exist, in order (vLLM's ``request.block_hashes``): each block's
        prefix, and its lookahead tokens after it (a block whose lookahead tokens are not
        there yet has none)."""
        state, ahead = self.requests[request_id], self.hash_lookahead
        size = size or self.block_size
        return [state.request.key(state.tokens[:end + ahead])
                for end in range(size, len(state.tokens) - ahead + 1, size)]

    # -- the API ------------------------------------------------------------------------------

    def add_request(self, request: PrefixRequest) -> None:
        if request.request_id in self.requests:
            raise ValueError(f"request {request.request_id!r} added twice")
        self.requests[request.request_id] = RequestState(request, list(request.prompt))

    def get_computed_blocks(self, request_id: str) -> Hit:
        """``hit``; with several groups the scheduler keeps its shared-prefix boundary on the
        request (a window's retention keeps the run below it). A request reporting in full
        (where the release reads the mode: ``reports_reused``) has a hit's blocks reported:
        per group, one ``BlockStored`` naming the cached blocks the hit holds (not the null
        block in a window's or a chunk's place: nothing is cached there), over the hit's
        tokens from the first, as a run of blocks is reported when it is cached; a group
        whose hit holds no cached block reports nothing."""
        hit = self.hit(request_id)
        if self.hybrid:
            self.junction[request_id] = hit.shared_prefix_boundary
        request = self.requests[request_id].request
        if self.reports_reused and hit.num_computed_tokens and \
                request.kv_cache_report_mode == "full":
            keys = {}
            for group, blocks in enumerate(self.by_group(hit.block_ids)):
                held = [i for i, b in enumerate(blocks) if b != NULL_BLOCK]
                if held:
                    size = self.size(group)
                    keys.setdefault(size, self.block_keys(request_id, size))
                    self._event(self._stored(request_id, group, keys[size], held, 0,
                                             len(blocks), reused=True))
        return hit

    def get_num_cached_tokens(self, request_id: str) -> int:
        """vLLM's probe of a waiting request (``get_num_cached_tokens``, 0.34.0 on; its
        scheduler orders waiting requests by it): the length of the hit
        ``get_computed_blocks`` would find now. It holds, caches and reports nothing."""
        return self.hit(request_id).num_computed_tokens

    def hit(self, request_id: str) -> Hit:
        """The longest prefix of the request's blocks whose blocks a lookup must find are all
        cached: every block from the first (full attention), or the ones the window covers
        at the prefix's end (sliding window), or those of the chunk its next token is in
        (chunked local); the blocks before them are the null block.
        Never the last token (it must be computed to sample from), and, for EAGLE, one block
        less (its drafter recomputes the last block's hidden states; a sliding window needs
        one block more cached for it). With both groups, the local group's hit within the
        full-attention run's, which is cut to it (the run's end, where longer, is the shared
        prefix's boundary); with EAGLE the specs of the groups holding the drafter's layers
        look one block past their bound and drop it (``drops``).
        Nothing with caching off, nor for a request that wants its prompt's logprobs."""
        state = self.requests[request_id]
        if not self.enable_caching or state.request.prompt_logprobs:
            return Hit(self.shaped(() for _ in self.groups))
        keys = self.block_keys(request_id)
        capped = (len(state.tokens) - 1) // self.block_size
        if not self.hybrid:
            blocks, = self._group_hit([(0,)], keys[:capped])
            return Hit(tuple(blocks), len(blocks) * self.block_size)
        # In a hybrid pool a spec that drops looks past the length cap, within the request's
        # hashes: the hit may end at the cap itself, where a single group's ends a block
        # short of it. The local groups search within full attention's run, ending on a
        # multiple of the alignment (with one block size, any block).
        full = self.size(0)
        run, = self._group_hit([(0,)], self.block_keys(request_id, full),
                               (len(state.tokens) - 1) // full)
        step = self.alignment // self.block_size
        local = self._group_hit(self.local_specs, keys, len(run) * full // self.block_size,
                                step)
        end = len(local[0]) * self.block_size
        boundary = len(run) * full if len(run) * full > end else 0
        return Hit((tuple(run[:end // full]), *map(tuple, local)), end, boundary)

    def _group_hit(self, specs: list[tuple[int, ...]], keys: list[BlockKey],
                   limit: int | None = None, step: int = 1) -> list[list[int]]:
        """The hit of the groups of ``specs`` among ``keys``, of at most ``limit`` blocks
        (default: all), one block list per group in group order: the longest prefix (of a
        multiple of ``step`` blocks) whose last blocks each spec reads (all, the window's,
        the chunk's) are cached in every group of that spec, the null block before them. A
        spec that drops EAGLE's block (``drops``) reads up to one block past the prefix,
        within ``keys``: its hit ended there before the drop."""
        cached = {group: self.cached_in(group) for spec in specs for group in spec}

        def served(spec, end):
            past = end + self.drops(spec[0])
            return end == 0 or past <= len(keys) and all(
                k in cached[g] for g in spec
                for k in keys[self._first_read(spec[0], past):past])
        end = max(e for e in range(0, len(keys) + 1 if limit is None else limit + 1, step)
                  if all(served(spec, e) for spec in specs))
        return [[NULL_BLOCK if i < self._first_read(group, end + self.drops(group))
                 else cached[group][keys[i]] for i in range(end)]
                for spec in specs for group in spec]

    def drops(self, group: int) -> bool:
        """Whether ``group``'s hit search drops a block for EAGLE: vLLM drops it in the
        groups holding the drafter's layers (``KVCacheGroupSpec.is_eagle_group``, from the
        drafter's layer specs: ``eagle_groups``) and in every group of their spec (its
        hybrid coordinator looks a spec's groups up together, the bit merged); the one
        group of a single-group pool."""
        return self.use_eagle and (not self.hybrid or any(
            g in self.eagle_groups for g in self.spec_of(group)))

    def spec_of(self, group: int) -> tuple[int, ...]:
        """The groups of ``group``'s spec (looked up together)."""
        return next((spec for spec in self.local_specs if group in spec), (group,))

    def _first_read(self, group: int, end: int) -> int:
        """The first block a hit of ``end`` blocks must find cached in ``group``: the first
        (full attention), the first of the window's (one more where it drops EAGLE's), or
        the first of the chunk the next token falls in."""
        kind, span = self.groups[group]
        if kind == SLIDING_WINDOW:
            return max(0, end - (-(-(span - 1) // self.block_size) + self.drops(group)))
        if kind == CHUNKED_LOCAL_ATTENTION:
            return self.skipped_blocks(group, end * self.block_size)
        return 0

    def skipped_blocks(self, group: int, num_computed_tokens: int) -> int:
        """Blocks of ``group`` the next token does not attend to: wholly behind its window,
        or in the chunks before its own (none for full attention)."""
        kind, span = self.groups[group]
        if kind == SLIDING_WINDOW:
            return max(0, num_computed_tokens - span + 1) // self.block_size
        if kind == CHUNKED_LOCAL_ATTENTION:
            return (num_computed_tokens - num_computed_tokens % span) // self.block_size
        return 0

    def admission_cap(self, group: int) -> int | None:
        """The most blocks a request holds at once in ``group``, a local group: the tokens
        one step adds to what the window or chunk still reads (a window's may start inside
        a block: one block more). None: no cap, full attention."""
        kind, span = self.groups[group]
        if kind == FULL_ATTENTION:
            return None
        in_flight = self.max_in_flight_tokens or self.max_model_len
        if kind == CHUNKED_LOCAL_ATTENTION:
            return -(-min(span + in_flight, self.max_model_len) // self.block_size)
        return -(-min(span - 1 + in_flight, self.max_model_len) // self.block_size) + 1

    def blocks_needed(self, request_id: str, num_new_tokens: int, hit: Hit,
                      num_lookahead_tokens: int, num_external_computed_tokens: int = 0) -> int:
        """Free blocks ``allocate_slots`` takes: in each group, new blocks for every slot past
        the held and hit blocks (the KV connector's tokens need blocks too), and each hit
        block that is free now (holding it takes it off the queue)."""
        state = self.requests[request_id]
        return self._blocks_for(request_id, state.num_computed_tokens + hit.num_computed_tokens
                                + num_external_computed_tokens + num_new_tokens
                                + num_lookahead_tokens, hit,
                                external=num_external_computed_tokens)

    @property
    def waiting(self) -> frozenset[str]:
        """The scheduler's waiting queue."""
        return frozenset(rid for rid, s in self.requests.items() if s.phase == WAITING)

    @property
    def loading(self) -> frozenset[str]:
        """The requests with an asynchronous connector load in flight."""
        return frozenset(rid for rid, s in self.requests.items() if s.phase == LOADING)

    def runs(self, request_id: str) -> bool:
        """Scheduled: holding blocks, neither waiting nor loading."""
        return self.holds(request_id) and self.requests[request_id].phase == RUNNING

    def blocks_to_finish(self, request_id: str) -> int:
        """Free blocks the request still needs to hold its whole sequence (up to the length
        cap, a window's group at most ``admission_cap``) beside those it holds."""
        whole = min(self.num_tokens(request_id), self.max_model_len)
        return self._blocks_for(request_id, whole, Hit(self.shaped(() for _ in self.groups)),
                                capped=True)

    def blocks_kept_free(self, request_id: str) -> int:
        """Blocks an admission of the request must leave free: the watermark's share of the
        pool while another request runs, else none."""
        others = any(self.runs(rid) for rid in self.tables if rid != request_id)
        return int(self.watermark * self.num_blocks) if others else 0

    def admission_refused(self, request_id: str, num_new_tokens: int, hit: Hit,
                          num_lookahead_tokens: int, whole_only: bool = False,
                          num_external_computed_tokens: int = 0,
                          reserved_blocks: int = 0) -> bool:
        """Whether ``allocate_slots`` refuses: the step does not fit beside the
        ``reserved_blocks`` kept for prefills in flight, or for a waiting request, the step
        or (with ``reserve_full_isl``) its whole sequence (a window's group capped at
        ``admission_cap``) does not fit beside the blocks the watermark keeps free (the
        whole sequence ignores the reservation). ``whole_only``: the whole-sequence gate
        alone (vLLM asks it before a running request gives back the blocks behind its
        window)."""
        free, kept = self.num_free_blocks, 0
        if self.requests[request_id].phase == WAITING:
            kept = self.blocks_kept_free(request_id)
            whole = min(self.num_tokens(request_id), self.max_model_len)
            if self.reserve_full_isl and self._blocks_for(
                    request_id, whole, hit, capped=True,
                    external=num_external_computed_tokens) + kept > free:
                return True
        if whole_only:
            return False
        return self.blocks_needed(request_id, num_new_tokens, hit, num_lookahead_tokens,
                                  num_external_computed_tokens) + kept > free - reserved_blocks

    def allocate_slots(self, request_id: str, num_new_tokens: int, hit: Hit | None = None,
                       num_lookahead_tokens: int = 0, num_external_computed_tokens: int = 0,
                       delay_cache_blocks: bool = False, reserved_blocks: int = 0):
        """Slots for the step; ``num_external_computed_tokens``: tokens past the hit whose KV
        a KV connector loads into new blocks this step (a request's first step only). The
        new blocks for the step's own tokens are returned (by group), not the connector's.
        ``delay_cache_blocks``: the load is asynchronous (no tokens of the step's own): the
        blocks are taken, nothing is cached until ``finish_load``."""
        hit = hit or Hit(self.shaped(() for _ in self.groups))
        external = num_external_computed_tokens
        state = self.requests[request_id]
        if self.admission_refused(request_id, num_new_tokens, hit, num_lookahead_tokens,
                                  whole_only=True, num_external_computed_tokens=external):
            return None
        reused = hit.num_computed_tokens + external
        # Given back even if the step is refused next (so it evicts fewer cached blocks).
        self._give_back_skipped(request_id, min(state.num_computed_tokens + reused,
                                                self.max_model_len))
        if self.admission_refused(request_id, num_new_tokens, hit, num_lookahead_tokens,
                                  num_external_computed_tokens=external,
                                  reserved_blocks=reserved_blocks):
            return None
        tables = self.tables.setdefault(request_id, [[] for _ in self.groups])
        upto = self.cached_upto.setdefault(request_id, [0] * len(self.groups))
        hits = self.by_group(hit.block_ids)
        # Every group's hit is held before any group takes a block (vLLM issue #33775): a hit
        # block behind the window (the connector's tokens move it) is the null block.
        for group, table in enumerate(tables):
            if hits[group] or external:
                behind = self.skipped_blocks(group, reused)
                for i, block in enumerate(hits[group]):
                    if i >= behind:
                        self.released.pop(block, None)
                    table.append(NULL_BLOCK if i < behind else block)
                table.extend([NULL_BLOCK] * (behind - len(table)))
                upto[group] = len(table)        # a hit is cached already
        done = state.num_computed_tokens + reused
        for group, table in enumerate(tables if external else ()):
            table.extend(self._take(max(-(-done // self.size(group)) - len(table), 0)))
        slots = min(state.num_computed_tokens + reused + num_new_tokens
                    + num_lookahead_tokens, self.max_model_len)
        new = []
        for group, table in enumerate(tables):
            new.append(self._take(max(-(-slots // self.size(group)) - len(table), 0)))
            table.extend(new[-1])
        state.num_computed_tokens += reused + num_new_tokens
        # A delayed step's blocks are written by the connector, cached when it is done.
        state.phase = LOADING if delay_cache_blocks else RUNNING
        if state.phase == RUNNING:
            self._write(request_id)
            self._cache_full_blocks(request_id)
        return self.shaped(new)

    def finish_load(self, request_id: str) -> None:
        """The asynchronous load finished: the loaded KV is in the blocks and they are
        cached; the request waits to be scheduled again (a load that reached its last token
        leaves that token to compute)."""
        state = self.requests[request_id]
        state.phase = WAITING
        self._write(request_id)
        self._cache_full_blocks(request_id)
        state.num_computed_tokens = min(state.num_computed_tokens, len(state.tokens) - 1)

    def append_token_ids(self, request_id: str, token_ids: tuple[int, ...]) -> None:
        self.requests[request_id].tokens.extend(token_ids)

    def connector_finished(self, request_id: str):
        """A finishing request's blocks as the scheduler hands them to its KV connector
        (before they are freed): first the blocks wholly behind the window of its computed
        tokens are given back (the null block in their slots), then the blocks holding its
        computed tokens are the answer (by group); blocks taken for lookahead slots past
        them are not."""
        state = self.requests[request_id]
        self._give_back_skipped(request_id, min(state.num_computed_tokens, self.max_model_len))
        return self.shaped(table[:-(-state.num_computed_tokens // self.size(group))]
                           for group, table in enumerate(
                               self.tables.get(request_id, [[] for _ in self.groups])))

    def free(self, request_id: str) -> None:
        """The request finished: its blocks are released and it is forgotten."""
        self._release(request_id)
        del self.requests[request_id]
        self.junction.pop(request_id, None)

    def preempt(self, request_id: str) -> None:
        """The scheduler's preemption: blocks released, nothing computed, waiting again."""
        self._release(request_id)
        state = self.requests[request_id]
        state.num_computed_tokens, state.phase = 0, WAITING

    def _release(self, request_id: str) -> None:
        """Release the request's blocks group by group, each table's last block first (a
        chain's tail is evicted before its head)."""
        for table in self.tables.pop(request_id, []):
            self._free(table[::-1])
        self.cached_upto.pop(request_id, None)

    def _give_back_skipped(self, request_id: str, num_computed_tokens: int) -> None:
        """A running request gives back, group by group, its blocks behind the window (the
        last first); its table keeps the null block in their place."""
        for group, table in enumerate(self.tables.get(request_id, [])):
            behind = range(min(self.skipped_blocks(group, num_computed_tokens), len(table)))
            given = [table[i] for i in reversed(behind) if table[i] != NULL_BLOCK]
            for i in behind:
                table[i] = NULL_BLOCK
            self._free(given)

    def _free(self, blocks: list[int]) -> None:
        """Blocks no longer held by one request, in the order given: each one no request
        holds now goes to the free queue's back (cached) or, with ``uncached_first``, its
        front (the first given frontmost)."""
        front, back = [], []
        for block in blocks:
            if block != NULL_BLOCK and self.ref_cnt(block) == 0:
                (front if self.uncached_first and block not in self.key_of else back).append(
                    block)
        for block in reversed(front):       # the first released ends up frontmost
            self.front -= 1
            self.released[block] = self.front
        for block in back:
            self.tick += 1
            self.released[block] = self.tick

    def reset_prefix_cache(self) -> bool:
        if any(b != NULL_BLOCK for tables in self.tables.values() for table in tables
               for b in table):
            return False
        self.key_of.clear()
        self.also_of.clear()
        self.group_of.clear()
        self.cached_at.clear()
        self._event(AllBlocksCleared())
        return True

    def take_events(self) -> tuple[Event, ...]:
        taken, self.events = tuple(self.events), []
        return taken

    # -- helpers ------------------------------------------------------------------------------

    def _blocks_for(self, request_id: str, slots: int, hit: Hit, capped: bool = False,
                    external: int = 0) -> int:
        """Free blocks holding ``slots`` slots (up to the length cap) takes, summed over the
        groups, with ``hit`` and ``external`` connector tokens after it: in each group the
        blocks past those held, hit, or (an admission) behind the window, and each hit block
        inside the window that is free now. ``capped``: a window's group at most its
        ``admission_cap``."""
        tables = self.tables.get(request_id, [[] for _ in self.groups])
        hits, total = self.by_group(hit.block_ids), 0
        for group, held in enumerate(tables):
            required = -(-min(slots, self.max_model_len) // self.size(group))
            if capped and self.admission_cap(group) is not None:
                required = min(required, self.admission_cap(group))
            if held:
                total += max(required - len(held), 0)
                continue
            behind = self.skipped_blocks(group, hit.num_computed_tokens + external)
            revived = sum(b != NULL_BLOCK and self.ref_cnt(b) == 0
                          for b in hits[group][behind:])
            total += max(required - max(behind, len(hits[group])), 0) + revived
        return total

    def _take(self, count: int) -> list[int]:
        """The front ``count`` free blocks, each losing the prefix cached on it."""
        taken = list(self.free_queue()[:count])
        for block in taken:
            del self.released[block]
            self._uncache(block)
        return taken

    def _uncache(self, block: int) -> None:
        """The block loses every key it is cached under (its own first), each reported."""
        key = self.key_of.pop(block, None)
        group = self.group_of.pop(block, 0)
        self.cached_at.pop(block, None)
        for lost in ([key] if key is not None else []) + list(self.also_of.pop(block, ())):
            self._event(BlockRemoved(lost, MEDIUM_GPU, group))

    def _write(self, request_id: str) -> None:
        """The computed tokens are in the request's blocks (the forward pass writes them)."""
        state = self.requests[request_id]
        for group, table in enumerate(self.tables[request_id]):
            size = self.size(group)
            for i, block in enumerate(table):
                end = min((i + 1) * size, state.num_computed_tokens)
                if end > i * size and block != NULL_BLOCK:
                    self.written[block] = state.request.key(state.tokens[:end])

    def _cache_full_blocks(self, request_id: str) -> None:
        """Cache, group by group, each full, computed block of the table past the blocks
        its caching has gone past (one ``BlockStored`` per group for the run, over its
        tokens; a block behind the window is the null block and caches nothing); a hit block
        is cached already. Nothing with caching off. With two block sizes a group caches only
        the blocks below the computed tokens rounded down to the alignment (a hit lands on no
        other end), and one block more where it drops EAGLE's (a hit there reads it); a
        block that held the prompt's last hash boundary is cached afresh when it is full
        (its keys dropped first), and full attention keys that boundary again where it falls
        inside one of its blocks (``_cache_prompt_end``)."""
        if not self.enable_caching:
            return
        state = self.requests[request_id]
        aligned = state.num_computed_tokens // self.alignment * self.alignment
        upto = self.cached_upto.setdefault(request_id, [0] * len(self.groups))
        for group, table in enumerate(self.tables[request_id]):
            size = self.size(group)
            cacheable = min(state.num_computed_tokens, aligned + size) \
                if aligned and self.drops(group) else aligned
            full = min(cacheable, len(state.tokens) - self.hash_lookahead) // size
            keys = self.block_keys(request_id, size)
            first = upto[group]
            if first < full:
                self._cache_run(request_id, group, keys, first, full)
                upto[group] = full
            if size > self.block_size:
                self._cache_prompt_end(request_id, table, cacheable)

    def _cache_run(self, request_id: str, group: int, keys: list[BlockKey], first: int,
                   full: int) -> None:
        """Cache blocks ``first``..``full`` of the request's table in ``group`` (those its
        retention keeps), reporting the run."""
        table = self.tables[request_id][group]
        retained = self._retained(request_id, group)
        stored = [i for i in range(first, full) if table[i] != NULL_BLOCK and retained(i)]
        for i in stored:
            self._uncache(table[i])     # the prompt's end keyed it before it was full
            self._key(table[i], keys[i], group)
        # A run the retention passed over whole is still reported: no blocks, its tokens.
        self._event(self._stored(request_id, group, keys, stored, first, full))

    def _stored(self, request_id: str, group: int, keys: list[BlockKey], stored: list[int],
                first: int, full: int, reused: bool = False) -> BlockStored:
        """The ``BlockStored`` of the request's blocks ``stored`` (table indices in
        ``group``, each under its key), in the run of blocks ``first``..``full``: the run's
        tokens after its parent's, each block's extra keys and lookahead tokens."""
        state, size = self.requests[request_id], self.size(group)
        salt, (kind, span) = state.request.cache_salt, self.groups[group]
        extra = tuple((salt,) if i == 0 and salt else None for i in stored) or None
        window = span if kind == SLIDING_WINDOW else None
        ahead = tuple(tuple(state.tokens[(i + 1) * size:(i + 1) * size
                                         + self.hash_lookahead])
                      for i in stored) if self.hash_lookahead else None
        return BlockStored(tuple(keys[i] for i in stored), keys[first - 1] if first else None,
                           tuple(state.tokens[first * size:full * size]), extra, size,
                           MEDIUM_GPU, group, kind, window, ahead, reused)

    def _cache_prompt_end(self, request_id: str, table: list[int], cacheable: int) -> None:
        """Full attention with blocks larger than the hash's: the prompt's last hash
        boundary (one token short of the prompt, rounded down to the hash's tokens; with
        EAGLE's drop the whole prompt) where it is computed and falls inside a block, keys
        that block under the prefix to it, as a lookup between block ends would ask
        (reported as a block of the hash's tokens). A block with no key takes it as its own;
        one keyed for fewer tokens is dropped and keyed afresh."""
        state, unit, size = self.requests[request_id], self.block_size, self.size(0)
        limit = len(state.request.prompt) - (not self.drops(0))
        units = self.block_keys(request_id)
        boundary = min(limit // unit, len(units)) * unit
        if not 0 < boundary <= cacheable or not boundary % size or \
                boundary // size >= len(table):
            return
        block, key = table[boundary // size], units[boundary // unit - 1]
        if key in self._keys(block):
            return
        if block in self.key_of and self._tokens_in(self.key_of[block]) < boundary:
            self._uncache(block)        # the key it carries covers fewer tokens
        self._key(block, key, 0)
        salt, start = state.request.cache_salt, boundary - unit
        ahead = (tuple(state.tokens[boundary:boundary + self.hash_lookahead]),) \
            if self.hash_lookahead else None
        self._event(BlockStored((key,), units[boundary // unit - 2] if start else None,
                                tuple(state.tokens[start:boundary]),
                                ((salt,) if salt and not start else None,), unit, MEDIUM_GPU,
                                0, FULL_ATTENTION, None, ahead))

    def _keys(self, block: int) -> list[BlockKey]:
        """Every key ``block`` is cached under, the one it carries first."""
        own = [self.key_of[block]] if block in self.key_of else []
        return own + list(self.also_of.get(block, ()))

    def _key(self, block: int, key: BlockKey, group: int) -> None:
        """Cache ``block`` (of ``group``) under ``key`` now: the key it carries if it has
        none, else a further one."""
        self.tick += 1
        if block in self.key_of:
            self.also_of.setdefault(block, {})[key] = self.tick
        else:
            self.key_of[block], self.cached_at[block], self.group_of[block] = \
                key, self.tick, group

    def _tokens_in(self, key: BlockKey) -> int:
        """The tokens of the prefix ``key`` names (its lookahead left out)."""
        return sum(isinstance(part, int) for part in key) - self.hash_lookahead

    def _retained(self, request_id: str, group: int):
        """Which of the request's full blocks ``group`` caches: all but in a hybrid pool's
        window under a retention, where only the blocks a hit at a retained boundary reads
        are kept: the window's run below the prompt's replay boundaries (its resend, capped
        at the last token, and with EAGLE its extension) and the request's shared-prefix
        junction, and with an interval, one such run at the end of each interval. A window
        that drops EAGLE's block keeps the block past each run too, and the run ending a
        block before the junction (a sibling diverging right after it has no block past it
        to read). Every boundary is rounded down to the alignment, where a hit can end; with
        two block sizes and no retention (dense), the runs ending at each multiple of it."""
        kind, window = self.groups[group]
        if not self.hybrid or kind != SLIDING_WINDOW:
            return lambda i: True
        size, past, align = self.block_size, self.drops(group), self.alignment
        need = -(-(window - 1) // size) + past
        per_segment = (align if self.retention is None else self.retention) // size
        if per_segment and need >= per_segment:
            return lambda i: True

        def periodic(i: int) -> bool:
            return per_segment > 0 and i >= past and \
                (i - past) % per_segment >= per_segment - need
        if self.retention is None:
            return periodic
        prompt = len(self.requests[request_id].request.prompt)
        if self.use_eagle:
            ends = {max((prompt - 1) // align * align - align, 0),
                    max(prompt // align * align - align, 0)}
        else:
            ends = {prompt - 1}
        if self.junction.get(request_id):
            ends |= {self.junction[request_id], self.junction[request_id] - size * past}
        tails = [b // align * align // size + past for b in ends]
        return lambda i: any(end - need <= i < end for end in tails) or periodic(i)

    def _event(self, event: Event) -> None:
        if self.enable_kv_cache_events:
            self.events.append(in_release_shape(event, self.event_fields))
