"""Start and stop txmq processes (``txmq server``, ``namesrv``, ``broker``) from another program: the demo, the
orders example, the benches and the tests. A process is ready when it prints its ready line (``print_ready``, read
back by ``parse_ready``); its stderr (the server log) goes to a file. Nothing of the servers is imported here: a
program that only starts them stays light."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Self

from txmq.ports import free_port

__all__ = ["ServerProcess", "free_port", "parse_ready", "print_ready", "txmq_command"]

READY_PREFIX = "txmq ready: "


def print_ready(addrs: dict[str, str]) -> None:
    """The one stdout line that says a server is serving, with its addresses (read back by ``parse_ready``)."""
    print(READY_PREFIX + " ".join(f"{k}={v}" for k, v in addrs.items()), flush=True)


def parse_ready(line: str) -> dict[str, str] | None:
    """The addresses of a ``print_ready`` line (``{"namesrv": …, "broker": …}``), or None for any other line."""
    _, sep, rest = line.partition(READY_PREFIX)
    return dict(kv.split("=", 1) for kv in rest.split()) if sep else None


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
