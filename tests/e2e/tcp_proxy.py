"""A TCP proxy in the test process, to cut a connection path without touching the processes on either side:
``cut()`` ends every relayed connection and refuses new ones until ``heal()``.

A relayed socket is closed only by the last of its connection's two relay threads. ``cut()`` and the other
direction only shut it down: a socket closed while another thread is about to use it hands that thread a
descriptor number the kernel may already have given to some other socket of this process (a shutdown there
once ended the test process's connection to Spark's JVM)."""

from __future__ import annotations

import contextlib
import socket
import threading


class _Relayed:
    """One relayed connection: its two sockets and how many of its two relay threads still run."""

    def __init__(self, client: socket.socket, upstream: socket.socket) -> None:
        self.socks = (client, upstream)
        self.running = 2

    def shutdown(self) -> None:
        for s in self.socks:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)


class TcpProxy:
    def __init__(self, target: tuple[str, int], listen: tuple[str, int] = ("127.0.0.1", 0)) -> None:
        """``listen``: the address to accept on (port 0: a free one), e.g. another loopback address with the
        target's port, to stand for the target on a network of its own."""
        self.target = target
        self.listener = socket.create_server(listen)
        self.host, self.port = self.listener.getsockname()[:2]
        self.cut_off = False
        self.refused = 0  # connections closed at once because the path was cut
        self.cut_open = 0  # relayed connections a cut ended
        self.bytes_up = 0  # bytes relayed from clients to the target
        self._relayed: set[_Relayed] = set()
        self._lock = threading.Lock()
        self._closed = False
        self._acceptor = threading.Thread(target=self._accept, daemon=True)
        self._acceptor.start()

    @property
    def addr(self) -> str:
        return f"{self.host}:{self.port}"

    def _accept(self) -> None:
        """The only thread that closes the listener (see ``close``)."""
        with self.listener:
            while not self._closed:
                try:
                    client, _ = self.listener.accept()
                except OSError:
                    return
                if self.cut_off or self._closed:
                    self._refuse(client)
                    continue
                try:
                    upstream = socket.create_connection(self.target, timeout=3)
                except OSError:
                    client.close()
                    continue
                relayed = _Relayed(client, upstream)
                with self._lock:  # a cut since the check above ends it here, as it ends the others
                    cut = self.cut_off
                    if not cut:
                        self._relayed.add(relayed)
                if cut:
                    self._refuse(*relayed.socks)
                    continue
                for a, b in ((client, upstream), (upstream, client)):
                    threading.Thread(target=self._pipe, args=(relayed, a, b), daemon=True).start()

    def _refuse(self, *socks: socket.socket) -> None:
        """A connection accepted while the path is cut: closed at once, counted in ``refused``."""
        self.refused += 1
        for s in socks:
            s.close()

    def _pipe(self, relayed: _Relayed, src: socket.socket, dst: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := src.recv(65536):
                dst.sendall(data)
                if src is relayed.socks[0]:
                    self.bytes_up += len(data)
        relayed.shutdown()  # ends the other direction too
        with self._lock:
            relayed.running -= 1
            last = relayed.running == 0
            self._relayed.discard(relayed)
        if last:  # no other thread uses these sockets any more
            for s in relayed.socks:
                s.close()

    def cut(self) -> None:
        self.cut_off = True
        with self._lock:
            relayed, self._relayed = self._relayed, set()
            self.cut_open += len(relayed)
            for r in relayed:
                r.shutdown()

    def heal(self) -> None:
        self.cut_off = False

    def close(self) -> None:
        """Stop relaying and listening. The listener is shut down here (which wakes the accepting thread) and
        closed by that thread, for the same reason relayed sockets are."""
        self._closed = True
        self.cut()
        with contextlib.suppress(OSError):
            self.listener.shutdown(socket.SHUT_RDWR)
        self._acceptor.join(5)
