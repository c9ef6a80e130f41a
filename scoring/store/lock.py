"""One writer per run store: an exclusive `flock` on `STORE/.lock` for the whole run.

Two `safevla score` runs into one `--out` each read the store, score, then write the
consolidated tables: the last to finish wins and the other's episodes are lost. The
lock makes the second run refuse with the first one's pid (or wait, with `wait=True`).
`flock` is released by the kernel when its holder exits, even on `kill -9`, so a
crashed run never leaves a stale lock behind. Readers (the dashboard, `safevla report`)
take no lock: every store file is replaced atomically.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import sys
from collections.abc import Iterator
from pathlib import Path

from scoring.errors import SafeVLAError

LOCK_FILE = ".lock"


class StoreBusy(SafeVLAError):
    """Another process is writing to the run store."""


@contextlib.contextmanager
def store_lock(store: str | os.PathLike, *, wait: bool = False) -> Iterator[None]:
    """Holds the store's write lock for the `with` block; raises StoreBusy if taken and not `wait`."""
    path = Path(store) / LOCK_FILE
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _holder(fd)
            if not wait:
                raise StoreBusy(f"run store {str(store)!r} is being written by another `safevla score` "
                                f"(pid {holder}); wait for it to finish, re-run with --wait, or use another "
                                "--out") from None
            print(f"safevla score: waiting for pid {holder} to finish writing {str(store)!r} ...", file=sys.stderr)
            fcntl.flock(fd, fcntl.LOCK_EX)
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        yield
    finally:
        os.close(fd)  # releases the lock


def _holder(fd: int) -> str:
    """The pid the lock holder wrote (informational: 'unknown' if it has not written it yet)."""
    try:
        text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
    except OSError:
        text = ""
    return text or "unknown"
