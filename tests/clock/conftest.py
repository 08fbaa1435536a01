"""The clock campaign's pieces (marker ``clock``): real name servers, brokers, controllers and client drivers under
one fake wall clock (faketime.py), the test process on the real one."""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.clock.faketime import FakeClock, forget
from tests.e2e.cluster import ALL_HOURS, Cluster
from txmq import Admin
from txmq.launch import ServerProcess, free_port

DRIVER = Path(__file__).parent / "driver.py"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if Path(str(item.fspath)).parent == Path(__file__).parent:
            item.add_marker(pytest.mark.clock)


class Faked:
    """A cluster whose every process runs on ``clock``; remembers the pids it started, for ``forget``."""

    def __init__(self, root: Path) -> None:
        self.clock = FakeClock(root / "faketime")
        self.cluster = Cluster(root)
        self.cluster.env.update(self.clock.env(tz="UTC"))
        self.pids: set[int] = set()
        self.broker: ServerProcess | None = None
        self.grpc_port = free_port()
        self.drivers: list[subprocess.Popen[str]] = []

    def start(self, conf: dict[str, object], topics: dict[str, int]) -> Faked:
        self.pids.add(self.cluster.start_namesrv().pid or 0)
        self.broker = self.cluster.start_broker("broker-a", {**conf, "grpcPort": self.grpc_port,
                                                             "deleteWhen": ALL_HOURS})
        self.pids.add(self.broker.pid or 0)
        with Admin(self.cluster.namesrv_addr) as admin:
            for topic, queues in topics.items():
                admin.create_topic(topic, queues)
        for topic in topics:
            self.cluster.wait_route(topic)
        return self

    @property
    def namesrv(self) -> str:
        return self.cluster.namesrv_addr

    @property
    def grpc_addr(self) -> str:
        return f"127.0.0.1:{self.grpc_port}"

    def restart(self, how: str) -> None:
        """Stop the broker (``TERM``: SIGTERM, a clean stop; ``KILL``: SIGKILL) and start it again."""
        assert self.broker is not None
        self.pids.add(self.broker.pid or 0)
        (self.broker.stop if how == "TERM" else self.broker.kill)()
        self.broker.start()
        self.pids.add(self.broker.pid or 0)

    def driver(self, topic: str, group: str, clock: FakeClock | None = None, tz: str = "UTC") -> Driver:
        """A client process (driver.py) on ``clock`` (default: the cluster's) in time zone ``tz``."""
        env = {**self.cluster.env, **(clock or self.clock).env(tz=tz)}
        with open(self.cluster.root / f"driver-{group}.log", "w") as log:
            proc = subprocess.Popen([sys.executable, str(DRIVER), self.namesrv, topic, group], stdin=subprocess.PIPE,
                                    stdout=subprocess.PIPE, stderr=log, text=True, env=env, start_new_session=True)
        self.drivers.append(proc)
        self.pids.add(proc.pid)
        return Driver(proc)

    def broker_errors(self) -> list[str]:
        """Error lines and tracebacks in the broker's log."""
        text = (self.cluster.root / "broker-a.log").read_text()
        return [line for line in text.splitlines() if " ERROR " in line or line.startswith("Traceback")]

    def close(self) -> None:
        for proc in self.drivers:
            if proc.poll() is None:
                proc.kill()
            proc.wait(10)
            for stream in (proc.stdin, proc.stdout):
                if stream is not None:
                    stream.close()
        self.cluster.close()
        forget(self.pids | {p.pid for p in self.cluster.procs if p.pid})


class Driver:
    """A started driver process; its start is waited for at its first run (several start at once)."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.proc = proc
        self.ready = False

    def _line(self) -> str:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        assert line, f"driver exited ({self.proc.poll()})"
        return line

    def run(self, label: str) -> dict[str, Any]:
        if not self.ready:
            assert json.loads(self._line()).get("ready"), "driver did not start"
            self.ready = True
        assert self.proc.stdin is not None
        self.proc.stdin.write(f"run {label}\n")
        self.proc.stdin.flush()
        out = json.loads(self._line())
        assert "error" not in out, out
        return out

    def quit(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write("quit\n")
        self.proc.stdin.flush()
        self.proc.wait(20)


def utc(text: str) -> dt.datetime:
    return dt.datetime.fromisoformat(text).replace(tzinfo=dt.UTC)


@pytest.fixture
def faked(tmp_path: Path) -> Iterator[Faked]:
    f = Faked(tmp_path)
    try:
        yield f
    finally:
        f.close()
