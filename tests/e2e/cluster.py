"""Real txmq server processes for end-to-end tests: a name server and brokers, each its own process on free
ports of 127.0.0.1, with its store in a temporary directory. Tests kill them (SIGKILL) and restart them."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from txmq.server import parse_ready


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class ServerProcess:
    args: list[str]
    log_path: Path
    env: dict[str, str]
    popen: subprocess.Popen[str] | None = None
    addrs: dict[str, str] = field(default_factory=dict)
    reader: threading.Thread | None = None

    def start(self, timeout: float = 20.0) -> ServerProcess:
        log = open(self.log_path, "a")  # noqa: SIM115 - kept open for the reader thread, closed with the process
        self.popen = subprocess.Popen(self.args, stdout=subprocess.PIPE, stderr=log, text=True, env=self.env,
                                      start_new_session=True)
        ready = threading.Event()

        def read() -> None:
            assert self.popen is not None and self.popen.stdout is not None
            for line in self.popen.stdout:
                addrs = parse_ready(line)
                if addrs is not None:
                    self.addrs = addrs
                    ready.set()
            log.close()

        self.reader = threading.Thread(target=read, daemon=True)
        self.reader.start()
        if not ready.wait(timeout):
            self.kill()
            raise RuntimeError(f"server did not start: {self.args}\n{self.log_path.read_text()[-3000:]}")
        return self

    @property
    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def kill(self, sig: int = signal.SIGKILL) -> None:
        if self.alive:
            assert self.popen is not None
            self.popen.send_signal(sig)
            try:
                self.popen.wait(15)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait(5)
        if self.popen is not None and self.popen.stdout is not None:
            if self.reader is not None:
                self.reader.join(5)
            self.popen.stdout.close()

    def stop(self) -> None:
        """Clean stop (SIGTERM): the broker flushes, persists offsets and checkpoints."""
        self.kill(signal.SIGTERM)


class Cluster:
    """Owns every process it starts; ``close`` stops them all."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.procs: list[ServerProcess] = []
        self.env = dict(os.environ, HOME=str(root / "home"), PYTHONUNBUFFERED="1")
        (root / "home").mkdir(parents=True, exist_ok=True)
        self.namesrv_addr = ""

    def _proc(self, name: str, args: list[str]) -> ServerProcess:
        p = ServerProcess([sys.executable, "-m", "txmq.cli", *args], self.root / f"{name}.log", self.env)
        self.procs.append(p)
        return p

    def start_namesrv(self) -> ServerProcess:
        p = self._proc("namesrv", ["namesrv", "--port", str(free_port())]).start()
        self.namesrv_addr = p.addrs["namesrv"]
        return p

    def broker(self, name: str = "broker-a", conf: dict[str, object] | None = None,
               port: int | None = None) -> ServerProcess:
        """A broker process (not started). ``conf`` holds RocketMQ broker.conf keys."""
        store = self.root / name
        conf_path = self.root / f"{name}.conf"
        settings = {"brokerName": name, "namesrvAddr": self.namesrv_addr, "storePathRootDir": str(store),
                    "listenPort": port or free_port(), "brokerIP1": "127.0.0.1", **(conf or {})}
        conf_path.write_text("".join(f"{k}={v}\n" for k, v in settings.items()))
        return self._proc(name, ["broker", "-c", str(conf_path)])

    def start_broker(self, name: str = "broker-a", conf: dict[str, object] | None = None) -> ServerProcess:
        return self.broker(name, conf).start()

    def wait_route(self, topic: str, brokers: int = 1, timeout: float = 10.0) -> None:
        """Wait until the name server routes ``topic`` to ``brokers`` brokers."""
        from txmq.client.admin import Admin

        deadline = time.monotonic() + timeout
        with Admin(self.namesrv_addr) as admin:
            while time.monotonic() < deadline:
                if len(admin.brokers()) >= brokers and topic in admin.list_topics():
                    return
                time.sleep(0.1)
        raise TimeoutError(f"topic {topic} not routed to {brokers} brokers")

    def close(self) -> None:
        for p in reversed(self.procs):
            p.kill()
