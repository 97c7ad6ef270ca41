"""Hypothesis strategies that build small, pressured prefix-cache worlds.

Pressure over validity: pools of a few blocks next to prompts of several, prompts built from
two or three shared stems (whole blocks of the same tokens) with short tails over a small
alphabet (so tails share blocks too), some prompts repeated exactly (the whole prompt cached:
the last-token cap), a length cap close to the longest prompt (lookahead slots run into it),
EAGLE in a third of the worlds, and local groups (a sliding window, or beside full attention
a window or chunked local attention) in a third. A world where nothing is shared or nothing
is evicted checks nothing.
"""

from __future__ import annotations

from attrs import frozen
from hypothesis import strategies as st

from models.prefix_cache_values import PrefixRequest

BLOCK_SIZES = (1, 2, 4)
ALPHABET = 3            # tail tokens 1..3: tails collide, and so do their blocks
WATERMARKS = (0.0, 0.25, 0.5)   # SchedulerConfig.watermark: [0.0, 1.0), 0.0 (off) first
# Windows shorter than the prompts, so blocks fall behind them; one step's tokens small
# enough that the admission cap binds on a long prompt (None: left out, first).
SLIDING_WINDOWS = (2, 3, 5)
IN_FLIGHT_TOKENS = (None, 1, 2, 4)


@frozen
class PrefixCacheWorld:
    """One run's configuration: the pool, the block size, the length cap, EAGLE, where an
    uncached released block goes (native worlds draw it; vLLM's release decides), and the
    requests that arrive, in order."""

    num_blocks: int
    block_size: int
    max_model_len: int
    use_eagle: bool
    uncached_first: bool
    requests: tuple[PrefixRequest, ...]
    # Drawn last (the draws before keep their meaning, and each shrinks to the default).
    enable_caching: bool = True
    enable_kv_cache_events: bool = True
    # The scheduler's admission gates.
    reserve_full_isl: bool = False
    watermark: float = 0.0
    # One sliding-window group instead of full attention, and the scheduler's in-flight tokens.
    sliding_window: int | None = None
    max_in_flight_tokens: int | None = None
    # A KV connector that loads tokens past a request's hit on its first step.
    kv_connector: bool = False
    # Lookahead block hashes (vLLM's num_hash_lookahead_tokens) in place of the EAGLE drop.
    hash_lookahead: int = 0
    # A full-attention group beside the sliding window's (a hybrid model: two groups), and
    # its window's retention interval (None: dense).
    hybrid: bool = False
    retention: int | None = None
    # A hybrid model's local group attending within chunks of this many tokens in place of
    # the sliding window (Llama 4's chunked local attention).
    attention_chunk_size: int | None = None
    # A hybrid model's groups of the local spec (Llama 4 Scout: three chunked-local groups).
    local_groups: int = 1
    # A hybrid window model's second window (a last group of another window size).
    second_window: int | None = None
    # With EAGLE in a hybrid pool, the groups holding the drafter's layers (vLLM's
    # is_eagle_group): full attention's, a window's, or both.
    eagle_groups: tuple[int, ...] = (0,)
    # A hybrid window model's full-attention blocks of more tokens than its windows' (Gemma
    # 4's twice), None: one block size.
    full_block_size: int | None = None
    # Full attention alone decoded with context parallelism (vLLM's
    # decode_context_parallel_size): each rank holds ``block_size`` tokens of every block, so
    # the scheduler's block, its hashes and its hits are of ``block_size * dcp_world_size``.
    dcp_world_size: int = 1
    # Beside that target, a draft model that keeps its whole cache on every rank: a second
    # full-attention group of blocks of ``block_size`` tokens.
    replicated_draft: bool = False

    def config(self) -> dict:
        return dict(num_blocks=self.num_blocks, block_size=self.block_size,
                    max_model_len=self.max_model_len, use_eagle=self.use_eagle,
                    uncached_first=self.uncached_first, enable_caching=self.enable_caching,
                    enable_kv_cache_events=self.enable_kv_cache_events,
                    reserve_full_isl=self.reserve_full_isl, watermark=self.watermark,
                    sliding_window=self.sliding_window,
                    max_in_flight_tokens=self.max_in_flight_tokens,
                    kv_connector=self.kv_connector, hash_lookahead=self.hash_lookahead,
                    hybrid=self.hybrid, retention=self.retention,
                    attention_chunk_size=self.attention_chunk_size,
                    local_groups=self.local_groups, second_window=self.second_window,
                    eagle_groups=self.eagle_groups, full_block_size=self.full_block_size,
                    dcp_world_size=self.dcp_world_size,
                    replicated_draft=self.replicated_draft)


@st.composite
def prefix_cache_worlds(draw, max_requests: int = 5, hybrid_only: bool = False,
                        eagle_only: bool = False, scaled_only: bool = False,
                        dcp_only: bool = False):
    """Request i is ``r<i>``; stems are runs of 10, 20, ... so a key shows its stem.
    ``hybrid_only``: every world a hybrid model's (full attention beside local groups);
    ``eagle_only``: every world with EAGLE's block drop (with ``hybrid_only``: a window
    model's, the drafter's layers in any of the groups that can hold them);
    ``scaled_only`` (with ``hybrid_only`` and ``eagle_only``): every world of two block
    sizes (Gemma 4's layout, with its MTP drafter); ``dcp_only``: every world full
    attention decoded over two or four ranks (half beside a replicated draft), prompts
    measured in the ranks' whole blocks."""
    block_size = draw(st.sampled_from(BLOCK_SIZES))
    # Gemma 4's layout on its own machine: its full-attention blocks (of two or three window
    # blocks) drawn first, and prompts measured in them, so hits of whole full-attention
    # blocks, with EAGLE's block past them, are common (measured in window blocks, one
    # example in a thousand had a hit; now about two in a hundred: results/hazards/
    # prefix-cache-hybrid-scaled-eagle-*).
    ratio = draw(st.sampled_from((2, 3))) if scaled_only else 1
    # Likewise decode context parallelism on its own machine: the ranks drawn first, and
    # prompts measured in whole blocks (in the ranks' blocks few prompts fill one: a hit of
    # such blocks in 0.4 examples in a hundred of the main machine's, 8.5 here:
    # results/hazards/prefix-cache-dcp-main-hazards-seeds-0-3.json and the DCP machine's).
    # Half of them (where no EAGLE drafter is drawn below) put a draft model beside the
    # target, its cache replicated on every rank, drawn with the ranks in one draw. The main
    # machine draws none: one more draw there would shift every later example of its
    # derandomized runs, the catalogue's among them.
    ranks, replicated = draw(st.sampled_from(((2, False), (4, False), (2, True), (4, True)))) \
        if dcp_only else (1, False)
    unit = block_size * ratio * ranks
    stems = [tuple(range(10 * (s + 1), 10 * (s + 1) + unit * draw(st.integers(1, 2))))
             for s in range(draw(st.integers(1, 2)))]
    requests: list[PrefixRequest] = []
    for i in range(draw(st.integers(2, max_requests))):
        if requests and draw(st.integers(0, 4)) == 0:          # the same prompt again
            prompt = draw(st.sampled_from(requests)).prompt
        else:
            stem = draw(st.sampled_from(stems))[:unit * draw(st.integers(0, 2))]
            tail = draw(st.lists(st.integers(1, ALPHABET), min_size=0 if stem else 1,
                                 max_size=2 * unit))
            prompt = stem + tuple(tail)
        requests.append(PrefixRequest(f"r{i}", prompt))
    longest = max(len(r.prompt) for r in requests)
    blocks_longest = -(-longest // block_size)
    # Usable blocks (the null block aside) from one short of the longest prompt's to about
    # two prompts' worth: requests wait, evict and are refused.
    num_blocks = 1 + draw(st.integers(max(1, blocks_longest - 1), 2 * blocks_longest + 1))
    max_model_len = longest + draw(st.integers(0, 2 * block_size))
    use_eagle = eagle_only or draw(st.integers(0, 2)) == 0
    uncached_first = draw(st.booleans())
    # vLLM's default scheduler admits a request only if it fits whole; a watermark of a
    # quarter or half the pool (int(fraction * num_blocks) blocks) holds admissions back.
    reserve_full_isl = draw(st.booleans())
    watermark = draw(st.sampled_from(WATERMARKS))
    # One world in eight without prefix caching, one in eight without KV events; about one
    # request in four salted (two tenants) or asking for its prompt's logprobs, one in seven
    # asking for its KV events in full (its hits reported).
    enable_caching = draw(st.integers(0, 7)) != 7
    enable_kv_cache_events = draw(st.integers(0, 7)) != 7
    requests = [_with_kind(r, draw(st.integers(0, 13))) for r in requests]
    # A third of the worlds have one sliding-window group; the scheduler then steps at most
    # ``max_in_flight_tokens`` tokens of a request at once, where it is set.
    sliding_window = max_in_flight_tokens = None
    if not dcp_only and (hybrid_only or draw(st.integers(0, 2)) == 2):
        sliding_window = draw(st.sampled_from(SLIDING_WINDOWS))
        max_in_flight_tokens = draw(st.sampled_from(IN_FLIGHT_TOKENS))
    kv_connector = draw(st.integers(0, 3)) == 3       # a quarter of the worlds
    # Half the EAGLE worlds hash each block with the token after it, as vLLM 0.33.0's config
    # does for EAGLE by default (prefix caching on, no KV connector): no block is dropped.
    hash_lookahead = 0
    if use_eagle and enable_caching and not kv_connector and not eagle_only \
            and draw(st.booleans()):
        use_eagle, hash_lookahead = False, 1
    # Half the sliding-window worlds are a hybrid model's: full attention beside the window,
    # each request holding blocks in both groups of one pool (which then needs more blocks).
    hybrid = sliding_window is not None and (hybrid_only or draw(st.booleans()))
    if hybrid:
        num_blocks += draw(st.integers(0, blocks_longest))
        # Half of them load through a KV connector: a load leaves the window's group without
        # the blocks behind it, so its hits lag full attention's (the hazard the hybrid
        # coordinator's cut exists for). vLLM keeps the legacy hashes with a connector.
        if not kv_connector and not hash_lookahead:
            kv_connector = draw(st.booleans())
    # vLLM 0.33.0's default retention (0: the window keeps only the runs below the replay
    # boundaries and junctions) in most hybrid worlds, dense or one run per two or four
    # blocks in the others (any multiple of the block size is accepted; an interval no longer
    # than the run a window's hit reads keeps every block).
    retention = draw(st.sampled_from((0, 0, None, 2 * block_size, 4 * block_size))) \
        if hybrid else None
    # A third of the worlds without EAGLE (vLLM serves a chunked-local model with EAGLE by
    # full attention alone) are a chunked-local model's, full attention beside chunks of one
    # to three blocks (two tokens at least), so prompts cross chunks: a hybrid world with the
    # chunk in the window's place, or a full-attention world given the chunked group (and
    # the blocks it needs). The retention is a window's setting: a chunked-local group
    # caches every block, and vLLM refuses an interval where no group is a window's (0 and
    # None, its default and unset, stay).
    attention_chunk_size = None
    if not dcp_only and not use_eagle and not hash_lookahead and \
            (hybrid or sliding_window is None) and draw(st.integers(0, 2)) == 0:
        attention_chunk_size = max(2, block_size * draw(st.integers(1, 3)))
        if not hybrid:
            hybrid = True
            num_blocks += draw(st.integers(0, blocks_longest))
            max_in_flight_tokens = draw(st.sampled_from(IN_FLIGHT_TOKENS))
            retention = draw(st.sampled_from((0, None)))
        sliding_window, retention = None, retention and 0
    # A third of the hybrid worlds have two or three local groups (a model with more local
    # layers than full ones: vLLM's hybrid allocator groups layers in equal numbers), each
    # taking its blocks from the same pool, which gets a prompt's worth more per group.
    local_groups = 1
    if hybrid and draw(st.integers(0, 2)) == 0:
        local_groups = draw(st.integers(2, 3))
        num_blocks += (local_groups - 1) * draw(st.integers(0, blocks_longest))
    # A third of the hybrid window worlds have a second window of another size in one more
    # group (a model whose local layers use two windows): the hit is then searched over
    # three specs, each window needing its own blocks at the hit's end.
    second_window = None
    if hybrid and sliding_window is not None and draw(st.integers(0, 2)) == 0:
        second_window = draw(st.sampled_from([w for w in SLIDING_WINDOWS
                                              if w != sliding_window]))
        num_blocks += draw(st.integers(0, blocks_longest))
    # With EAGLE in a hybrid window world the drafter's layer is full attention (it joins
    # group 0), in half of them (in most ``eagle_only`` ones) a layer of a window's size
    # (vLLM 0.33.0's engine marks the groups holding the drafter's layers, and its hybrid
    # coordinator merges the mark over a spec's groups: the drafter's window layer joins
    # the local spec's last group, or the second window's), or a drafter of both.
    eagle_groups = (0,)
    if use_eagle and hybrid and (eagle_only or draw(st.booleans())):
        eagle_groups = draw(st.sampled_from([(0,)] * eagle_only + [
            (local_groups,), (0, local_groups)] + ([(local_groups + 1,)] if second_window
                                                   else [])))
    # A third of the hybrid window worlds are Gemma 4's layout: full-attention blocks of two
    # (or three) window blocks, so hits land on their multiples and a window's hit and
    # retention are aligned to them; a retention interval is then a multiple of them. Its
    # window reaches past two or three full-attention blocks (Gemma 4's 1024 tokens span 32
    # of them), so a window's hit reads blocks no aligned hit ends on, and short prompts
    # fall within its reach.
    full_block_size = None
    if hybrid and sliding_window is not None and (scaled_only or draw(st.integers(0, 2)) == 0):
        full_block_size = unit if scaled_only else block_size * draw(st.sampled_from((2, 3)))
        sliding_window = full_block_size * draw(st.integers(2, 3)) + 1
        if retention and retention % full_block_size:
            retention = 2 * full_block_size
        if second_window == sliding_window:
            second_window += 1
    # A third of the worlds of full attention alone decode with context parallelism over
    # two (or four) ranks, as vLLM builds DeepSeek's MLA models (or GQA with more TP ranks
    # than KV heads; with a KV connector, P/D, MLA only): a block is ``dcp_world_size`` ranks'
    # blocks, so the pool, drawn in the ranks' blocks, needs that many times fewer. vLLM
    # refuses DCP beside a window's or a chunked-local group.
    dcp_world_size = ranks
    if not dcp_only and not hybrid and sliding_window is None and \
            draw(st.integers(0, 2)) == 0:
        dcp_world_size = draw(st.sampled_from((2, 2, 4)))
    # A replicated draft (the DCP machine's) comes without EAGLE: vLLM replicates a draft
    # model's cache, not an EAGLE drafter's. Its group keeps blocks of ``block_size`` tokens,
    # as many as the pool drawn in them.
    replicated_draft = replicated and not use_eagle and not hash_lookahead
    if dcp_world_size > 1:
        draft_blocks = num_blocks - 1 if replicated_draft else 0
        num_blocks = 1 + max(1, -(-(num_blocks - 1) // dcp_world_size)) + draft_blocks
    return PrefixCacheWorld(num_blocks, block_size, max_model_len, use_eagle, uncached_first,
                            tuple(requests), enable_caching, enable_kv_cache_events,
                            reserve_full_isl, watermark, sliding_window, max_in_flight_tokens,
                            kv_connector, hash_lookahead, hybrid, retention,
                            attention_chunk_size, local_groups, second_window, eagle_groups,
                            full_block_size, dcp_world_size, replicated_draft)


def _with_kind(request: PrefixRequest, kind: int) -> PrefixRequest:
    """0-8: as drawn; 9, 10: salted for tenant a or b; 11: asks for its prompt's logprobs;
    12, 13: asks for its KV events in full (one of them salted too)."""
    if kind in (9, 10):
        return PrefixRequest(request.request_id, request.prompt, cache_salt="ab"[kind - 9])
    if kind == 11:
        return PrefixRequest(request.request_id, request.prompt, prompt_logprobs=True)
    if kind in (12, 13):
        return PrefixRequest(request.request_id, request.prompt,
                             cache_salt="a" if kind == 13 else None,
                             kv_cache_report_mode="full")
    return request
