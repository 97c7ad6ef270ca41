"""Writing what a run produces: output directories proven writable before the work starts,
and files (reports, reproducers) replaced atomically, so a stop at any moment (Ctrl-C, a
SIGTERM from CI, a full disk) leaves the old file or the new one, never half of one.

Every entry point writes through here. The standard library has the pieces (``mkstemp`` in
the target directory, ``os.replace``) but no one call that also keeps the user's umask, which
``mkstemp``'s 0600 would override and hide a report from the rest of a team.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from sim.errors import HarnessError


def atomic_write(path: str | os.PathLike, text: str) -> Path:
    """Write ``text`` to ``path`` through a temporary file in the same directory."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        umask = os.umask(0)
        os.umask(umask)
        os.fchmod(fd, 0o666 & ~umask)
        with os.fdopen(fd, "w") as handle:
            handle.write(text)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise
    return path


def check_writable(directory: str | os.PathLike, option: str) -> Path:
    """Make ``directory`` and prove a file can be written there, before any work; else one
    line naming the problem and the fix (a ``HarnessError``)."""
    try:
        Path(directory).mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(dir=directory, prefix=".lch-write-probe-")
        os.close(fd)
        os.unlink(probe)
    except OSError as error:
        raise HarnessError(f"{option} {directory} is not writable ({type(error).__name__}: "
                           f"{error.strerror or error}); pass {option} with a directory you "
                           "can write to") from None
    return Path(directory)
