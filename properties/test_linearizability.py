"""Real threads: a block tier called from several caller threads at once, each call's
invocation and response recorded, the history checked for linearizability against the
sequential block-store model (``properties/linearizability.py``).

Against ``vllm`` this is the real ``FileSystemTierManager`` with its real I/O thread pool
(callers hold one lock around manager calls, the I/O runs concurrently on the pool); against
``native`` an in-tree tier with one lock. The same rounds must catch the native tier with its
lock removed (a store publishes a half-written block). Each round's program comes from one
``random.Random(seed)``; the budget is fixed.
"""

from __future__ import annotations

import random
import threading

from properties.linearizability import Op, Recorder, linearizable
from properties.run import unavailable
from sim.errors import TargetUnavailable
from sim.targets import make_threaded_tier

THREADS = 4
OPS_PER_THREAD = 6
KEYS = 3
ROUNDS = {"native": 40, "vllm": 12}
SEED = 6


def run_round(tier, seed: int) -> list[Op]:
    rng = random.Random(seed)
    programs = [[(rng.choice(("store", "load", "load")), rng.randrange(KEYS))
                 for _ in range(OPS_PER_THREAD)] for _ in range(THREADS)]
    recorder, start = Recorder(), threading.Barrier(THREADS)

    def caller(thread: int) -> None:
        start.wait()
        for name, key in programs[thread]:
            recorder.call(thread, name, key, lambda n=name, k=key: getattr(tier, n)(k))

    threads = [threading.Thread(target=caller, args=(t,)) for t in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not any(t.is_alive() for t in threads), "a caller thread hung"
    return recorder.history


def hunt(target: str, rounds: int, unlocked: bool = False) -> tuple[int, list[Op] | None]:
    """(histories checked, the first history that is not linearizable or None)."""
    for i in range(rounds):
        tier = make_threaded_tier(target, unlocked=unlocked)
        try:
            history = run_round(tier, SEED * 1000 + i)
        finally:
            tier.close()
        if linearizable(history) is None:
            return i + 1, history
    return rounds, None


def test_tier_is_linearizable_under_real_threads(target):
    base = target.partition(":")[0]
    try:
        checked, bad = hunt(target, ROUNDS.get(base, 12))
    except TargetUnavailable as why:
        unavailable(target, why)
    shown = "\n".join(str(o) for o in sorted(bad or [], key=lambda o: o.invoked))
    assert bad is None, f"not linearizable (SEED={SEED}, after {checked} rounds):\n{shown}"


def test_a_removed_lock_is_caught():
    checked, bad = hunt("native", ROUNDS["native"], unlocked=True)
    assert bad is not None, f"the planted race was not caught in {checked} rounds"


# -- the checker on histories known to be linearizable and known not to be --------------------

def op(thread, name, key, invoked, responded, result):
    return Op(thread, name, key, invoked, responded, result)


def test_checker_accepts_a_load_concurrent_with_its_store_either_way():
    # t0 stores 1 during [0, 10]; t1 loads 1 during [2, 4] (miss) and [5, 8] (hit).
    history = [op(0, "store", 1, 0, 10, True), op(1, "load", 1, 2, 4, None),
               op(1, "load", 1, 5, 8, 1)]
    assert linearizable(history) is not None


def test_checker_accepts_a_sequential_history():
    history = [op(0, "load", 2, 0, 1, None), op(0, "store", 2, 2, 3, True),
               op(1, "load", 2, 4, 5, 2)]
    assert [o.invoked for o in linearizable(history)] == [0, 2, 4]


def test_checker_rejects_a_miss_after_the_store_responded():
    history = [op(0, "store", 1, 0, 1, True), op(1, "load", 1, 2, 3, None)]
    assert linearizable(history) is None


def test_checker_rejects_a_hit_then_a_miss_in_real_time_order():
    # The store is still running, but once a load saw the block a later load cannot miss.
    history = [op(0, "store", 1, 0, 10, True), op(1, "load", 1, 1, 2, 1),
               op(2, "load", 1, 3, 4, None)]
    assert linearizable(history) is None


def test_checker_rejects_torn_and_foreign_reads():
    assert linearizable([op(0, "store", 1, 0, 5, True), op(1, "load", 1, 1, 2, -1)]) is None
    assert linearizable([op(0, "store", 2, 0, 1, True), op(1, "load", 1, 2, 3, 2)]) is None
