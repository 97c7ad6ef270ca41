"""Crash and restart: the file-system tier killed with SIGKILL at a drawn point, then a fresh
tier on the same directory (issue 13, part 3).

One round: a child process (``os.fork``) builds the tier on a fresh directory and runs a
drawn program of store jobs one at a time, telling the parent through a pipe which keys each
job was *reported* stored with. The tier's ``FaultyOS`` kills the child with SIGKILL inside
a drawn ``write`` (half the block in the temp file) or at a drawn ``replace`` (the temp file
whole, not renamed), or never. The parent then builds a fresh tier on the directory, probes
every key, loads every key found, and requires:

- ``crash-serves-subset``: every key found is one the child tried to store;
- ``crash-keeps-reported``: every key reported stored before the kill is found;
- ``crash-no-torn-data``: every key found loads, byte for byte (a torn file under a key's
  name, or a leftover temp file read as data, fails here), and no file under a key's name
  is short or foreign;
- ``crash-store-after-restart``: the fresh tier stores every key again (a leftover temp
  file must not block a key forever) and then finds them all.

Randomness outside Hypothesis: one ``random.Random(seed)``, its seed printed first. Bounded:
a fixed number of rounds, programs of at most four jobs, a child deadline.
"""

from __future__ import annotations

import os
import random
import select
import shutil
import signal
import tempfile
import time

from attrs import define, field

from models.tiered_lookup_values import LookupResult
from sim import targets

KEYS = tuple(range(6))
CHILD_DEADLINE_S = 120


class CrashCheckFailed(AssertionError):
    def __init__(self, property: str, detail: str):
        super().__init__(f"{property}: {detail}")
        self.property = property


@define
class CrashRound:
    seed: int
    program: list[tuple[int, ...]]
    crash: tuple[str, int] | None
    killed: bool = False
    reported: set[int] = field(factory=set)
    found: set[int] = field(factory=set)
    temp_left: int = 0

    def describe(self) -> str:
        where = "never" if self.crash is None else f"{self.crash[0]} #{self.crash[1]}"
        return (f"SEED={self.seed} program={self.program} crash at {where}: "
                f"{'killed' if self.killed else 'exited'}, reported {sorted(self.reported)}, "
                f"found {sorted(self.found)}, {self.temp_left} temp file(s) left")


def draw_round(seed: int) -> CrashRound:
    rng = random.Random(seed)
    program = [tuple(rng.sample(KEYS, rng.randint(1, 2))) for _ in range(rng.randint(1, 4))]
    writes = sum(len(job) for job in program)
    crash = None if rng.random() < 0.15 else (rng.choice(("write", "replace")),
                                              rng.randrange(writes))
    return CrashRound(seed, program, crash)


def _child(target: str, root: str, rnd: CrashRound, ack_fd: int,
           fresh_temp_names: bool) -> None:
    if target == "vllm" and fresh_temp_names:
        # A restarted engine is a new process; a forked child would reuse the temp-file
        # name its parent drew (see test_secondary_tier_crash.py for what that does).
        from sim.vllm.secondary_tier import forget_temp_name
        forget_temp_name()
    tier = targets.make(target, "secondary_tier", num_chunks=2, tier="fs", root=root)
    if rnd.crash is not None:
        tier.os.crash_at(*rnd.crash)
    for job_id, keys in enumerate(rnd.program):
        for chunk, key in enumerate(keys):
            tier.write_chunk(chunk, key)
        tier.submit_store(job_id, keys, tuple(range(len(keys))))
        tier.run_job(job_id)
        for done in tier.get_finished_jobs():
            if done.success:
                os.write(ack_fd, bytes(keys))


def _run_child(target: str, root: str, rnd: CrashRound, fresh_temp_names: bool) -> None:
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:                                    # the child: never returns
        code = 0
        try:
            os.close(read_fd)
            _child(target, root, rnd, write_fd, fresh_temp_names)
        except BaseException:   # noqa: BLE001 - reported to the parent by the exit code
            code = 3
        os._exit(code)
    os.close(write_fd)
    deadline = time.monotonic() + CHILD_DEADLINE_S
    data = b""
    while True:
        ready, _, _ = select.select([read_fd], [], [], 1.0)
        if ready:
            chunk = os.read(read_fd, 4096)
            if not chunk:
                break
            data += chunk
        elif time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
    os.close(read_fd)
    _, status = os.waitpid(pid, 0)
    if os.WIFEXITED(status) and os.WEXITSTATUS(status) != 0:
        raise CrashCheckFailed("crash-child-ran", f"the child failed before any kill "
                               f"(exit {os.WEXITSTATUS(status)}): {rnd.describe()}")
    rnd.killed = os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL
    rnd.reported = set(data)


def _found(tier) -> set[int]:
    for key in KEYS:
        tier.lookup(key)                            # probes queued
    tier.on_schedule_end()                          # probes sent: they see the disk now
    return {k for k in KEYS if tier.lookup(k) is LookupResult.HIT}


def _check_restart(target: str, root: str, rnd: CrashRound) -> None:
    tier = targets.make(target, "secondary_tier", num_chunks=2, tier="fs", root=root)
    rnd.found = _found(tier)
    rnd.temp_left = tier.temp_files()
    tried = {k for job in rnd.program for k in job}

    def fail(prop: str, what: str) -> None:
        raise CrashCheckFailed(prop, f"{what}; {rnd.describe()}")

    if not rnd.found <= tried:
        fail("crash-serves-subset", f"found {sorted(rnd.found - tried)}, never stored")
    if not rnd.reported <= rnd.found:
        fail("crash-keeps-reported", f"reported stored but lost: "
             f"{sorted(rnd.reported - rnd.found)}")
    bad = [(k, s) for k, s in tier.stored_files() if s != "ok"]
    if bad:
        fail("crash-no-torn-data", f"files under a key's name not whole: {bad}")
    job_id = 0
    for key in sorted(rnd.found):
        tier.submit_load(job_id, (key,), (0,))
        tier.run_job(job_id)
        done = tier.get_finished_jobs()
        if not done or not done[0].success or tier.read_chunk(0) != key:
            fail("crash-no-torn-data", f"key {key} found after the restart but its load "
                 f"gave {done} with chunk holding {tier.read_chunk(0)}'s bytes")
        job_id += 1
    for key in sorted(tried):
        tier.write_chunk(0, key)
        tier.submit_store(job_id, (key,), (0,))
        tier.run_job(job_id)
        done = tier.get_finished_jobs()
        if not done or not done[0].success:
            fail("crash-store-after-restart", f"storing key {key} again after the restart "
                 f"failed: {done}")
        job_id += 1
    tier.on_request_finished()
    if _found(tier) != tried:
        fail("crash-store-after-restart", f"after storing again, found {sorted(_found(tier))}")


def crash_round(target: str, seed: int, fresh_temp_names: bool = True) -> CrashRound:
    """One round on a fresh temporary directory (removed afterwards)."""
    rnd = draw_round(seed)
    root = tempfile.mkdtemp(prefix="lch-crash-")
    try:
        _run_child(target, root, rnd, fresh_temp_names)
        _check_restart(target, root, rnd)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return rnd


def crash_hunt(target: str, seed: int, rounds: int, log=print,
               fresh_temp_names: bool = True) -> list[CrashRound]:
    """``rounds`` rounds from ``seed``; the first failure raises ``CrashCheckFailed``."""
    log(f"SEED={seed} crash-restart hunt on {target}: {rounds} rounds")
    done = []
    for i in range(rounds):
        done.append(crash_round(target, seed * 1000 + i, fresh_temp_names))
        log(done[-1].describe())
    return done
