"""Wake a broker-to-broker reader once a large response is in, not at every piece of it (SO_RCVLOWAT).

A follower's fetch response of a megabyte crosses loopback in pieces as the leader's
sendfile pushes them, and the follower woke for each: 9 to 28 reads, loop turns and
context switches per response (bench/rf3_profile.py). Once a frame's size is known,
the socket is told how many bytes to wait for. The kernel still wakes the reader at end
of file, on an error and when its receive buffer is under pressure (Linux 5.8 and later:
tcp_epollin_ready), so a mark never holds back what must be seen.

A mark never exceeds the bytes its frame still lacks, so a peer that has sent a whole
frame always wakes its reader. Over TLS the socket's bytes are not the frame's: no mark.

The server's client connections set one too, for large produce requests. Their receive
buffer is locked at socket.receive.buffer.bytes (Kafka's 100 KiB), and the kernel caps a
mark at half of a locked buffer: a request of a megabyte came in ten reads, each a loop
wake-up, as the client's window allowed. A connection whose frame lacks more than its
buffer holds for a mark gets a buffer of LARGEST once (the kernel caps it at
net.core.rmem_max): the window opens to the frame, and the frame wakes its reader once.
It is never shrunk again (data queued beyond a smaller buffer would be dropped), so a
connection that sent a large request may queue up to LARGEST unread in the kernel, as
the request it is reading does in memory.
"""

from __future__ import annotations

import asyncio
import platform
import socket
import sys

__all__ = ["ReceiveLowWater"]

SMALLEST = 64 * 1024  # frames lacking fewer bytes are read as they come: a mark costs a system call
LARGEST = 1024 * 1024  # the kernel grows the receive buffer to hold a mark (to half of tcp_rmem's maximum)
_KERNEL = (5, 8)  # the first with the receive-buffer-pressure wake-up: before it a mark could stall a reader


def _kernel_release() -> tuple[int, int]:
    try:
        major, minor = platform.release().split(".")[:2]
        return int(major), int("".join(c for c in minor if c.isdigit()) or 0)
    except ValueError:
        return 0, 0


AVAILABLE = sys.platform.startswith("linux") and _kernel_release() >= _KERNEL


class ReceiveLowWater:
    """The receive low-water mark of one plain TCP socket, changed only when it must."""

    __slots__ = ("_socket", "_mark", "_room")

    def __init__(self, sock: socket.socket, locked: bool = False) -> None:
        self._socket = sock
        self._mark = 1
        # The largest mark the buffer holds when it is locked (SO_RCVBUF set: the kernel keeps half of its
        # doubled value for a mark); None once grown, or when the kernel sizes it (autotuning grows it to a mark).
        self._room = sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF) // 2 if locked else None

    @classmethod
    def of(cls, transport: asyncio.BaseTransport, locked: bool = False) -> ReceiveLowWater | None:
        """The mark of the transport's socket; None where none is set (TLS, an older kernel, not TCP).
        `locked`: the socket's receive buffer was set (SO_RCVBUF), so a large mark must grow it."""
        if not AVAILABLE or transport.get_extra_info("ssl_object") is not None:
            return None
        sock = transport.get_extra_info("socket")
        if sock is None or sock.family not in (socket.AF_INET, socket.AF_INET6):
            return None
        try:
            return cls(sock, locked)
        except OSError:  # closed already: the transport reports it
            return None

    def expect(self, lacking: int) -> None:
        """The frame being read lacks `lacking` bytes (0: none is under way)."""
        mark = min(lacking, LARGEST) if lacking >= SMALLEST else 1
        if mark != self._mark:
            try:
                if self._room is not None and mark > self._room:
                    self._socket.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, LARGEST)
                    self._room = None
                self._socket.setsockopt(socket.SOL_SOCKET, socket.SO_RCVLOWAT, mark)
            except OSError:  # the socket is closed: the transport reports it
                return
            self._mark = mark
