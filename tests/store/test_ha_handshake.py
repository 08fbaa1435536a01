"""HA authentication in one process over real TCP (the attacks on real processes are tests/e2e/test_ha_auth.py):
authenticated members replicate byte for byte; a slave with a wrong secret, a non-admin account or of another
group copies nothing and is logged once, not per retry; a recorded session's proof replayed on a new connection
gets nothing; a slave follows no master that does not authenticate, and says why; tls.server.mode on the HA port
(permissive: TLS and plaintext slaves; enforcing: TLS ones only)."""

from __future__ import annotations

import asyncio
import contextlib
import logging

import pytest

from tests.store.store_helpers import make_config, msg, run
from txmq.launch import free_port
from txmq.remoting.tls import TlsServerConfig, client_context
from txmq.store import DefaultMessageStore
from txmq.store.ha import HAAuth, HAClient, HAConfig, HAService

ADMINS = {"clusterAdmin01": "clusterAdminSecret01"}


def _admin_secret(access_key: str) -> str | None:
    return ADMINS.get(access_key)


def _ha(broker_id: int, port: int, auth: HAAuth | None, name: str = "broker-a") -> HAConfig:
    return HAConfig("C", name, broker_id, listen_port=port, master_address=f"127.0.0.1:{port}",
                    send_heartbeat_interval_ms=200, housekeeping_interval_ms=2000, auth=auth)


ADMIN = HAAuth("clusterAdmin01", "clusterAdminSecret01", _admin_secret)


async def _put(store: DefaultMessageStore, n: int) -> None:
    for i in range(n):
        assert (await store.put_message(msg(body=f"b{i}".encode() * 80, queue_id=i % 3))).ok


async def _until(pred, timeout: float = 10.0) -> None:
    end = asyncio.get_running_loop().time() + timeout
    while not pred():
        assert asyncio.get_running_loop().time() < end, "timed out"
        await asyncio.sleep(0.02)


def test_authenticated_members_replicate_byte_for_byte(tmp_path):
    port = free_port()

    async def go() -> None:
        async with DefaultMessageStore(make_config(tmp_path / "m")) as master, \
                DefaultMessageStore(make_config(tmp_path / "s")) as slave:
            ha = HAService(master, _ha(0, port, ADMIN))
            await ha.start()
            client = HAClient(slave, _ha(1, port, ADMIN))
            client.start()
            try:
                await _put(master, 300)
                await _until(lambda: slave.max_phy_offset == master.max_phy_offset)
                assert [c.broker_id for c in ha.connections] == [1]
                end = master.max_phy_offset
                assert slave.commit_log.read_raw(0, end) == master.commit_log.read_raw(0, end)
            finally:
                await client.shutdown()
                await ha.shutdown()

    run(go)


@pytest.mark.parametrize("slave_auth,name,why", [
    (HAAuth("clusterAdmin01", "not-the-secret", _admin_secret), "broker-a", "wrong proof"),
    (HAAuth("billingKey01", "billingSecret01", _admin_secret), "broker-a", "not an admin account"),
    (ADMIN, "broker-b", "wrong proof"),  # the cluster's account, but a slave of another group
])
def test_a_slave_that_cannot_prove_itself_copies_nothing_and_is_logged_once(tmp_path, caplog, slave_auth, name, why):
    port = free_port()

    async def go() -> tuple[int, int]:
        async with DefaultMessageStore(make_config(tmp_path / "m")) as master, \
                DefaultMessageStore(make_config(tmp_path / "s")) as slave:
            await _put(master, 20)
            ha = HAService(master, _ha(0, port, ADMIN))
            await ha.start()
            client = HAClient(slave, _ha(1, port, slave_auth, name))
            client.start()
            try:
                await asyncio.sleep(3.5)  # the slave retries every second
                return slave.max_phy_offset, len(ha.connections)
            finally:
                await client.shutdown()
                await ha.shutdown()

    with caplog.at_level(logging.INFO, "txmq.ha"):
        assert run(go) == (0, 0)
    lines = [r.getMessage() for r in caplog.records if r.name == "txmq.ha"]
    refused = [line for line in lines if "HA connection refused" in line]
    assert len(refused) == 1 and why in refused[0], lines
    slave_side = [line for line in lines if "refused this slave's proof" in line]
    assert len(slave_side) == 1, lines


def test_a_recorded_proof_replayed_on_a_new_connection_gets_nothing(tmp_path):
    """An eavesdropper records what a real slave sent (OPEN, proof, HELLO, first report) and sends it again: the
    master's nonce is new, the proof does not fit it."""
    port, relay_port = free_port(), free_port()
    recorded = bytearray()

    async def relay(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_r, up_w = await asyncio.open_connection("127.0.0.1", port)

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter, record: bool) -> None:
            while data := await src.read(65536):
                if record:
                    recorded.extend(data)
                dst.write(data)
            dst.close()

        await asyncio.gather(pipe(reader, up_w, True), pipe(up_r, writer, False), return_exceptions=True)

    async def go() -> tuple[bytes, int]:
        async with DefaultMessageStore(make_config(tmp_path / "m")) as master, \
                DefaultMessageStore(make_config(tmp_path / "s")) as slave:
            await _put(master, 50)
            ha = HAService(master, _ha(0, port, ADMIN))
            await ha.start()
            server = await asyncio.start_server(relay, "127.0.0.1", relay_port)
            client = HAClient(slave, _ha(1, relay_port, ADMIN))
            client.start()
            try:
                await _until(lambda: slave.max_phy_offset == master.max_phy_offset)
                await client.shutdown()
                await _until(lambda: not ha.connections)
                r, w = await asyncio.open_connection("127.0.0.1", port)
                w.write(bytes(recorded))
                got = await asyncio.wait_for(r.read(), 5)
                w.close()
                return got, len(ha.connections)
            finally:
                server.close()
                await ha.shutdown()

    got, connections = run(go)
    assert len(got) == 5 + 32 and got[:5] == b"TXHA\x00", got  # the challenge, then the connection closed
    assert connections == 0


@pytest.mark.parametrize("master_auth,slave_auth,said", [
    (None, ADMIN, "does not authenticate"),  # a master without aclEnable: the slave does not follow it
    (ADMIN, None, "authenticates its slaves"),  # a slave without aclEnable is told what it needs
])
def test_a_slave_follows_no_master_that_does_not_authenticate_and_says_why(tmp_path, caplog, master_auth,
                                                                          slave_auth, said):
    port = free_port()

    async def go() -> int:
        async with DefaultMessageStore(make_config(tmp_path / "m")) as master, \
                DefaultMessageStore(make_config(tmp_path / "s")) as slave:
            await _put(master, 20)
            ha = HAService(master, _ha(0, port, master_auth))
            await ha.start()
            client = HAClient(slave, _ha(1, port, slave_auth))
            client.start()
            try:
                await asyncio.sleep(2.5)
                return slave.max_phy_offset
            finally:
                await client.shutdown()
                await ha.shutdown()

    with caplog.at_level(logging.WARNING, "txmq.ha"):
        assert run(go) == 0
    lines = [r.getMessage() for r in caplog.records if r.name == "txmq.ha" and said in r.getMessage()]
    assert len(lines) == 1, [r.getMessage() for r in caplog.records]


def test_tls_permissive_serves_tls_and_plaintext_slaves_enforcing_only_tls(tmp_path):
    from tests.acl.test_tls import make_certificates

    (tmp_path / "certs").mkdir()
    ca, cert, key = make_certificates(tmp_path / "certs")

    async def copied(mode: str, tls_slave: bool) -> bool:
        """Whether the slave's log becomes the master's: within 15 s (a loaded machine) when it should, and
        watched 2 s when it must not."""
        port = free_port()
        root = tmp_path / f"{mode}-{tls_slave}"
        async with DefaultMessageStore(make_config(root / "m")) as master, \
                DefaultMessageStore(make_config(root / "s")) as slave:
            await _put(master, 20)
            config = _ha(0, port, ADMIN)
            config.tls = TlsServerConfig(mode, str(cert), str(key))
            ha = HAService(master, config)
            await ha.start()
            slave_config = _ha(1, port, ADMIN)
            slave_config.tls_client = client_context(str(ca)) if tls_slave else None
            client = HAClient(slave, slave_config)
            client.start()
            try:
                with contextlib.suppress(AssertionError):
                    await _until(lambda: slave.max_phy_offset == master.max_phy_offset,
                                 15.0 if tls_slave or mode == "permissive" else 2.0)
                return slave.max_phy_offset == master.max_phy_offset
            finally:
                await client.shutdown()
                await ha.shutdown()

    async def go() -> list[bool]:
        return [await copied(mode, tls) for mode, tls in
                (("permissive", True), ("permissive", False), ("enforcing", True), ("enforcing", False))]

    assert run(go) == [True, True, True, False]


def test_a_truncation_s_disk_error_is_logged_as_what_it_is_and_tried_again(tmp_path, caplog, monkeypatch):
    """A slave whose log runs past its master's truncates at the handshake; when that fails on its disk (an I/O
    error), the one line says so (not "connection lost" nor "not reachable"), and the next handshake truncates."""
    port = free_port()

    async def go() -> None:
        async with DefaultMessageStore(make_config(tmp_path / "old")) as old, \
                DefaultMessageStore(make_config(tmp_path / "m")) as master, \
                DefaultMessageStore(make_config(tmp_path / "s")) as slave:
            await _put(old, 60)
            cut = old.get_commit_log_offset_in_queue("T", 0, 10)
            master.append_replicated(0, old.commit_log.read_raw(0, cut))
            slave.replica = True
            slave.append_replicated(0, old.commit_log.read_raw(0, old.max_phy_offset))
            real, failures = slave.truncate_replicated, [2]

            def failing(offset: int) -> None:
                if failures[0]:
                    failures[0] -= 1
                    raise OSError(5, "Input/output error")
                real(offset)

            monkeypatch.setattr(slave, "truncate_replicated", failing)
            ha = HAService(master, _ha(0, port, None))
            await ha.start()
            client = HAClient(slave, _ha(1, port, None))
            client.start()
            try:
                await _until(lambda: client.connected and slave.max_phy_offset == master.max_phy_offset)
            finally:
                await client.shutdown()
                await ha.shutdown()

    with caplog.at_level(logging.INFO, "txmq.ha"):
        run(go)
    lines = [r.getMessage() for r in caplog.records if r.name == "txmq.ha"]
    failed = [line for line in lines if "truncating this log at" in line]
    assert len(failed) == 1 and "Input/output error" in failed[0], lines  # one line for the two failures
    assert not [line for line in lines if "lost" in line or "not reachable" in line], lines
