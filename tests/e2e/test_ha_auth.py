"""The HA port under aclEnable, attacked as issue 28's attacker did, on real broker processes: a stranger that
connects as a slave (speaking the protocol by hand, with the old HELLO or the new OPEN, with no account, with a
consumer-only account it holds, or with the admin's access key and a guessed proof) gets no byte of the log and
learns nothing (no cluster or broker name, segment size, offset); such a fake slave acknowledging everything does
not make a SYNC_MASTER answer SEND_OK; a fake master feeds a real slave nothing; the port holds at most
haMaxConnections connections and drops silent ones quickly; tls.server.mode=enforcing refuses plaintext on the HA
port, while the real slave replicates over TLS."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import os
import socket
import struct
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.acl.test_tls import make_certificates
from tests.e2e.failover_group import FailoverGroup
from tests.e2e.ha_group import SEGMENT, Group, commit_log_bytes
from tests.e2e.helpers import wait_until
from txmq import Admin, Message, Producer, SendStatus
from txmq.acl.signer import AclClientRPCHook, SessionCredentials
from txmq.admin import MQAdminExt
from txmq.message import MessageExt
from txmq.remoting.admin_headers import UserRequestHeader
from txmq.remoting.codes import RequestCode, ResponseCode
from txmq.remoting.command import RemotingCommand
from txmq.remoting.transport import RemotingClient
from txmq.store import DefaultMessageStore, StoreConfig

ADMIN = SessionCredentials("clusterAdmin01", "clusterAdminSecret01")
CONSUMER = SessionCredentials("billingKey01", "billingSecret01")  # a consumer-only account the attacker holds
RETIRED = SessionCredentials("retiredAdmin01", "retiredSecret01")  # a Super user, disabled: its secret leaked
CLUSTER, NAME = "SecretClusterName", "secret-broker-name"
BODY = b"confidential-order-body-"
PLAIN_ACL = f"""\
accounts:
  - accessKey: {ADMIN.access_key}
    secretKey: {ADMIN.secret_key}
    admin: true
    defaultTopicPerm: PUB|SUB
    defaultGroupPerm: PUB|SUB
  - accessKey: {CONSUMER.access_key}
    secretKey: {CONSUMER.secret_key}
    topicPerms: [orders=SUB]
    groupPerms: [billing=SUB]
"""


def acl_conf(root: Path) -> dict[str, object]:
    (root / "plain_acl.yml").write_text(PLAIN_ACL)
    return {"aclEnable": "true", "aclFile": root / "plain_acl.yml", "accessKey": ADMIN.access_key,
            "secretKey": ADMIN.secret_key, "brokerClusterName": CLUSTER}


def signed(addr: str, code: int) -> RemotingCommand:
    async def go() -> RemotingCommand:
        async with RemotingClient(rpc_hook=AclClientRPCHook(ADMIN)) as client:
            return await client.invoke(addr, RemotingCommand.request(code), 5.0)

    return asyncio.run(go())


def ha_status(addr: str) -> dict[str, Any]:
    resp = signed(addr, RequestCode.GET_BROKER_HA_STATUS)
    assert resp.code == ResponseCode.SUCCESS, resp.remark
    return dict(orjson.loads(resp.body))


def producer(namesrv: str) -> Producer:
    return Producer("p-ha-auth", namesrv, send_timeout_s=3.0).set_session_credentials(ADMIN.access_key,
                                                                                      ADMIN.secret_key)


def create_topic(namesrv: str, topic: str = "orders") -> None:
    with Admin(namesrv).set_session_credentials(ADMIN.access_key, ADMIN.secret_key) as admin:
        admin.create_topic(topic, queue_nums=2)


# --- the attacker's tools: the HA protocol by hand ---------------------------------------------------------------

def _s(text: str) -> bytes:
    return struct.pack(">H", len(text.encode())) + text.encode()


def old_hello(broker_id: int = 1, cluster: str = CLUSTER, name: str = NAME, version: int = 2) -> bytes:
    """The slave's first message before authentication existed (issue 28's fake slave)."""
    return struct.pack(">4sHIqq8s", b"TXHA", version, broker_id, SEGMENT, 0, bytes(8)) + _s(cluster) + _s(name)


def hello(broker_id: int = 1) -> bytes:
    return old_hello(broker_id, version=3)


def open_msg(nonce: bytes, access_key: str, broker_id: int = 1) -> bytes:
    return struct.pack(">4sHI32s", b"TXHA", 3, broker_id, nonce) + _s(access_key)


def proof(secret: str, role: bytes, slave_nonce: bytes, master_nonce: bytes, access_key: str,
          broker_id: int = 1) -> bytes:
    """The documented proof: HMAC-SHA256 over length-prefixed fields."""
    fields = (b"txmq-ha-3", role, slave_nonce, master_nonce, CLUSTER.encode(), NAME.encode(),
              str(broker_id).encode(), access_key.encode())
    return hmac.new(secret.encode(), b"".join(struct.pack(">H", len(f)) + f for f in fields), hashlib.sha256).digest()


def read_all(sock: socket.socket, timeout: float = 4.0) -> bytes:
    """Everything the peer sends until it closes, or until ``timeout``."""
    sock.settimeout(0.2)
    out = b""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            data = sock.recv(65536)
        except TimeoutError:
            continue
        except OSError:
            break
        if not data:
            break
        out += data
    return out


def fake_slave(port: int, attempt: str, ack: Callable[[socket.socket, bytes], None] | None = None,
               timeout: float = 4.0) -> bytes:
    """One attempt at being a slave; returns every byte the master sent. Attempts: ``old`` (the unauthenticated
    HELLO), ``open`` (no account), ``consumer`` (a consumer-only account with its right secret), ``guess`` (the
    admin's access key, a random proof), ``wrong-names`` (the old HELLO naming another group), ``retired`` (a
    disabled Super user with its right secret). Each then says "start from offset 0", as a slave would."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        got = b""
        if attempt in ("old", "wrong-names"):
            sock.sendall(old_hello(name=NAME if attempt == "old" else "other-broker"))
        else:
            nonce = os.urandom(32)
            key = {"open": "", "consumer": CONSUMER.access_key, "guess": ADMIN.access_key,
                   "retired": RETIRED.access_key}[attempt]
            sock.sendall(open_msg(nonce, key))
            sock.settimeout(5)
            with_nonce = b""
            try:
                while len(with_nonce) < 37:
                    chunk = sock.recv(37 - len(with_nonce))
                    if not chunk:
                        break
                    with_nonce += chunk
            except OSError:
                pass
            got += with_nonce
            secret = {"consumer": CONSUMER.secret_key, "retired": RETIRED.secret_key}.get(attempt, "a-guessed-secret")
            try:
                sock.sendall(proof(secret, b"slave", nonce, with_nonce[5:37], key) + hello())
            except OSError:
                return got
        try:
            sock.sendall(struct.pack(">q", 0))
        except OSError:
            return got
        if ack is None:
            return got + read_all(sock, timeout)
        ack(sock, got)
        return got


def leaks(data: bytes, master_end: int) -> list[str]:
    """What of the master ``data`` (a fake slave's answers) gives away."""
    found = [what for what, raw in (("cluster name", CLUSTER.encode()), ("broker name", NAME.encode()),
                                     ("a message body", BODY), ("the topic", b"orders"),
                                     ("segment size", struct.pack(">q", SEGMENT)),
                                     ("the master's end", struct.pack(">q", master_end))) if raw in data]
    if len(data) > 5 + 32 + 200:
        found.append(f"{len(data)} bytes")
    return found


@pytest.fixture
def acl_group(cluster) -> Iterator[Group]:
    yield Group(cluster, NAME, conf=acl_conf(cluster.root))


def _send_some(namesrv: str, n: int = 50) -> None:
    create_topic(namesrv)
    with producer(namesrv) as p:
        for i in range(n):
            p.send(Message("orders", BODY + str(i).encode() * 100))


ATTEMPTS = ("old", "open", "consumer", "guess", "wrong-names")


def test_a_fake_slave_gets_no_byte_of_the_log_and_learns_nothing_from_the_refusal(cluster, acl_group):
    master = acl_group.member(0, "ASYNC_MASTER").start()
    _send_some(cluster.namesrv_addr)
    end = int(ha_status(master.addrs["broker"])["maxOffset"])
    assert end > 0
    port = acl_group.ha_ports[0]
    for attempt in ATTEMPTS:
        for _ in range(3):  # again and again: the master logs it once
            data = fake_slave(port, attempt, timeout=4.0)
            assert not leaks(data, end), (attempt, leaks(data, end), data[:200])
    assert ha_status(master.addrs["broker"])["slaves"] == []
    log = (cluster.root / f"{NAME}-0.log").read_text()
    refusals = [line for line in log.splitlines() if "HA connection refused" in line]
    # One line per kind of refusal and peer in the period, not one per attempt (15 attempts, at most 5 kinds).
    assert 1 <= len(refusals) <= len(ATTEMPTS), refusals


def test_a_disabled_super_user_replicates_nothing(cluster, acl_group):
    """A Super user made by the commands and then disabled (its secret leaked, say) is refused every remoting
    request; the HA port still took its proof and streamed it the whole log, message bodies included. Now a
    master checks the user's status too."""
    master = acl_group.member(0, "ASYNC_MASTER").start()
    _send_some(cluster.namesrv_addr, 5)
    end = int(ha_status(master.addrs["broker"])["maxOffset"])
    with MQAdminExt(cluster.namesrv_addr).set_session_credentials(ADMIN.access_key, ADMIN.secret_key) as admin:
        addr = master.addrs["broker"]
        admin.auth_request(addr, RequestCode.AUTH_CREATE_USER, UserRequestHeader(RETIRED.access_key),
                           {"username": RETIRED.access_key, "password": RETIRED.secret_key, "userType": "Super"})
        admin.auth_request(addr, RequestCode.AUTH_UPDATE_USER, UserRequestHeader(RETIRED.access_key),
                           {"username": RETIRED.access_key, "userStatus": "disable"})
    data = fake_slave(acl_group.ha_ports[0], "retired", timeout=4.0)
    assert not leaks(data, end), (leaks(data, end), data[:200])
    assert ha_status(master.addrs["broker"])["slaves"] == []


def test_a_fake_slave_acknowledging_everything_does_not_make_a_sync_master_answer_send_ok(cluster, acl_group):
    """The fake slave reports, for every frame it gets, that it holds it (and, given nothing, the master's end as
    it guesses it): no send is answered SEND_OK on its word. A real slave, authenticated, then makes sends
    SEND_OK."""
    acl_group.member(0, "SYNC_MASTER", {"flushDiskType": "SYNC_FLUSH"}).start()
    create_topic(cluster.namesrv_addr)
    port = acl_group.ha_ports[0]
    stop = threading.Event()

    def ack_everything(sock: socket.socket, first: bytes) -> None:
        sock.settimeout(0.2)
        buf = b""
        while not stop.is_set():
            try:
                data = sock.recv(1 << 20)
            except TimeoutError:
                continue
            except OSError:
                return
            if not data:
                return
            buf += data
            if buf.startswith(b"TXHA") and len(buf) >= 31:  # a WELCOME (the old protocol): frames follow it
                buf = buf[31 + struct.unpack(">H", buf[29:31])[0]:]
            while len(buf) >= 20:  # transfer frames: offset, size, confirm, data; each acknowledged whole
                offset, size, _ = struct.unpack(">qiq", buf[:20])
                if len(buf) < 20 + size:
                    break
                buf = buf[20 + size:]
                with contextlib.suppress(OSError):
                    sock.sendall(struct.pack(">q", offset + size))

    attackers = [threading.Thread(target=fake_slave, args=(port, attempt, ack_everything), daemon=True)
                 for attempt in ("old", "consumer", "guess")]
    for t in attackers:
        t.start()
    try:
        time.sleep(1.0)
        with producer(cluster.namesrv_addr) as p:
            results = [p.send(Message("orders", BODY + bytes([65 + i]) * 50)).status for i in range(5)]
    finally:
        stop.set()
        for t in attackers:
            t.join(10)
    assert SendStatus.SEND_OK not in results, results
    assert set(results) == {SendStatus.SLAVE_NOT_AVAILABLE}, results
    acl_group.member(1, "SLAVE").start()
    m_addr = acl_group.addr(0)
    assert wait_until(lambda: len(ha_status(m_addr)["slaves"]) == 1, 20), ha_status(m_addr)
    with producer(cluster.namesrv_addr) as p:
        assert p.send(Message("orders", BODY + b"replicated")).status == SendStatus.SEND_OK
    assert wait_until(lambda: int(ha_status(acl_group.addr(1))["maxOffset"]) == int(ha_status(m_addr)["maxOffset"]),
                      10)


def _valid_records(root: Path) -> bytes:
    """What a master's log holds after one send: a record a slave's checks accept."""
    async def go() -> bytes:
        async with DefaultMessageStore(StoreConfig(store_path_root_dir=str(root),
                                                   mapped_file_size_commit_log=SEGMENT)) as store:
            m = MessageExt("orders", b"INJECTED BY A FAKE MASTER", {}, queue_id=0, born_host=("10.0.0.2", 4321))
            assert (await store.put_message(m)).ok
            return store.commit_log.read_raw(0, store.max_phy_offset)

    return asyncio.run(go())


class FakeMaster:
    """A master that is not one: it answers whatever a slave says as a master of any version would (the old
    WELCOME at once; the new protocol without authentication; or claiming authentication with a guessed proof)
    and streams a valid record from offset 0."""

    def __init__(self, records: bytes) -> None:
        self.records = records
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.connections = 0
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn:
                self.connections += 1
                mode = ("old", "open", "guess")[(self.connections - 1) % 3]
                with contextlib.suppress(OSError):
                    self._answer(conn, mode)

    def _answer(self, conn: socket.socket, mode: str) -> None:
        conn.settimeout(3)
        conn.recv(4096)  # a HELLO, or an OPEN
        if mode == "open":
            conn.sendall(b"TXHA\x02" + os.urandom(32))
        elif mode == "guess":
            conn.sendall(b"TXHA\x00" + os.urandom(32))
            conn.recv(4096)  # the slave's proof
            conn.sendall(os.urandom(32))
        if mode != "old":
            conn.recv(4096)  # the HELLO
        welcome = struct.pack(">4sBqq8s", b"TXHA", 0, len(self.records), 0, bytes(8)) + _s("")
        conn.sendall(welcome)
        conn.recv(4096)  # where to start
        conn.sendall(struct.pack(">qiq", 0, len(self.records), -1) + self.records)
        read_all(conn, 1.0)

    def close(self) -> None:
        self.sock.close()


def test_a_fake_master_cannot_feed_a_real_slave_a_record(cluster, acl_group):
    fake = FakeMaster(_valid_records(cluster.root / "fake-master-store"))
    held: list[int] = []  # the slave's log end, watched all along (a later session may truncate an injection)
    try:
        slave = acl_group.member(1, "SLAVE", {"haMasterAddress": f"127.0.0.1:{fake.port}"}).start()

        def tried_each_way() -> bool:
            held.append(int(ha_status(slave.addrs["broker"])["maxOffset"]))
            return fake.connections >= 4

        assert wait_until(tried_each_way, 20), fake.connections
        status = ha_status(slave.addrs["broker"])
    finally:
        fake.close()
    assert max(held) == 0 and status["maxOffset"] == 0, (max(held), status)
    assert status["master"]["connected"] is False
    assert not any(p.stat().st_size and b"INJECTED" in p.read_bytes()
                   for p in (acl_group.store(1) / "commitlog").glob("*"))
    log = (cluster.root / f"{NAME}-1.log").read_text()
    assert "does not authenticate" in log or "did not prove" in log, log[-2000:]


def test_the_ha_port_holds_at_most_ha_max_connections_and_drops_silent_ones_quickly(cluster, acl_group):
    """The default cap, 8: a ninth connection is closed at once. Connections that never authenticate are dropped
    within the handshake timeout (3 s), and the port serves again; a real slave replicates after the flood."""
    acl_group.member(0, "ASYNC_MASTER").start()
    port = acl_group.ha_ports[0]
    silent = [socket.create_connection(("127.0.0.1", port), timeout=5) for _ in range(8)]
    opened = time.monotonic()
    try:
        time.sleep(0.3)
        with socket.create_connection(("127.0.0.1", port), timeout=5) as ninth:
            t0 = time.monotonic()
            assert read_all(ninth, 2.0) == b""
            assert time.monotonic() - t0 < 1.0, "the ninth connection was not refused at once"
        for s in silent:
            assert read_all(s, 6.0) == b""
        assert time.monotonic() - opened < 4.5, "silent connections were held past the handshake timeout"
    finally:
        for s in silent:
            s.close()
    acl_group.member(1, "SLAVE").start()
    m_addr = acl_group.addr(0)
    assert wait_until(lambda: len(ha_status(m_addr)["slaves"]) == 1, 20), ha_status(m_addr)


def test_tls_enforcing_refuses_plaintext_on_the_ha_port_and_the_slave_replicates_over_tls(cluster, acl_group):
    d = cluster.root / "certs"
    d.mkdir()
    ca, cert, key = make_certificates(d)
    tls = {"tls.server.mode": "enforcing", "tls.server.certPath": cert, "tls.server.keyPath": key,
           "tls.enable": "true", "tls.client.trustCertPath": ca}
    master = acl_group.member(0, "SYNC_MASTER", {k: v for k, v in tls.items() if k.startswith("tls.server")}).start()
    m_addr = master.addrs["broker"]
    port = acl_group.ha_ports[0]
    for attempt in ("old", "open", "guess"):
        assert fake_slave(port, attempt, timeout=3.0) == b"", attempt
    # The slave's tls.enable also covers its name server calls (plaintext here): it is given its master.
    acl_group.member(1, "SLAVE", {**tls, "haMasterAddress": f"127.0.0.1:{port}"}).start()

    def connected() -> bool:
        try:
            return len(ha_status_tls(m_addr, ca)["slaves"]) == 1
        except OSError:
            return False

    assert wait_until(connected, 20)
    log = (cluster.root / f"{NAME}-0.log").read_text()
    assert "plaintext (tls.server.mode=enforcing)" in log


def ha_status_tls(addr: str, ca: Path) -> dict[str, Any]:
    from txmq.remoting.tls import client_context

    async def go() -> RemotingCommand:
        async with RemotingClient(rpc_hook=AclClientRPCHook(ADMIN), ssl_context=client_context(str(ca))) as client:
            return await client.invoke(addr, RemotingCommand.request(RequestCode.GET_BROKER_HA_STATUS), 5.0)

    resp = asyncio.run(go())
    assert resp.code == ResponseCode.SUCCESS, resp.remark
    return dict(orjson.loads(resp.body))


@pytest.mark.parametrize("mode", [{"brokerRole": "SLAVE"}, {"enableControllerMode": "true", "controllerAddr": "x:1"}])
def test_a_slave_under_acl_without_credentials_refuses_to_start_naming_the_keys(cluster, mode):
    conf = {k: v for k, v in acl_conf(cluster.root).items() if k not in ("accessKey", "secretKey")}
    proc = cluster.broker("no-credentials", {**conf, "brokerId": 1, "grpcPort": -1, **mode})
    done = subprocess.run(proc.args, env=cluster.env, capture_output=True, text=True, timeout=60)
    assert done.returncode != 0
    assert "aclEnable=true: a slave needs accessKey and secretKey" in done.stderr, done.stderr
    assert not (cluster.root / "no-credentials").exists()  # refused before its store was made


def test_without_acl_the_ha_port_is_open_as_rocketmqs(cluster):
    """aclEnable off: the master says so to whoever opens (documented: as RocketMQ's, unauthenticated), and a
    slave replicates as before."""
    group = Group(cluster, NAME, conf={"brokerClusterName": CLUSTER})
    master = group.member(0, "SYNC_MASTER").start()
    with socket.create_connection(("127.0.0.1", group.ha_ports[0]), timeout=5) as sock:
        sock.sendall(open_msg(os.urandom(32), ""))
        assert read_all(sock, 1.0)[:5] == b"TXHA\x02"  # open: no proofs
    group.member(1, "SLAVE").start()
    assert wait_until(lambda: len(ha_status(master.addrs["broker"])["slaves"]) == 1, 20)


def _acting(group: FailoverGroup, replicas: int, not_id: int | None = None, timeout: float = 40.0) -> int:
    """The master that acts (valid lease) with ``replicas`` members in its SyncStateSet, asked with signed calls."""
    def found() -> int:
        m = group.master()
        if m <= 0 or m == not_id or not group.members[m].alive:
            return -1
        try:
            c = ha_status(group.addr(m)).get("controller", {})
        except Exception:
            return -1
        return m if c.get("leaseValid") and len(c.get("syncStateSet", [])) == replicas else -1

    assert wait_until(lambda: found() > 0, timeout), group.state()
    return found()


def test_controller_mode_replicates_only_between_authenticated_replicas_across_a_failover(cluster):
    """Three replicas with aclEnable in controller mode: they authenticate each other and form the SyncStateSet,
    a fake slave on the master's HA port gets nothing, and after the master is SIGKILLed the new master's slave
    and then the restarted replica replicate again; every log is the same at the end."""
    group = FailoverGroup(cluster, NAME, conf=acl_conf(cluster.root))
    try:
        group.start()
        first = _acting(group, 3)
        create_topic(cluster.namesrv_addr)
        with producer(cluster.namesrv_addr) as p:
            assert {p.send(Message("orders", BODY + b"%d" % i)).status for i in range(20)} == {SendStatus.SEND_OK}
        end = int(ha_status(group.addr(first))["maxOffset"])
        port = group.ha_proxies[first].target[1]  # the master's HA port itself (brokerIP1)
        for attempt in ATTEMPTS:
            data = fake_slave(port, attempt, timeout=3.0)
            assert not leaks(data, end), (attempt, leaks(data, end), data[:200])
        assert sorted(s["broker_id"] for s in ha_status(group.addr(first))["slaves"]) == \
            sorted(r for r in group.ids if r != first)
        group.members[first].kill()
        second = _acting(group, 2, not_id=first)
        with producer(cluster.namesrv_addr) as p:
            assert p.send(Message("orders", BODY + b"after the failover")).status == SendStatus.SEND_OK
        group.members[first].start()
        assert _acting(group, 3) == second
        end = int(ha_status(group.addr(second))["maxOffset"])
        assert wait_until(lambda: all(int(ha_status(group.addr(r))["maxOffset"]) == end for r in group.ids), 30)
        for r in group.ids:
            assert commit_log_bytes(group.store(r), end) == commit_log_bytes(group.store(second), end)
    finally:
        cluster.close()
        group.close()
