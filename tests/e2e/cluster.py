"""Real txmq server processes for end-to-end tests: a name server and brokers, each its own process on free
ports of 127.0.0.1, with its store in a temporary directory. Tests kill them (SIGKILL) and restart them."""

from __future__ import annotations

import os
import time
from pathlib import Path

from txmq.launch import ServerProcess, free_port, txmq_command

ALL_HOURS = ";".join(f"{h:02d}" for h in range(24))  # deleteWhen: retention at any hour (tests that age in seconds)


class Cluster:
    """Owns every process it starts; ``close`` stops them all."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.procs: list[ServerProcess] = []
        self.env = dict(os.environ, HOME=str(root / "home"), PYTHONUNBUFFERED="1")
        (root / "home").mkdir(parents=True, exist_ok=True)
        self.namesrv_addr = ""

    def _proc(self, name: str, args: list[str]) -> ServerProcess:
        p = ServerProcess(txmq_command(*args), self.root / f"{name}.log", self.env)
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

    def start_broker_with_topic(self, topic: str, conf: dict[str, object] | None = None) -> ServerProcess:
        """A broker (gRPC on a free port) serving ``topic`` with one queue, routed by the name server."""
        from txmq.client.admin import Admin
        from txmq.launch import free_port

        broker = self.start_broker(conf={"grpcPort": free_port(), **(conf or {})})
        with Admin(self.namesrv_addr) as admin:
            admin.create_topic(topic, queue_nums=1)
        self.wait_route(topic)
        return broker

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
