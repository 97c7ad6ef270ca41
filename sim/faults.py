"""Faults at the operating-system boundary a file-system tier really uses.

``FaultyOS`` stands in for the ``os`` module inside a tier's I/O code (vLLM's
``tiering/fs/io.py`` is given one as its module global ``os``; the native tier takes one):
every call goes to the real ``os`` unless the machine armed a fault that this call matches,
in which case the first such fault is consumed and the call fails the way a real disk fails:

- ``write_short``: ``os.write`` writes half the block and returns that count;
- ``write_enospc`` / ``write_eio``: ``os.write`` raises ``ENOSPC`` / ``EIO``, writing nothing;
- ``replace_eio``: ``os.replace`` raises ``EIO``, renaming nothing;
- ``readv_short``: ``os.readv`` fills half the buffer and returns that count;
- ``readv_eio``: ``os.readv`` raises ``EIO``, reading nothing.

A crash point (``crash_at``) kills the process with SIGKILL inside the n-th ``write`` (after
half the block is written: a torn temp file) or at the n-th ``replace`` (the temp file is
whole, not yet renamed): no ``finally`` runs, as in a real crash. The crash-restart hunt
(``properties/secondary_tier_crash.py``) arms one in a child process.

Half a block stays a multiple of 512 bytes, so the calls also work with ``O_DIRECT``; a short
read goes through a page-aligned bounce buffer for the same reason.
"""

from __future__ import annotations

import errno
import mmap
import os
import signal

from models.secondary_tier_values import FAULT_CALL


class FaultyOS:
    def __init__(self) -> None:
        self.armed: list[str] = []
        self.fired: list[str] = []            # faults consumed, in order
        self.crash: tuple[str, int] | None = None   # ("write" | "replace", n): SIGKILL there
        self.calls = {"write": 0, "replace": 0}

    def crash_at(self, call: str, nth: int) -> None:
        """SIGKILL this process in the ``nth`` (from 0) ``write`` or ``replace`` from now."""
        self.crash = (call, nth)
        self.calls = {"write": 0, "replace": 0}

    def _crash_now(self, call: str) -> bool:
        nth = self.calls[call]
        self.calls[call] += 1
        return self.crash == (call, nth)

    @staticmethod
    def _die() -> None:
        os.kill(os.getpid(), signal.SIGKILL)

    def __getattr__(self, name: str):
        return getattr(os, name)

    def arm(self, fault: str) -> None:
        if fault not in FAULT_CALL:
            raise ValueError(f"unknown fault {fault!r}; known: {', '.join(FAULT_CALL)}")
        self.armed.append(fault)

    def _take(self, call: str) -> str | None:
        for fault in self.armed:
            if FAULT_CALL[fault] == call:
                self.armed.remove(fault)
                self.fired.append(fault)
                return fault
        return None

    def write(self, fd: int, data) -> int:
        if self._crash_now("write"):
            view = memoryview(data).cast("B")
            os.write(fd, view[:len(view) // 2])
            self._die()
        fault = self._take("write")
        if fault == "write_short":
            view = memoryview(data).cast("B")
            return os.write(fd, view[:len(view) // 2])
        if fault is not None:
            code = errno.ENOSPC if fault == "write_enospc" else errno.EIO
            raise OSError(code, os.strerror(code))
        return os.write(fd, data)

    def replace(self, src, dst) -> None:
        if self._crash_now("replace"):
            self._die()
        if self._take("replace"):
            raise OSError(errno.EIO, os.strerror(errno.EIO), src)
        os.replace(src, dst)

    def readv(self, fd: int, buffers) -> int:
        fault = self._take("readv")
        if fault == "readv_eio":
            raise OSError(errno.EIO, os.strerror(errno.EIO))
        if fault is None:
            return os.readv(fd, buffers)
        target = memoryview(buffers[0]).cast("B")
        bounce = mmap.mmap(-1, max(len(target), mmap.PAGESIZE))
        try:
            got = min(os.readv(fd, [bounce]), len(target)) // 2
            target[:got] = bounce[:got]
        finally:
            bounce.close()
        return got
