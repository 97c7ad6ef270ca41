"""BlockPoolsMachine: vLLM's block pool (``BlockPool``) on its own API, beside a second pool,
against its model (``models/prefix_cache_pools.py``): the prefix cache's further machine
``prefix_cache.block_pools``.

The prefix-cache machine reaches the pool only through the KV cache manager, which never
lists the null block to ``touch`` or ``free_blocks`` (a window's table trims it first), keeps
one pool, and never calls ``unpin_blocks``. The pool's API promises more, and vLLM's own
callers use it: a Mamba group's table holds the null block between real ones, HiSparse keeps
a host pool whose blocks a deferred free lists beside the device pool's, and releases blocks
that stay readable until reused. The rules are those calls as the contract allows them: take
blocks (more than are free is refused), take holders on (a free block leaves the queue),
free held blocks of either pool through either, unpin held blocks under a watcher, reset.
After every step each pool's free order and every block's holder count are checked; the
watchers heard are taken after each call that can fire them.
"""

from __future__ import annotations

from attrs import evolve, frozen
from hypothesis import strategies as st
from hypothesis.stateful import initialize, invariant, precondition, rule

from models.prefix_cache_pools import NULL_BLOCK, BlockPoolsModel
from properties.harness import HarnessMachine, InvalidAction, draw_bool, draw_integer, pick
from sim.factories.prefix_cache import make_block_pools

PROPERTIES = {
    "handout-agrees": "get_new_blocks hands out the model's front blocks, and refuses exactly "
                      "when fewer are free",
    "holders-agree": "every block counts the model's holders after each call (the null "
                     "block's count is never changed)",
    "pool-order-agrees": "each pool's free queue lists the model's blocks in its order",
    "reuse-notices-agree": "an unpinned block's watcher hears of it exactly when the pool "
                           "hands it out again or a reset drops it",
    "reset-agrees": "reset_prefix_cache succeeds exactly when no block is held",
}
HAZARDS = ("get_new_blocks refused", "the null block listed",
           "a block freed through the other pool", "an unpinned block taken back by touch",
           "a watched block handed out again", "a reset heard by watchers")
MAX_BLOCKS = 5
WATCHERS = ("w0", "w1")


@frozen
class PoolsWorld:
    num_blocks: tuple[int, ...]     # per pool, the null block included

    def config(self) -> dict:
        return {"num_blocks": self.num_blocks}


worlds = st.builds(PoolsWorld, st.lists(st.integers(2, MAX_BLOCKS), min_size=1, max_size=2)
                   .map(tuple))


def _ready(self) -> bool:
    return hasattr(self, "model")


class BlockPoolsMachine(HarnessMachine):
    subsystem = "prefix_cache"
    SUBJECT = "pools"
    PROPERTIES = PROPERTIES
    HAZARDS = HAZARDS
    REPRODUCER_IMPORTS = ("from sim.factories.prefix_cache import make_block_pools",)
    REPRODUCER_HELPERS = ""

    @staticmethod
    def reproducer_subject(config: dict) -> str:
        return f"pools = make_block_pools(target, {tuple(config['num_blocks'])!r})"

    @initialize(world=worlds)
    def setup(self, world: PoolsWorld):
        self.world = world
        self.trace.config.update(world.config(), target=self.target_name)
        self.trace.world = world
        self.pools = make_block_pools(self.target_name, world.num_blocks)
        # What the release offers (vLLM's adapter reports it; ours offers all of it).
        self.unpins = getattr(self.pools, "unpins", True)
        self.cross_pool = getattr(self.pools, "cross_pool", True)
        self.null_listed = getattr(self.pools, "null_left_alone", True)
        for offered, why in ((self.unpins, "no BlockPool.unpin_blocks"),
                             (self.cross_pool or len(world.num_blocks) == 1,
                              "no KVCacheBlock.pool: a pool frees only its own blocks"),
                             (self.null_listed, "the null block is not listed to touch or "
                              "free_blocks (this release keeps a count on it)")):
            if not offered:
                self.recorder.note_missing(why)
        self.model = BlockPoolsModel(world.num_blocks,
                                     getattr(self.pools, "uncached_first", True))

    @classmethod
    def simpler_worlds(cls, world: PoolsWorld, actions: list[tuple]):
        if len(world.num_blocks) > 1:         # a step naming the second pool turns invalid
            yield evolve(world, num_blocks=world.num_blocks[:1]), actions
        for i, n in enumerate(world.num_blocks):
            if n > 2:
                smaller = (*world.num_blocks[:i], n - 1, *world.num_blocks[i + 1:])
                yield evolve(world, num_blocks=smaller), actions

    # -- rules ---------------------------------------------------------------------------------

    @precondition(_ready)
    @rule(data=st.data())
    def get_new_blocks(self, data):
        pool = self._pool(data)
        self.act("get_new_blocks", pool,
                 draw_integer(data, 0, len(self.model.free_order(pool)) + 1))

    @precondition(_ready)
    @rule(data=st.data())
    def touch(self, data):
        pool = self._pool(data)
        blocks = range(0 if self.null_listed else 1, self.world.num_blocks[pool])
        self.act("touch", pool, self._some(data, list(blocks)))

    @precondition(lambda self: _ready(self) and self._held_anywhere())
    @rule(data=st.data())
    def free_blocks(self, data):
        pool = self._pool(data)
        pools = range(len(self.world.num_blocks)) if self.cross_pool else (pool,)
        listed = [(q, b) for q in pools for b in self._held(q)]
        if self.null_listed:
            listed += [(q, NULL_BLOCK) for q in pools]
        self.act("free_blocks", pool, self._some(data, listed))

    @precondition(lambda self: _ready(self) and self.unpins and self._held_anywhere())
    @rule(data=st.data())
    def unpin_blocks(self, data):
        pool = self._pool(data)
        self.act("unpin_blocks", pool, self._some(data, self._held(pool)),
                 pick(data, list(WATCHERS)))

    @precondition(_ready)
    @rule(data=st.data())
    def reset_prefix_cache(self, data):
        self.act("reset_prefix_cache", self._pool(data))

    # -- actions -------------------------------------------------------------------------------

    def do_get_new_blocks(self, pool: int, n: int):
        self._valid(pool)
        refused = n > len(self.model.free_order(pool))
        if refused:
            self.hazard("get_new_blocks refused")
        watched = set(self.model.pools[pool].watchers)
        taken = self.call("handout-agrees", "get_new_blocks", pool, n,
                          shown=f"pools.get_new_blocks({pool}, {n})",
                          effect="refused: fewer are free" if refused else f"the front {n}")
        if watched & set(taken or ()):
            self.hazard("a watched block handed out again")
        self._take_notices()

    def do_touch(self, pool: int, blocks: tuple[int, ...]):
        self._valid(pool, *((pool, b) for b in blocks))
        self._note_null(blocks)
        if set(blocks) & set(self.model.pools[pool].watchers) & set(self.model.free_order(pool)):
            self.hazard("an unpinned block taken back by touch")
        self.apply("touch", pool, blocks, shown=f"pools.touch({pool}, {blocks!r})",
                   effect="a holder more each")

    def do_free_blocks(self, pool: int, blocks: tuple[tuple[int, int], ...]):
        self._valid(pool, *blocks)
        if any(b != NULL_BLOCK and self.model.holder_counts(q)[b] < 1 for q, b in blocks):
            raise InvalidAction("free_blocks: a block no one holds")
        self._note_null([b for _, b in blocks])
        if any(q != pool for q, _ in blocks):
            self.hazard("a block freed through the other pool")
        self.apply("free_blocks", pool, blocks, shown=f"pools.free_blocks({pool}, {blocks!r})",
                   effect="a holder less each")

    def do_unpin_blocks(self, pool: int, blocks: tuple[int, ...], watcher: str):
        self._valid(pool, *((pool, b) for b in blocks))
        if any(b == NULL_BLOCK or self.model.holder_counts(pool)[b] < 1 for b in blocks):
            raise InvalidAction("unpin_blocks: the null block, or a block no one holds")
        self.apply("unpin_blocks", pool, blocks, watcher,
                   shown=f"pools.unpin_blocks({pool}, {blocks!r}, {watcher!r})",
                   effect=f"readable until reused; {watcher} hears then")

    def do_reset_prefix_cache(self, pool: int):
        self._valid(pool)
        watched = bool(self.model.pools[pool].watchers)
        ok = self.call("reset-agrees", "reset_prefix_cache", pool,
                       shown=f"pools.reset_prefix_cache({pool})",
                       effect=lambda ok: "reset" if ok else "refused: blocks are held")
        if ok and watched:
            self.hazard("a reset heard by watchers")
        self._take_notices()

    def _take_notices(self):
        self.call("reuse-notices-agree", "take_notices", shown="pools.take_notices()",
                  effect="the watchers heard")

    # -- invariants ----------------------------------------------------------------------------

    @invariant()
    def pools_agree(self):
        if not _ready(self):
            return
        for pool in range(len(self.world.num_blocks)):
            got, want = self.pools.free_order(pool), self.model.free_order(pool)
            self.check("pool-order-agrees", got == want,
                       f"pool {pool}'s free blocks {got!r}, model {want!r}")
            got, want = self.pools.holder_counts(pool), self.model.holder_counts(pool)
            self.check("holders-agree", got == want,
                       f"pool {pool}'s holder counts {got!r}, model {want!r}")
        self.check_valid(self.pools)

    def state_checks(self) -> list[str]:
        return [line for pool in range(len(self.world.num_blocks)) for line in (
            f"assert pools.free_order({pool}) == {self.model.free_order(pool)!r}",
            f"assert pools.holder_counts({pool}) == {self.model.holder_counts(pool)!r}")]

    # -- helpers -------------------------------------------------------------------------------

    def _pool(self, data) -> int:
        return draw_integer(data, 0, len(self.world.num_blocks) - 1)

    def _held(self, pool: int) -> list[int]:
        return [b for b, n in enumerate(self.model.holder_counts(pool)) if n and b]

    def _held_anywhere(self) -> bool:
        return any(self._held(q) for q in range(len(self.world.num_blocks)))

    @staticmethod
    def _some(data, items: list) -> tuple:
        """Distinct items in a drawn order (possibly none)."""
        items, chosen = list(items), []
        while items and draw_bool(data):
            chosen.append(items.pop(draw_integer(data, 0, len(items) - 1)))
        return tuple(chosen)

    def _valid(self, pool: int, *blocks: tuple[int, int]):
        sizes = self.world.num_blocks
        if pool >= len(sizes) or any(q >= len(sizes) or b >= sizes[q] for q, b in blocks):
            raise InvalidAction("a pool or block this world does not have")

    def _note_null(self, blocks):
        if NULL_BLOCK in blocks:
            self.hazard("the null block listed")
