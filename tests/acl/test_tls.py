"""TLS on the remoting ports and gRPC (``tls.server.mode``), with certificates made at test time by the
``openssl`` command: txmq's client and CLI over TLS, the official RocketMQ 5 clients over TLS, plaintext refused
by ``enforcing`` and accepted beside TLS by ``permissive`` (where the C++ client, which has no TLS, still works)."""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.cpp.harness import cpp_client_available, run_produce
from txmq.client.consumer import ConsumeFromWhere, ConsumeStatus, PushConsumer
from txmq.client.producer import Producer
from txmq.errors import TxmqError
from txmq.launch import txmq_command
from txmq.message import Message
from txmq.remoting.server import RemotingServer, ServerLimits
from txmq.remoting.tls import TlsServer, TlsServerConfig

from .conftest import CONSUMER, VICTIM, AclServer, start_acl_server
from .test_acl_grpc import NODE, PY, drive

pytestmark = [pytest.mark.e2e, pytest.mark.slow,  # real servers and other languages' clients over TLS
              pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command")]


def make_certificates(d: Path) -> tuple[Path, Path, Path]:
    """(CA certificate, server certificate for 127.0.0.1, server key)."""
    def openssl(*args: str) -> None:
        subprocess.run(["openssl", *args], cwd=d, check=True, capture_output=True, timeout=60)

    ec = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes")
    openssl("req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.pem", "-days", "1", "-subj", "/CN=txmq test CA")
    openssl("req", *ec, "-keyout", "server.key", "-out", "server.csr", "-subj", "/CN=127.0.0.1")
    (d / "ext.cnf").write_text("subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\n"
                               "keyUsage=digitalSignature\nextendedKeyUsage=serverAuth\n")
    openssl("x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
            "-out", "server.pem", "-days", "1", "-extfile", "ext.cnf")
    return d / "ca.pem", d / "server.pem", d / "server.key"


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    return make_certificates(tmp_path_factory.mktemp("certs"))


def _tls_conf(certs: tuple[Path, Path, Path], mode: str) -> str:
    ca, cert, key = certs
    return (f"tls.server.mode={mode}\ntls.server.certPath={cert}\ntls.server.keyPath={key}\n"
            f"tls.enable=true\ntls.client.trustCertPath={ca}\n")


@pytest.fixture(scope="module")
def enforcing(certs, tmp_path_factory: pytest.TempPathFactory) -> Iterator[AclServer]:
    """TLS enforcing and ACL on: name server, broker and gRPC."""
    server = start_acl_server(tmp_path_factory.mktemp("tls-enforcing"), _tls_conf(certs, "enforcing"),
                              tls_trust=str(certs[0]))
    try:
        yield server
    finally:
        server.proc.stop()


def _roundtrip(namesrv: str, trust: str | None, body: bytes) -> list[bytes]:
    """Send ``body`` and consume what arrives, over TLS trusting ``trust`` (None: plaintext)."""
    producer = Producer("order-service", namesrv, retry_times=0).set_session_credentials(VICTIM.access_key,
                                                                                          VICTIM.secret_key)
    if trust is not None:
        producer.use_tls(trust)
    with producer:
        producer.send(Message("orders", body))
    got: list[bytes] = []
    consumer = PushConsumer("billing", namesrv, consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET)
    consumer.set_session_credentials(CONSUMER.access_key, CONSUMER.secret_key)
    if trust is not None:
        consumer.use_tls(trust)
    consumer.subscribe("orders", "*")
    consumer.register_listener(lambda msgs: got.extend(m.body for m in msgs) or ConsumeStatus.SUCCESS)
    consumer.start()
    try:
        deadline = time.monotonic() + 15
        while body not in got and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        consumer.shutdown()
    return got


def test_txmq_client_over_tls_and_plaintext_refused(enforcing: AclServer, certs):
    assert b"over tls" in _roundtrip(enforcing.namesrv, str(certs[0]), b"over tls")
    with pytest.raises(TxmqError):
        _roundtrip(enforcing.namesrv, None, b"plaintext")
    assert "TLS server refused a connection from 127.0.0.1: plaintext (tls.server.mode=enforcing)" in enforcing.log
    # a client that does not trust the test CA refuses the server
    with pytest.raises(TxmqError):
        _roundtrip(enforcing.namesrv, "", b"untrusted")


def test_cli_over_tls(enforcing: AclServer, certs):
    env = {k: v for k, v in os.environ.items() if not k.startswith("TXMQ_")}
    r = subprocess.run(txmq_command("send", "--topic", "orders", "--group", "order-service", "--body", "cli tls",
                                    "-n", enforcing.namesrv, "--access-key", VICTIM.access_key, "--secret-key",
                                    VICTIM.secret_key, "--tls", "--tls-trust-cert", str(certs[0])),
                       capture_output=True, text=True, timeout=60, env=env)
    assert r.returncode == 0 and r.stdout.startswith("SEND_OK"), r.stderr


@pytest.mark.parametrize("client", ["py", "node"])
def test_official_clients_over_tls(enforcing: AclServer, certs, tmp_path, client):
    roots = {"GRPC_DEFAULT_SSL_ROOTS_FILE_PATH": str(certs[0])}
    argv = PY if client == "py" else NODE
    ok, events = drive(argv, enforcing.proc.grpc, tmp_path, VICTIM, env=roots, tls=True, cmd="send",
                       topic="orders", count=1, body=f"{client}-tls")
    assert ok and [e for e in events if e["event"] == "sent"]
    ok, _ = drive(argv, enforcing.proc.grpc, tmp_path, VICTIM, cmd="send", topic="orders", count=1, timeout=30,
                  body="plaintext")
    assert not ok


def test_permissive_serves_tls_and_plaintext_on_one_port(certs, tmp_path):
    server = start_acl_server(tmp_path / "server", _tls_conf(certs, "permissive"), tls_trust=str(certs[0]))
    try:
        assert b"tls" in _roundtrip(server.namesrv, str(certs[0]), b"tls")
        assert b"plain" in _roundtrip(server.namesrv, None, b"plain")
        if cpp_client_available():  # the C++ client 0.4.4 has no TLS: permissive lets it in, still signed
            sent = run_produce(server.namesrv, "orders", 1, "sync", home=tmp_path, timeout=60,
                               extra=["--access-key", VICTIM.access_key, "--secret-key", VICTIM.secret_key])
            assert sent[0]["status"] == "OK"
    finally:
        server.proc.stop()


def test_handshakes_that_never_finish_are_bounded_by_the_servers_limits(certs):
    """Sockets that send one byte of a TLS hello and stop are not connections yet: the frame timeout closes them
    (as it closes a stalled frame) and the connection cap bounds how many are held."""
    _, cert, key = certs

    async def go() -> None:
        srv = RemotingServer(lambda conn, cmd: None, limits=ServerLimits(server_max_connections=5,
                                                                         server_frame_timeout_seconds=1),
                             tls=TlsServerConfig("enforcing", str(cert), str(key)))
        await srv.start()
        socks = []
        try:
            for _ in range(20):
                s = socket.create_connection(("127.0.0.1", srv.port))
                s.send(b"\x16")
                socks.append(s)
            await asyncio.sleep(0.5)
            server = srv._server
            assert isinstance(server, TlsServer)
            assert server.pending <= 5  # beyond the cap, closed at once
            deadline = time.monotonic() + 10  # the frame timeout is 1 s: ten times that, for a loaded machine
            while server.pending and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
            assert server.pending == 0  # past the frame timeout, every stalled handshake is closed
        finally:
            for s in socks:
                s.close()
            await srv.close()

    asyncio.run(go())
