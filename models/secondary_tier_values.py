"""Values of the secondary-tier subsystem (frozen, hashable, pasteable reprs): a finished
job, the faults the machine can arm at the operating-system boundary, and the bytes a chunk
of a key holds.

A key's bytes are fixed (keys are content hashes): an 8-byte header naming the key, then a
pattern that depends on the key and the position, so a chunk or a file read back says whose
bytes it holds, and a short one reads as a prefix.
"""

from __future__ import annotations

import functools

from attrs import frozen

CHUNK_BYTES = 4096          # one page: vLLM's file-system tier may use O_DIRECT

# Faults armed by the machine; each is consumed by the first operating-system call it
# matches (the write of a block's temp file, its rename into place, the read of a block).
FAULTS = ("write_short", "write_enospc", "write_eio", "replace_eio", "readv_short",
          "readv_eio")
FAULT_CALL = {"write_short": "write", "write_enospc": "write", "write_eio": "write",
              "replace_eio": "replace", "readv_short": "readv", "readv_eio": "readv"}

# What a file at a key's path holds: the key's whole bytes, a prefix of them, or other bytes.
OK, SHORT, GARBAGE = "ok", "short", "garbage"


@frozen
class JobDone:
    """``get_finished_jobs()``'s entry: the job, whether it succeeded and, for a failed
    load, the keys loaded before the failure (None: all keys share the job's fate)."""

    job_id: int
    success: bool
    successful_keys: tuple[int, ...] | None = None


@functools.lru_cache(maxsize=256)
def payload(key: int, size: int = CHUNK_BYTES) -> bytes:
    """The bytes of ``key``'s chunk."""
    head = (key + 1).to_bytes(8, "little")
    step = 2 * key + 1
    return head + bytes((step * i + key) % 251 for i in range(size - 8))


def holder(data: bytes, size: int = CHUNK_BYTES) -> int | None:
    """Whose whole bytes ``data`` holds: a key, None for zeros (never written), -1 for
    anything else (a torn or foreign chunk)."""
    if not any(data):
        return None
    key = int.from_bytes(data[:8], "little") - 1
    return key if 0 <= key < 1 << 20 and data == payload(key, size) else -1


def file_state(key: int, data: bytes, size: int = CHUNK_BYTES) -> str:
    """OK, SHORT (a proper prefix of the key's bytes) or GARBAGE."""
    want = payload(key, size)
    if data == want:
        return OK
    return SHORT if len(data) < size and want.startswith(data) else GARBAGE
