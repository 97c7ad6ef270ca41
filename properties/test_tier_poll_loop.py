"""The tier-poll thread's promises when things go wrong (vLLM 0.33.0's
``TieringOffloadingManager``), its tiers played by the harness
(``sim/vllm/tiered_lookup_tiering.py``):

- a round that raises does not end the thread; it gives up only once rounds have failed
  continuously for ``_TIER_POLL_GIVE_UP_AFTER_S``, a success starting the count again, and
  logs a run of failures at most once per ``_TIER_POLL_ERROR_LOG_INTERVAL_S``; from vLLM
  0.34.0 it never gives up (peers are served while the engine idles): after
  ``_TIER_POLL_BACK_OFF_AFTER_S`` of failures it pauses ``_TIER_POLL_BACKOFF_S`` between
  rounds, says so once, and a success returns it to the interval;
- a round polls only while holding the manager's lock and releases it before pausing; while
  the lock stays unavailable it warns once it has waited more than
  ``_TIER_POLL_STALL_WARN_S``, and again only after as long once more;
- the thread is a daemon, started only when a tier asked and the interval is positive;
- ``shutdown`` never shuts a tier down under a round still running: it raises if the round
  keeps the lock, and shuts the tiers down holding the lock once the round lets it go; a
  tier whose shutdown fails does not stop the others, and keeps the primary's memory.

Time is the test's: the loop body runs in the test's thread with the manager module's clock,
lock and stop event replaced (``PollLoopDriver``), so a 30 s give-up takes no wall time. Only
the shutdown tests run the real thread, and they wait on events, not on sleeps. The native
manager has no thread: on other targets the tests skip.
"""

from __future__ import annotations

import threading
from types import SimpleNamespace

import pytest

from models.tiered_lookup_values import TierSpec
from properties.run import vllm_tiering_module
from properties.scenarios import agrees, holds

ROUND_S = 0.25          # the test's clock advances this much at each pause between rounds
THREAD_NAME = "vllm_offload_tier_poll"


def _module(target: str):
    return vllm_tiering_module(
        target, "the tier-poll thread is vLLM's (the native manager polls per call)",
        "its tiering manager has no tier-poll thread (from 0.33.0)")


def _world(interval_s: float = 0):
    from sim.vllm.tiered_lookup_tiering import VllmTieringWorld
    return VllmTieringWorld(4, [TierSpec("t0", False, True, False),
                                TierSpec("t1", False, False, False)],
                            tier_poll_interval_s=interval_s)


class Log:
    """The manager module's logger, recorded: (level, message, test-clock time)."""

    def __init__(self, clock=None, on_error=None):
        self.records: list[tuple[str, str, float]] = []
        self.clock, self.on_error = clock, on_error

    def _add(self, level, msg, *args, **_):
        now = self.clock.now if self.clock else 0.0
        self.records.append((level, msg % args if args else msg, now))
        if level == "error" and self.on_error is not None:
            self.on_error()

    def info(self, *a, **k):
        self._add("info", *a, **k)

    def warning(self, *a, **k):
        self._add("warning", *a, **k)

    def error(self, *a, **k):
        self._add("error", *a, **k)

    def exception(self, *a, **k):
        self._add("exception", *a, **k)

    def times(self, level: str, text: str = "") -> list[float]:
        return [t for lvl, msg, t in self.records if lvl == level and text in msg]


class PollLoopDriver:
    """Runs the tier-poll loop's body in this thread, on the test's clock: each pause between
    rounds advances it by ``ROUND_S``; a failed lock attempt by the timeout it waited.
    ``lock_free(now)`` says whether the lock can be had at a moment; ``failing(now)``
    whether the polled tier's poll raises then. Checks, at every step, that a round polls
    only with the lock held and pauses only with it released."""

    def __init__(self, module, world, monkeypatch, lock_free, failing, rounds_max=2000):
        self.module, self.world, self.manager = module, world, world.manager
        self.now = 1000.0
        self.lock_free, self.failing = lock_free, failing
        self.held = False
        self.rounds, self.rounds_max = 0, rounds_max
        self.stopped = False
        self.log = Log(self)
        self.poll_times: list[float] = []
        self.pauses: list[tuple[float, float | None]] = []   # (when, the pause asked for)
        monkeypatch.setattr(module, "time", SimpleNamespace(monotonic=lambda: self.now))
        monkeypatch.setattr(module, "logger", self.log)
        self.manager._lock = self          # vLLM 0.33.0: the manager's lock, as the loop uses it
        self.manager._tier_poll_stop = self
        world.tiers[0].on_poll = self._polled

    # the lock
    def acquire(self, blocking=True, timeout=-1):
        holds("tier-poll-locking", not self.held,
              "the poll loop asked for the manager lock it already holds")
        if self.lock_free(self.now):
            self.held = True
            return True
        self.now += timeout
        return False

    def release(self):
        holds("tier-poll-locking", self.held, "the poll loop released a lock it does not hold")
        self.held = False

    # the stop event
    def is_set(self):
        self.rounds += 1
        return self.stopped or self.rounds > self.rounds_max

    def wait(self, timeout=None):
        holds("tier-poll-locking", not self.held, "the poll loop paused holding the manager lock")
        self.pauses.append((self.now, timeout))
        # At least a round's time, so a zero interval still moves the clock.
        self.now += max(ROUND_S, timeout or 0)
        return self.stopped

    def set(self):
        self.stopped = True

    def _polled(self, tier):
        holds("tier-poll-locking", self.held, "a tier was polled without the manager lock")
        self.poll_times.append(self.now)
        tier.poll_error = RuntimeError("peer gone") if self.failing(self.now) else None

    def run(self) -> bool:
        """Run the loop until it returns; True if it stopped by itself (gave up)."""
        self.manager._tier_poll_loop()
        holds("tier-poll-locking", not self.held,
              "the poll loop returned holding the manager lock")
        return self.rounds <= self.rounds_max


def _expected_error_logs(fail_times: list[float], interval_s: float) -> list[float]:
    """A failing round logs when at least ``interval_s`` passed since the last it logged."""
    logged: list[float] = []
    for t in fail_times:
        if not logged or t - logged[-1] >= interval_s:
            logged.append(t)
    return logged


def _gives_up(module) -> bool:
    """Whether the release's thread gives up after failing rounds (vLLM 0.33.0), or backs off
    and keeps polling (vLLM >=0.34.0)."""
    return hasattr(module, "_TIER_POLL_GIVE_UP_AFTER_S")


def test_failing_rounds_give_up_after_the_limit(target, monkeypatch):
    module = _module(target)
    if not _gives_up(module):
        pytest.skip(f"n/a: vLLM {_release()}'s tier-poll thread never gives up: it backs off "
                    "(test_failing_rounds_back_off_and_keep_polling)")
    world = _world()
    start = 1000.0
    driver = PollLoopDriver(module, world, monkeypatch, lambda now: True,
                            lambda now: now >= start + 2)
    holds("tier-poll-give-up", driver.run(), "rounds failing continuously must end the thread "
          "(on_schedule_end still serves the tiers)")
    fails = [t for t in driver.poll_times if t >= start + 2]
    give_up = module._TIER_POLL_GIVE_UP_AFTER_S
    holds("tier-poll-give-up", fails and fails[-1] - fails[0] == give_up,
          lambda: f"the thread gave up {fails[-1] - fails[0] if fails else None} s after "
                  f"rounds began failing; it must give up at the first round {give_up} s "
                  "into the failures")
    holds("tier-poll-give-up", driver.log.times("exception") == _expected_error_logs(
        fails, module._TIER_POLL_ERROR_LOG_INTERVAL_S),
        "a run of failing rounds logs its traceback at most once per interval, first at once")
    agrees("tier-poll-give-up", driver.log.times("error", "stopping"), [fails[-1]])  # once
    holds("tier-poll-thread", driver.poll_times[:8] == [start + ROUND_S * n for n in range(8)],
          "rounds that succeed poll every interval")


def test_a_success_restarts_the_failure_count(target, monkeypatch):
    module = _module(target)
    world = _world()
    # The limit after which failing rounds end the thread (0.33.0) or slow it (0.34.0 on).
    prop, limit = ("tier-poll-give-up", module._TIER_POLL_GIVE_UP_AFTER_S) if _gives_up(module) \
        else ("tier-poll-back-off", module._TIER_POLL_BACK_OFF_AFTER_S)
    start, half = 1000.0, limit * 2 / 3

    def failing(now):   # two failing runs each shorter than the limit, one success between
        return not (start + half <= now < start + half + ROUND_S)
    driver = PollLoopDriver(module, world, monkeypatch, lambda now: True, failing,
                            rounds_max=int(2 * half / ROUND_S))
    holds(prop, not driver.run(),
          f"two runs of failures of {half} s each, a successful round between them, must not "
          f"end the thread: it gives up only after {limit} s of consecutive failures")
    holds(prop, not driver.log.times("error"),
          lambda: f"two runs of failures of {half} s each, a successful round between them, "
                  f"reached the {limit} s limit (logged {driver.log.times('error', '')}): a "
                  "success must restart the count")


def test_failing_rounds_back_off_and_keep_polling(target, monkeypatch):
    module = _module(target)
    if _gives_up(module):
        pytest.skip(f"n/a: vLLM {_release()}'s tier-poll thread gives up instead "
                    "(test_failing_rounds_give_up_after_the_limit)")
    world = _world()
    after, backoff = module._TIER_POLL_BACK_OFF_AFTER_S, module._TIER_POLL_BACKOFF_S
    start = 1000.0
    first_fail, recover = start + 2, start + 2 + after + 10 * backoff

    def failing(now):
        return first_fail <= now < recover
    driver = PollLoopDriver(module, world, monkeypatch, lambda now: True, failing,
                            rounds_max=int((recover - start) / ROUND_S) + 40)
    holds("tier-poll-back-off", not driver.run(), "rounds failing continuously must not end "
          "the thread: it keeps polling so peers are served while the engine idles")
    fails = [t for t in driver.poll_times if failing(t)]
    # After each round: the back-off pause once failures have lasted the limit, else the
    # interval (the world's: 0).
    want = [(t, backoff if failing(t) and t - fails[0] >= after else 0)
            for t, _ in driver.pauses]
    agrees("tier-poll-back-off", driver.pauses, want)
    holds("tier-poll-back-off", any(t >= recover for t in driver.poll_times) and
          any(t - fails[0] >= after for t in fails),
          "the thread polled through the back-off and after the failures ended")
    agrees("tier-poll-back-off", driver.log.times("error", "backing off"),
           [t for t in fails if t - fails[0] >= after][:1])            # once, when it begins
    logged = _expected_error_logs(fails, module._TIER_POLL_ERROR_LOG_INTERVAL_S)
    agrees("tier-poll-back-off", (driver.log.times("exception"),
                                  driver.log.times("warning", "consecutive")),
           (logged[:1], logged[1:]))   # the first failure's traceback, then a count per interval


def _release() -> str:
    from sim.vllm import release
    return release.release()


def test_an_unavailable_lock_warns_and_polls_nothing(target, monkeypatch):
    module = _module(target)
    world = _world()
    start, warn = 1000.0, module._TIER_POLL_STALL_WARN_S
    # Unavailable for 20 s, then free for one round, then unavailable for over 2 * warn s.

    def lock_free(now):
        return start + 20 <= now < start + 20 + ROUND_S or now >= start + 25 + 2 * warn + 5

    driver = PollLoopDriver(module, world, monkeypatch, lock_free, lambda now: False,
                            rounds_max=200)
    driver.run()
    holds("tier-poll-locking", all(lock_free(t) for t in driver.poll_times),
          "a tier was polled without the lock")
    warnings = [(msg, t) for lvl, msg, t in driver.log.records if lvl == "warning"]
    times = [t for _, t in warnings]
    holds("tier-poll-locking", times and times[0] > start + 20 + warn,
          f"warned at {[t - start for t in times]} s: only once the lock has been unavailable "
          f"for more than {warn} s (the first 20 s stall ended with a round)")
    holds("tier-poll-locking", len(times) == 2 and times[1] - times[0] > warn,
          f"warned at {[t - start for t in times]} s: once per {warn} s of one stall")
    for msg, _ in warnings:
        waited = _seconds_waited(msg)
        holds("tier-poll-locking", waited is not None and warn < waited <= warn + 2,
              f"the warning reports {waited} s unavailable: {msg!r}")
    holds("tier-poll-locking", driver.poll_times, "once the lock is free again the rounds poll")


def _seconds_waited(warning: str) -> float | None:
    """The seconds a stall warning says the lock was unavailable ("... for 12.5s ..."); None
    when the message does not say (a mutant's garbled warning fails the property, not the
    test's parsing)."""
    try:
        return float(warning.split(" for ")[1].split("s")[0])
    except (IndexError, ValueError):
        return None


def test_the_thread_is_a_daemon_started_when_asked(target, monkeypatch):
    module = _module(target)
    log = Log()
    monkeypatch.setattr(module, "logger", log)
    world = _world(interval_s=0)
    holds("tier-poll-thread", not _poll_threads(), "an interval of zero runs no tier-poll thread")
    world.shutdown()
    world = _world(interval_s=0.001)
    try:
        threads = _poll_threads()
        holds("tier-poll-thread", len(threads) == 1 and threads[0].daemon,
              "the tier-poll thread must be a daemon (it must not keep the process alive)")
        holds("tier-poll-thread", any(lvl == "info" and "t0" in msg
                                      for lvl, msg, _ in log.records),
              "the thread's start is logged, naming the tiers it polls")
    finally:
        world.shutdown()
    holds("tier-poll-thread", not _poll_threads(), "shutdown stops the tier-poll thread")


def _poll_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == THREAD_NAME and t.is_alive()]


class StuckRound:
    """The polled tier's poll blocks until ``let_go``: a round stuck in the tier's I/O."""

    def __init__(self, world):
        self.entered, self.go, self.done = threading.Event(), threading.Event(), False
        self.world = world
        world.tiers[0].on_poll = self._poll
        for tier in world.tiers:
            tier.on_shutdown = self._shutdown
        self.shutdowns: list[tuple[str, bool, bool]] = []

    def _poll(self, tier):
        if self.done:
            return
        self.entered.set()
        self.go.wait(30)
        self.done = True

    def _shutdown(self, tier):
        # (tier, was a round still in the tier, was the manager's lock held)
        self.shutdowns.append((tier.name, self.entered.is_set() and not self.done,
                               self.world.manager.lock.locked()))

    def let_go(self):
        self.go.set()


def test_shutdown_refuses_while_a_round_holds_the_lock(target, monkeypatch):
    module = _module(target)
    monkeypatch.setattr(module, "_TIER_POLL_JOIN_TIMEOUT_S", 0.05)
    log = Log()
    monkeypatch.setattr(module, "logger", log)
    world = _world(interval_s=0.001)
    stuck = StuckRound(world)
    holds("tier-poll-thread", stuck.entered.wait(30), "the tier-poll thread never polled")
    refused = _raised(world.shutdown, RuntimeError)
    holds("tier-poll-shutdown", refused is not None and "lock" in str(refused),
          f"shutdown under a round keeping the lock must raise a RuntimeError naming the "
          f"lock; it raised {refused!r}")
    holds("tier-poll-shutdown", stuck.shutdowns == [] and world.released == [],
          f"shutdown released {world.released} under a round still running")
    holds("tier-poll-shutdown", log.times("error", "did not exit"),
          "the thread that would not stop is logged")
    stuck.let_go()
    for thread in _poll_threads():
        thread.join(30)
    world.shutdown()
    agrees("shutdown-releases-all", world.released, ["t0", "t1", "primary"])


def _raised(call, kind: type[BaseException]) -> BaseException | None:
    """The ``kind`` error ``call()`` raised, or None if it returned (another error passes
    through: it is no answer to the property)."""
    try:
        call()
    except kind as error:
        return error
    return None


def test_shutdown_waits_for_the_round_then_holds_the_lock(target, monkeypatch):
    """The round outlives the join but lets the lock go in time (here: as soon as the
    manager logs that the thread did not exit): the tiers are shut down holding the lock,
    after the round, once each, and the lock is free again afterwards."""
    module = _module(target)
    monkeypatch.setattr(module, "_TIER_POLL_JOIN_TIMEOUT_S", 2.0)
    world = _world(interval_s=0.001)
    stuck = StuckRound(world)
    monkeypatch.setattr(module, "logger", Log(on_error=stuck.let_go))
    holds("tier-poll-thread", stuck.entered.wait(30), "the tier-poll thread never polled")
    world.shutdown()
    holds("tier-poll-shutdown", stuck.shutdowns == [("t0", False, True), ("t1", False, True)],
          f"tier shutdowns (tier, under a running round, lock held): {stuck.shutdowns}")
    agrees("shutdown-releases-all", world.released, ["t0", "t1", "primary"])
    holds("tier-poll-shutdown", not world.manager.lock.locked(),
          "shutdown must release the lock it took")
    for thread in _poll_threads():
        thread.join(30)


def test_a_failing_tier_shutdown_keeps_the_primary(target, monkeypatch):
    module = _module(target)
    log = Log()
    monkeypatch.setattr(module, "logger", log)
    world = _world()
    world.tiers[0].shutdown_error = OSError("tier stuck")
    failed = _raised(world.shutdown, OSError)
    holds("tier-poll-shutdown", failed is not None and "tier stuck" in str(failed),
          f"a tier's failed shutdown must reach the caller; shutdown raised {failed!r}")
    holds("tier-poll-shutdown", world.released == ["t0", "t1"],
          f"released {world.released}: every tier gets its shutdown, and the primary's memory "
          "stays while a failed tier may still use it")
    holds("tier-poll-shutdown", log.times("exception", "t0") or log.times("exception", "#0"),
          "the failed tier's shutdown is logged")
