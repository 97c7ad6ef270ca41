"""A small linearizability checker (the approach of Wing & Gong, Lowe, and Porcupine /
Knossos): a concurrent history is linearizable when some order of its operations, consistent
with real time (an operation that responded before another was invoked comes first), makes
every operation return what a sequential model returns.

No well-kept Python checker exists on PyPI (Porcupine is Go, Knossos Clojure), so this one is
kept small: a depth-first search over which operation takes effect next, among those invoked
before the earliest pending response, memoized on (operations left, model state) as
Porcupine does. ``properties/test_linearizability.py`` tests it on histories known to be
linearizable and known not to be.

The sequential model of a block store: ``store(k)`` adds ``k``; ``load(k)`` returns ``k``
(its own whole bytes) when ``k`` was stored, else None (a miss). A torn or foreign read
(-1, another key) is never a model answer, so a history containing one is not linearizable.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Hashable

from attrs import frozen


@frozen
class Op:
    thread: int
    name: str               # "store" | "load"
    key: int
    invoked: float          # time.monotonic() at the call
    responded: float        # time.monotonic() at the return
    result: object          # what the call returned

    def __str__(self) -> str:
        return (f"t{self.thread} {self.name}({self.key}) -> {self.result!r} "
                f"[{self.invoked:.6f}, {self.responded:.6f}]")


Model = Callable[[Hashable, Op], tuple[bool, Hashable]]


def block_store(state: frozenset, op: Op) -> tuple[bool, frozenset]:
    """(whether ``op``'s result is what the model returns in ``state``, the next state)."""
    if op.name == "store":
        return op.result is True, state | {op.key}
    return op.result == (op.key if op.key in state else None), state


def linearizable(history: list[Op], model: Model = block_store,
                 initial: Hashable = frozenset()) -> list[Op] | None:
    """A linearization of ``history`` (operations in the order they take effect), or None."""
    ops = sorted(history, key=lambda o: o.invoked)
    seen: set[tuple[frozenset, Hashable]] = set()

    def search(left: frozenset, state: Hashable, order: list[Op]) -> list[Op] | None:
        if not left:
            return order
        if (left, state) in seen:
            return None
        seen.add((left, state))
        first_response = min(ops[i].responded for i in left)
        for i in sorted(left):
            if ops[i].invoked > first_response:
                continue                      # invoked after another responded: not first
            ok, after = model(state, ops[i])
            if ok:
                found = search(left - {i}, after, [*order, ops[i]])
                if found is not None:
                    return found
        return None

    return search(frozenset(range(len(ops))), initial, [])


class Recorder:
    """Records each call's invocation and response times from several threads."""

    def __init__(self) -> None:
        self.history: list[Op] = []
        self._lock = threading.Lock()

    def call(self, thread: int, name: str, key: int, fn: Callable[[], object]) -> object:
        invoked = time.monotonic()
        result = fn()
        responded = time.monotonic()
        with self._lock:
            self.history.append(Op(thread, name, key, invoked, responded, result))
        return result
