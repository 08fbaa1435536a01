"""Start and stop txmq processes (``txmq server``, ``namesrv``, ``broker``) from another program: the demo, the
orders example, the benches and the tests. A process is ready when it prints its ready line
(``txmq.server.print_ready``); its stderr (the server log) goes to a file."""

from __future__ import annotations

import os
import random
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path
from typing import Self

from txmq.broker.controller import pick_free_port
from txmq.server import parse_ready

__all__ = ["ServerProcess", "free_port", "txmq_command"]


_EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")
_handed_out: set[int] = set()


def _ephemeral_low() -> int:
    try:
        return int(_EPHEMERAL_RANGE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768  # Linux's default


def free_port(host: str = "127.0.0.1") -> int:
    """A port free now for a process started later, chosen below the kernel's ephemeral range: every outgoing
    connection and port-0 listener draws its port from that range, so a port picked there and bound seconds later
    could be taken meanwhile (two fresh-clone CI runs lost a controller's and an HA port so). Never the same port
    twice in one process."""
    low = _ephemeral_low()
    for _ in range(1000):
        port = random.randrange(max(1024, low - 20_000), low)
        if port in _handed_out:
            continue
        with socket.socket() as s:
            try:
                s.bind((host, port))
            except OSError:
                continue
        _handed_out.add(port)
        return port
    return pick_free_port(host)  # a range below the ephemeral one with nothing free: the kernel's choice


def txmq_command(*args: str) -> list[str]:
    """The command line of ``txmq <args>`` with this interpreter."""
    return [sys.executable, "-m", "txmq.cli", *args]


class ServerProcess:
    """One txmq process in its own session. ``start`` waits for the ready line (a thread keeps reading stdout, so
    the pipe never fills) and may be called again after ``kill``: a restart appends to the same log."""

    def __init__(self, args: list[str], log_path: Path, env: dict[str, str] | None = None) -> None:
        self.args = args
        self.log_path = log_path
        self.env = env if env is not None else dict(os.environ, PYTHONUNBUFFERED="1")
        self.popen: subprocess.Popen[str] | None = None
        self.addrs: dict[str, str] = {}
        self.reader: threading.Thread | None = None

    def start(self, timeout: float = 20.0) -> Self:
        log = open(self.log_path, "a")  # noqa: SIM115 - kept open for the reader thread, closed with the process
        self.popen = subprocess.Popen(self.args, stdout=subprocess.PIPE, stderr=log, text=True, env=self.env,
                                      start_new_session=True)
        ready, done = threading.Event(), threading.Event()

        def read() -> None:
            assert self.popen is not None and self.popen.stdout is not None
            for line in self.popen.stdout:
                addrs = parse_ready(line)
                if addrs is not None:
                    self.addrs = addrs
                    ready.set()
                    done.set()
            log.close()
            done.set()  # the process ended: no need to wait out the timeout

        self.reader = threading.Thread(target=read, daemon=True)
        self.reader.start()
        done.wait(timeout)
        if not ready.is_set():
            self.kill()
            raise RuntimeError(f"txmq did not start: {self.args}\n{self.log_path.read_text()[-3000:]}")
        return self

    @property
    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    @property
    def pid(self) -> int | None:
        return self.popen.pid if self.popen is not None else None

    @property
    def namesrv(self) -> str:
        return self.addrs["namesrv"]

    @property
    def grpc(self) -> str:
        return self.addrs["grpc"]

    def kill(self, sig: int = signal.SIGKILL, timeout: float = 15.0) -> None:
        """Send ``sig`` and wait for the exit (SIGKILL after ``timeout``); then the reader ends and the log closes."""
        if self.alive:
            assert self.popen is not None
            self.popen.send_signal(sig)
            try:
                self.popen.wait(timeout)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait(5)
        if self.popen is not None and self.popen.stdout is not None:
            if self.reader is not None:
                self.reader.join(5)
            self.popen.stdout.close()

    def stop(self, timeout: float = 15.0) -> None:
        """Clean stop (SIGTERM): the broker flushes, persists offsets and checkpoints."""
        self.kill(signal.SIGTERM, timeout)
