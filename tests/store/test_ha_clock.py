"""A slave's ages of its master's records, over a real HA connection on 127.0.0.1: each record is aged from the
moment its master wrote it on the master's elapsed-time account, whatever the slave's own wall clock said when its
store was opened, and however late the slave arrived. The clocks are the stores' own, shifted by the tests
(``elapsed.py``)."""

from __future__ import annotations

import asyncio

import pytest

import txmq.store.clock as clock_module
from tests.elapsed import advance, wall_step
from tests.store.store_helpers import make_config, msg, run
from txmq.launch import free_port
from txmq.message import decode_message
from txmq.store import DefaultMessageStore
from txmq.store.config import StoreConfig
from txmq.store.ha import HAClient, HAConfig, HAService


def _ha(broker_id: int, port: int) -> HAConfig:
    return HAConfig("C", "broker-a", broker_id, listen_port=port, master_address=f"127.0.0.1:{port}",
                    send_heartbeat_interval_ms=200, housekeeping_interval_ms=2000)


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


async def _copied(master: DefaultMessageStore, slave: DefaultMessageStore, port: int) -> None:
    """The slave connects to the master's HA port and copies until their ends match."""
    client = HAClient(slave, _ha(1, port))
    client.start()
    try:
        loop = asyncio.get_running_loop()
        end = loop.time() + 10
        while slave.max_phy_offset != master.max_phy_offset:
            assert loop.time() < end, "the slave did not catch up"
            await asyncio.sleep(0.02)
    finally:
        await client.shutdown()


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
    halves ten minutes early, and its retention delete recent segments). What it copied before is as old as it is."""
    port = free_port()
    slave_config = make_config(tmp_path / "s")

    async def main() -> None:
        async with DefaultMessageStore(make_config(tmp_path / "m")) as master:
            ha = HAService(master, _ha(0, port))
            await ha.start()
            try:
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
                    assert all(900_000 <= age < 902_000 for age in ages), ages
            finally:
                await ha.shutdown()

    run(main)


def test_a_slave_restarted_after_being_down_ages_the_backlog_from_its_masters_writing(tmp_path, monkeypatch):
    """Records the master wrote while its slave was down, five minutes before the slave came back, are five minutes
    old on the slave, not aged from their arrival (a failover would deliver their timers and check their halves
    five minutes late)."""
    port = free_port()
    slave_config = make_config(tmp_path / "s")

    async def main() -> None:
        async with DefaultMessageStore(make_config(tmp_path / "m")) as master:
            ha = HAService(master, _ha(0, port))
            await ha.start()
            try:
                async with open_at(slave_config, monkeypatch, 0, 0) as slave:
                    await _put(master, 5)
                    await _copied(master, slave, port)
                records = await _put(master, 20)
                later(300, master)
                async with open_at(slave_config, monkeypatch, 300, 300) as slave:  # on the same boot
                    await _copied(master, slave, port)
                    ages = [slave.clock.age_ms(offset, stamp) for offset, stamp in records]
                    assert all(300_000 <= age < 302_000 for age in ages), ages
            finally:
                await ha.shutdown()

    run(main)
