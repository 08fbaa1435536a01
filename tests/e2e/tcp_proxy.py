"""A TCP proxy in the test process, to cut a connection path without touching the processes on either side:
``cut()`` closes every relayed connection and refuses new ones until ``heal()``."""

from __future__ import annotations

import contextlib
import socket
import threading


class TcpProxy:
    def __init__(self, target: tuple[str, int], listen: tuple[str, int] = ("127.0.0.1", 0)) -> None:
        """``listen``: the address to accept on (port 0: a free one), e.g. another loopback address with the
        target's port, to stand for the target on a network of its own."""
        self.target = target
        self.listener = socket.create_server(listen)
        self.host, self.port = self.listener.getsockname()[:2]
        self.cut_off = False
        self.refused = 0  # connections closed at once because the path was cut
        self.cut_open = 0  # relayed connections a cut closed
        self._socks: set[socket.socket] = set()
        self._lock = threading.Lock()
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def addr(self) -> str:
        return f"{self.host}:{self.port}"

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            if self.cut_off:
                self.refused += 1
                client.close()
                continue
            try:
                upstream = socket.create_connection(self.target, timeout=3)
            except OSError:
                client.close()
                continue
            with self._lock:
                self._socks |= {client, upstream}
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    def _pipe(self, src: socket.socket, dst: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := src.recv(65536):
                dst.sendall(data)
        for s in (src, dst):
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
        with self._lock:  # relayed no more (both ends shut down, so the other direction ends too)
            self._socks -= {src, dst}
        src.close()
        dst.close()

    def cut(self) -> None:
        self.cut_off = True
        with self._lock:
            socks, self._socks = self._socks, set()
            self.cut_open += len(socks) // 2  # each relayed connection is a pair of sockets
        for s in socks:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            s.close()

    def heal(self) -> None:
        self.cut_off = False

    def close(self) -> None:
        self._closed = True
        self.cut()
        self.listener.close()
