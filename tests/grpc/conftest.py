"""tests/grpc: the RocketMQ 5 gRPC endpoint against the official clients, each run as a subprocess driver.

* one ``txmq server`` process for the module session, on free ports, with its own store and HOME;
* ``rmq5_py``: ``drivers/rmq5_py.py`` in ``.venv-rmq5`` (``rocketmq-python-client==5.1.2``);
* ``rmq5_node``: ``node/driver.js`` with ``rocketmq-client-nodejs@1.0.8`` from ``node/package-lock.json``.

Both client installs come from ``make grpc-clients`` (a prerequisite of ``make test``); when missing, the
session runs that target itself, so ``pytest tests/grpc`` works on a fresh clone too.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.grpc.grpc_helpers import start_server
from txmq.launch import ServerProcess

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
RMQ5_PYTHON = ROOT / ".venv-rmq5" / "bin" / "python"
NODE_MODULES = HERE / "node" / "node_modules"

@pytest.fixture(scope="session")
def grpc_clients() -> None:
    """Make sure both official clients are installed (``make grpc-clients``)."""
    if not (RMQ5_PYTHON.exists() and (NODE_MODULES / ".installed").exists()):
        if shutil.which("make") is None:
            pytest.fail("the official RocketMQ 5 clients are missing: run `make grpc-clients`")
        subprocess.run(["make", "-C", str(ROOT), "grpc-clients"], check=True, timeout=600)


@pytest.fixture(scope="session")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    s = start_server(tmp_path_factory.mktemp("grpc-server"))
    try:
        yield s
    finally:
        s.stop()


@pytest.fixture(scope="session")
def admin(server: ServerProcess) -> Iterator[object]:
    from txmq.client.admin import Admin

    a = Admin(server.namesrv).start()
    try:
        yield a
    finally:
        a.shutdown()


_topics = iter(range(1, 10_000))


@pytest.fixture
def topic(admin, request: pytest.FixtureRequest) -> str:
    """A fresh topic with 4 queues (the server does not auto-create topics)."""
    name = re.sub(r"[^a-zA-Z0-9_-]", "_", f"{request.node.name}_{next(_topics)}")[:100]
    admin.create_topic(name, 4)
    return name


class Driver:
    """Runs one official-client driver command; returns its JSON events."""

    def __init__(self, argv: list[str], home: Path, endpoint: str) -> None:
        self.argv = argv
        self.home = home
        self.endpoint = endpoint

    def _cmd(self, args: dict) -> list[str]:
        return [*self.argv, json.dumps({"endpoint": self.endpoint, **args})]

    def start(self, **args) -> subprocess.Popen[str]:
        env = dict(os.environ, HOME=str(self.home))
        return subprocess.Popen(self._cmd(args), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                                start_new_session=True)

    @staticmethod
    def finish(p: subprocess.Popen[str], timeout: float = 60) -> list[dict]:
        try:
            stdout, stderr = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            stdout, stderr = p.communicate()
            raise AssertionError(f"driver timed out: {p.args}\n{stdout}\n{stderr[-2000:]}") from None
        events = [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]
        assert events and events[-1]["event"] == "done" and events[-1]["ok"], f"{p.args}\n{stdout}\n{stderr[-3000:]}"
        return events[:-1]

    def __call__(self, timeout: float = 60, **args) -> list[dict]:
        return self.finish(self.start(**args), timeout)


def py_driver(home: Path, endpoint: str) -> Driver:
    """The official Python client's driver, against ``endpoint``."""
    return Driver([str(RMQ5_PYTHON), str(HERE / "drivers" / "rmq5_py.py")], home, endpoint)


@pytest.fixture(scope="session")
def rmq5_py(grpc_clients, server: ServerProcess, tmp_path_factory: pytest.TempPathFactory) -> Driver:
    return py_driver(tmp_path_factory.mktemp("py-home"), server.grpc)


@pytest.fixture(scope="session")
def rmq5_py_named(grpc_clients, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Driver, ServerProcess]]:
    """The official Python client against a server of its own whose brokerIP1 is a host name (localhost)."""
    s = start_server(tmp_path_factory.mktemp("grpc-named"), host="localhost")
    try:
        yield py_driver(tmp_path_factory.mktemp("py-named-home"), s.grpc), s
    finally:
        s.stop()


@pytest.fixture(scope="session")
def rmq5_node(grpc_clients, server: ServerProcess, tmp_path_factory: pytest.TempPathFactory) -> Driver:
    node = shutil.which("node")
    if node is None:
        pytest.fail("node is not installed (Node 20 is expected on the machine)")
    return Driver([node, str(HERE / "node" / "driver.js")], tmp_path_factory.mktemp("node-home"), server.grpc)


@pytest.fixture(params=["py", "node"])
def client(request: pytest.FixtureRequest) -> Driver:
    """Each test that takes it runs with both official clients."""
    return request.getfixturevalue("rmq5_py" if request.param == "py" else "rmq5_node")
