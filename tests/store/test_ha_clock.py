"""A slave's ages of its master's records, over a real HA connection on 127.0.0.1: each record is aged from the
moment its master wrote it on the master's elapsed-time account, whatever the slave's own wall clock said when its
store was opened, and however late the slave arrived. The clocks are the stores' own, shifted by the tests
(``elapsed.py``)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import AsyncIterator

import pytest

import txmq.store.clock as clock_module
from tests.elapsed import advance, wall_step
from tests.store.store_helpers import ha_config, make_config, msg, run
from txmq.launch import free_port
from txmq.message import decode_message
from txmq.store import DefaultMessageStore
from txmq.store.config import StoreConfig
from txmq.store.ha import HAClient, HAService
from txmq.store.ha.client import DIFFERENCE_WINDOW_MS, AccountDifference
from txmq.store.ha.protocol import REPORT, Challenge, Transfer, Welcome, read_hello, read_open, refusal


async def _put(store: DefaultMessageStore, n: int) -> list[tuple[int, int]]:
    """``n`` puts; each record's commit-log offset and store timestamp."""
    out = []
    for i in range(n):
        result = await store.put_message(msg(body=b"x" * (100 + i)))
        assert result.ok and result.append_result is not None
        offset = result.append_result.wrote_offset
        out.append((offset, decode_message(store.read_record(offset))[0].store_timestamp))
    return out


def later(seconds: float, *stores: DefaultMessageStore) -> None:
    """``seconds`` pass at once for each of ``stores``: on its monotonic clock and on its wall clock."""
    for store in stores:
        advance(store, seconds)
        wall_step(store, seconds)


@contextlib.asynccontextmanager
async def _served_master(config: StoreConfig, port: int) -> AsyncIterator[DefaultMessageStore]:
    """A master store serving its HA port on 127.0.0.1:``port``."""
    async with DefaultMessageStore(config) as master:
        ha = HAService(master, ha_config(0, port))
        await ha.start()
        try:
            yield master
        finally:
            await ha.shutdown()


async def _copied(master: DefaultMessageStore, slave: DefaultMessageStore, port: int) -> None:
    """The slave connects to the master's HA port and copies until their ends match."""
    client = HAClient(slave, ha_config(1, port))
    client.start()
    try:
        await _until_copied(master, slave)
    finally:
        await client.shutdown()


async def _until_copied(master: DefaultMessageStore, slave: DefaultMessageStore) -> None:
    loop = asyncio.get_running_loop()
    end = loop.time() + 10
    while slave.max_phy_offset != master.max_phy_offset:
        assert loop.time() < end, "the slave did not catch up"
        await asyncio.sleep(0.02)


def open_at(config: StoreConfig, monkeypatch: pytest.MonkeyPatch, wall_s: float, monotonic_s: float
            ) -> DefaultMessageStore:
    """A replica's store opened with its wall clock ``wall_s`` and its monotonic clock ``monotonic_s`` ahead of
    this process's (and kept so)."""
    wall, mono = clock_module.time.time_ns, clock_module.time.monotonic_ns
    with monkeypatch.context() as m:
        m.setattr(clock_module.time, "time_ns", lambda: wall() + int(wall_s * 1e9))
        m.setattr(clock_module.time, "monotonic_ns", lambda: mono() + int(monotonic_s * 1e9))
        store = DefaultMessageStore(config)
    store.replica = True
    return store


@pytest.mark.parametrize("restarted", [False, True])
def test_a_slave_opened_with_its_wall_clock_ahead_ages_its_masters_records_as_they_are(tmp_path, monkeypatch,
                                                                                       restarted):
    """The slave's wall clock was ten minutes ahead when its store was opened (a new one, or one that copied
    records before), and corrected since; a quarter of an hour later its master's records, copied as they are
    written, are seconds old on its account, not ten minutes (a failover would deliver their timers and check their
    halves ten minutes early, and its retention delete recent segments). What it copied before is as old as it is; once
    promoted, it stamps with its own clock."""
    port = free_port()
    slave_config = make_config(tmp_path / "s")

    async def main() -> None:
        async with _served_master(make_config(tmp_path / "m"), port) as master:
            before = []
            if restarted:
                async with open_at(slave_config, monkeypatch, 0, 0) as first:
                    before = await _put(master, 10)
                    await _copied(master, first, port)
            async with open_at(slave_config, monkeypatch, 600, 0) as slave:
                wall_step(slave, -600)  # NTP stepped it back
                later(900, master, slave)  # it has run for a quarter of an hour since
                records = await _put(master, 20)
                await _copied(master, slave, port)
                ages = [slave.clock.age_ms(offset, stamp) for offset, stamp in records]
                assert all(0 <= age < 2_000 for age in ages), ages
                ages = [slave.clock.age_ms(offset, stamp) for offset, stamp in before]
                assert all(899_900 <= age < 902_000 for age in ages), ages
                # Promoted, its wall clock now half a minute ahead of its master's: it stamps with its own, and
                # ages its own records and its master's as they are.
                slave.replica = False
                wall_step(slave, 30)
                own = await _put(slave, 5)
                wall = slave.clock.wall_ms()
                assert all(wall - 2_000 < stamp <= wall for _, stamp in own)
                later(60, slave)
                ages = [slave.clock.age_ms(offset, stamp) for offset, stamp in records + own]
                assert all(59_900 <= age < 62_000 for age in ages), ages

    run(main)


def test_a_slave_restarted_after_being_down_ages_the_backlog_from_its_masters_writing(tmp_path, monkeypatch):
    """Records the master wrote while its slave was down, five minutes before the slave came back, are five minutes
    old on the slave, not aged from their arrival (a failover would deliver their timers and check their halves
    five minutes late)."""
    port = free_port()
    slave_config = make_config(tmp_path / "s")

    async def main() -> None:
        async with _served_master(make_config(tmp_path / "m"), port) as master:
            async with open_at(slave_config, monkeypatch, 0, 0) as slave:
                await _put(master, 5)
                await _copied(master, slave, port)
            records = await _put(master, 20)
            later(300, master)
            async with open_at(slave_config, monkeypatch, 300, 300) as slave:  # on the same boot
                await _copied(master, slave, port)
                ages = [slave.clock.age_ms(offset, stamp) for offset, stamp in records]
                assert all(299_900 <= age < 302_000 for age in ages), ages

    run(main)


def test_a_slave_maps_its_masters_steps_by_the_masters_anchors(tmp_path):
    """The master's wall clock steps back two minutes, then forward an hour, while its slave copies: the slave ages
    every record as the master does (none two minutes younger, none an hour older), and a search by time on the
    slave looks at the same rising stretches as on the master."""
    port = free_port()

    async def main() -> None:
        async with _served_master(make_config(tmp_path / "m"), port) as master, \
                DefaultMessageStore(make_config(tmp_path / "s")) as slave:
            slave.replica = True
            client = HAClient(slave, ha_config(1, port))
            client.start()
            try:
                records = await _put(master, 5)
                wall_step(master, -120)
                records += await _put(master, 5)
                wall_step(master, 3600)
                records += await _put(master, 5)
                await _until_copied(master, slave)
                later(30, master, slave)
                mine = [slave.clock.age_ms(offset, stamp) for offset, stamp in records]
                theirs = [master.clock.age_ms(offset, stamp) for offset, stamp in records]
                assert all(30_000 <= age < 32_000 for age in theirs), theirs
                assert all(abs(a - b) < 100 for a, b in zip(mine, theirs, strict=True)), (mine, theirs)
                assert slave.clock.steps_back() == master.clock.steps_back() == [records[5][0]]
            finally:
                await client.shutdown()

    run(main)


class MasterOfVersion3:
    """A master as txmq's HA protocol version 3 has it, serving a real store's log: it refuses an OPEN of another
    version with the WELCOME that version sends, and streams frames without the clock."""

    def __init__(self, store: DefaultMessageStore) -> None:
        self.store = store
        self.opened: list[int] = []  # the version of each OPEN

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            opened = await read_open(reader)
            self.opened.append(opened.version)
            if opened.version != 3:
                writer.write(refusal(f"peer speaks HA protocol version {opened.version}, this member 3: upgrade it"))
                return
            writer.write(Challenge(False, os.urandom(32)).encode())
            hello = await read_hello(reader)
            log = self.store.commit_log
            writer.write(Welcome(True, self.store.max_phy_offset, 0, log.tail_bytes(hello.max_offset)).encode())
            (at,) = REPORT.unpack(await reader.readexactly(REPORT.size))
            data = log.read_raw(at, self.store.max_phy_offset - at)
            writer.write(Transfer(at, len(data), -1).encode() + data)
            await reader.read()  # the slave's reports, until it goes
        finally:
            writer.close()


def test_a_slave_follows_a_master_of_version_3_aging_its_backlog_from_its_arrival(tmp_path, monkeypatch, caplog):
    """A master not upgraded refuses the slave's version 4; the slave opens again speaking 3, copies the log, and
    ages what it copied as version 3 did: the backlog from its arrival."""
    slave_config = make_config(tmp_path / "s")

    async def main() -> None:
        async with DefaultMessageStore(make_config(tmp_path / "m")) as master:
            old = MasterOfVersion3(master)
            server = await asyncio.start_server(old.serve, "127.0.0.1", 0)
            port = server.sockets[0].getsockname()[1]
            try:
                async with open_at(slave_config, monkeypatch, 0, 0) as slave:
                    await _put(master, 5)
                    await _copied(master, slave, port)
                records = await _put(master, 20)
                later(300, master)
                async with open_at(slave_config, monkeypatch, 300, 300) as slave:
                    await _copied(master, slave, port)
                    ages = [slave.clock.age_ms(offset, stamp) for offset, stamp in records]
                    assert all(0 <= age < 2_000 for age in ages), ages
                assert old.opened == [4, 3, 4, 3]
            finally:
                server.close()

    with caplog.at_level(logging.WARNING, "txmq.ha"):
        run(main)
    assert len([r for r in caplog.records if "speaks protocol version 3: following it" in r.getMessage()]) == 2


def test_the_account_difference_is_the_smallest_seen_in_the_last_window_or_two():
    """Each frame shows the difference plus its one-way delay: the smallest is kept, for a window or two only (the
    two monotonic clocks may drift apart over a long connection)."""
    difference = AccountDifference()
    assert difference.observe(10_005, 5) == 10_000
    assert difference.observe(10_100, 97) == 10_000
    assert difference.observe(10_200, 210) == 9_990
    window = 10_005 + DIFFERENCE_WINDOW_MS
    assert difference.observe(window, window - 10_020) == 9_990  # the last window's smallest still counts
    window += DIFFERENCE_WINDOW_MS
    assert difference.observe(window, window - 10_010) == 10_010  # not the one before it


def test_a_frame_of_many_anchors_is_saved_once(tmp_path):
    """A master's frame may carry thousands of anchors (up to 65,535: its clock stepping at every group, or a master
    that sends what it should not). Each was saved on its own, the whole clock file rewritten and fsynced each time,
    so one such frame held the slave's loop (its every client) for minutes; the frame's anchors are saved once,
    before its records are written, and all of them are in the file."""
    from txmq.store.clock import StoreClock

    clock = StoreClock(str(tmp_path))
    clock.open(0)
    saves = []
    save = clock.save
    clock.save = lambda: (saves.append(1), save())[1]  # counted, and done
    anchors = [(1000 + 100 * i, 10**12 + (i % 2) * 1000, 5000 + i) for i in range(3000)]
    clock.follow(1000, anchors, 7)
    assert len(saves) == 1
    assert StoreClock(str(tmp_path)).anchors == clock.anchors
    assert clock.anchors[1:] == [(at, skew - 7, since + 7) for at, skew, since in anchors]  # after the open's at 0


@pytest.mark.parametrize("account, anchors", [
    (-1, ()),  # an account below zero
    (1 << 62, ()),  # an account no real clock counts (every copied record would look ancient)
    (1000, ((0, 1 << 62, None),)),  # a skew past any wall clock
    (1000, ((0, 0, 2000),)),  # an anchor made later than the account now
    (1000, ((-5, 0, None),)),  # an anchor before the log's start
    (1000, ((0, 0, -(1 << 62)),)),  # an anchor made further before the account began than a century
])
def test_a_transfer_frame_with_values_no_clock_gives_is_refused(account: int, anchors: tuple) -> None:
    """A broken or hostile master's account and anchors are refused as a malformed frame is (the slave reconnects),
    never mapped into the slave's time line; a real clock's pass."""
    from txmq.store.ha.protocol import CLOCK_VERSION, HandshakeError, read_transfer

    async def read(frame: Transfer) -> Transfer:
        reader = asyncio.StreamReader()
        reader.feed_data(frame.encode())
        return await read_transfer(reader, CLOCK_VERSION)

    real = Transfer(0, 0, 0, 5000, ((0, 1_790_000_000_000, -300_000), (100, 1_790_000_000_100, 4000)))
    assert asyncio.run(read(real)) == real
    with pytest.raises(HandshakeError, match="range"):
        asyncio.run(read(Transfer(0, 0, 0, account, anchors)))


def test_a_promoted_slave_serves_the_anchors_it_mapped_from_before_its_account_began(tmp_path):
    """The master's clock stepped back five minutes before a new slave's store was opened: on the slave's account
    that anchor's records were written before the account began (its ``since`` below zero, as it must be for them
    to age five minutes). Promoted, the slave sends that anchor to its own slave, which copies its log: a refusal
    would have the new slave reconnect forever and copy nothing."""
    port, promoted_port = free_port(), free_port()

    async def main() -> None:
        async with _served_master(make_config(tmp_path / "m"), port) as master, \
                DefaultMessageStore(make_config(tmp_path / "s")) as slave, \
                DefaultMessageStore(make_config(tmp_path / "t")) as third:
            slave.replica = third.replica = True
            wall_step(master, -120)
            records = await _put(master, 5)
            later(300, master)
            await _copied(master, slave, port)
            assert any(since is not None and since < 0 for _, _, since in slave.clock.anchors), slave.clock.anchors
            slave.replica = False
            ha = HAService(slave, ha_config(0, promoted_port))
            await ha.start()
            try:
                await _copied(slave, third, promoted_port)
            finally:
                await ha.shutdown()
            ages = [third.clock.age_ms(offset, stamp) for offset, stamp in records]
            assert all(299_900 <= age < 302_000 for age in ages), ages

    run(main)


@pytest.mark.parametrize("delay_s", [0.3, 0.7, 1.1])
def test_a_slave_killed_while_copying_its_masters_steps_back_keeps_every_mark(tmp_path, delay_s):
    """A real process holding a master, whose wall clock steps back every seventh put, and its slave copying over
    HA and checkpointing every 100 ms, is killed (SIGKILL) anywhere: between a frame's records and its clock file's
    save, in a checkpoint, in a put. Reopened, the slave has every mark its master made in what it copied (those
    the clock file did not get, recovery made again from the records past the checkpoint), and its search by time
    is exact over all of it."""
    from tests.killed_child import lines_until_killed
    from tests.store.test_clock import _assert_search_exact

    lines_until_killed(os.path.join(os.path.dirname(__file__), "crash_slave.py"),
                       [str(tmp_path / "m"), str(tmp_path / "s")], delay_s, min_lines=50)

    async def main() -> None:
        async with DefaultMessageStore(make_config(tmp_path / "m")) as master, \
                DefaultMessageStore(make_config(tmp_path / "s")) as slave:
            end = slave.max_phy_offset
            marks = [m for m in master.clock.steps_back() if m < end]
            assert len(marks) >= 3, (end, marks)
            assert set(marks) <= set(slave.clock.steps_back())
            count = slave.get_max_offset_in_queue("T", 0)
            stamps = [decode_message(slave.get_message("T", 0, i, 1, 1 << 30).messages[0])[0].store_timestamp
                      for i in range(count)]
            assert slave.commit_log.read_raw(0, min(end, 4096)) == master.commit_log.read_raw(0, min(end, 4096))
            _assert_search_exact(slave, stamps)

    run(main)
