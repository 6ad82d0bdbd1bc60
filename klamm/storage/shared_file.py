"""An open file descriptor shared by its owner and the responses that send from it.

A segment owns its `.log` descriptor, but a Fetch response may wait in a
connection's queue (behind a long poll) long after the read that chose its
bytes. Had the response kept the bare descriptor number, a segment deleted
meanwhile would close it, and the number, reused by the next file opened,
would send another file's bytes. So the descriptor is reference-counted: the
owner holds one reference, each response a `FileLease` of its own, and the
descriptor closes when the last one is released. A lease's bytes are then the
original ones, even from a file already unlinked (Kafka keeps the file open too).

Releases come from the event loop (responses sent or dropped) and from worker
threads (delayed deletes), hence the lock.
"""

from __future__ import annotations

import os
import threading


class SharedFile:
    """A descriptor with a reference count; the creator holds the first reference."""

    __slots__ = ("_fd", "_refs", "_lock")

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._refs = 1
        self._lock = threading.Lock()

    @property
    def closed(self) -> bool:
        return self._refs == 0

    def fileno(self) -> int:
        if self._refs == 0:
            raise ValueError("I/O operation on closed file")
        return self._fd

    def lease(self) -> FileLease:
        """Another reference, for a response that sends from this file later."""
        with self._lock:
            if self._refs == 0:
                raise ValueError("lease of a closed file")
            self._refs += 1
        return FileLease(self)

    def release(self) -> None:
        """Drop one reference; the last one closes the descriptor."""
        with self._lock:
            if self._refs == 0:
                raise ValueError("release of a closed file")
            self._refs -= 1
            last = self._refs == 0
        if last:
            os.close(self._fd)


class FileLease:
    """One reference to a SharedFile; `release` is idempotent, so a response's cleanup can be too."""

    __slots__ = ("_file",)

    def __init__(self, file: SharedFile) -> None:
        self._file: SharedFile | None = file

    def fileno(self) -> int:
        if self._file is None:
            raise ValueError("I/O operation on a released lease")
        return self._file.fileno()

    def release(self) -> None:
        file, self._file = self._file, None
        if file is not None:
            file.release()
