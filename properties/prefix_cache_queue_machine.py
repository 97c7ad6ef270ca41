"""FreeQueueMachine: vLLM's free-block queue (``FreeKVCacheBlockQueue``) on its own, against
its model (``models/prefix_cache_queue.py``): the prefix cache's further machine
``prefix_cache.free_queue``.

The prefix-cache machine reaches the queue only through the block pool, which never pops an
empty queue, never builds one of fewer than two blocks and gives blocks back only in runs
(``append_n``, ``prepend_n``); the queue's API promises more (a single ``append``, a walk
from a cursor), and a pool of another release or a caller of its own may use it. The rules
are the queue's calls as its contract allows them: pop from the front (an empty queue
refuses), pop several, take a block out of the middle, give blocks not in the queue back to
either end, walk the queue. After every step the order, the count and the links are checked.
"""

from __future__ import annotations

from attrs import evolve, frozen
from hypothesis import strategies as st
from hypothesis.stateful import initialize, invariant, precondition, rule

from models.prefix_cache_queue import FreeQueueModel
from properties.harness import HarnessMachine, InvalidAction, draw_bool, draw_integer, pick
from sim.factories.prefix_cache import make_free_queue

PROPERTIES = {
    "pops-agree": "popleft and popleft_n hand out the model's front blocks; an empty queue "
                  "refuses a popleft (vLLM: ValueError)",
    "queue-order-agrees": "get_all_free_blocks and iter_blocks_after list the model's order, "
                          "and num_free_blocks is its length",
}
HAZARDS = ("popleft refused: the queue is empty", "a block taken out of the middle",
           "blocks given back to the front", "the queue emptied and refilled",
           "a walk from a cursor")
MAX_BLOCKS = 6


@frozen
class QueueWorld:
    num_blocks: int

    def config(self) -> dict:
        return {"num_blocks": self.num_blocks}


class FreeQueueMachine(HarnessMachine):
    subsystem = "prefix_cache"
    SUBJECT = "queue"
    PROPERTIES = PROPERTIES
    HAZARDS = HAZARDS
    REPRODUCER_IMPORTS = ("from sim.factories.prefix_cache import make_free_queue",)
    REPRODUCER_HELPERS = ""

    @staticmethod
    def reproducer_subject(config: dict) -> str:
        return f"queue = make_free_queue(target, {config['num_blocks']})"

    @initialize(world=st.builds(QueueWorld, st.integers(0, MAX_BLOCKS)))
    def setup(self, world: QueueWorld):
        self.world = world
        # Recorded first: a queue that raises while it is built is the reproducer's subject.
        self.trace.config.update(world.config(), target=self.target_name)
        self.trace.world = world
        self.queue = make_free_queue(self.target_name, world.num_blocks)
        self.model = FreeQueueModel(world.num_blocks)
        self.emptied = False

    @classmethod
    def simpler_worlds(cls, world: QueueWorld, actions: list[tuple]):
        if world.num_blocks:        # the steps name blocks: those of a smaller pool stay valid
            yield evolve(world, num_blocks=world.num_blocks - 1), actions

    # -- rules ---------------------------------------------------------------------------------

    @precondition(lambda self: hasattr(self, "model"))
    @rule()
    def popleft(self):
        self.act("popleft")

    @precondition(lambda self: getattr(self, "model", None) and self.model.order)
    @rule(data=st.data())
    def popleft_n(self, data):
        self.act("popleft_n", draw_integer(data, 0, len(self.model.order)))

    @precondition(lambda self: getattr(self, "model", None) and self.model.order)
    @rule(data=st.data())
    def remove(self, data):
        self.act("remove", pick(data, list(self.model.order)))

    @precondition(lambda self: getattr(self, "model", None) and self._held())
    @rule(data=st.data())
    def append(self, data):
        self.act("append", pick(data, self._held()))

    # A run of held blocks in a drawn order, to either end (the pool's two ways back).
    @precondition(lambda self: getattr(self, "model", None) and self._held())
    @rule(data=st.data())
    def give_back(self, data):
        held, run = self._held(), []
        while held and (not run or draw_bool(data)):
            run.append(held.pop(draw_integer(data, 0, len(held) - 1)))
        self.act("prepend_n" if draw_bool(data) else "append_n", tuple(run))

    @precondition(lambda self: hasattr(self, "model"))
    @rule(data=st.data())
    def iter_blocks_after(self, data):
        order = list(self.model.order)
        self.act("iter_blocks_after", pick(data, [None, *order]))

    # -- actions -------------------------------------------------------------------------------

    def do_popleft(self):
        empty = not self.model.order
        self.call("pops-agree", "popleft", shown="queue.popleft()",
                  effect="refused: empty" if empty else "the front block")
        if empty:
            self.hazard("popleft refused: the queue is empty")
        self._note_emptied()

    def do_popleft_n(self, n: int):
        if n > len(self.model.order):
            raise InvalidAction("popleft_n: more blocks than the queue holds")
        self.call("pops-agree", "popleft_n", n, shown=f"queue.popleft_n({n})",
                  effect=f"the front {n}")
        self._note_emptied()

    def do_remove(self, block: int):
        if block not in self.model.order:
            raise InvalidAction("remove: the block is not in the queue")
        if self.model.order[0] != block and self.model.order[-1] != block:
            self.hazard("a block taken out of the middle")
        self.apply("remove", block, shown=f"queue.remove({block})", effect="taken out")
        self._note_emptied()

    def do_append(self, block: int):
        if block not in self._held():
            raise InvalidAction("append: the block is in the queue already")
        self.apply("append", block, shown=f"queue.append({block})", effect="to the back")
        self._note_refilled()

    def do_append_n(self, blocks: tuple[int, ...]):
        self._give_back("append_n", blocks, "to the back")

    def do_prepend_n(self, blocks: tuple[int, ...]):
        self._give_back("prepend_n", blocks, "to the front")
        if blocks:
            self.hazard("blocks given back to the front")

    def do_iter_blocks_after(self, cursor: int | None):
        if cursor is not None and cursor not in self.model.order:
            raise InvalidAction("iter_blocks_after: the cursor is not in the queue")
        if cursor is not None:
            self.hazard("a walk from a cursor")
        self.call("queue-order-agrees", "iter_blocks_after", cursor,
                  shown=f"queue.iter_blocks_after({cursor})", effect="the blocks after it")

    def _give_back(self, method: str, blocks: tuple[int, ...], where: str):
        held = self._held()
        if len(set(blocks)) != len(blocks) or not set(blocks) <= set(held):
            raise InvalidAction(f"{method}: a block twice, or one in the queue already")
        self.apply(method, blocks, shown=f"queue.{method}({blocks!r})", effect=where)
        self._note_refilled()

    # -- invariants ----------------------------------------------------------------------------

    @invariant()
    def queue_agrees(self):
        if not hasattr(self, "model"):
            return
        got, want = self.queue.get_all_free_blocks(), self.model.get_all_free_blocks()
        self.check("queue-order-agrees", got == want and
                   self.queue.num_free_blocks == len(want),
                   lambda: f"free blocks {got!r} ({self.queue.num_free_blocks} counted), "
                   f"model {want!r}")
        self.check_valid(self.queue)

    def state_checks(self) -> list[str]:
        return [f"assert queue.get_all_free_blocks() == {self.model.get_all_free_blocks()!r}",
                f"assert queue.num_free_blocks == {self.model.num_free_blocks}"]

    # -- helpers -------------------------------------------------------------------------------

    def _held(self) -> list[int]:
        return [b for b in range(self.world.num_blocks) if b not in self.model.order]

    def _note_emptied(self):
        self.emptied = self.emptied or (self.world.num_blocks > 0 and not self.model.order)

    def _note_refilled(self):
        if self.emptied:
            self.hazard("the queue emptied and refilled")
