"""Helpers of the gRPC tests, in a module of its own (not ``conftest``: another folder's could be imported
instead when pytest is given folders in another order)."""

from __future__ import annotations

import os
from pathlib import Path

from txmq.launch import ServerProcess, free_port, txmq_command

BROKER_CONF = """\
autoCreateTopicEnable=false
transactionTimeOut=1000
transactionCheckInterval=1000
maxMessageSize=262144
"""


def start_server(root: Path, conf: str = BROKER_CONF, timeout: float = 20.0, *,
                 host: str = "127.0.0.1") -> ServerProcess:
    """``txmq server`` (name server, broker, gRPC endpoint) on free ports, its store and HOME under ``root``."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "broker.conf").write_text(conf)
    (root / "home").mkdir(exist_ok=True)
    env = dict(os.environ, HOME=str(root / "home"), PYTHONUNBUFFERED="1")
    args = txmq_command("server", "--host", host, "--store", str(root / "store"), "--port", "0",
                        "--namesrv-port", str(free_port()), "--grpc-port", "0", "-c", str(root / "broker.conf"))
    return ServerProcess(args, root / "server.log", env).start(timeout)


def bodies(events: list[dict], kind: str = "received") -> list[str]:
    return [e["body"] for e in events if e["event"] == kind]
