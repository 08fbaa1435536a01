"""The store's clock (``txmq.store.clock``): records stamped with the wall clock of the moment, every age counted on
the elapsed-time account, which a step of the wall clock does not move, which resumes across restarts, and which
retention judges segments by. The clocks are the store's own, shifted by the tests (``elapsed.py``)."""

from __future__ import annotations

import asyncio
import json
import logging
import os
from pathlib import Path
from types import SimpleNamespace

import pytest

import txmq.store.clock as clock_module
from tests.elapsed import advance, wall_step
from tests.store.store_helpers import SEGMENT, make_config, msg, run, stepping_back
from txmq.broker.config import BrokerConfig
from txmq.message import decode_message
from txmq.store import DefaultMessageStore
from txmq.store.clock import StoreClock
from txmq.store.config import delete_hours

pytestmark = pytest.mark.dated  # run again at a fixed month end by make test (Makefile, DATED_AT)

HOUR_MS = 3600 * 1000


async def _put(store: DefaultMessageStore, n: int, body: bytes = b"x" * 200) -> list[int]:
    """``n`` puts; the commit-log offsets of their records."""
    out = []
    for _ in range(n):
        result = await store.put_message(msg(body=body))
        assert result.ok and result.append_result is not None
        out.append(result.append_result.wrote_offset)
    return out


def test_a_step_back_stamps_the_wall_clock_of_the_moment_and_ages_count_on(root, caplog):
    """Store timestamps follow the wall clock both ways (never a remembered maximum); each record's age is the
    account's, so the records after a step back of two minutes are seconds old, not minus two minutes, and those
    before it do not grow two minutes older. One warning names the step."""
    caplog.set_level(logging.INFO, logger="txmq.store")

    async def main() -> None:
        async with DefaultMessageStore(make_config(root)) as store:
            before = (await store.put_message(msg())).append_result
            wall_step(store, -120)
            advance(store, 5)
            after = (await store.put_message(msg())).append_result
            assert before is not None and after is not None
            assert before.store_timestamp - 125_000 < after.store_timestamp < before.store_timestamp - 110_000
            clock = store.clock
            assert 4_900 <= clock.age_ms(before.wrote_offset, before.store_timestamp) <= 5_500
            assert 0 <= clock.age_ms(after.wrote_offset, after.store_timestamp) <= 500
            steps = [r for r in caplog.records if "the wall clock moved -12" in r.getMessage()]
            assert len(steps) == 1 and steps[0].levelno == logging.WARNING, caplog.text
            # a step forward: ages stay as they were
            wall_step(store, 3 * 24 * 3600)
            late = (await store.put_message(msg())).append_result
            assert late is not None and late.store_timestamp > after.store_timestamp + 70 * HOUR_MS
            assert clock.age_ms(before.wrote_offset, before.store_timestamp) < 6_000
            assert clock.age_ms(late.wrote_offset, late.store_timestamp) < 500
            assert len([r for r in caplog.records if "the wall clock moved" in r.getMessage()]) == 2

    run(main)


def test_a_search_by_time_finds_records_stored_before_a_step_back(root):
    """Records a, b, then (the clock stepped back two minutes, then forward a day, then back again) c, d, e, f:
    the first offset stored at or after each record's time has no record before it stored as late. One binary
    search over the whole queue, which assumes rising times, answered past a and b (a reset by time, or a Spark
    filter on store time, missed them); each rising stretch is searched apart."""

    async def main() -> None:
        async with DefaultMessageStore(make_config(root)) as store:
            stamps = []
            for step in (0, 0, -120, 0, 24 * 3600, -3600):
                wall_step(store, step)
                result = await store.put_message(msg())
                assert result.append_result is not None
                stamps.append(result.append_result.store_timestamp)
            for t in [*stamps, stamps[0] - 1, max(stamps) + 1, stamps[2] + 1]:
                found = store.get_offset_in_queue_by_time("T", 0, t)
                expected = next((i for i, s in enumerate(stamps) if s >= t), len(stamps))
                assert found == expected, (t, stamps)

    run(main)


async def _put_spaced(store: DefaultMessageStore, n: int) -> list[int]:
    """``n`` puts, 10 ms apart on both clocks (the wall clock keeps its skew: no anchor); their store timestamps."""
    stamps = []
    for _ in range(n):
        advance(store, 0.01)
        wall_step(store, 0.01)
        result = (await store.put_message(msg())).append_result
        assert result is not None
        stamps.append(result.store_timestamp)
    return stamps


def _assert_search_exact(store: DefaultMessageStore, stamps: list[int]) -> None:
    """The first queue offset stored at or after each stamp (and a ms either side) has none before it stored as
    late."""
    for t in sorted({s + d for s in stamps for d in (-1, 0, 1)}):
        expected = next((i for i, s in enumerate(stamps) if s >= t), len(stamps))
        assert store.get_offset_in_queue_by_time("T", 0, t) == expected, (t, stamps)


@pytest.mark.parametrize("steps_ms", [(-80,), (-60, -60), (90, -150)], ids=["-80", "-60,-60", "+90,-150"])
def test_a_search_by_time_is_exact_across_steps_back_under_the_clock_tolerance(tmp_path, steps_ms):
    """Steps back too small for an anchor (under 100 ms against the present one, alone or added up) still split the
    search: stretches of 4 records 10 ms apart, the wall clock stepped by ``steps_ms`` between them. The search stays
    exact after a restart (the marks are in the clock file), across a step back of 30 ms over the restart, and on a
    slave that copied the log (its master's stamps step back)."""

    async def main() -> None:
        config = make_config(tmp_path / "master")
        async with DefaultMessageStore(config) as master:
            stamps = await _put_spaced(master, 4)
            for step in steps_ms:
                wall_step(master, step / 1000)
                stamps += await _put_spaced(master, 4)
            _assert_search_exact(master, stamps)
        async with DefaultMessageStore(config) as master:
            _assert_search_exact(master, stamps)
            wall_step(master, (stamps[-1] - 40 - master.clock.wall_ms()) / 1000)  # the first put 30 ms lower
            stamps += await _put_spaced(master, 4)
            assert stamps[-4] < stamps[-5]
            _assert_search_exact(master, stamps)
            data = master.commit_log.read_raw(0, master.max_phy_offset)
        slave = DefaultMessageStore(make_config(tmp_path / "slave"))
        slave.replica = True
        await slave.start()
        assert slave.append_replicated(0, data) == len(data)
        _assert_search_exact(slave, stamps)
        await slave.shutdown()

    run(main)


async def _stepped_back_once(root: Path, seconds: float) -> tuple[list[int], dict]:
    """Four puts, the wall clock stepped by ``seconds``, four more, the store closed: their stamps and the clock file
    it left."""
    async with DefaultMessageStore(make_config(root)) as store:
        stamps = await _put_spaced(store, 4)
        wall_step(store, seconds)
        stamps += await _put_spaced(store, 4)
    return stamps, json.loads((root / "clock").read_bytes())


def test_recovery_marks_again_the_steps_back_of_the_records_it_reads(root):
    """A mark lost with the clock file's last write (a slave marks its master's records after writing them, and a
    crash may come between) is made again by recovery for the records it reads past the checkpoint: here the whole
    log, the checkpoint gone, with a clock file that lost its mark of a step back of 80 ms."""

    async def main() -> None:
        stamps, saved = await _stepped_back_once(root, -0.08)
        assert saved["marks"]
        (root / "clock").write_bytes(json.dumps({**saved, "marks": []}).encode())
        (root / "checkpoint").unlink()
        async with DefaultMessageStore(make_config(root)) as store:
            _assert_search_exact(store, stamps)

    run(main)


def test_a_clock_file_without_marks_keeps_the_steps_back_of_its_anchors(root):
    """A clock file written before marks existed: its anchors whose skew fell by more than the tolerance are the
    steps back the search knows, as they were."""

    async def main() -> None:
        stamps, saved = await _stepped_back_once(root, -120)
        del saved["marks"]
        (root / "clock").write_bytes(json.dumps(saved).encode())
        async with DefaultMessageStore(make_config(root)) as store:
            assert store.clock.steps_back() == [store.clock.anchors[1][0]]
            _assert_search_exact(store, stamps)

    run(main)


def test_marks_go_with_the_segments_below_the_log_and_with_a_truncated_tail(tmp_path):
    """Marks at or below the log's start split nothing left and go with retention; a cut tail takes its marks (the
    record copied next there is compared again); the clock file holds what is left."""
    clock = StoreClock(str(tmp_path))
    clock.open(0)
    clock.replicated([(100, 1_000), (200, 1_020), (300, 1_004), (400, 1_003), (500, 1_002)], 1_010)
    assert clock.steps_back() == [100, 300, 400, 500]
    clock.trim(300)
    assert clock.steps_back() == [400, 500] == StoreClock(str(tmp_path)).steps_back()
    clock.truncate(500)
    assert clock.steps_back() == [400] == StoreClock(str(tmp_path)).steps_back()


def test_the_account_resumes_across_restarts_counting_the_downtime_on_one_boot_only(root, monkeypatch, caplog):
    """A restart on the same boot counts the time the store was closed (the monotonic clock went on), whatever the
    wall clock did meanwhile; after a reboot (another boot id) the account resumes from its last save and the
    downtime is not counted: late, never early. A wall-clock step across the restart is one anchor."""
    caplog.set_level(logging.INFO, logger="txmq.store")
    mono = [10**12]
    wall = [1_800_000_000 * 10**9]
    monkeypatch.setattr(clock_module, "time", SimpleNamespace(monotonic_ns=lambda: mono[0], time_ns=lambda: wall[0]))

    async def main() -> None:
        store = DefaultMessageStore(make_config(root))
        await store.start()
        [offset] = await _put(store, 1)
        stamp = decode_message(store.read_record(offset))[0].store_timestamp
        mono[0] += 10 * 10**9  # 10 s later
        wall[0] += 10 * 10**9
        await store.shutdown()
        mono[0] += 50 * 10**9  # down for 50 s, during which the wall clock stepped a year ahead
        wall[0] += (50 + 365 * 24 * 3600) * 10**9
        store = DefaultMessageStore(make_config(root))
        assert store.clock.age_ms(offset, stamp) == 60_000
        [late] = await _put(store, 1)
        late_stamp = decode_message(store.read_record(late))[0].store_timestamp
        assert late_stamp == wall[0] // 10**6  # the wall clock of the moment, a year ahead
        assert store.clock.age_ms(late, late_stamp) == 0
        assert [a[0] for a in store.clock.anchors] == [0, late]  # one anchor where the step began
        await store.shutdown()
        monkeypatch.setattr(clock_module, "boot_id", lambda: "another boot")
        mono[0] = 5 * 10**9  # a reboot: the monotonic clock starts over, and 2 h went by
        wall[0] += 2 * 3600 * 10**9
        store = DefaultMessageStore(make_config(root))
        assert store.clock.age_ms(offset, stamp) == 60_000  # the downtime is not counted
        assert "not counted" in caplog.text
        await store.shutdown()

    run(main)


def test_retention_judges_the_newest_record_by_the_account_not_the_wall_clock(root):
    """A segment goes once the first record of the next one (no newer than anything in it) is older than
    fileReservedTime by the account. A step of the wall clock past fileReservedTime deletes nothing; the same time
    passing for the account deletes the old segments, and never the one whose records are young."""
    config = make_config(root, file_reserved_time_hours=72)

    async def main() -> None:
        async with DefaultMessageStore(config) as store:
            while len(store.commit_log.queue.files) < 4:
                await _put(store, 20)
            store.flush_and_checkpoint()
            wall_step(store, 73 * 3600)  # NTP fixing a clock three days slow, or a VM restored
            assert store.clean_expired_files() == 0
            assert store.min_phy_offset == 0
            advance(store, 73 * 3600)  # three days really pass
            young = (await _put(store, 1))[0]
            store.flush_and_checkpoint()
            assert store.clean_expired_files() == 3  # the three full segments; the active one holds the young record
            assert store.min_phy_offset == 3 * SEGMENT
            assert decode_message(store.read_record(young))[0].body == b"x" * 200
            assert store.clock.anchors[0][0] <= store.min_phy_offset  # anchors below the log went, not the one over it

    run(main)


def test_retention_runs_at_the_delete_when_hours_and_refuses_a_bad_one(root, monkeypatch):
    """RocketMQ's deleteWhen: the periodic job deletes at the listed local hours only (unless the disk is full);
    a value that is not hours of the day is refused with the key's name, in broker.conf as in the store."""
    assert delete_hours("04") == {4} and delete_hours("04;16") == {4, 16} and delete_hours("0;23") == {0, 23}
    for bad in ("", "24", "4am", "04,16", "-1"):
        with pytest.raises(ValueError, match="deleteWhen"):
            delete_hours(bad)
        with pytest.raises(ValueError, match="deleteWhen"):
            BrokerConfig().update({"deleteWhen": bad})

    async def main() -> None:
        hour = [3]
        monkeypatch.setattr("txmq.store.message_store.time.localtime",
                            lambda: type("T", (), {"tm_hour": hour[0]})())
        async with DefaultMessageStore(make_config(root, file_reserved_time_hours=1, delete_when="04")) as store:
            while len(store.commit_log.queue.files) < 3:
                await _put(store, 20)
            store.flush_and_checkpoint()
            advance(store, 2 * 3600)
            await store._clean_async()
            assert store.min_phy_offset == 0  # 03:00: not the hour
            hour[0] = 4
            await store._clean_async()
            assert store.min_phy_offset == 2 * SEGMENT

    run(main)


def test_a_slave_ages_its_masters_records_from_their_arrival_when_their_stamps_cannot_be_believed(tmp_path):
    """A slave's records carry its master's stamps. One from the future (the master's clock ahead) is aged from its
    arrival, not from the future; one stamped before the record ahead of it (the master's clock stepped back) is
    aged from that record, not as if it were minutes old. Both are remembered across the slave's restart."""

    async def main() -> None:
        async with DefaultMessageStore(make_config(tmp_path / "master")) as master:
            await _put(master, 3)
            wall_step(master, 3600)
            await _put(master, 3)
            wall_step(master, -3600 - 120)
            await _put(master, 3)
            data = master.commit_log.read_raw(0, master.max_phy_offset)
            records = [(m.commit_log_offset, m.store_timestamp)
                       for m in (decode_message(master.read_record(o))[0] for o in _offsets(master))]
        slave_config = make_config(tmp_path / "slave")
        slave = DefaultMessageStore(slave_config)
        slave.replica = True
        await slave.start()
        assert slave.append_replicated(0, data) == len(data)
        ages = [slave.clock.age_ms(offset, stamp) for offset, stamp in records]
        assert all(0 <= age < 1_000 for age in ages), ages
        await slave.shutdown()
        reopened = DefaultMessageStore(slave_config)
        assert all(0 <= reopened.clock.age_ms(o, s) < 2_000 for o, s in records)
        await reopened.shutdown()

    run(main)


def _offsets(store: DefaultMessageStore) -> list[int]:
    out, offset = [], 0
    while offset < store.max_phy_offset:
        out.append(offset)
        offset += decode_message(store.read_record(offset))[0].store_size + 4
    return out


def test_the_clock_file_is_written_atomically_and_a_damaged_one_starts_the_account_again(root, caplog):
    async def main() -> None:
        async with DefaultMessageStore(make_config(root)) as store:
            await _put(store, 2)
        saved = json.loads((root / "clock").read_bytes())
        assert saved["version"] == 1 and saved["anchors"] and saved["elapsed_ms"] >= 0
        for damage in (b"{not json", b'{"version": 1}', b'{"version": 1, "elapsed_ms": 1, "monotonic_ns": 1, '
                       b'"anchors": [[0, "x"]]}'):
            (root / "clock").write_bytes(damage)
            caplog.clear()
            store = DefaultMessageStore(make_config(root))
            assert "unreadable" in caplog.text
            assert store.clock.anchors[0][0] == 0 and len(store.clock.anchors) == 1
            await store.shutdown()
        assert not [n for n in os.listdir(root) if n.startswith(".clock")]

    run(main)


def test_ages_are_never_negative_and_never_past_now(root):
    async def main() -> None:
        async with DefaultMessageStore(make_config(root)) as store:
            [offset] = await _put(store, 1)
            clock = store.clock
            assert clock.elapsed_of(offset, 10**15) <= clock.elapsed_ms()  # a stamp from the far future
            assert clock.age_ms(offset, 10**15) == 0
            assert clock.age_ms(offset, -(10**15)) >= 0

    run(main)


def test_a_group_of_puts_is_stamped_once(root):
    """A group of puts is stamped once: every record of it carries the same store timestamp and maps to the same
    moment of the account, whatever the wall clock did during the group."""

    async def main() -> None:
        async with DefaultMessageStore(make_config(root)) as store:
            puts = [store.put_message(msg()) for _ in range(5)]
            results = await asyncio.gather(*puts)
            stamps = {r.append_result.store_timestamp for r in results}
            assert len(stamps) == 1

    run(main)


def test_a_put_that_joins_an_open_group_is_stamped_no_earlier_than_it_was_asked(root):
    """A group is stamped as it is written, after its last put was asked: a put that joins it when the loop was held
    up since its first put (a slow callback, the process descheduled) is not aged from that first put, which would
    make a delayed message due that much before it was sent."""

    async def main() -> None:
        async with DefaultMessageStore(make_config(root)) as store:
            first = store.put_message(msg())
            advance(store, 0.06)  # 60 ms pass, for both clocks, before the next put of the same loop iteration
            wall_step(store, 0.06)
            asked = store.clock.elapsed_ms()
            later = (await asyncio.gather(first, store.put_message(msg())))[1].append_result
            assert later is not None
            # not 60 ms before it was asked; the wall clock and the account are each truncated to the ms, so the
            # wall stamp read back on the account may fall 1 ms below an account read a moment before it
            assert store.clock.elapsed_of(later.wrote_offset, later.store_timestamp) >= asked - 1

    run(main)


def test_a_checkpoint_is_not_written_past_a_mark_its_clock_file_could_not_keep(tmp_path):
    """A full disk: the clock file, grown past a page by many steps back, cannot be written again, while the
    checkpoint's document (a page) can. A step back of a second is marked in memory (its save fails, logged) and
    the checkpoint after it fails saving the clock; then a crash, and the disk freed. Recovery starts at the
    checkpoint on disk: if that checkpoint was written past the records whose mark never reached the clock file, no
    record is read again to mark them, and the search by time takes the records before and after the step for one
    rising stretch."""
    from tests.disk_helpers import fill_disk, tmpfs

    with tmpfs(tmp_path / "disk") as disk:
        config = make_config(os.path.join(disk, "store"), disk_space_warning_level_ratio=100,
                             message_index_enable=False)

        async def main() -> list[int]:
            store = DefaultMessageStore(config)
            await store.start()
            stamps = []
            for _ in range(200):  # an anchor each (steps forward: rising, and no mark): the clock file grows
                wall_step(store, 0.2)
                stamps += await _put_spaced(store, 1)
            stamps += await _put_spaced(store, 4)
            store.flush_and_checkpoint()
            assert (Path(disk) / "store" / "clock").stat().st_size > 4096
            fill_disk(disk, leave=4096)
            wall_step(store, -1)
            stamps += await _put_spaced(store, 4)
            assert stamps[-4] < stamps[-5]
            with pytest.raises(OSError):
                store.flush_and_checkpoint()
            store.close_without_shutdown()
            os.unlink(os.path.join(disk, "filler"))
            return stamps

        stamps = run(main)

        async def reopened() -> None:
            async with DefaultMessageStore(config) as store:
                _assert_search_exact(store, stamps)

        run(reopened)


@pytest.mark.parametrize("following", [False, True])
def test_a_slave_saves_the_marks_of_a_frame_once(tmp_path: Path, following: bool) -> None:
    """A master whose clock stepped back at every group: each record it sends is a mark (and, under the version 3
    protocol's guesses, an anchor at each). Each was saved on its own, the whole clock file
    rewritten and fsynced per record, holding the slave's loop for the frame; now once for the frame's records, with
    every mark in the file."""

    async def main() -> None:
        async with DefaultMessageStore(make_config(tmp_path / "master")) as master:
            stamps: list[int] = []
            for _ in range(200):
                stamps += await _put_spaced(master, 1)
                wall_step(master, -0.5 if len(stamps) % 2 else -2)  # more than a loaded machine's time between puts
            data = master.commit_log.read_raw(0, master.max_phy_offset)
            marks = master.clock.steps_back()
        assert len(marks) >= 190
        slave = DefaultMessageStore(make_config(tmp_path / "slave"))
        slave.replica = True
        await slave.start()
        try:
            slave.clock.following = following  # as a version 4 master's frames make it
            saves: list[int] = []
            save = slave.clock.save
            slave.clock.save = lambda: (saves.append(1), save())[1]  # type: ignore[method-assign]
            assert slave.append_replicated(0, data) == len(data)
            assert len(saves) == 1
            assert slave.clock.steps_back() == StoreClock(str(tmp_path / "slave")).steps_back() == marks
            _assert_search_exact(slave, stamps)
        finally:
            await slave.shutdown()

    run(main)


@pytest.mark.parametrize("then", ["checkpoint", "crash"])
def test_a_slave_keeps_the_marks_of_a_frame_its_clock_file_could_not_take(tmp_path: Path, then: str,
                                                                          caplog: pytest.LogCaptureFixture) -> None:
    """A slave copies a frame whose records step back twice (a second, then 40 ms) onto a full disk (a real tmpfs):
    the records go into the log's preallocated segment, the clock file's one save for the frame fails. The marks
    stay in memory: the next checkpoint writes them all; or, after a crash, the checkpoint on disk is the one before
    the frame, and recovery marks its records again. Either way the search by time stays exact."""
    from tests.disk_helpers import fill_disk, tmpfs

    async def mastered() -> tuple[list[int], bytes, int, list[int]]:
        async with DefaultMessageStore(make_config(tmp_path / "master")) as master:
            stamps = await _put_spaced(master, 4)
            first_end = master.max_phy_offset
            for step in (-1, -0.05):
                wall_step(master, step)
                stamps += await _put_spaced(master, 4)
            return stamps, bytes(master.commit_log.read_raw(0, master.max_phy_offset)), first_end, \
                master.clock.steps_back()

    stamps, data, first_end, marks = run(mastered)
    assert len(marks) == 2
    with tmpfs(tmp_path / "disk") as disk:
        config = make_config(os.path.join(disk, "slave"), disk_space_warning_level_ratio=100,
                             message_index_enable=False)

        def on_disk() -> list[int]:
            return StoreClock(config.store_path_root_dir).steps_back()

        async def copied() -> None:
            slave = DefaultMessageStore(config)
            slave.replica = True
            await slave.start()
            assert slave.append_replicated(0, data[:first_end]) == first_end
            slave.flush_and_checkpoint()
            fill_disk(disk)
            with caplog.at_level(logging.ERROR, "txmq.store"):
                assert slave.append_replicated(first_end, data[first_end:]) == len(data) - first_end
            assert "not saved" in caplog.text
            assert slave.clock.steps_back() == marks
            assert on_disk() == []
            if then == "crash":
                slave.close_without_shutdown()
                os.unlink(os.path.join(disk, "filler"))
                return
            os.unlink(os.path.join(disk, "filler"))
            slave.flush_and_checkpoint()
            assert on_disk() == marks
            await slave.shutdown()

        run(copied)

        async def reopened() -> None:
            async with DefaultMessageStore(config) as store:
                assert set(marks) <= set(store.clock.steps_back())
                _assert_search_exact(store, stamps)

        run(reopened)


def test_a_slave_copying_frames_cut_anywhere_across_segment_ends_and_a_crash_keeps_every_mark(tmp_path: Path) -> None:
    """A master's log of three segments whose clock stepped back (by 50 ms or a second) every seventh record, copied
    by a slave in frames cut at arbitrary bytes (a record split between two frames, a frame of no whole record, one
    across a segment's end and its BLANK marker), the slave crashing once half way, its clock file as the checkpoint
    before left it (the crash came before the saves of the frames after it): the slave marks every step its master
    marked (recovery those of the records past the checkpoint), and its search by time is exact, before and after
    its reopen."""
    import random

    async def mastered() -> tuple[list[int], bytes, list[int]]:
        async with DefaultMessageStore(make_config(tmp_path / "master")) as master:
            stamps: list[int] = []
            before_put = stepping_back(master.clock)
            while master.max_phy_offset < 2 * SEGMENT + SEGMENT // 2:
                before_put(len(stamps))
                result = (await master.put_message(msg(body=b"x" * 400))).append_result
                assert result is not None
                stamps.append(result.store_timestamp)
            data = b""
            while len(data) < master.max_phy_offset:  # a segment at a time
                data += master.commit_log.read_raw(len(data), master.max_phy_offset - len(data))
            return stamps, data, master.clock.steps_back()

    stamps, data, marks = run(mastered)
    assert len(marks) > 40 and len(data) > 2 * SEGMENT
    config = make_config(tmp_path / "slave")
    cuts = random.Random(7)

    async def copy(slave: DefaultMessageStore, until: int) -> None:
        """The master's bytes up to ``until`` in frames of random sizes, each with what the last left untaken."""
        sent = slave.max_phy_offset
        while sent < until:
            sent = min(until, sent + cuts.choice([1, 50, 333, 1000, 5000, 20000]))
            slave.append_replicated(slave.max_phy_offset, data[slave.max_phy_offset:sent])

    async def first_half() -> None:
        slave = DefaultMessageStore(config)
        slave.replica = True
        await slave.start()
        await copy(slave, SEGMENT + 7000)
        slave.flush_and_checkpoint()
        clock_file = Path(config.store_path_root_dir) / "clock"
        checkpointed = clock_file.read_bytes()
        await copy(slave, SEGMENT + 30000)
        assert len(slave.clock.steps_back()) > len(json.loads(checkpointed)["marks"])
        slave.close_without_shutdown()
        clock_file.write_bytes(checkpointed)  # the crash came before the clock file's saves since the checkpoint

    run(first_half)

    async def second_half() -> None:
        slave = DefaultMessageStore(config)
        slave.replica = True
        await slave.start()
        await copy(slave, len(data))
        assert slave.max_phy_offset == len(data)
        assert set(marks) <= set(slave.clock.steps_back())
        _assert_search_exact(slave, stamps)
        await slave.shutdown()
        async with DefaultMessageStore(config) as reopened:
            assert set(marks) <= set(reopened.clock.steps_back())
            _assert_search_exact(reopened, stamps)

    run(second_half)


def test_a_slave_crashing_inside_a_cut_of_its_log_compares_the_next_record_with_no_stamp_of_a_dropped_one(
        tmp_path: Path) -> None:
    """A slave copied four records of its old master and a fifth stamped a second earlier (a step back, marked).
    Its new master's log ends after the fourth: the slave cuts its log there, the checkpoint below the cut written,
    and crashes before the checkpoint after it. That checkpoint's recovery point is the cut, so recovery reads no
    record and the last store timestamp is the checkpoint's, which was the dropped fifth record's. The new master's
    fifth record, stamped half a second before the fourth, is a step back the search must know: compared with the
    dropped record's stamp instead of the fourth's, it was not marked, and the search by time took the fourth and
    the fifth for one rising stretch."""
    import shutil

    old_root, new_root = tmp_path / "old", tmp_path / "new"

    async def masters() -> tuple[list[int], bytes, int, bytes]:
        async with DefaultMessageStore(make_config(old_root)) as old:
            stamps = await _put_spaced(old, 4)
            cut = old.max_phy_offset
        shutil.copytree(old_root, new_root)
        async with DefaultMessageStore(make_config(old_root)) as old:
            wall_step(old, -1)
            await _put_spaced(old, 1)
            old_data = bytes(old.commit_log.read_raw(0, old.max_phy_offset))
        async with DefaultMessageStore(make_config(new_root)) as new:
            wall_step(new, (stamps[-1] - 500 - new.clock.wall_ms()) / 1000)
            stamps += await _put_spaced(new, 1)
            assert stamps[-1] < stamps[-2]
            new_data = bytes(new.commit_log.read_raw(cut, new.max_phy_offset - cut))
        return stamps, old_data, cut, new_data

    stamps, old_data, cut, new_data = run(masters)
    config = make_config(tmp_path / "slave")

    async def crashed_in_the_cut() -> None:
        slave = DefaultMessageStore(config)
        slave.replica = True
        await slave.start()
        slave.append_replicated(0, old_data)
        slave.flush_and_checkpoint()
        checkpoint = slave.replica_log._write_checkpoint

        def then_crash(below: int | None) -> None:
            if below is None:
                raise OSError("the process died here")
            checkpoint(below)

        slave.replica_log._write_checkpoint = then_crash
        with pytest.raises(OSError, match="died"):
            slave.truncate_replicated(cut)
        slave.close_without_shutdown()

    run(crashed_in_the_cut)

    async def copied_from_the_new_master() -> None:
        slave = DefaultMessageStore(config)
        slave.replica = True
        await slave.start()
        assert slave.max_phy_offset == cut and slave.recovery_report.records_scanned == 0
        slave.append_replicated(cut, new_data)
        assert cut in slave.clock.steps_back()
        _assert_search_exact(slave, stamps)
        await slave.shutdown()

    run(copied_from_the_new_master)
