"""PrefixCacheMachine: the prefix-caching KV block cache, step by step, against the model.

Rules are the calls vLLM's scheduler makes on its ``KVCacheManager``, in the order it makes
them: a request arrives (``add_request``); a waiting one asks ``get_computed_blocks`` and is
given slots with that hit (``allocate_slots``, in the same action: the scheduler does both in
one pass), maybe with speculative lookahead slots; a running one gets slots for its next
chunk or for the tokens it sampled (``append_token_ids``); a request finishes (``free``) or
is preempted (``preempt``: its blocks go back, it waits again and is rescheduled with what
the cache kept); the prefix cache is reset (a weights update) with requests running or not;
the KV events are taken. Pools are small next to the prompts, so allocations evict cached
blocks and are refused.

After every step the invariants compare the target's block pool with the model's facts:
reference counts, block tables, the free queue and its order, the hash map (and that each
cached hash names the tokens its block holds), and where the target shows it, what each
``free_blocks`` call listed (vLLM issue #42571).
"""

from __future__ import annotations

from collections import Counter

from attrs import evolve
from hypothesis import strategies as st
from hypothesis.stateful import initialize, invariant, precondition, rule

from models.prefix_cache import PrefixCacheModel
from models.prefix_cache_values import (
    NULL_BLOCK,
    AllBlocksCleared,
    BlockRemoved,
    BlockStored,
    Hit,
)
from properties.harness import HarnessMachine, InvalidAction, draw_bool, draw_integer, pick
from properties.prefix_cache_shrink import simpler_worlds
from properties.prefix_cache_worlds import ALPHABET, prefix_cache_worlds
from sim import targets
from sim.prefix_cache_config import as_scheduler_blocks

MAX_LOOKAHEAD = 3        # speculative slots drawn per step (EAGLE's drafts)

HAZARDS = (
    "prefix hit",
    "hit capped at the last token",
    "EAGLE dropped the last hit block",
    "EAGLE: a hit read past by the drafter's window",
    "hit revived a free block",
    "hit shared with a running request",
    "allocate_slots refused",
    "admission refused: the whole sequence does not fit",
    "admission refused: the watermark kept blocks free",
    "allocate_slots evicted a cached block",
    "lookahead slots cut at max_model_len",
    "preempted request rescheduled with a hit",
    "reset refused: blocks held",
    "reset dropped cached blocks",
    "prefix cached by two blocks",
    "events report a removal",
    "decode filled a block",
    "uncached block released to the front",
    "sliding window: hit past blocks behind it",
    "sliding window: blocks behind it given back",
    "sliding window: admission capped below the whole sequence",
    "chunked local: hit past the chunks before it",
    "chunked local: blocks of chunks left behind given back",
    "chunked local: admission capped below the whole sequence",
    "KV connector loaded tokens past the hit",
    "KV connector handed a finished request's blocks",
    "KV connector loads asynchronously",
    "admission refused: blocks reserved for prefills in flight",
    "asynchronous load finished: blocks cached, request waits",
    "lookahead hash: a computed block waits for its next token",
    "hybrid: the window's hit shorter than full attention's",
    "local groups: a prefix cached in one and not in another",
    "two windows: the hit cut by the second window",
    "two windows: a second round cut the hit",
    "two block sizes: the prompt's end keyed inside a full-attention block",
    "two block sizes: computed blocks left uncached past the alignment",
    "DCP: prefix hit of blocks spread over the ranks",
    "DCP: a prompt shares a cached block's first rank's tokens, not the whole block",
    "DCP: a hit of the target's and the replicated draft's blocks",
    "full report: a hit's reused blocks reported",
    "full report: a hit past the null block reported",
)

PROPERTIES = {
    "hit-agrees": "get_computed_blocks returns the model's longest cached prefix (capped)",
    "fit-agrees": "allocate_slots refuses exactly when the request cannot fit, else hands "
                  "out the model's blocks",
    "reset-agrees": "reset_prefix_cache succeeds exactly when no block is held",
    "events-agree": "take_events returns the model's KV events",
    "events-account-for-cached-set": "the events taken so far, folded, give the cached set",
    "refs-agree": "every block's reference count is the number of requests holding it",
    "tables-agree": "get_block_ids(request) is the model's block table",
    "free-is-unreferenced": "the free queue holds exactly the unreferenced blocks",
    "free-queue-agrees": "the free queue is in the model's eviction order",
    "cached-set-agrees": "the hash map maps each prefix to the model's blocks",
    "cached-hash-names-contents": "a cached hash names the tokens its block holds",
    "block-hash-is-cached": "a block carries a hash exactly while the cached set names it "
                            "under that hash: none survives an eviction or a reset",
    "free-lists-held-blocks": "no free_blocks call lists a block twice or one not held",
    "probe-agrees": "get_num_cached_tokens(request) of a waiting request is the length of "
                    "the hit get_computed_blocks would find, and takes, caches and reports "
                    "nothing",
    "cached-tokens-agree": "estimate_cached_tokens(request) is the prefix every group has "
                           "cached on the request's own blocks",
    "connector-blocks-agree": "a finishing request hands its KV connector the blocks of its "
                              "computed tokens, those behind the window given back first",
}


def names_contents(named, holds, block_size: int, hash_size: int) -> bool:
    """Whether a block of ``block_size`` tokens holding the prefix ``holds`` may be cached
    under ``named``: the same prefix, or, where blocks are larger than the hashes'
    ``hash_size`` tokens (a full-attention block keyed at the prompt's last hash boundary
    too), a shorter prefix of the same request that ends on a hash boundary inside the
    block: same salt, its tokens first, past the block's first token."""
    if holds is None or named == holds or block_size == hash_size:
        return named == holds
    def parts(key, kind):
        return [p for p in key if isinstance(p, kind)]
    tokens, held = parts(named, int), parts(holds, int)
    items = parts(named, tuple)         # the multimodal items that start in the prefix
    start = (len(held) - 1) // block_size * block_size
    return start < len(tokens) < len(held) and len(tokens) % hash_size == 0 and \
        held[:len(tokens)] == tokens and parts(named, str) == parts(holds, str) and \
        parts(holds, tuple)[:len(items)] == items


class PrefixCacheMachine(HarnessMachine):
    subsystem = "prefix_cache"
    SUBJECT = "cache"
    PROPERTIES = PROPERTIES
    HAZARDS = HAZARDS
    REPRODUCER_IMPORTS = ("import attrs",
                          "from models.prefix_cache_values import (AllBlocksCleared, "
                          "BlockRemoved, BlockStored, Hit, PrefixRequest)",)
    REPRODUCER_HELPERS = ""

    @staticmethod
    def reproducer_subject(config: dict) -> str:
        args = ", ".join(f"{k}={config[k]!r}" for k in (
            "num_blocks", "block_size", "max_model_len", "use_eagle", "uncached_first",
            "enable_caching", "enable_kv_cache_events", "reserve_full_isl", "watermark",
            "sliding_window", "max_in_flight_tokens", "kv_connector", "hash_lookahead",
            "hybrid", "retention", "attention_chunk_size", "local_groups", "second_window",
            "eagle_groups", "full_block_size", "dcp_world_size", "replicated_draft"))
        return f'cache = make(target, "prefix_cache", {args})'

    @initialize(world=prefix_cache_worlds())
    def setup(self, world):
        self.cache = targets.make(self.target_name, "prefix_cache", **world.config())
        # An option the target's release is not driven with: noted, and the world runs
        # without it (the target was built so; the model and the reproducer follow).
        for option, off in (("sliding_window", dict(sliding_window=None,
                                                    max_in_flight_tokens=None,
                                                    second_window=None, eagle_groups=(0,),
                                                    full_block_size=None)),
                            ("kv_connector", dict(kv_connector=False)),
                            ("hybrid", dict(hybrid=False, retention=None,
                                            attention_chunk_size=None, local_groups=1,
                                            second_window=None, eagle_groups=(0,),
                                            full_block_size=None)),
                            ("replicated_draft", dict(replicated_draft=False)),
                            # a release without lookahead hashes drops the EAGLE block
                            ("hash_lookahead", dict(hash_lookahead=0, use_eagle=True))):
            if getattr(world, option) and not getattr(self.cache, f"drives_{option}", True):
                self.recorder.note_missing(getattr(self.cache, f"why_no_{option}")
                                           .removeprefix("absent: "))
                world = evolve(world, **off)
        if not self.cache.probes_cached_tokens:
            self.recorder.note_missing("get_num_cached_tokens: the release has none "
                                       "(probe-agrees not checked)")
        if not self.cache.estimates_cached_tokens:
            self.recorder.note_missing("estimate_cached_tokens: the release has none "
                                       "(cached-tokens-agree not checked)")
        self.world = world
        # The model takes the free-queue order and the event shape of the target's release
        # (native: the world's order).
        # The admission gates likewise: a release without one has it off.
        # And the group: a release not read for the sliding window runs full attention.
        config = {**world.config(), "uncached_first": self.cache.uncached_first,
                  "reserve_full_isl": self.cache.reserve_full_isl,
                  "watermark": self.cache.watermark,
                  "sliding_window": self.cache.sliding_window,
                  "max_in_flight_tokens": self.cache.max_in_flight_tokens,
                  "kv_connector": self.cache.kv_connector,
                  "hash_lookahead": self.cache.hash_lookahead,
                  "hybrid": self.cache.hybrid,
                  "retention": self.cache.retention,
                  "attention_chunk_size": self.cache.attention_chunk_size,
                  "local_groups": self.cache.local_groups,
                  "second_window": self.cache.second_window,
                  "full_block_size": self.cache.full_block_size,
                  "replicated_draft": self.cache.replicated_draft,
                  "reports_reused": self.cache.reports_reused}
        self.model = PrefixCacheModel(**as_scheduler_blocks(config),
                                      event_fields=self.cache.event_fields)
        self.arrived = 0
        self.finished: set[int] = set()
        self.preempted: set[int] = set()
        self.sent: dict[int, int] = {}            # request -> times sent again
        self.calls_since_reset = self.calls_since_take = 0
        self.taken: Counter = Counter()           # the events' fold: key -> blocks caching it
        self.trace.config.update(config, target=self.target_name)
        self.trace.world = world
        self.trace.setup += [f"{r.request_id} = {r!r}" for r in world.requests]

    # -- rules: choose a valid step, then act ------------------------------------------------

    # Requests arrive in the world's order; once all have, a finished one's prompt is sent
    # again under a new id (the best case for a prefix cache, and the run goes on).
    @precondition(lambda self: self._absent())
    @rule(data=st.data())
    def add_request(self, data):
        fresh = [r for r in self._absent() if r >= self.arrived]
        self.act("add_request", fresh[0] if fresh else pick(data, self._absent()))

    @precondition(lambda self: self._waiting())
    @rule(data=st.data())
    def schedule_waiting(self, data):
        r = pick(data, self._waiting())
        left = self._uncomputed(r)
        # Half the time the whole prompt (no chunking), else a chunk; lookahead 0..3 in one
        # draw (each draw costs Hypothesis more than a step costs the cache).
        chunk, lookahead = divmod(draw_integer(data, 0, 2 * left * (MAX_LOOKAHEAD + 1) - 1),
                                  MAX_LOOKAHEAD + 1)
        # With a KV connector, half the first admissions load some tokens past the hit, half
        # of those asynchronously.
        external = asynchronous = 0
        if self.model.kv_connector and not self._holds(r):
            external = max(0, draw_integer(data, 0, 2 * left - 1) - left)
            asynchronous = int(external > 0 and draw_bool(data))
        self.act("schedule_waiting", r, min(left, chunk + 1, self._step_cap()), lookahead,
                 external, asynchronous)

    # vLLM 0.34.0's scheduler probes waiting requests that hold nothing for the hit each
    # would get (its cache-aware order of the waiting queue), before admitting any, where
    # there are two or more to order.
    @precondition(lambda self: self._probeable())
    @rule(data=st.data())
    def probe_waiting(self, data):
        self.act("probe_waiting", pick(data, self._probeable()))

    # The test finishes a load when it chooses (the connector's transfer completes).
    @precondition(lambda self: getattr(self, "model", None) is not None and self.model.loading)
    @rule(data=st.data())
    def finish_load(self, data):
        self.act("finish_load", pick(data, self._loading()))

    @precondition(lambda self: self._running(pending=True))
    @rule(data=st.data())
    def allocate_slots(self, data):
        r = pick(data, self._running(pending=True))
        left = self._uncomputed(r)
        chunk, lookahead = divmod(draw_integer(data, 0, 2 * left * (MAX_LOOKAHEAD + 1) - 1),
                                  MAX_LOOKAHEAD + 1)
        self.act("allocate_slots", r, min(left, chunk + 1, self._step_cap()), lookahead)

    @precondition(lambda self: self._running(pending=False))
    @rule(data=st.data())
    def append_token_ids(self, data):
        r = pick(data, self._running(pending=False))
        # One sampled token, or two (an accepted draft): tokens from the tails' alphabet, so
        # decodes of different requests fill blocks with the same tokens.
        count_token = draw_integer(data, 0, 2 * ALPHABET - 1)
        room = self.world.max_model_len - self.model.num_tokens(self._rid(r))
        count = min(room, 1 + count_token // ALPHABET)
        self.act("append_token_ids", r, (1 + count_token % ALPHABET,) * count)

    # A request finishes once its tokens are computed, or is aborted while it waits after a
    # preemption (one that never ran leaves the pool as it found it: nothing to check).
    @precondition(lambda self: self._finishable())
    @rule(data=st.data())
    def free(self, data):
        self.act("free", pick(data, self._finishable()))

    @precondition(lambda self: self._running(pending=None))
    @rule(data=st.data())
    def preempt(self, data):
        self.act("preempt", pick(data, self._running(pending=None)))

    # A weights update is rare next to scheduling: allowed once a few calls have changed the
    # pool since the last attempt (else resets dominate the runs and check an empty cache).
    @precondition(lambda self: getattr(self, "calls_since_reset", 0) >= 3)
    @rule()
    def reset_prefix_cache(self):
        self.act("reset_prefix_cache")

    # The engine takes the events once a step; taking none checks nothing.
    @precondition(lambda self: hasattr(self, "model") and self.model.events
                  and self.calls_since_take >= 2)
    @rule()
    def take_events(self):
        self.act("take_events")

    def end_of_run(self):
        # The engine publishes its events every step: the run's last ones are checked too.
        if self.trace.steps and self.trace.steps[-1].action[0] != "take_events":
            self.act("take_events")

    @classmethod
    def simpler_worlds(cls, world, actions):
        return simpler_worlds(world, actions)

    # -- actions: one API call (or the scheduler's pair) on model and target -----------------

    def act(self, name: str, *args) -> None:
        super().act(name, *args)
        self.calls_since_reset = 0 if name == "reset_prefix_cache" else \
            self.calls_since_reset + 1
        self.calls_since_take = 0 if name == "take_events" else self.calls_since_take + 1

    def do_add_request(self, r: int):
        if r not in self._absent() or (r > self.arrived):
            raise InvalidAction("requests arrive in order, then finished ones again")
        req = self.world.requests[r]
        if r == self.arrived:
            self.arrived += 1
            shown = req.request_id
        else:
            self.finished.discard(r)
            self.preempted.discard(r)
            self.sent[r] = self.sent.get(r, 0) + 1
            req = evolve(req, request_id=self._rid(r))
            shown = f"attrs.evolve({self.world.requests[r].request_id}, " \
                    f"request_id={req.request_id!r})"
        self.apply("add_request", req, shown=f"cache.add_request({shown})",
                   effect=f"{len(req.prompt)} prompt tokens")

    def do_schedule_waiting(self, r: int, num_new_tokens: int, lookahead: int,
                            external: int = 0, asynchronous: int = 0):
        if r not in self._waiting() or num_new_tokens > self._step_cap() or \
                ((external or asynchronous) and (not self.model.kv_connector
                                                 or self._holds(r))):
            raise InvalidAction("schedule_waiting: not a waiting request, past one step, or "
                                "a load with no connector or after one")
        rid = self._rid(r)
        if self._holds(r):
            # Back from an asynchronous load, holding its blocks: the scheduler looks up no
            # hit for a request with computed tokens.
            self._allocate(rid, min(num_new_tokens, self._uncomputed(r)), None, lookahead)
            return
        preempted = r in self.preempted
        hit = self.model.get_computed_blocks(rid)
        self._check_hit(rid, lambda: self.target.get_computed_blocks(rid), hit)
        self._note_hit(rid, hit, preempted)
        left = self.model.num_tokens(rid) - hit.num_computed_tokens
        external = min(external, left - 1)      # the connector leaves a token to compute
        if num_new_tokens > left - external:
            num_new_tokens = left - external    # the hit and the load took part of the chunk
        if external:
            self.hazard("KV connector loaded tokens past the hit")
        if external and asynchronous:
            # The scheduler's asynchronous load: no tokens of its own, no lookahead, and the
            # blocks the prefills in flight still need kept free.
            self._allocate(rid, 0, hit, 0, external, asynchronous=True)
            return
        self._allocate(rid, max(1, num_new_tokens), hit, lookahead, external)

    def do_probe_waiting(self, r: int):
        if r not in self._probeable():
            raise InvalidAction("probe_waiting: not a waiting request holding nothing, or a "
                                "release without the probe")
        rid = self._rid(r)
        expect = self.model.get_num_cached_tokens(rid)
        self.record(f"cache.get_num_cached_tokens({rid!r})", expect, f"{expect} tokens cached")
        actual = self.target.get_num_cached_tokens(rid)
        if actual != expect:
            self._blame_the_hit(rid)
        self.check("probe-agrees", actual == expect, lambda: (
            f"get_num_cached_tokens returned {actual!r}, the model expects {expect!r}"))

    def _blame_the_hit(self, rid: str) -> None:
        """A probe that disagrees is checked against the hit it summarises: where the
        target's own ``get_computed_blocks`` disagrees with the model's too, the divergence
        is the hit's, reported once, under ``hit-agrees`` and the hit's signature (what the
        scheduling call would report), not again as a shorter number under the probe's.
        The probe's line then asserts nothing and the hit's line follows it, so the
        reproducer fails where the cause shows. Where the hit agrees, the probe alone is
        wrong and ``probe-agrees`` fails as before. Both calls only read (the scheduler's
        call sets the request's shared-prefix boundary, as its next lookup would)."""
        expect, actual = self.model.get_computed_blocks(rid), self.target.get_computed_blocks(rid)
        if actual == expect:
            return
        steps = self.trace.steps
        if steps:
            steps[-1] = evolve(steps[-1], expect=None, check=None, comment=(
                f"{steps[-1].comment} [the hit below is what it measures]"))
        self._check_hit(rid, lambda: actual, expect)

    def _check_hit(self, rid: str, lookup, expect: Hit) -> None:
        """The lookup's step, recorded with the model's hit, and ``hit-agrees``. Where the
        hit itself (its blocks and tokens) differs, the shared-prefix boundary follows from
        it (it is where full attention's run ends past the hit): the message compares the
        hits without it and gives it after, so the signature names the hit alone, whether
        or not full attention's run reached past the model's hit (vLLM 0.33.0's window
        aligned before EAGLE's drop, met both ways, was two findings). A boundary that
        differs under an equal hit is compared whole. ``lookup`` makes the target's call
        once the step is recorded: a lookup that raises is the program's last step."""
        def message() -> str:
            if isinstance(actual, Hit) and (actual.block_ids, actual.num_computed_tokens) != \
                    (expect.block_ids, expect.num_computed_tokens):
                return (f"get_computed_blocks returned {_hit_alone(actual)}, the model expects "
                        f"{_hit_alone(expect)} (shared prefix boundary "
                        f"{actual.shared_prefix_boundary}, the model's "
                        f"{expect.shared_prefix_boundary})")
            return f"get_computed_blocks returned {actual!r}, the model expects {expect!r}"
        self.record(f"cache.get_computed_blocks({rid!r})", expect, _hit_effect(expect))
        actual = lookup()
        self.check("hit-agrees", actual == expect, message)

    def do_finish_load(self, r: int):
        if r not in self._loading():
            raise InvalidAction("finish_load: no load in flight for this request")
        rid = self._rid(r)
        self.apply("finish_load", rid, shown=f"cache.finish_load({rid!r})",
                   effect="the load is done: its blocks cached, the request waits")
        self.hazard("asynchronous load finished: blocks cached, request waits")

    def do_allocate_slots(self, r: int, num_new_tokens: int, lookahead: int):
        if r not in self._running(pending=True) or num_new_tokens > self._uncomputed(r) \
                or num_new_tokens > self._step_cap():
            raise InvalidAction("allocate_slots: no such uncomputed tokens in one step")
        self._allocate(self._rid(r), num_new_tokens, None, lookahead)

    def do_append_token_ids(self, r: int, token_ids: tuple[int, ...]):
        if r not in self._running(pending=False) or not token_ids or \
                self.model.num_tokens(self._rid(r)) + len(token_ids) > self.world.max_model_len:
            raise InvalidAction("append_token_ids: request not done or at max_model_len")
        rid = self._rid(r)
        self.apply("append_token_ids", rid, token_ids,
                   shown=f"cache.append_token_ids({rid!r}, {token_ids!r})",
                   effect="sampled" if len(token_ids) == 1 else "sampled, a draft accepted")

    def do_free(self, r: int):
        if r not in self._live():
            raise InvalidAction("free: not a live request")
        rid = self._rid(r)
        self._note_release(rid)
        if self.model.kv_connector:
            # The scheduler hands a finishing request's blocks to its KV connector first.
            behind = self.model.null_slots(rid)
            handed = self.call("connector-blocks-agree", "connector_finished", rid,
                               shown=f"cache.connector_finished({rid!r})",
                               effect=lambda b: f"{len(b)} blocks handed to the connector")
            if handed:
                self.hazard("KV connector handed a finished request's blocks")
            if self.model.null_slots(rid) > behind:
                self.hazard(self._local("blocks behind it given back"))
        self.apply("free", rid, shown=f"cache.free({rid!r})", effect="finished")
        self.finished.add(r)

    def do_preempt(self, r: int):
        if r not in self._running(pending=None):
            raise InvalidAction("preempt: not a running request")
        rid = self._rid(r)
        self._note_release(rid)
        self.apply("preempt", rid, shown=f"cache.preempt({rid!r})",
                   effect="blocks released, waits again")
        self.preempted.add(r)

    def do_reset_prefix_cache(self):
        held = any(self.model.holds(rid) for rid in self.model.tables)
        cached = bool(self.model.key_of)
        ok = self.call("reset-agrees", "reset_prefix_cache", shown="cache.reset_prefix_cache()",
                       effect=lambda ok: "every hash dropped" if ok else "refused: blocks held")
        if held:
            self.hazard("reset refused: blocks held")
        elif ok and cached:
            self.hazard("reset dropped cached blocks")

    def do_take_events(self):
        taken = self.model.take_events()
        self.record("cache.take_events()", taken, "the KV events since the last take")
        actual = self.cache.take_events()
        self.check("events-agree", actual == taken, lambda: _events_compared(actual, taken))
        for event in taken:     # the target's events: the model's, or the step failed
            # Folded by the group each names (with one group, its keys alone).
            if isinstance(event, BlockStored):
                named = [self.model.map_key(event.group_idx or 0, k) for k in event.keys]
                if not event.reused:
                    self.taken.update(named)
                    continue
                # A hit reported in full names blocks cached already: the fold must hold
                # each, and holds it no more often for it. (A consumer cannot tell these
                # from blocks cached again: upstream PR #51699, open, would mark them; the
                # fold here reads the model's events, equal to the target's, for the mark.)
                unknown = [k for k in named if not self.taken[k]]
                self.check("events-account-for-cached-set", not unknown,
                           f"a hit reported in full names {unknown}, which the events taken "
                           f"so far do not hold cached")
            elif isinstance(event, BlockRemoved):
                self.taken[self.model.map_key(event.group_idx or 0, event.key)] -= 1
                self.hazard("events report a removal")
            elif isinstance(event, AllBlocksCleared):
                self.taken.clear()
        folded = +self.taken
        cached = Counter({k: len(b) for k, b in self.cache.cached_blocks().items()})
        if not self.world.enable_kv_cache_events:
            return              # nothing is reported: events-agree checked that none came
        self.check("events-account-for-cached-set", folded == cached,
                   lambda: f"events fold to {dict(folded)}, the cache holds {dict(cached)}")

    # -- invariants ---------------------------------------------------------------------------

    @invariant()
    def pool_agrees(self):
        if not hasattr(self, "model"):
            return
        model, cache = self.model, self.cache
        # The pool's blocks: the null block is never pooled, and its count is kept by no
        # release's promise (0.33.0 skips it on free; 0.32.0 counts it down past zero).
        blocks = range(1, model.num_blocks)
        refs = [cache.ref_cnt(b) for b in blocks]
        queue = cache.free_queue()
        unreferenced = {b for b, n in zip(blocks, refs, strict=True) if n == 0}
        self.check("free-is-unreferenced", set(queue) == unreferenced and
                   len(queue) == cache.num_free_blocks,
                   lambda: f"free queue {list(queue)} ({cache.num_free_blocks} free), "
                   f"unreferenced {sorted(unreferenced)}")
        expect = [model.ref_cnt(b) for b in blocks]
        # Only the blocks whose counts differ, by block: a count too high (a holder never
        # let go) and one too low (a block given back early) are different bugs, and read
        # as different shapes of the difference (``[N]: more``, ``[N]: less``).
        self.check("refs-agree", refs == expect, lambda: (
            "ref_cnt returned {}, the model expects {}".format(*(
                {b: n for b, n, m in zip(blocks, refs, expect, strict=True) if n != m},
                {b: m for b, n, m in zip(blocks, refs, expect, strict=True) if n != m}))))
        for r in self._live():
            rid = self._rid(r)
            got, want = cache.get_block_ids(rid), model.get_block_ids(rid)
            if got != want:
                self.fail("tables-agree", f"{rid} holds {got}, model {want}")
            if not cache.estimates_cached_tokens:
                continue
            got, want = cache.estimate_cached_tokens(rid), model.estimate_cached_tokens(rid)
            if got != want:
                self.fail("cached-tokens-agree", f"estimate_cached_tokens({rid!r}) returned "
                          f"{got}, the model expects {want}")
        self.check("free-queue-agrees", queue == model.free_queue(), lambda: (
            f"free_queue() returned {queue!r}, the model expects {model.free_queue()!r}"))
        self.check_valid(cache)

    @invariant()
    def hashes_agree(self):
        if not hasattr(self, "model"):
            return
        got, want = self.cache.cached_blocks(), self.model.cached_blocks()
        for key, blocks in got.items():
            for block in blocks:
                holds = self.model.written.get(block)
                size = self.model.size(key[0] if self.model.hybrid else 0)
                if not names_contents(self.model.contents_of(key), holds, size,
                                      self.model.block_size):
                    self.fail("cached-hash-names-contents",
                              f"block {block} is cached under {key} but holds {holds}")
        self.check("cached-set-agrees", got == want, lambda: (
            f"cached_blocks() returned {got!r}, the model expects {want!r}"))
        carried = getattr(self.cache, "block_hashes", None)     # the blocks' own fields
        if carried is not None:
            named, on = self.model.carried(), carried()
            self.check("block-hash-is-cached", on == named, lambda: "blocks carry " + ", ".join(
                f"{b}: {on.get(b)} (model {named.get(b)})" for b in sorted({*on, *named})
                if on.get(b) != named.get(b)))
        calls = getattr(self.cache, "free_block_calls", None)
        if calls is not None:
            wrong = duplicate_listings(calls())
            self.check("free-lists-held-blocks", not wrong, lambda: "; ".join(wrong))

    def state_checks(self) -> list[str]:
        model = self.model
        lines = [f"assert cache.free_queue() == {model.free_queue()!r}",
                 f"assert cache.num_free_blocks == {model.num_free_blocks}",
                 f"assert [cache.ref_cnt(b) for b in range(1, {model.num_blocks})] == "
                 f"{[model.ref_cnt(b) for b in range(1, model.num_blocks)]!r}"]
        lines += [f"assert cache.get_block_ids({self._rid(r)!r}) == "
                  f"{model.get_block_ids(self._rid(r))!r}" for r in self._live()]
        if self.cache.estimates_cached_tokens:
            lines += [f"assert cache.estimate_cached_tokens({self._rid(r)!r}) == "
                      f"{model.estimate_cached_tokens(self._rid(r))!r}" for r in self._live()]
        lines.append(f"assert cache.cached_blocks() == {model.cached_blocks()!r}")
        return lines

    # -- helpers ------------------------------------------------------------------------------

    def _allocate(self, rid: str, num_new_tokens: int, hit: Hit | None, lookahead: int,
                  external: int = 0, asynchronous: bool = False):
        model = self.model
        needed = model.blocks_needed(rid, num_new_tokens, hit or Hit(), lookahead, external)
        admission = rid in model.waiting
        cached_before = set(model.key_of)
        computed = model.requests[rid].num_computed_tokens + (hit.num_computed_tokens
                                                              if hit else 0)
        if computed + num_new_tokens + lookahead > model.max_model_len and lookahead:
            self.hazard("lookahead slots cut at max_model_len")
        shown_hit = f", hit={hit!r}" if hit and hit.block_ids else ""
        shown_look = f", num_lookahead_tokens={lookahead}" if lookahead else ""
        shown_look += f", num_external_computed_tokens={external}" if external else ""
        loads = dict(num_external_computed_tokens=external) if external else {}
        if asynchronous:
            reserved = self._reserved_blocks(rid)
            loads.update(delay_cache_blocks=True, reserved_blocks=reserved)
            shown_look += f", delay_cache_blocks=True, reserved_blocks={reserved}"
            self.hazard("KV connector loads asynchronously")
        stored_before = sum(isinstance(e, BlockStored) for e in model.events)
        running, behind_before = model.runs(rid), model.null_slots(rid)
        whole = -(-min(model.num_tokens(rid), model.max_model_len) // model.block_size)
        if admission and model.reserve_full_isl and any(
                cap is not None and cap < whole
                for cap in map(model.admission_cap, range(len(model.groups)))):
            self.hazard(self._local("admission capped below the whole sequence"))
        new = self.call("fit-agrees", "allocate_slots", rid, num_new_tokens, hit=hit,
                        num_lookahead_tokens=lookahead, **loads,
                        shown=f"cache.allocate_slots({rid!r}, {num_new_tokens}{shown_hit}"
                              f"{shown_look})",
                        effect=lambda new: f"refused: {needed} blocks needed, "
                        f"{model.num_free_blocks} free" if new is None
                        else f"{len(new)} new blocks")
        if running and model.null_slots(rid) > behind_before:
            self.hazard(self._local("blocks behind it given back"))
        if new is None:
            self.hazard("allocate_slots refused")
            if asynchronous and needed + model.blocks_kept_free(rid) <= \
                    model.num_free_blocks < needed + model.blocks_kept_free(rid) + reserved:
                self.hazard("admission refused: blocks reserved for prefills in flight")
            elif admission and needed <= model.num_free_blocks:
                self.hazard("admission refused: the whole sequence does not fit"
                            if needed + model.blocks_kept_free(rid) <= model.num_free_blocks
                            else "admission refused: the watermark kept blocks free")
            return
        if cached_before - set(model.key_of):
            self.hazard("allocate_slots evicted a cached block")
        state = model.requests[rid]
        if model.hash_lookahead and model.enable_caching and \
                min(state.num_computed_tokens, len(state.tokens)) // model.block_size > \
                (len(state.tokens) - model.hash_lookahead) // model.block_size:
            self.hazard("lookahead hash: a computed block waits for its next token")
        if any(len(b) > 1 for b in model.cached_blocks().values()):
            self.hazard("prefix cached by two blocks")
        stored = [e for e in model.events if isinstance(e, BlockStored)][stored_before:]
        if model.full_block_size and model.enable_caching:
            if any(e.group_idx == 0 and e.block_size == model.block_size for e in stored):
                self.hazard("two block sizes: the prompt's end keyed inside a full-attention "
                            "block")
            if state.num_computed_tokens % model.alignment >= model.block_size:
                self.hazard("two block sizes: computed blocks left uncached past the "
                            "alignment")
        if hit is None and any(e.parent is not None for e in stored) and \
                len(model.requests[rid].tokens) > len(self._prompt(rid)):
            self.hazard("decode filled a block")

    def _note_hit(self, rid: str, hit: Hit, preempted) -> None:
        model = self.model
        keys = model.block_keys(rid)
        cached = model.cached_in(0)
        blocks = [b for group in model.by_group(hit.block_ids) for b in group]
        if blocks:
            self.hazard("prefix hit")
            if preempted:
                self.hazard("preempted request rescheduled with a hit")
            if any(b != NULL_BLOCK and model.ref_cnt(b) == 0 for b in blocks):
                self.hazard("hit revived a free block")
            if NULL_BLOCK in blocks:
                self.hazard(self._local("hit past blocks behind it"))
            if any(model.ref_cnt(b) > 0 for b in blocks):
                self.hazard("hit shared with a running request")
        if self.world.dcp_world_size > 1 and model.enable_caching:
            self._note_dcp(rid, blocks)
        if blocks and model.enable_kv_cache_events and model.reports_reused and \
                model.requests[rid].request.kv_cache_report_mode == "full":
            self.hazard("full report: a hit's reused blocks reported")
            if NULL_BLOCK in blocks:
                self.hazard("full report: a hit past the null block reported")
        if hit.shared_prefix_boundary and not model.replicated_draft:
            self.hazard("hybrid: the window's hit shorter than full attention's")
        if model.second_window and model.enable_caching:
            self._note_two_windows(rid, keys[:(model.num_tokens(rid) - 1) // model.block_size])
        if model.local_groups > 1:
            local = [set(model.cached_in(g)) for g in model.local_specs[0]]
            if any(len({key in cached for cached in local}) > 1 for key in keys):
                self.hazard("local groups: a prefix cached in one and not in another")
        # Full attention's run, in its own blocks (Gemma 4's layout: of several window
        # blocks, keyed at their ends).
        full = model.size(0)
        run = 0
        for key in model.block_keys(rid, full):
            if key not in cached:
                break
            run += 1
        usable = (model.num_tokens(rid) - 1) // full
        if run > usable:
            self.hazard("hit capped at the last token")
        if model.use_eagle and min(run, usable) > len(model.by_group(hit.block_ids)[0]):
            self.hazard("EAGLE dropped the last hit block")
        if hit.num_computed_tokens and model.hybrid and any(
                model.drops(g) for g in range(1, len(model.groups))):
            self.hazard("EAGLE: a hit read past by the drafter's window")

    def _note_two_windows(self, rid: str, keys: list) -> None:
        """Where the second window's hit at the first's is shorter, and where the first's
        at that length is shorter again (the hit needs a second round over the specs).
        ``keys``: the request's window blocks' keys below its last token; full attention's
        run is read in its own blocks, and the windows' hits end on the alignment."""
        model = self.model
        first, second = model.local_specs
        full, step = model.size(0), model.alignment // model.block_size
        run, = model._group_hit([(0,)], model.block_keys(rid, full),
                                len(keys) * model.block_size // full)
        at_first = len(model._group_hit([first], keys, len(run) * full // model.block_size,
                                        step)[0])
        at_second = len(model._group_hit([second], keys, at_first, step)[0])
        if at_second < at_first:
            self.hazard("two windows: the hit cut by the second window")
            if len(model._group_hit([first], keys, at_second, step)[0]) < at_second:
                self.hazard("two windows: a second round cut the hit")

    def _note_release(self, rid: str) -> None:
        model = self.model
        tables = model.tables.get(rid, [])
        if model.uncached_first and any(model.ref_cnt(b) == 1 and b not in model.key_of
                                        for table in tables for b in table):
            self.hazard("uncached block released to the front")

    def _local(self, seen: str) -> str:
        """The hazard ``seen`` (named as a sliding window meets it) as the world's local
        group meets it."""
        if self.model.attention_chunk_size is None:
            return f"sliding window: {seen}"
        return {"hit past blocks behind it": "chunked local: hit past the chunks before it",
                "blocks behind it given back":
                    "chunked local: blocks of chunks left behind given back",
                }.get(seen, f"chunked local: {seen}")

    def _step_cap(self) -> int:
        """The most tokens one step schedules for a request: ``max_in_flight_tokens`` (one
        batch in flight), where the world sets it."""
        return self.model.max_in_flight_tokens or self.model.max_model_len

    def _rid(self, r: int) -> str:
        rid = self.world.requests[r].request_id
        return f"{rid}-{self.sent[r]}" if self.sent.get(r) else rid

    def _absent(self) -> list[int]:
        """Requests that may arrive now: the next one of the world, and the finished ones."""
        if not hasattr(self, "model"):
            return []
        nxt = [self.arrived] if self.arrived < len(self.world.requests) else []
        return nxt + sorted(self.finished)

    def _note_dcp(self, rid: str, hit_blocks: list[int]) -> None:
        """Decode context parallelism: a hit, and a lookup a hash of one rank's block per
        block would answer wrongly (vLLM 0.10.2's engine hashed so): the prompt shares with
        a cached block the first ``1/dcp_world_size`` of every block up to it, not the whole
        of them."""
        if hit_blocks:
            self.hazard("DCP: prefix hit of blocks spread over the ranks")
            if self.model.replicated_draft:
                self.hazard("DCP: a hit of the target's and the replicated draft's blocks")
        state, ranks = self.model.requests[rid], self.world.dcp_world_size
        mine = state.request.key(state.tokens)
        for key in self.model.cached_in(0):
            shown = len(key) // ranks
            if len(mine) >= len(key) and mine[:len(key)] != key and \
                    mine[:shown] == key[:shown]:
                self.hazard("DCP: a prompt shares a cached block's first rank's tokens, "
                            "not the whole block")
                return

    def _prompt(self, rid: str) -> tuple[int, ...]:
        base = rid.partition("-")[0]
        return next(q.prompt for q in self.world.requests if q.request_id == base)

    def _live(self) -> list[int]:
        if not hasattr(self, "model"):
            return []
        return [r for r in range(self.arrived) if r not in self.finished]

    def _finishable(self) -> list[int]:
        return [r for r in self._live() if (r in self.preempted and r in self._waiting()
                                             and not self._holds(r))
                or (self.model.runs(self._rid(r)) and not self._uncomputed(r))]

    def _waiting(self) -> list[int]:
        """Requests in the scheduler's waiting queue: arrived, preempted, or back from an
        asynchronous load (holding its blocks)."""
        return [r for r in self._live() if self._rid(r) in self.model.waiting]

    def _probeable(self) -> list[int]:
        if not getattr(getattr(self, "cache", None), "probes_cached_tokens", False):
            return []
        fresh = [r for r in self._waiting() if not self._holds(r)]
        return fresh if len(fresh) > 1 else []

    def _loading(self) -> list[int]:
        return [r for r in self._live() if self._rid(r) in self.model.loading]

    def _holds(self, r: int) -> bool:
        return self.model.holds(self._rid(r))

    def _reserved_blocks(self, rid: str) -> int:
        """The scheduler's reservation for an asynchronous load: the blocks each other
        prefill in flight (holding blocks, prompt tokens left; loading ones included) still
        needs to hold its whole sequence."""
        model = self.model
        return sum(model.blocks_to_finish(other) for other in model.tables
                   if other != rid and model.holds(other) and
                   model.requests[other].num_computed_tokens < model.num_tokens(other))

    def _uncomputed(self, r: int) -> int:
        state = self.model.requests[self._rid(r)]
        return len(state.tokens) - state.num_computed_tokens

    def _running(self, pending: bool | None) -> list[int]:
        """Requests holding blocks; ``pending``: with tokens left to compute (True), all
        computed and below the length cap (False), either (None)."""
        out = []
        for r in self._live():
            if not self.model.runs(self._rid(r)):
                continue
            left = self._uncomputed(r)
            if pending is None or (pending and left > 0) or (
                    pending is False and left == 0
                    and self.model.num_tokens(self._rid(r)) < self.world.max_model_len):
                out.append(r)
        return out


def _events_compared(actual, expect) -> str:
    """``events-agree``'s message in compared form, one shape per way the events differ:
    first the blocks stored (each group's keys, counted), then the removals, each side
    giving only what the other lacks; where both agree, the first event that differs (its
    fields compared), else the events in another order. One bug then reads alike however
    many events a program took with it (vLLM's full report of a window's hit, met beside
    two, three or four other events, was four findings)."""
    if not isinstance(actual, tuple) or not all(
            isinstance(e, (BlockStored, BlockRemoved, AllBlocksCleared)) for e in actual):
        return f"take_events returned {actual!r}, the model expects {expect!r}"
    for kind, named in (("stored", lambda e: [(e.group_idx, k) for k in e.keys]
                         if isinstance(e, BlockStored) else []),
                        ("removed", lambda e: [(e.group_idx, e.key)]
                         if isinstance(e, BlockRemoved) else [])):
        got = Counter(n for e in actual for n in named(e))
        want = Counter(n for e in expect for n in named(e))
        if got != want:
            only_got = sorted((got - want).elements(), key=repr)
            only_want = sorted((want - got).elements(), key=repr)
            return (f"take_events returned {{{kind!r}: {only_got}}}, "
                    f"the model expects {{{kind!r}: {only_want}}}")
    for a, b in zip(actual, expect, strict=False):
        if a != b:
            return f"take_events returned {a!r}, the model expects {b!r}"
    return f"take_events returned {actual!r}, the model expects {expect!r}"


def _hit_alone(hit: Hit) -> str:
    """A hit as its constructor reads without the shared-prefix boundary."""
    return f"Hit(block_ids={hit.block_ids!r}, num_computed_tokens={hit.num_computed_tokens})"


def _hit_effect(hit: Hit) -> str:
    """A lookup's comment in a reproducer: how many tokens the hit covers."""
    return f"{hit.num_computed_tokens} tokens cached" if hit.num_computed_tokens \
        else "no cached prefix"


def duplicate_listings(calls: list[tuple[tuple[int, ...], dict[int, int]]]) -> list[str]:
    """The ``free_blocks`` calls (blocks listed, each one's reference count before the call)
    that list a block twice, or more often than it is held: vLLM issue #42571's condition
    (a release that decrements every listing first queues such a block twice)."""
    wrong = []
    for listed, refs in calls:
        for block, times in Counter(listed).items():
            if times > 1 or times > refs[block]:
                wrong.append(f"free_blocks listed block {block} {times}x (ref_cnt "
                             f"{refs[block]}) in {list(listed)}")
    return wrong



class HybridPrefixCacheMachine(PrefixCacheMachine):
    """The machine in hybrid models' worlds only: full attention beside a sliding window's
    or a chunked-local model's groups, several of one spec, or two windows
    (``prefix_cache_worlds(hybrid_only=True)``), each of which the main machine draws in a
    fifth of its worlds or fewer."""

    @initialize(world=prefix_cache_worlds(hybrid_only=True))
    def setup(self, world):
        PrefixCacheMachine.setup(self, world)


class EagleHybridPrefixCacheMachine(PrefixCacheMachine):
    """The machine in hybrid window worlds with EAGLE's block drop, the drafter's layers in
    full attention's group, a window's or both (``prefix_cache_worlds(hybrid_only=True,
    eagle_only=True)``): the main machine draws one such world in about thirty-six, one with
    the drafter in a window in about seventy."""

    @initialize(world=prefix_cache_worlds(hybrid_only=True, eagle_only=True))
    def setup(self, world):
        PrefixCacheMachine.setup(self, world)


class ScaledEagleHybridPrefixCacheMachine(PrefixCacheMachine):
    """The machine in Gemma 4's layout with a drafter: hybrid window worlds whose
    full-attention blocks hold two or three window blocks, with EAGLE's block drop
    (``prefix_cache_worlds(hybrid_only=True, eagle_only=True, scaled_only=True)``): the main
    machine draws one such world in about a hundred."""

    @initialize(world=prefix_cache_worlds(hybrid_only=True, eagle_only=True,
                                          scaled_only=True))
    def setup(self, world):
        PrefixCacheMachine.setup(self, world)


class DcpPrefixCacheMachine(PrefixCacheMachine):
    """The machine with full attention alone decoded over two or four ranks, prompts
    measured in the ranks' whole blocks (``prefix_cache_worlds(dcp_only=True)``): the main
    machine draws such a world in about one of six, and its prompts rarely fill a whole
    block there."""

    @initialize(world=prefix_cache_worlds(dcp_only=True))
    def setup(self, world):
        PrefixCacheMachine.setup(self, world)
