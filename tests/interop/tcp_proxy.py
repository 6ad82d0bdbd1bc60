"""A TCP proxy that a test can cut, to partition a node from the network without root.

Each proxy listens on its own port and forwards to one upstream address. A node
is partitioned by giving its peers the proxy's address instead of its own (in
`advertised.listeners` or `controller.quorum.voters`). `cut()` turns the proxy
into a black hole, as a partition looks to TCP: connections stay open, bytes
are swallowed, nothing comes back, so peers see request timeouts rather than
resets. `heal()` closes the swallowed connections (a real partition outlasting
TCP's retransmissions ends them too) and forwards again.
"""

from __future__ import annotations

import socket
import threading


class TcpProxy:
    def __init__(self, upstream_port: int, host: str = "127.0.0.1") -> None:
        self.upstream = (host, upstream_port)
        self._listener = socket.create_server((host, 0))
        self.port = self._listener.getsockname()[1]
        self._lock = threading.Lock()
        self._cut = False
        self._sockets: set[socket.socket] = set()
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def address(self) -> str:
        return f"{self.upstream[0]}:{self.port}"

    def cut(self) -> None:
        with self._lock:
            self._cut = True

    def heal(self) -> None:
        with self._lock:
            self._cut = False
            sockets, self._sockets = self._sockets, set()
        for sock in sockets:
            _close(sock)

    def close(self) -> None:
        self._closed = True
        _close(self._listener)
        self.heal()

    def _accept(self) -> None:
        while not self._closed:
            try:
                downstream, _ = self._listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(self.upstream, timeout=5)
            except OSError:
                _close(downstream)
                continue
            with self._lock:
                self._sockets.update((downstream, upstream))
            for source, target in ((downstream, upstream), (upstream, downstream)):
                threading.Thread(target=self._pump, args=(source, target), daemon=True).start()

    def _pump(self, source: socket.socket, target: socket.socket) -> None:
        while True:
            try:
                data = source.recv(65536)
            except OSError:
                data = b""
            if not data:
                _close(source)
                _close(target)
                return
            if self._cut:
                continue  # swallowed: the peer hears nothing back
            try:
                target.sendall(data)
            except OSError:
                _close(source)
                return


def _close(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    sock.close()
