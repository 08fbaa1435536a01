"""tests/acl: an ACL-enabled ``txmq server`` (name server + broker, one process, free ports) for the module, the
accounts below, and a raw remoting caller that signs as any account or not at all (the attacker's tool)."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from txmq.acl.signer import AclClientRPCHook, SessionCredentials
from txmq.launch import ServerProcess, free_port, txmq_command
from txmq.remoting.command import RemotingCommand
from txmq.remoting.transport import RemotingClient

ADMIN = SessionCredentials("adminKey01", "adminSecret01")
VICTIM = SessionCredentials("orderKey01", "orderSecret01")  # the order service: produces orders, owns its group
CONSUMER = SessionCredentials("billingKey01", "billingSecret01")  # consumes orders
ATTACKER = SessionCredentials("attackKey01", "attackSecret01")  # a valid account of another team
NOBODY = SessionCredentials("nobodyKey01", "nobodySecret01")  # a valid account with no permission at all

PLAIN_ACL = f"""\
globalWhiteRemoteAddresses: []
accounts:
  - accessKey: {ADMIN.access_key}
    secretKey: {ADMIN.secret_key}
    admin: true
    defaultTopicPerm: PUB|SUB
    defaultGroupPerm: PUB|SUB
  - accessKey: {VICTIM.access_key}
    secretKey: {VICTIM.secret_key}
    topicPerms: [orders=PUB|SUB, cpp-orders=PUB|SUB]
    groupPerms: [order-service=PUB, txmq_cpp_producer=PUB, orders=PUB]  # orders: a 5.x producer's group
  - accessKey: {CONSUMER.access_key}
    secretKey: {CONSUMER.secret_key}
    topicPerms: [orders=SUB, cpp-orders=SUB]
    groupPerms: [billing=SUB]
  - accessKey: {ATTACKER.access_key}
    secretKey: {ATTACKER.secret_key}
    defaultTopicPerm: PUB|SUB
    defaultGroupPerm: DENY
    groupPerms: [attacker-group=PUB|SUB]
  - accessKey: {NOBODY.access_key}
    secretKey: {NOBODY.secret_key}
"""


@dataclass
class AclServer:
    proc: ServerProcess
    root: Path

    @property
    def namesrv(self) -> str:
        return self.proc.namesrv

    @property
    def broker(self) -> str:
        return self.proc.addrs["broker"]

    @property
    def log(self) -> str:
        return (self.root / "server.log").read_text()


def start_acl_server(root: Path, extra_conf: str = "", tls_trust: str | None = None,
                     plain_acl: str = PLAIN_ACL) -> AclServer:
    """``tls_trust``: the CA the fixture's admin client trusts (the server runs TLS)."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "plain_acl.yml").write_text(plain_acl)
    (root / "broker.conf").write_text(
        f"aclEnable=true\naclFile={root / 'plain_acl.yml'}\naccessKey={ADMIN.access_key}\n"
        f"secretKey={ADMIN.secret_key}\nautoCreateTopicEnable=false\ntransactionTimeOut=1000\n"
        f"transactionCheckInterval=500\n{extra_conf}")
    (root / "home").mkdir(exist_ok=True)
    env = dict(os.environ, HOME=str(root / "home"), PYTHONUNBUFFERED="1")
    for var in ("TXMQ_ACCESS_KEY", "TXMQ_SECRET_KEY"):
        env.pop(var, None)
    args = txmq_command("server", "--store", str(root / "store"), "--port", "0", "--namesrv-port", str(free_port()),
                        "--grpc-port", "0", "-c", str(root / "broker.conf"))
    server = AclServer(ServerProcess(args, root / "server.log", env).start(), root)
    try:
        from txmq.client.admin import Admin

        admin = Admin(server.namesrv).set_session_credentials(ADMIN.access_key, ADMIN.secret_key)
        if tls_trust is not None:
            admin.use_tls(tls_trust)
        with admin:
            admin.create_topic("orders", 2)
            admin.create_topic("cpp-orders", 2)  # read by the C++ client alone: its count of 3 is exact
            admin.create_topic("other", 2)
    except BaseException:
        server.proc.stop()
        raise
    return server


@pytest.fixture(scope="module")
def acl_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AclServer]:
    server = start_acl_server(tmp_path_factory.mktemp("acl-server"))
    try:
        yield server
    finally:
        server.proc.stop()


def call(addr: str, code: int, ext: dict[str, str] | None = None, body: bytes = b"",
         as_: SessionCredentials | None = None) -> RemotingCommand:
    """One request to ``addr``, signed as ``as_`` (unsigned when None); the answer."""

    async def go() -> RemotingCommand:
        hook = AclClientRPCHook(as_) if as_ is not None else None
        async with RemotingClient(rpc_hook=hook) as client:
            return await client.invoke(addr, RemotingCommand.request(code, dict(ext or {}), body), 5.0)

    return asyncio.run(go())
