"""Run tasks in forked children, a few at a time, each with a time limit.

The parent imports vLLM (10-30 s) and the harness once; every task forks a fresh child that
inherits them, so a mutant costs its tests and not an import. A child writes its result as
JSON to a file and exits; one that runs past its limit is killed with its process group (a
mutant may loop forever). Output of a child goes to its own log file, not the terminal.

The limit is on the child's CPU time, not its wall time: on a shared machine another user's
load stretches a healthy run (measured: a 44 s suite took 150 s) and a wall-clock limit
would count a surviving mutant as killed. A mutant that loops burns CPU and still hits it; a
wall-clock cap of ``WALL_FACTOR`` times the limit catches one that sleeps.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path

from attrs import define, field

POLL_S = 0.05
WALL_FACTOR = 10
TICKS_PER_S = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


@define
class Task:
    key: str                                  # unique: names the log and result files
    run: Callable[[], dict]                   # what the child does; returns its result
    timeout_s: float                          # CPU seconds (see the module docstring)
    result: dict | None = None
    seconds: float = 0.0                      # wall time
    cpu_seconds: float = 0.0


@define
class _Running:
    task: Task
    pid: int
    started: float
    log: Path = field(default=None)


def run_all(tasks: Iterable[Task], jobs: int, workdir: Path,
            on_done: Callable[[Task], None] = lambda task: None) -> list[Task]:
    """Run every task in its own forked child, ``jobs`` at once; fills ``task.result``
    (``{"outcome": "timeout"}`` for a killed child, ``"crash"`` for one that died without a
    result) and ``task.seconds``, and calls ``on_done`` as each finishes."""
    queue, running, done = list(tasks), {}, []
    workdir.mkdir(parents=True, exist_ok=True)
    try:
        while queue or running:
            while queue and len(running) < jobs:
                task = queue.pop(0)
                running_task = _start(task, workdir)
                running[running_task.pid] = running_task
            finished = _reap(running, workdir)
            for task in finished:
                done.append(task)
                on_done(task)
            if not finished:
                time.sleep(POLL_S)
    finally:
        for r in running.values():             # interrupted: our children go with us
            _kill(r.pid)
    return done


def _start(task: Task, workdir: Path) -> _Running:
    log = workdir / f"{task.key}.log"
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:                               # the child: never returns
        _child(task, log, workdir / f"{task.key}.json")
    try:
        os.setpgid(pid, pid)                   # also here: no window before the child's own
    except (PermissionError, ProcessLookupError):
        pass
    return _Running(task, pid, time.monotonic(), log)


def _child(task: Task, log: Path, result_path: Path) -> None:
    code = 0
    try:
        os.setpgid(0, 0)                       # one group: a timeout kills what it spawned
        out = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(out, 1)
        os.dup2(out, 2)
        try:
            result = task.run()
        except BaseException as error:  # noqa: BLE001 - report anything, never propagate
            result = {"outcome": "error", "message": f"{type(error).__name__}: {error}"}
        result_path.write_text(json.dumps(result))
        sys.stdout.flush()
        sys.stderr.flush()
    except BaseException:  # noqa: BLE001
        code = 3
    os._exit(code)


def _reap(running: dict[int, _Running], workdir: Path) -> list[Task]:
    finished = []
    for pid, r in list(running.items()):
        cpu = _cpu_seconds(pid)                # read before the wait reaps the child
        elapsed = time.monotonic() - r.started
        waited, _status, usage = os.wait4(pid, os.WNOHANG)
        if waited:
            cpu = usage.ru_utime + usage.ru_stime
        elif cpu <= r.task.timeout_s and elapsed <= WALL_FACTOR * r.task.timeout_s:
            continue
        if waited == 0:
            _kill(pid)
            r.task.result = {"outcome": "timeout", "message": f"killed after {cpu:.0f} s of "
                             f"CPU ({elapsed:.0f} s wall); the limit is {r.task.timeout_s:.0f}"}
        else:
            r.task.result = _read_result(workdir / f"{r.task.key}.json", r.log)
        r.task.seconds, r.task.cpu_seconds = elapsed, cpu
        del running[pid]
        finished.append(r.task)
    return finished


def _cpu_seconds(pid: int) -> float:
    """User + system CPU time of a running child (Linux ``/proc``; 0 where unreadable, which
    leaves only the wall-clock cap)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / TICKS_PER_S


def _read_result(path: Path, log: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        tail = log.read_text(errors="replace")[-400:] if log.exists() else ""
        return {"outcome": "crash", "message": f"the child died without a result: {tail}"}


def _kill(pid: int) -> None:
    for send in (lambda: os.killpg(pid, signal.SIGKILL), lambda: os.kill(pid, signal.SIGKILL)):
        try:
            send()
        except (ProcessLookupError, PermissionError):
            pass
    try:
        os.waitpid(pid, 0)
    except ChildProcessError:
        pass
