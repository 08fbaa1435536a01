"""Replication in one process over real TCP and real files: the HA port refuses garbage and wrong peers, a
slave refuses a stream that is not valid records, and a slave whose log runs past (or away from) its master's
truncates it on disk. Small segments, so streams cross segment ends."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import os
import shutil
from collections.abc import Awaitable
from pathlib import Path

import pytest
import uvloop

from tests.store.store_helpers import SEGMENT, make_config, msg, run, spoil_record
from txmq.errors import CorruptRecordError
from txmq.launch import free_port
from txmq.store import DefaultMessageStore, PutMessageStatus
from txmq.store.ha import HAClient, HAConfig, HAConnection, HAService
from txmq.store.ha.protocol import (
    REPORT,
    TRANSFER_HEADER,
    Challenge,
    Hello,
    Open,
    Transfer,
    Welcome,
    read_challenge,
    read_hello,
    read_open,
    read_welcome,
)
from txmq.store.mapped_file import offset_to_name


def _ha(broker_id: int, port: int, **kw: object) -> HAConfig:
    cfg = HAConfig("C", "broker-a", broker_id, listen_port=port, master_address=f"127.0.0.1:{port}",
                   send_heartbeat_interval_ms=200, housekeeping_interval_ms=2000)
    for k, v in kw.items():
        setattr(cfg, k, v)
    return cfg


async def _put(store: DefaultMessageStore, n: int, start: int = 0) -> None:
    for i in range(start, start + n):
        assert (await store.put_message(msg(body=f"b{i}".encode() * (50 + i % 40), queue_id=i % 3))).ok


async def _until(pred, timeout: float = 10.0) -> None:
    end = asyncio.get_running_loop().time() + timeout
    while not pred():
        assert asyncio.get_running_loop().time() < end, "timed out"
        await asyncio.sleep(0.02)


async def _connect_open(port: int, broker_id: int = 1) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A connection to an HA port (aclEnable off) past the OPEN: the next message is the HELLO."""
    r, w = await asyncio.open_connection("127.0.0.1", port)
    w.write(Open(broker_id, os.urandom(32)).encode())
    answer = await read_challenge(r)
    assert isinstance(answer, Challenge) and not answer.authenticate, answer
    return r, w


async def _answer_open(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """A master's side of the OPEN without aclEnable."""
    await read_open(reader)
    writer.write(Challenge(False, os.urandom(32)).encode())


async def _replicate(mroot: Path, sroot: Path, port: int, extra: int, start: int,
                     timeout: float = 10.0) -> tuple[int, int]:
    """A master at ``mroot`` takes ``extra`` puts from ``start``; a slave at ``sroot`` connects and copies until
    their ends match. The master's end and the slave's T/0 max offset."""
    async with DefaultMessageStore(make_config(mroot)) as master, DefaultMessageStore(make_config(sroot)) as slave:
        ha = HAService(master, _ha(0, port))
        await ha.start()
        await _put(master, extra, start)
        client = HAClient(slave, _ha(1, port))
        client.start()
        try:
            await _until(lambda: slave.max_phy_offset == master.max_phy_offset, timeout=timeout)
        finally:
            await client.shutdown()
            await ha.shutdown()
        return master.max_phy_offset, slave.get_max_offset_in_queue("T", 0)


def _log_bytes(root: Path, end: int) -> bytes:
    out = []
    for seg in sorted((root / "commitlog").iterdir()):
        if int(seg.name) < end:
            out.append(seg.read_bytes()[: end - int(seg.name)])
    return b"".join(out)


def test_ha_port_refuses_garbage_and_wrong_peers_with_one_line_each(tmp_path, caplog):
    port = free_port()

    async def go() -> list[Welcome]:
        async with DefaultMessageStore(make_config(tmp_path / "m")) as master:
            ha = HAService(master, _ha(0, port))
            await ha.start()
            await _put(master, 20)
            end = master.max_phy_offset
            answers = []
            try:
                for payload in (b"GET / HTTP/1.1\r\nHost: x\r\n\r\n" + b"\0" * 64, os.urandom(300), b"TX"):
                    r, w = await asyncio.open_connection("127.0.0.1", port)
                    w.write(payload)
                    w.write_eof() if payload == b"TX" else None
                    assert await asyncio.wait_for(r.read(), 5) == b""  # closed, nothing said
                    w.close()
                wrong = [Hello(1, SEGMENT, 0, bytes(8), "Other", "broker-a"),
                         Hello(1, SEGMENT, 0, bytes(8), "C", "broker-b"),
                         Hello(0, SEGMENT, 0, bytes(8), "C", "broker-a"),
                         Hello(1, SEGMENT * 2, 0, bytes(8), "C", "broker-a")]
                for hello in wrong:
                    r, w = await _connect_open(port, hello.broker_id)
                    w.write(hello.encode())
                    answers.append(await read_welcome(r))
                    assert await asyncio.wait_for(r.read(), 5) == b""
                    w.close()
                # A slave not upgraded (version 2 opened with its HELLO) is told why, in a WELCOME it reads.
                r, w = await asyncio.open_connection("127.0.0.1", port)
                w.write(Hello(1, SEGMENT, 0, bytes(8), "C", "broker-a", version=2).encode())
                answers.append(await read_welcome(r))
                w.close()
                # A slave reporting an offset past the master's end is dropped before anything is sent.
                r, w = await _connect_open(port)
                w.write(Hello(1, SEGMENT, 0, bytes(8), "C", "broker-a").encode())
                assert (await read_welcome(r)).accepted
                w.write(REPORT.pack(end + 12345))
                assert await asyncio.wait_for(r.read(), 5) == b""
                w.close()
                assert master.max_phy_offset == end and not ha.connections
            finally:
                await ha.shutdown()
            return answers

    with caplog.at_level(logging.WARNING, "txmq.ha"):
        answers = run(go)
    assert [a.accepted for a in answers] == [False] * 5
    assert "Other/broker-a" in answers[0].remark and "C/broker-b" in answers[1].remark
    assert "only slaves" in answers[2].remark and "mappedFileSizeCommitLog" in answers[3].remark
    assert "HA protocol version 2, this member 4" in answers[4].remark
    lines = [r.getMessage() for r in caplog.records if r.name == "txmq.ha"]
    assert sum("refused" in line for line in lines) >= 5, lines
    assert any("bad handshake (HandshakeError)" in line for line in lines)
    assert any("outside" in line for line in lines)


async def _spoiled_frame(root: Path, field: str) -> bytes:
    """A master's first three records (one per queue, each with a key), the second spoiled (``spoil_record``): a
    frame whose records all pass their CRC and size checks but whose second does not decode."""
    async with DefaultMessageStore(make_config(root)) as master:
        for q in range(3):
            assert (await master.put_message(msg(queue_id=q, KEYS=f"k{q}"))).ok
        frame = bytearray(master.commit_log.read_raw(0, master.max_phy_offset))
        first = master.commit_log.read(0)
        second = master.commit_log.read(len(first))
    rec = bytearray(second)
    spoil_record(rec, field)
    frame[len(first) : len(first) + len(rec)] = rec
    return bytes(frame)


@pytest.mark.parametrize("stream", ["random bytes", "a record whose topic is not UTF-8"])
def test_slave_refuses_a_stream_that_is_not_valid_records_and_writes_nothing(tmp_path, caplog, stream):
    port = free_port()
    junk = os.urandom(4096)

    async def fake_master(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await _answer_open(reader, writer)
            await read_hello(reader)
            writer.write(Welcome(True, 1 << 20, 0, bytes(8)).encode())
            start = REPORT.unpack(await reader.readexactly(8))[0]
            writer.write(Transfer(start, len(junk), -1, 0).encode() + junk)
            await writer.drain()
            await reader.read()
        finally:
            writer.close()

    async def go() -> int:
        nonlocal junk
        if stream != "random bytes":
            junk = await _spoiled_frame(tmp_path / "m", "topic")
        server = await asyncio.start_server(fake_master, "127.0.0.1", port)
        async with DefaultMessageStore(make_config(tmp_path / "s")) as slave:
            client = HAClient(slave, _ha(1, port))
            client.start()
            await asyncio.sleep(1.0)
            await client.shutdown()
            server.close()
            await server.wait_closed()
            return slave.max_phy_offset

    with caplog.at_level(logging.WARNING, "txmq.ha"):
        assert run(go) == 0
    lines = [r.getMessage() for r in caplog.records if r.name == "txmq.ha"]
    assert any("not valid records" in line and "nothing written" in line for line in lines), lines
    assert stream == "random bytes" or all("not UTF-8" in line for line in lines), lines
    assert len(lines) == len(set(lines))  # one line per problem, not one per retry


@pytest.mark.parametrize("field", ["topic", "properties", "layout"])
def test_a_frame_with_a_record_that_does_not_decode_is_refused_whole_and_nothing_written(tmp_path, field):
    """A record whose CRC is right but whose topic or properties are not UTF-8 (or do not fill it) comes only
    from a broken or hostile master. The frame's records were written to the slave's log before they were decoded
    for dispatch: the decoding failed, none of the frame was dispatched, and the session went on from the log's
    end, so its records never reached their queues. Such a frame is refused whole, nothing written; the master's
    valid bytes are then taken at the same offset."""

    async def go() -> None:
        frame = await _spoiled_frame(tmp_path / "m", field)
        async with DefaultMessageStore(make_config(tmp_path / "m")) as master, \
                DefaultMessageStore(make_config(tmp_path / "s")) as slave:
            first = len(master.commit_log.read(0))
            with pytest.raises(CorruptRecordError, match=f"record at {first}"):
                slave.append_replicated(0, frame)
            assert slave.max_phy_offset == 0 and slave.commit_log.read_raw(0, len(frame)) == b""
            assert [slave.get_max_offset_in_queue("T", q) for q in range(3)] == [0, 0, 0]
            valid = master.commit_log.read_raw(0, master.max_phy_offset)
            assert slave.append_replicated(0, valid) == len(valid)
            assert [slave.get_max_offset_in_queue("T", q) for q in range(3)] == [1, 1, 1]

    run(go)


@pytest.mark.parametrize("new_records", [0, 30])
def test_slave_truncates_bytes_its_master_no_longer_has_and_copies_the_new_ones(tmp_path, caplog, new_records):
    """The master's log loses its tail (recovery found it torn), and new records may take its place: the slave
    must drop what it had there, on disk, and end byte-identical to the master."""
    port = free_port()
    mroot, sroot = tmp_path / "m", tmp_path / "s"

    def replicate(extra: int, start: int) -> Awaitable[tuple[int, int]]:
        return _replicate(mroot, sroot, port, extra, start)

    end, _ = run(lambda: replicate(700, 0))
    assert end > 3 * SEGMENT
    # Cut the master's log inside its last segment: recovery truncates there.
    cut_at = end - 3000
    last = sorted((mroot / "commitlog").iterdir())[-1]
    with open(last, "r+b") as f:
        f.seek(cut_at - int(last.name))
        f.write(b"\xff" * 16)
    (mroot / "checkpoint").unlink()  # recovery scans the whole log and finds the damage
    with caplog.at_level(logging.WARNING):
        end2, slave_queue_max = run(lambda: replicate(new_records, 700))
    assert end2 != end
    truncations = [r.getMessage() for r in caplog.records if "truncating the commit log" in r.getMessage()]
    assert truncations, "the slave did not truncate"
    assert _log_bytes(sroot, end2) == _log_bytes(mroot, end2)
    assert sum(os.path.getsize(p) for p in (sroot / "commitlog").iterdir()) == \
        sum(os.path.getsize(p) for p in (mroot / "commitlog").iterdir())

    async def reopen() -> tuple[int, int]:
        async with DefaultMessageStore(make_config(sroot)) as slave, DefaultMessageStore(make_config(mroot)) as m:
            assert not slave.recovery_report.lost_data
            return slave.max_phy_offset, m.get_max_offset_in_queue("T", 0)

    s_end, m_queue_max = run(reopen)
    assert s_end == end2 and slave_queue_max == m_queue_max


def test_sync_master_group_commit_one_report_answers_every_put_waiting_then(tmp_path):
    port = free_port()

    async def go() -> tuple[list[PutMessageStatus], int, int]:
        async with DefaultMessageStore(make_config(tmp_path / "m")) as master, \
                DefaultMessageStore(make_config(tmp_path / "s")) as slave:
            ha = HAService(master, _ha(0, port))
            master.replicate = ha.replicate
            await ha.start()
            client = HAClient(slave, _ha(1, port))
            client.start()
            try:
                await _until(lambda: bool(ha.connections) and ha.connections[0].ack_offset >= 0)
                before = ha.connections[0].reports
                results = await asyncio.gather(*(master.put_message(msg(body=b"g" * 200)) for _ in range(500)))
                reports = ha.connections[0].reports - before
                assert slave.max_phy_offset == master.max_phy_offset  # every answered put is on the slave
            finally:
                await client.shutdown()
                await ha.shutdown()
            return [r.status for r in results], reports, len(results)

    statuses, reports, puts = run(go)
    assert set(statuses) == {PutMessageStatus.PUT_OK}
    assert reports < puts / 5, (reports, puts)


@pytest.mark.parametrize(("config", "in_sync", "needed"), [
    ({}, 0, 1), ({}, 2, 1), ({"in_sync_replicas": 3}, 2, 2), ({"all_ack_in_sync_state_set": True}, 3, 3),
    ({"in_sync_replicas": 3, "enable_auto_in_sync_replicas": True, "min_in_sync_replicas": 2}, 1, 1),
    ({"in_sync_replicas": 3, "enable_auto_in_sync_replicas": True, "min_in_sync_replicas": 1}, 0, 0),
])
def test_slave_acks_needed_follows_the_in_sync_replica_keys(config, in_sync, needed):
    assert _ha(0, 1, **config).slave_acks_needed(in_sync) == needed



def test_reports_stop_quietly_once_the_master_reset_the_connection_on_uvloop(tmp_path):
    """A master SIGKILLed with the slave's reports unread in its socket resets the connection (RST). On uvloop a
    report written after that raises RuntimeError (not OSError): it ended the HA client's task for good, the
    slave copied nothing more and its promotion failed at the client's shutdown. The reporter stops instead."""
    async def master(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read()
        writer.close()

    async def go() -> None:
        server = await asyncio.start_server(master, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        try:
            async with DefaultMessageStore(make_config(tmp_path / "s")) as slave:
                client = HAClient(slave, _ha(1, port, send_heartbeat_interval_ms=1))
                _, writer = await asyncio.open_connection("127.0.0.1", port)
                writer.transport.abort()  # as the connection_lost of a reset: closed on the next loop iteration
                await asyncio.sleep(0.01)
                await asyncio.wait_for(client._report_loop(writer), 5)
        finally:
            server.close()
            await server.wait_closed()

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(go())


def test_an_unexpected_error_in_a_session_does_not_stop_the_slave_copying(tmp_path, caplog, monkeypatch):
    """The client's task outlives any error of one session (logged with its traceback) and reconnects."""
    monkeypatch.setattr("txmq.store.ha.client.RETRY_S", 0.05)
    sessions: list[str] = []

    async def failing_session(addr: str, version: int) -> None:
        sessions.append(addr)
        raise RuntimeError("a bug")

    async def go() -> None:
        async with DefaultMessageStore(make_config(tmp_path / "s")) as slave:
            client = HAClient(slave, _ha(1, free_port()))
            client._session = failing_session  # type: ignore[method-assign]
            client.start()
            await _until(lambda: len(sessions) >= 2, 5)
            await client.shutdown()

    with caplog.at_level(logging.ERROR, "txmq.ha"):
        run(go)
    assert any("a bug" in (r.exc_text or "") + str(r.exc_info) for r in caplog.records if r.name == "txmq.ha")


def test_a_slave_s_shutdown_ends_when_it_comes_as_its_connection_is_made(tmp_path, monkeypatch):
    """The cancel of a shutdown that lands while the connection's last step is done but not yet taken up is not
    lost: ``asyncio.wait_for`` of Python 3.11 returned the connection and swallowed the cancel, and the session
    went on replicating while the shutdown waited for it for good."""
    port = free_port()
    real_open = asyncio.open_connection
    stopping: list[asyncio.Task[None]] = []

    async def go() -> None:
        async with DefaultMessageStore(make_config(tmp_path / "m")) as master, \
                DefaultMessageStore(make_config(tmp_path / "s")) as slave:
            ha = HAService(master, _ha(0, port))
            await ha.start()
            client = HAClient(slave, _ha(1, port))

            async def connected_as_shutdown_comes(*args: object, **kwargs: object):
                streams = await real_open(*args, **kwargs)
                stopping.append(asyncio.create_task(client.shutdown()))
                return streams

            monkeypatch.setattr(asyncio, "open_connection", connected_as_shutdown_comes)
            client.start()
            try:
                await _until(lambda: bool(stopping), 5)
                done, _ = await asyncio.wait(stopping, timeout=5)
                assert done, "the slave's shutdown never ended"
                assert not client.connected
            finally:
                await ha.shutdown()

    run(go)


def test_a_put_before_the_slaves_first_report_does_not_drop_the_slave(tmp_path):
    """A put wakes every slave's connection; one whose slave has not reported yet must wait for the report (it
    read from offset -1 and closed the connection as 'below retention': a restarted replica never rejoined)."""
    port = free_port()

    async def go() -> tuple[int, int]:
        async with DefaultMessageStore(make_config(tmp_path / "m")) as master:
            ha = HAService(master, _ha(0, port))
            await ha.start()
            await _put(master, 5)
            try:
                r, w = await _connect_open(port)
                w.write(Hello(1, SEGMENT, 0, bytes(8), "C", "broker-a").encode())
                assert (await read_welcome(r)).accepted
                await _put(master, 5, start=5)  # before the slave's first report
                await asyncio.sleep(0.2)
                w.write(REPORT.pack(0))
                offset, size, _ = TRANSFER_HEADER.unpack(await asyncio.wait_for(r.readexactly(TRANSFER_HEADER.size),
                                                                                5))
                w.close()
                return offset, size
            finally:
                await ha.shutdown()

    offset, size = run(go)
    assert offset == 0 and size > 0


def test_a_reader_bounded_by_the_confirm_offset_skips_nothing_when_a_slave_takes_over(tmp_path):
    """Issue 13's missed deliveries, in one process: a master serving the tail its SyncStateSet lacks lets a consumer
    move past queue offsets which the next master fills with other messages. The confirm offset (controller mode)
    stops reads where the slave's acknowledgement does; the slave keeps the master's bound from the stream, and as
    master alone it serves its whole log."""
    port = free_port()

    async def go() -> None:
        async with DefaultMessageStore(make_config(tmp_path / "m")) as master, \
                DefaultMessageStore(make_config(tmp_path / "s")) as slave:
            for store in (master, slave):
                store.set_confirm_offset(0)  # as a broker in controller mode starts
            ha = HAService(master, _ha(0, port))
            ha.set_needed_slaves(frozenset({1}))  # the SyncStateSet {master, 1}
            await ha.start()
            client = HAClient(slave, _ha(1, port, send_heartbeat_interval_ms=50))
            client.start()
            try:
                await _put(master, 6)  # queue 0 gets two
                await _until(lambda: master.confirm_offset == slave.confirm_offset == master.max_phy_offset)
                await client.shutdown()  # the slave is cut off
                replicated = slave.max_phy_offset
                await _put(master, 6, start=6)  # a tail no other member has
                assert master.confirm_offset == replicated
                bounded = master.get_message("T", 0, 0, 32, confirmed=True)
                unbounded = master.get_message("T", 0, 0, 32)
                assert (bounded.next_begin_offset, unbounded.next_begin_offset) == (2, 4)
            finally:
                await ha.shutdown()
            took_over = HAService(slave, _ha(0, free_port()))  # the slave is elected: its SyncStateSet is itself
            took_over.set_needed_slaves(frozenset())
            assert slave.confirm_offset == replicated
            for i in range(100, 106):
                assert (await slave.put_message(msg(body=b"new%d" % i, queue_id=i % 3))).ok
            assert slave.confirm_offset == slave.max_phy_offset
            after = slave.get_message("T", 0, bounded.next_begin_offset, 32, confirmed=True)
            assert [pos for pos in after.queue_offsets] == [2, 3]  # the new master's two, delivered
            assert all(b"new" in raw for raw in after.messages)
            # The unbounded reader would go on at 4 and never get them.
            assert slave.get_message("T", 0, unbounded.next_begin_offset, 32, confirmed=True).messages == []

    run(go)


def test_a_master_alone_serves_its_whole_log_and_its_service_once_shut_down_moves_nothing(tmp_path):
    """A replica elected again later gets a new HAService: the one it had when it was master alone (bound = its
    log's end at each put) must not keep raising the bound over the new SyncStateSet's."""
    async def go() -> None:
        async with DefaultMessageStore(make_config(tmp_path / "m")) as store:
            store.set_confirm_offset(0)
            alone = HAService(store, _ha(0, free_port()))
            alone.set_needed_slaves(frozenset())
            await _put(store, 2)
            assert store.confirm_offset == store.max_phy_offset
            await alone.shutdown()
            held = store.confirm_offset
            later = HAService(store, _ha(0, free_port()))
            later.set_needed_slaves(frozenset({2}))  # slave 2 has reported nothing yet
            await _put(store, 2, start=2)
            assert store.confirm_offset == held < store.max_phy_offset

    run(go)


def test_outside_controller_mode_reads_are_not_bounded_on_master_or_slave(tmp_path):
    port = free_port()

    async def go() -> None:
        async with DefaultMessageStore(make_config(tmp_path / "m")) as master, \
                DefaultMessageStore(make_config(tmp_path / "s")) as slave:
            ha = HAService(master, _ha(0, port))
            await ha.start()
            client = HAClient(slave, _ha(1, port))
            client.start()
            try:
                await _put(master, 6)
                await _until(lambda: slave.max_phy_offset == master.max_phy_offset)
                await client.shutdown()
                await _put(master, 3, start=6)
                assert master.confirm_offset is None and slave.confirm_offset is None
                assert master.get_max_offset_in_queue("T", 0, confirmed=True) == 3
                assert slave.get_max_offset_in_queue("T", 0, confirmed=True) == 2
            finally:
                await ha.shutdown()

    run(go)


def test_a_slave_reset_ends_the_masters_stream_quietly_on_uvloop(tmp_path):
    """The master's side of the HA client's uvloop fix: a slave gone (RST) while its stream has data to send. The
    writer stopped with uvloop's RuntimeError, which also skipped the connection's close: the slave's id stayed
    'already connected' and it could never come back. The writer stops, the slave's id is free."""
    async def peer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read()
        writer.close()

    async def go() -> None:
        server = await asyncio.start_server(peer, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        try:
            async with DefaultMessageStore(make_config(tmp_path / "m")) as master:
                await _put(master, 3)
                ha = HAService(master, _ha(0, free_port()))
                reader, writer = await asyncio.open_connection("127.0.0.1", port)
                conn = HAConnection(ha, reader, writer, Hello(1, SEGMENT, 0, bytes(8), "C", "broker-a"), "peer")
                ha.connections.append(conn)
                conn.transferred = 0  # the slave reported where it stands
                writer.transport.abort()  # as the connection_lost of a reset
                await asyncio.sleep(0.01)
                await asyncio.wait_for(conn._write_loop(), 5)
                await asyncio.wait_for(conn.run(), 5)
                assert ha.connections == []
        finally:
            server.close()
            await server.wait_closed()

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(go())


def test_a_slave_whose_fsync_failed_acknowledges_nothing_more_to_its_sync_master(tmp_path, caplog):
    """A slave's store that lost its durability (a failed fsync) appends nothing of its master's, so its reports
    (its log's end, as RocketMQ's slave reports) never cover a put made since: a SYNC_MASTER put is not answered
    PUT_OK on its account, and the slave's HA client says why."""
    port = free_port()

    async def go() -> tuple[PutMessageStatus, int, int]:
        async with DefaultMessageStore(make_config(tmp_path / "m")) as master, \
                DefaultMessageStore(make_config(tmp_path / "s")) as slave:
            ha = HAService(master, _ha(0, port, sync_timeout_ms=500))
            master.replicate = ha.replicate
            await ha.start()
            client = HAClient(slave, _ha(1, port))
            client.start()
            try:
                await _until(lambda: bool(ha.connections) and ha.connections[0].ack_offset >= 0)
                await _put(master, 5)
                await _until(lambda: slave.max_phy_offset == master.max_phy_offset)
                copied = slave.max_phy_offset
                slave.durability.lose("a segment", OSError(errno.EIO, os.strerror(errno.EIO)))
                result = await master.put_message(msg(body=b"after"))
                return result.status, copied, slave.max_phy_offset
            finally:
                await client.shutdown()
                await ha.shutdown()

    status, copied, slave_end = run(go)
    assert status is not PutMessageStatus.PUT_OK and slave_end == copied, (status, copied, slave_end)
    assert any("failed an fsync" in r.getMessage() for r in caplog.records), caplog.text


def test_a_slave_whose_log_differs_from_a_cut_master_s_across_a_segment_end_ends_byte_identical(tmp_path: Path) -> None:
    """A master and its slave hold the same log, four segments and more. The master loses the end of its third
    segment and everything after (its recovery cuts the log there), then takes new puts that run into a fourth
    segment again. The slave connects: the handshake finds the bytes before the slave's end different and cuts the
    slave at the start of the segment holding its end; the 8 bytes before that segment start were the zeros after a
    BLANK marker on both sides whatever the records before them, so the check passed there, and the slave kept its
    old records between the master's cut and that segment start: the two logs differed for good, silently. At a
    segment start the check compares the previous segment's last record and its marker."""
    port = free_port()
    mroot, sroot = tmp_path / "m", tmp_path / "s"

    async def replicate(extra: int, start: int) -> int:
        return (await _replicate(mroot, sroot, port, extra, start, timeout=20))[0]

    seg_size = make_config(mroot).mapped_file_size_commit_log
    end = run(lambda: replicate(700, 0))
    assert end > 3 * seg_size
    third = mroot / "commitlog" / offset_to_name(2 * seg_size)
    with open(third, "r+b") as f:  # the master's third segment from its middle on: lost pages
        f.seek(seg_size // 2)
        f.write(bytes(seg_size - seg_size // 2))
    (mroot / "checkpoint").unlink()  # (recovery from the start of the log finds the zeros as a power loss's scan would)
    end2 = run(lambda: replicate(700, 700))
    assert end2 > end
    master_log, slave_log = _log_bytes(mroot, end2), _log_bytes(sroot, end2)
    differ = next((i for i, (a, b) in enumerate(zip(master_log, slave_log, strict=True)) if a != b), None)
    assert differ is None, f"the slave's log differs from its master's from offset {differ} on"


def test_a_slave_ending_at_a_segment_start_its_master_deleted_replicates(tmp_path: Path) -> None:
    """The slave ends exactly at a segment start (its last segment full) and its master's retention deleted the
    segments before it: the master has no tail there to show (zeros) where the slave's full segment shows its last
    record and marker. Compared, the slave cut a valid segment and then could never copy again ("ends before the
    master's oldest byte"); the tails are compared only where both logs hold the bytes before."""
    mroot, sroot = tmp_path / "m", tmp_path / "s"
    port = free_port()

    async def fill() -> int:
        async with DefaultMessageStore(make_config(mroot)) as master:
            n = 0
            while master.max_phy_offset < 2 * SEGMENT + 5000:
                await _put(master, 50, n)
                n += 50
            return int(master.max_phy_offset)

    run(fill)
    # The slave holds the master's first two segments, the second full (BLANK marker): it ends at a segment start.
    (sroot / "commitlog").mkdir(parents=True)
    for i in range(2):
        shutil.copy(mroot / "commitlog" / offset_to_name(i * SEGMENT),
                    sroot / "commitlog" / offset_to_name(i * SEGMENT))

    async def slave_end() -> int:
        async with DefaultMessageStore(make_config(sroot)) as slave:
            return int(slave.max_phy_offset)

    assert run(slave_end) == 2 * SEGMENT

    async def replicate() -> tuple[int, int, int, int, bytes, bytes]:
        async with DefaultMessageStore(make_config(mroot, file_reserved_time_hours=1)) as master, \
                DefaultMessageStore(make_config(sroot)) as slave:
            gone = master.clean_expired_files(elapsed_ms=10**12)  # retention: the master's first two segments go
            assert gone == 2 and master.min_phy_offset == 2 * SEGMENT, (gone, master.min_phy_offset)
            mtail, stail = master.commit_log.tail_bytes(2 * SEGMENT), slave.commit_log.tail_bytes(2 * SEGMENT)
            ha = HAService(master, _ha(0, port))
            await ha.start()
            client = HAClient(slave, _ha(1, port))
            client.start()
            try:
                with contextlib.suppress(AssertionError):  # (the assertion below says how far it got)
                    await _until(lambda: slave.max_phy_offset == master.max_phy_offset, timeout=8)
            finally:
                await client.shutdown()
                await ha.shutdown()
            return (int(master.max_phy_offset), int(slave.max_phy_offset), int(slave.min_phy_offset),
                    int(master.min_phy_offset), mtail, stail)

    mmax, smax, smin, mmin, mtail, stail = run(replicate)
    assert (smax, smin) == (mmax, 0), (
        f"slave ends at {smax} (starts {smin}), master {mmin}..{mmax}; tails at {2 * SEGMENT}: master "
        f"{mtail.hex()} slave {stail.hex()}")


def test_a_segment_start_s_tail_shows_a_blank_marker_further_than_64_mib_from_the_segment_end(tmp_path: Path) -> None:
    """With maxMessageSize above 64 MiB (it has no upper bound), a record that does not fit leaves a BLANK marker
    further than that from its segment's end. The handshake's tail at the next segment's start was then the zeros
    after the marker in every log (the marker searched for in the last 64 MiB only), and a slave whose records
    before it differ from its master's passed the check there and kept them. Two logs whose first segments differ
    show different tails at the second's start."""
    seg = 128 << 20

    async def fill(root: Path, first: bytes) -> bytes:
        config = make_config(root, mapped_file_size_commit_log=seg, max_message_size=seg)
        async with DefaultMessageStore(config) as store:
            assert (await store.put_message(msg(body=first * (60 << 20)))).ok
            assert (await store.put_message(msg(body=b"c" * (100 << 20)))).ok  # into the next segment
            assert store.commit_log.queue.files[1].file_from_offset == seg
            tail = bytes(store.commit_log.tail_bytes(seg))
        shutil.rmtree(root)
        return tail

    tails = [run(lambda: fill(tmp_path / "m", b"a")), run(lambda: fill(tmp_path / "s", b"b"))]
    assert tails[0] != tails[1], [t.hex() for t in tails]
