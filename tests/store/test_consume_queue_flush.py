"""Consume queues flushed as RocketMQ's FlushConsumeQueueService does: a periodic checkpoint fsyncs only the queues
with ``flushConsumeQueueLeastPages`` written (all of them every ``flushConsumeQueueThoroughInterval``), and keeps its
recovery point at the oldest entry it left unflushed, so recovery rebuilds those entries from the commit log. With
sends spread over thousands of queues, fsyncing each written queue at every checkpoint cost more than the sends."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import random
import shutil
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

import txmq.store.mapped_file as mapped_file
import txmq.store.message_store as message_store
import txmq.store.tail_journal as tail_journal
from tests.killed_child import lines_until_killed
from tests.store.crash_writer import body_for
from tests.store.store_helpers import assert_killed_cleanly, make_config, msg, reopened_store, run
from txmq.message import decode_message
from txmq.store import DefaultMessageStore, StoreConfig
from txmq.store.consume_queue import CQ_ENTRY, CQ_ENTRY_SIZE, ConsumeQueue
from txmq.store.mapped_file import MappedFileQueue

HERE = os.path.dirname(os.path.abspath(__file__))
QUEUES = 40


def _periodic_checkpoint(store: DefaultMessageStore) -> None:
    """What the checkpoint loop runs (on this thread)."""
    store._write_checkpoint(store._snapshot(thorough=False))


def _assert_queues_match_the_log(store: DefaultMessageStore, expected: dict[tuple[str, int], list[int]]) -> None:
    """Every queue holds exactly the commit-log offsets of its records, in queue-offset order."""
    for (topic, qid), offsets in expected.items():
        assert store.get_max_offset_in_queue(topic, qid) == len(offsets), (topic, qid)
        got = store.get_message(topic, qid, 0, 100_000, 1 << 30)
        assert [decode_message(w)[0].commit_log_offset for w in got.messages] == offsets, (topic, qid)


async def _spread(store: DefaultMessageStore, n: int, expected: dict[tuple[str, int], list[int]]) -> None:
    for i in range(n):
        qid = i % QUEUES
        result = await store.put_message(msg("spread", b"%06d" % i + b"." * 100, queue_id=qid))
        assert result.ok
        expected.setdefault(("spread", qid), []).append(result.append_result.wrote_offset)


def test_a_periodic_checkpoint_leaves_lightly_written_queues_and_its_recovery_point_before_them(
        root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = make_config(root, mapped_file_size_consume_queue=20 * 1024)
    synced: list[int] = []
    real = mapped_file.fsync_fd

    def counting_fsync(fd: int) -> None:
        synced.append(fd)
        real(fd)

    async def main() -> None:
        store = DefaultMessageStore(config)
        await store.start()
        expected: dict[tuple[str, int], list[int]] = {}
        await _spread(store, 4 * QUEUES, expected)
        thorough = store.runtime_info()["thorough_checkpoints"]
        store.flush_and_checkpoint()  # thorough: every queue durable, the recovery point at the log's end
        assert store.checkpoint_offset == store.max_phy_offset
        assert store.runtime_info()["thorough_checkpoints"] == thorough + 1  # counted (brokerStatus shows it)
        oldest_unflushed = store.max_phy_offset
        await _spread(store, 3 * QUEUES, expected)  # 3 entries a queue: far under 2 pages
        hot = []
        for _ in range(2 * 4096 // CQ_ENTRY_SIZE):  # one queue past 2 pages
            result = await store.put_message(msg("hot", b"h" * 20))
            hot.append(result.append_result.wrote_offset)
        expected[("hot", 0)] = hot
        monkeypatch.setattr(mapped_file, "fsync_fd", counting_fsync)
        _periodic_checkpoint(store)
        monkeypatch.undo()
        # The commit log (one), the hot queue's two files and the index file: none of the spread queues' files.
        assert 1 <= len(synced) <= 5, len(synced)
        assert store.checkpoint_offset == oldest_unflushed
        assert store.runtime_info()["thorough_checkpoints"] == thorough + 1  # a periodic one left queues: not counted
        # flushConsumeQueueThoroughInterval passed: the next periodic checkpoint flushes all.
        store._thorough_at -= config.flush_consume_queue_thorough_interval_ms / 1000
        _periodic_checkpoint(store)
        assert store.checkpoint_offset == store.max_phy_offset
        assert not store.queues.pending
        assert store.runtime_info()["thorough_checkpoints"] == thorough + 2
        await store.shutdown()

    run(main)


def test_lost_unflushed_consume_queue_writes_are_rebuilt_from_the_log(root: Path) -> None:
    """A machine crash loses what was written but not fsynced: the consume queues' unflushed entries revert to
    zeros (their files to what was fsynced). Recovery rebuilds them from the commit log."""
    config: StoreConfig = make_config(root, mapped_file_size_consume_queue=20 * 8)  # files roll every 8 entries

    async def main() -> dict[tuple[str, int], list[int]]:
        store = DefaultMessageStore(config)
        await store.start()
        expected: dict[tuple[str, int], list[int]] = {}
        await _spread(store, 5 * QUEUES, expected)
        store.flush_and_checkpoint()
        durable = {key: len(offsets) for key, offsets in expected.items()}
        await _spread(store, 7 * QUEUES, expected)  # into the next file of every queue: new files, unflushed
        _periodic_checkpoint(store)
        assert store.checkpoint_offset < store.max_phy_offset
        store.close_without_shutdown()
        for (topic, qid), count in durable.items():  # the files as the disk had them: fsynced bytes only
            directory = os.path.join(config.store_path_root_dir, "consumequeue", topic, str(qid))
            for name in sorted(os.listdir(directory)):
                start = int(name)
                path = os.path.join(directory, name)
                keep = max(0, count * CQ_ENTRY_SIZE - start)
                if keep == 0:
                    os.unlink(path)  # created after the last fsync of its directory
                elif keep < config.mapped_file_size_consume_queue:
                    with open(path, "r+b") as f:
                        f.truncate(keep)
                        f.truncate(config.mapped_file_size_consume_queue)
        return expected

    expected = run(main)
    with reopened_store(config) as reopened:
        assert reopened.recovery_report.consume_queues_rebuilt == []  # the tail from the recovery point sufficed
        _assert_queues_match_the_log(reopened, expected)


def test_sigkill_with_sends_spread_over_many_queues_keeps_every_queue_whole(root: Path) -> None:
    """A real child spreads SYNC_FLUSH puts over many queues with a checkpoint every 100 ms (each leaves them
    unflushed) and is killed; each reopen finds every acknowledged record at its place in its queue, rebuilding no
    queue wholesale."""
    rng = random.Random(7)
    acked: dict[int, tuple[int, int, str]] = {}
    for run_id in range(3):
        lines = lines_until_killed(os.path.join(HERE, "crash_writer.py"), [str(root), f"r{run_id}", str(QUEUES)],
                                   rng.uniform(0.4, 0.9))
        assert lines, "the child acknowledged nothing"
        for line in lines:
            off, qid, qoff, key = line.split()
            acked[int(off)] = (int(qid), int(qoff), key)
        store = DefaultMessageStore(make_config(root))
        try:
            report = store.recovery_report
            assert_killed_cleanly(report, acked)
            assert report.consume_queues_rebuilt == []
            for off, (qid, qoff, key) in acked.items():
                assert store.get_commit_log_offset_in_queue("crash", qid, qoff) == off
                assert store.look_message_by_offset(off).body == body_for(key)
            for qid in range(QUEUES):
                got = store.get_message("crash", qid, 0, 100_000, 1 << 30)
                assert got.message_count == store.get_max_offset_in_queue("crash", qid)
                assert [decode_message(w)[0].queue_offset for w in got.messages] == list(range(got.message_count))
        finally:
            store.close_without_shutdown()


def test_a_checkpoint_with_thousands_of_files_to_flush_syncs_the_file_system_once(
        root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A stop after sends spread over many queues fsynced each queue's file and directory, each waiting for a
    journal commit of its own: at 80,000 queues the stop took over a minute. Above ``SYNCFS_ABOVE`` files it is
    one syncfs."""
    config = make_config(root)
    synced: list[str] = []
    fsyncs: list[int] = []
    real_fsync, real_syncfs = mapped_file.fsync_fd, message_store.syncfs

    async def main() -> None:
        store = DefaultMessageStore(config)
        await store.start()
        for qid in range(message_store.SYNCFS_ABOVE + 50):
            assert (await store.put_message(msg("wide", b"w" * 20, queue_id=qid))).ok
        monkeypatch.setattr(mapped_file, "fsync_fd", lambda fd: fsyncs.append(fd) or real_fsync(fd))
        monkeypatch.setattr(message_store, "syncfs", lambda path: synced.append(path) or real_syncfs(path))
        store.flush_and_checkpoint()
        monkeypatch.undo()
        assert synced == [config.store_path_root_dir]
        assert len(fsyncs) <= 3  # the commit log and the index file, not the queues'
        assert store.checkpoint_offset == store.max_phy_offset and not store.queues.pending
        await store.shutdown()

    run(main)
    with reopened_store(config) as reopened:
        assert reopened.recovery_report.clean_shutdown
        assert all(reopened.get_max_offset_in_queue("wide", q) == 1 for q in range(message_store.SYNCFS_ABOVE + 50))


class _Disk:
    """What a power loss leaves: each file as it was when it was last fsynced (its bytes read just before the
    fsync, a subset of what the fsync made durable), and no file that was never fsynced."""

    def __init__(self, root: str) -> None:
        self.root = os.path.realpath(root)
        self.fsynced: dict[str, bytes] = {}
        self.off = False  # the power is off: fsyncs from here (a crashing store's last ones) reach nothing
        self._real, self._real_syncfs = mapped_file.fsync_fd, message_store.syncfs
        self._real_dir = mapped_file.fsync_dir

    def fsync_fd(self, fd: int) -> None:
        path = os.readlink(f"/proc/self/fd/{fd}")
        if path.startswith(self.root + os.sep) and not self.off:
            self.fsynced[path] = os.pread(fd, os.fstat(fd).st_size, 0)
        self._real(fd)

    def fsync_dir(self, path: str) -> None:
        """The directory's deletions made durable: a file made again at a deleted one's path no longer brings back
        the deleted one's fsynced bytes."""
        if not self.off:
            directory = os.path.realpath(path)
            for gone in [p for p in self.fsynced if os.path.dirname(p) == directory and not os.path.exists(p)]:
                del self.fsynced[gone]
        self._real_dir(path)

    def syncfs(self, path: str) -> None:
        """syncfs(2): every file under the store, as it is now."""
        if not self.off:
            for parent, _, names in os.walk(self.root):
                for name in names:
                    with open(os.path.join(parent, name), "rb") as f:
                        self.fsynced[os.path.join(parent, name)] = f.read()
        self._real_syncfs(path)

    def power_loss(self) -> None:
        """After the store was closed as a crash would (with ``off`` set before): the files as the disk has them."""
        self.off = False
        for directory in ("commitlog", "consumequeue"):
            for parent, _, names in os.walk(os.path.join(self.root, directory)):
                for name in names:
                    path = os.path.join(parent, name)
                    if path not in self.fsynced:
                        os.unlink(path)
                        continue
                    with open(path, "r+b") as f:
                        f.write(self.fsynced[path])


def _powered(config: StoreConfig, monkeypatch: pytest.MonkeyPatch) -> _Disk:
    """The store's fsyncs recorded, for a ``power_loss`` later."""
    disk = _Disk(config.store_path_root_dir)
    monkeypatch.setattr(mapped_file, "fsync_fd", disk.fsync_fd)
    monkeypatch.setattr(mapped_file, "fsync_dir", disk.fsync_dir)
    return disk


def _whole_after_power_loss(config: StoreConfig, disk: _Disk, expected: dict[tuple[str, int], list[int]]) -> None:
    """A power loss, then a reopen: no queue rebuilt wholesale, every queue matching the log."""
    disk.power_loss()
    with reopened_store(config) as store:
        assert store.recovery_report.consume_queues_rebuilt == []
        _assert_queues_match_the_log(store, expected)


async def _flushed_then_spread(store: DefaultMessageStore, expected: dict[tuple[str, int], list[int]],
                               flushed: int) -> None:
    """``flushed`` records spread over every queue, all flushed by a full checkpoint; then two more per queue, too
    few pages for a periodic checkpoint to flush."""
    await _spread(store, flushed, expected)
    store.flush_and_checkpoint()
    await _spread(store, 2 * QUEUES, expected)


async def _left_unflushed(store: DefaultMessageStore, expected: dict[tuple[str, int], list[int]]) -> None:
    """Records spread over every queue, all flushed by a full checkpoint; more, which the periodic checkpoint that
    follows leaves unflushed (too few pages), its recovery point held before them."""
    await _flushed_then_spread(store, expected, 3 * QUEUES)
    _periodic_checkpoint(store)


def test_power_loss_with_queues_flushed_past_the_recovery_point_and_others_not_twice_over(
        root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """ASYNC_FLUSH, a power loss: lightly written queues lost their unflushed entries, a hot queue was flushed past
    the recovery point, the commit log lost its unflushed tail (below entries the hot queue had fsynced, when a
    checkpoint's queue fsync covered entries written after its commit-log flush). Then the same again right after
    the reopen, before any checkpoint: the entries recovery rebuilt were never fsynced either. Each reopen finds
    every queue matching the log that survived: no entry past its end, none missing, none twice."""
    config = make_config(root, mapped_file_size_consume_queue=20 * 64, flush_interval_commit_log_ms=60_000)
    disk = _powered(config, monkeypatch)
    expected: dict[tuple[str, int], list[int]] = {}

    async def hot(store: DefaultMessageStore, n: int) -> None:
        for _ in range(n):
            result = await store.put_message(msg("hot", b"h" * 20))
            expected.setdefault(("hot", 0), []).append(result.append_result.wrote_offset)

    async def first_life() -> None:
        store = DefaultMessageStore(config)
        await store.start()
        await _flushed_then_spread(store, expected, 4 * QUEUES)
        await hot(store, 2 * 4096 // CQ_ENTRY_SIZE)
        _periodic_checkpoint(store)  # the hot queue flushed, the spread ones left: the recovery point before them
        assert store.checkpoint_offset < store.max_phy_offset
        await hot(store, 30)
        await _spread(store, QUEUES, expected)
        for mf in store.queues.find("hot", 0).files.files:  # the hot queue's file fsynced past the log's
            mf.flush()
        disk.off = True
        store.close_without_shutdown()

    async def second_life() -> None:
        store = DefaultMessageStore(config)
        assert _check(store) == 30 + QUEUES  # the log lost what followed the checkpoint, under the hot queue's
        assert store.recovery_report.consume_queue_entries_truncated >= 30  # ... entries, which recovery dropped
        await store.start()
        await _spread(store, QUEUES, expected)
        await hot(store, 10)
        disk.off = True
        store.close_without_shutdown()

    def _check(store: DefaultMessageStore) -> int:
        """Every queue matches the log that survived; the number of records the power loss took."""
        end = store.max_phy_offset
        lost = 0
        for offsets in expected.values():
            kept = [o for o in offsets if o < end]
            lost += len(offsets) - len(kept)
            offsets[:] = kept
        _assert_queues_match_the_log(store, expected)
        return lost

    run(first_life)
    disk.power_loss()
    run(second_life)
    disk.power_loss()
    lost = []
    for _ in range(2):  # and twice in a row with no write between
        store = DefaultMessageStore(config)
        try:
            lost.append(_check(store))
        finally:
            disk.off = True
            store.close_without_shutdown()
        disk.power_loss()
    assert lost == [QUEUES + 10, 0]
    assert sum(map(len, expected.values())) > 6 * QUEUES  # the checkpointed records survived


def test_a_torn_checkpoint_after_a_checkpoint_that_left_queues_unflushed(
        root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The checkpoint file damaged after a periodic checkpoint left queues unflushed, and a power loss: recovery
    scans the whole log, and every queue matches it."""
    config = make_config(root, flush_interval_commit_log_ms=60_000)
    disk = _powered(config, monkeypatch)
    expected: dict[tuple[str, int], list[int]] = {}

    async def main() -> str:
        store = DefaultMessageStore(config)
        await store.start()
        await _left_unflushed(store, expected)
        assert store.checkpoint_offset < store.max_phy_offset
        disk.off = True
        store.close_without_shutdown()
        return str(store.checkpoint.path)

    checkpoint = run(main)
    disk.power_loss()
    with open(checkpoint, "r+b") as f:
        f.truncate(os.path.getsize(checkpoint) // 2)
    with reopened_store(config) as store:
        assert store.recovery_report.checkpoint_offset is None  # no usable checkpoint: the whole log scanned
        _assert_queues_match_the_log(store, expected)


def test_a_crash_between_the_syncfs_and_the_checkpoint_write(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A checkpoint synced the file system, then failed before writing its checkpoint (a crash there leaves the
    previous one): the queues, flushed past that checkpoint's recovery point, are whole after a power loss."""
    config = make_config(root)
    disk = _powered(config, monkeypatch)
    monkeypatch.setattr(message_store, "syncfs", disk.syncfs)
    width = message_store.SYNCFS_ABOVE + 20
    expected: dict[tuple[str, int], list[int]] = {}

    async def main() -> None:
        store = DefaultMessageStore(config)
        await store.start()
        for round_ in range(2):
            for qid in range(width):
                result = await store.put_message(msg("wide", b"w%d" % round_, queue_id=qid))
                expected.setdefault(("wide", qid), []).append(result.append_result.wrote_offset)
            if round_ == 0:
                store.flush_and_checkpoint()

        def crash(_: object) -> None:
            raise OSError("the machine stops here")

        monkeypatch.setattr(store.checkpoint, "write_document", crash)
        with pytest.raises(OSError):
            store.flush_and_checkpoint()
        assert len(disk.fsynced) > width  # the syncfs ran
        disk.off = True
        store.close_without_shutdown()

    run(main)
    _whole_after_power_loss(config, disk, expected)


def test_a_slave_truncating_to_its_master_with_queues_left_unflushed_then_a_power_loss(
        root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A truncation (a slave dropping what its master no longer has) while a periodic checkpoint had left queues
    unflushed, then a power loss: no queue keeps an entry past the cut, none loses one before it."""
    config = make_config(root, flush_interval_commit_log_ms=60_000)
    disk = _powered(config, monkeypatch)
    expected: dict[tuple[str, int], list[int]] = {}

    async def main() -> int:
        store = DefaultMessageStore(config)
        await store.start()
        await _left_unflushed(store, expected)
        recovery_point = store.checkpoint_offset
        await _spread(store, QUEUES, expected)
        cut = sorted(o for offsets in expected.values() for o in offsets if o > recovery_point)[QUEUES // 2]
        store.replica_log.truncate(cut)
        assert not store.queues.pending  # the truncation's checkpoint flushed every queue
        for offsets in expected.values():
            offsets[:] = [o for o in offsets if o < cut]
        _assert_queues_match_the_log(store, expected)
        disk.off = True
        store.close_without_shutdown()
        return cut

    cut = run(main)
    disk.power_loss()
    with reopened_store(config) as store:
        assert store.max_phy_offset == cut
        _assert_queues_match_the_log(store, expected)


async def _diverged(tmp_path: Path, config: StoreConfig) -> tuple[DefaultMessageStore, DefaultMessageStore,
                                                                  DefaultMessageStore, int]:
    """An old master of 40 records on 4 queues; a slave (``config``) that copied it all and checkpointed; a new
    master holding the old log up to ``cut`` (the fourth entry of queue 0), then 30 records of other sizes in
    another topic: the slave must cut its log at ``cut`` and take the new master's records."""
    old = DefaultMessageStore(make_config(tmp_path / "old"))
    for i in range(40):
        assert (await old.put_message(msg("old", b"o%03d" % i + b"." * 60, queue_id=i % 4))).ok
    slave = DefaultMessageStore(config)
    slave.replica = True
    slave.append_replicated(0, old.commit_log.read_raw(0, old.max_phy_offset))
    slave.flush_and_checkpoint()
    cut = old.get_commit_log_offset_in_queue("old", 0, 3)
    new = DefaultMessageStore(make_config(tmp_path / "new"))
    new.append_replicated(0, old.commit_log.read_raw(0, cut))
    for i in range(30):
        assert (await new.put_message(msg("new", b"n%03d" % i + b"-" * 131, queue_id=i % 3))).ok
    return old, slave, new, cut


def _queues_of(master: DefaultMessageStore) -> dict[tuple[str, int], list[int]]:
    """Each queue of the diverged logs' new master, as the commit-log offsets of its entries."""
    return {(topic, q): [decode_message(w)[0].commit_log_offset
                         for w in master.get_message(topic, q, 0, 1000, 1 << 30).messages]
            for topic, queues in (("old", 4), ("new", 3)) for q in range(queues)}


def _holds_the_master_s_log_after_a_power_loss(config: StoreConfig, disk: _Disk,
                                               expected: dict[tuple[str, int], list[int]], end: int) -> None:
    """After a power loss the reopened slave lost nothing flushed, ends where the master ends, and each queue
    points at the master's records of that queue."""
    disk.power_loss()
    with reopened_store(config) as store:
        assert not store.recovery_report.lost_data, store.recovery_report.events
        assert store.max_phy_offset == end
        for (topic, qid), offsets in expected.items():
            got = [decode_message(w)[0] for w in store.get_message(topic, qid, 0, 1000, 1 << 30).messages]
            assert [(m.topic, m.queue_id, m.commit_log_offset) for m in got] == [(topic, qid, o) for o in offsets]
            assert store.get_max_offset_in_queue(topic, qid) == len(offsets), (topic, qid)


def _eio(*_: object) -> None:
    raise OSError(5, "Input/output error")


def _restarted_after_a_crash(store: DefaultMessageStore, config: StoreConfig, disk: _Disk) -> DefaultMessageStore:
    """A store whose durability was lost refuses appends until a restart: here a crash and a power loss, then a
    reopen (a replica again) whose recovery decides what holds."""
    with pytest.raises(OSError, match="failed an fsync"):
        store.append_replicated(store.max_phy_offset, b"")
    disk.off = True
    store.close_without_shutdown()
    disk.power_loss()
    reopened = DefaultMessageStore(config)
    reopened.replica = True
    return reopened


@pytest.mark.parametrize("failing", ["a queue's fsync", "syncfs", "the commit log's flush"])
@pytest.mark.parametrize("when", ["throughout", "after the cut"])
def test_a_slave_s_truncation_whose_checkpoint_cannot_be_made_durable_then_new_records_and_a_power_loss(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, failing: str, when: str) -> None:
    """A slave checkpointed past the point its new master's log ends at, then truncates there, and a fsync of the
    truncation's checkpoint fails (an I/O error: once, throughout the truncation or only after the log was cut).
    An fsync that failed loses the slave's durability: it appends nothing until a restart (here a crash and a power
    loss). Its HA client reconnects (truncating again if its log still ends past the master's) and appends the
    master's new records, flushed; then a power loss. The reopened slave holds the master's log: every record whole,
    every queue entry pointing at a record of its queue, nothing flushed lost. (Before: the checkpoint on disk kept its
    recovery point past the cut, and recovery started in the middle of a new record, dropped the records after
    it, and kept an old queue's entries pointing at the new ones.)"""
    config = make_config(tmp_path / "slave", flush_interval_commit_log_ms=60_000)
    disk = _powered(config, monkeypatch)
    monkeypatch.setattr(message_store, "syncfs", disk.syncfs)
    if failing == "syncfs":
        monkeypatch.setattr(message_store, "SYNCFS_ABOVE", 0)
    truncated: list[int] = []

    async def main() -> tuple[dict[tuple[str, int], list[int]], int, int]:
        old, slave, new, cut = await _diverged(tmp_path, config)
        slave.add_truncate_listener(truncated.append)
        assert 0 < cut < slave.checkpoint_offset
        real_fsync, real_truncate = mapped_file.fsync_fd, slave.commit_log.truncate
        broken = [when == "throughout"]

        def queue_fsync(fd: int) -> None:
            if broken[0] and "consumequeue" in os.readlink(f"/proc/self/fd/{fd}"):
                _eio()
            real_fsync(fd)

        def breaking_truncate(offset: int) -> None:
            real_truncate(offset)
            broken[0] = True

        with monkeypatch.context() as m:
            m.setattr(slave.commit_log, "truncate", breaking_truncate)
            if failing == "a queue's fsync":
                m.setattr(mapped_file, "fsync_fd", queue_fsync)
            elif failing == "syncfs":
                m.setattr(message_store, "syncfs", lambda path: _eio() if broken[0] else disk.syncfs(path))
            else:
                flush = slave.commit_log.flush
                m.setattr(slave.commit_log, "flush", lambda: _eio() if broken[0] else flush())
            with pytest.raises(OSError):
                slave.truncate_replicated(cut)
        if slave.durability.lost:  # a real fsync failed (not the commit log's flush replaced above)
            slave = _restarted_after_a_crash(slave, config, disk)
            slave.add_truncate_listener(truncated.append)
        if slave.max_phy_offset > cut:  # the HA client's next handshake: this log ends past the master's
            assert when == "throughout" and not truncated  # nothing was cut
            slave.truncate_replicated(cut)
        slave.append_replicated(cut, new.commit_log.read_raw(cut, new.max_phy_offset - cut))
        slave.commit_log.flush()  # the flush thread's
        expected = _queues_of(new)
        disk.off = True
        for store in (slave, old, new):
            store.close_without_shutdown()
        return expected, new.max_phy_offset, cut

    expected, end, cut = run(main)
    _holds_the_master_s_log_after_a_power_loss(config, disk, expected, end)
    assert truncated == [cut]  # the slave's state derived from the dropped records went (a transaction table)


def test_a_slave_s_cut_whose_log_fsync_fails_lowers_the_end_and_refuses_appends_until_a_restart(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A slave truncates to its new master's end; the truncation's first checkpoint is durable, then the commit
    log's fsync of the cut fails. The log's end is lowered to the cut with the queues' entries past it (before,
    it stayed past the cut over zeroed bytes, the queues pointing into them, until the next handshake); durability
    is lost, so appends are refused, also once the disk works (a retried fsync would not prove the cut durable).
    Restarted (after a crash and a power loss, the cut perhaps undone), the slave truncates again if it must and
    appends the master's records; then a power loss: the reopened slave holds the master's log, every queue entry
    pointing at its record."""
    config = make_config(tmp_path / "slave", flush_interval_commit_log_ms=60_000)
    disk = _powered(config, monkeypatch)
    failing = [False]

    def log_fsync(fd: int) -> None:
        if failing[0] and "commitlog" in os.readlink(f"/proc/self/fd/{fd}"):
            _eio()
        disk.fsync_fd(fd)

    async def main() -> tuple[dict[tuple[str, int], list[int]], int]:
        old, slave, new, cut = await _diverged(tmp_path, config)
        monkeypatch.setattr(mapped_file, "fsync_fd", log_fsync)
        real_truncate = slave.commit_log.truncate

        def failing_truncate(offset: int) -> None:  # the first checkpoint is durable by now
            failing[0] = True
            real_truncate(offset)

        with monkeypatch.context() as m:
            m.setattr(slave.commit_log, "truncate", failing_truncate)
            with pytest.raises(OSError):
                slave.truncate_replicated(cut)
        assert slave.max_phy_offset == cut
        assert slave.get_max_offset_in_queue("old", 0) == 3  # no entry points past the cut
        records = new.commit_log.read_raw(cut, new.max_phy_offset - cut)
        with pytest.raises(OSError):
            slave.append_replicated(cut, records)
        assert slave.max_phy_offset == cut
        failing[0] = False
        slave = _restarted_after_a_crash(slave, config, disk)
        if slave.max_phy_offset > cut:  # the cut's fsync failed: the power loss may have undone it
            slave.truncate_replicated(cut)
        slave.append_replicated(cut, records)
        slave.commit_log.flush()  # the flush thread's
        expected = _queues_of(new)
        disk.off = True
        for store in (slave, old, new):
            store.close_without_shutdown()
        return expected, new.max_phy_offset

    expected, end = run(main)
    _holds_the_master_s_log_after_a_power_loss(config, disk, expected, end)


async def _checkpointed_then_more(config: StoreConfig, expected: dict[tuple[str, int], list[int]],
                                  doomed: bool = False) -> DefaultMessageStore:
    """A started store: entries on every queue (and three on topic "doomed"), a full checkpoint, as many again."""
    store = DefaultMessageStore(config)
    await store.start()
    await _spread(store, 2 * QUEUES, expected)
    for _ in range(3 if doomed else 0):
        assert (await store.put_message(msg("doomed", b"d" * 20))).ok
    store.flush_and_checkpoint()
    await _spread(store, 2 * QUEUES, expected)
    return store


def _failed_in_its_worker(store: DefaultMessageStore, monkeypatch: pytest.MonkeyPatch) -> message_store._Snapshot:
    """A periodic checkpoint that took every queue and whose worker failed (its document refused: no fsync failed,
    durability is not lost); the loop has not resumed the job, so its queues are not put back yet."""
    store._thorough_at -= store.config.flush_consume_queue_thorough_interval_ms / 1000 + 1
    snap = store._snapshot(thorough=False)
    with monkeypatch.context() as m:
        m.setattr(store.checkpoint, "write_document", _eio)
        with pytest.raises(OSError):
            store._write_checkpoint(snap)
    assert snap.failed and not store.durability.lost
    return snap


def test_a_truncation_while_a_failed_checkpoint_is_not_put_back_yet_puts_it_back_and_cuts(
        root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A periodic checkpoint's worker failed and the loop has not put its queues back yet: a checkpoint taken then
    would claim them durable, so none is written until they are back. The truncation's checkpoint puts them back
    itself and is written below the cut; the loop's put-back after it changes nothing; a crash then loses none."""
    config = make_config(root, flush_interval_commit_log_ms=60_000)
    disk = _powered(config, monkeypatch)
    expected: dict[tuple[str, int], list[int]] = {}

    async def main() -> None:
        store = await _checkpointed_then_more(config, expected)
        cut = expected[("spread", 0)][2]
        snap = _failed_in_its_worker(store, monkeypatch)
        store.truncate_replicated(cut)
        assert store.max_phy_offset == cut and store.checkpoint_offset == cut
        assert store.checkpoint.load()[0].recovery_offset == cut  # type: ignore[union-attr]
        for offsets in expected.values():
            offsets[:] = [o for o in offsets if o < cut]
        _assert_queues_match_the_log(store, expected)
        store._unflushed_again(snap)  # the loop resumes the failed job
        assert snap not in store._in_flight
        await _spread(store, QUEUES, expected)
        store.commit_log.flush()
        store.close_without_shutdown()

    run(main)
    _whole_after_power_loss(config, disk, expected)


def test_a_deletion_while_a_failed_checkpoint_is_not_put_back_yet_is_durable(
        root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """As above with a topic deleted: its checkpoint (which must stop listing the topic, or recovery brings its
    queues back) returned without writing its document and without an error. It now puts the failed one's queues
    back and is written: after a power loss the topic stays deleted and every other queue is whole."""
    config = make_config(root, flush_interval_commit_log_ms=60_000)
    disk = _powered(config, monkeypatch)
    expected: dict[tuple[str, int], list[int]] = {}

    async def main() -> None:
        store = await _checkpointed_then_more(config, expected, doomed=True)
        snap = _failed_in_its_worker(store, monkeypatch)
        store.delete_topic("doomed")
        cp = store.checkpoint.load()[0]
        assert "doomed" not in cp.queues  # type: ignore[union-attr]
        assert cp.recovery_offset == store.max_phy_offset  # type: ignore[union-attr]
        store._unflushed_again(snap)
        store.commit_log.flush()
        store.close_without_shutdown()

    run(main)
    disk.power_loss()
    with reopened_store(config) as store:
        assert "doomed" not in store.topics() and store.recovery_report.consume_queues_rebuilt == []
        _assert_queues_match_the_log(store, expected)


def test_shutdown_after_a_cancelled_checkpoint_whose_worker_then_failed_writes_its_checkpoint(
        root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The checkpoint loop is cancelled (shutdown) while its worker runs: the job puts the queues back, but the
    snapshot stays in flight until the worker is done; the worker then fails. Every later checkpoint was skipped
    for it, shutdown's too, which then removed the abort file as if its document were on disk. Shutdown now writes
    its checkpoint: every entry durable at the recovery point of the log's end."""
    config = make_config(root, flush_interval_commit_log_ms=60_000)
    disk = _powered(config, monkeypatch)
    expected: dict[tuple[str, int], list[int]] = {}

    async def main() -> None:
        store = await _checkpointed_then_more(config, expected)
        store._thorough_at -= config.flush_consume_queue_thorough_interval_ms / 1000 + 1
        snap = store._snapshot(thorough=False)
        store._unflushed_again(snap)  # the job cancelled: its worker still runs
        assert snap in store._in_flight
        with monkeypatch.context() as m:
            m.setattr(store.checkpoint, "write_document", _eio)
            with pytest.raises(OSError):
                store._write_checkpoint(snap)  # ... and fails
        end = store.max_phy_offset
        await store.shutdown()
        assert store.checkpoint.load()[0].recovery_offset == end  # type: ignore[union-attr]

    run(main)
    disk.power_loss()
    with reopened_store(config) as store:
        assert store.recovery_report.consume_queues_rebuilt == []
        _assert_queues_match_the_log(store, expected)


def test_shutdown_while_a_cancelled_journaled_checkpoint_s_worker_still_runs_then_fails(
        root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A periodic thorough checkpoint took queue hot/0 (its file 0, written and not fsynced, no longer dirty); the
    job is cancelled (shutdown) while the worker writes its journal, and puts the queue back; shutdown's checkpoint
    takes the queue again without file 0 and waits for the worker, which fails and makes file 0 dirty again. The
    retry must put the queue back once more: put back only once, it was taken without file 0 and the document
    counted entries 60..63 durable; after a power loss they were a hole no check found."""
    config = make_config(root, flush_interval_commit_log_ms=60_000)
    disk = _powered(config, monkeypatch)
    offsets: list[int] = []
    entered, release = threading.Event(), threading.Event()
    real_write = tail_journal.TailJournal.write

    def blocking_write(self: tail_journal.TailJournal, where: str) -> None:
        if threading.current_thread() is threading.main_thread():
            return real_write(self, where)
        entered.set()
        release.wait(10)
        raise OSError(28, "No space left on device")

    async def main() -> None:
        store = DefaultMessageStore(config)
        await store.start()
        for i in range(60):  # file 0 (64 entries a file), fsynced below
            offsets.append((await store.put_message(msg("hot", b"%04d" % i))).append_result.wrote_offset)
        store.flush_and_checkpoint()
        for i in range(60, 64):  # the end of file 0: written, not fsynced
            offsets.append((await store.put_message(msg("hot", b"%04d" % i))).append_result.wrote_offset)
        store.queues.find("hot", 0).write_tail()
        for i in range(64, 70):  # in the tail (file 1)
            offsets.append((await store.put_message(msg("hot", b"%04d" % i))).append_result.wrote_offset)
        store._thorough_at -= config.flush_consume_queue_thorough_interval_ms / 1000 + 1
        snap = store._snapshot(thorough=False)  # the periodic thorough one: a journal
        assert snap.tails is not None
        store._unflushed_again(snap)  # its job cancelled by shutdown; the worker still runs
        monkeypatch.setattr(tail_journal.TailJournal, "write", blocking_write)

        def the_worker() -> None:
            with pytest.raises(OSError):
                store._write_checkpoint(snap)

        worker = threading.Thread(target=the_worker)
        worker.start()
        assert entered.wait(5)
        threading.Timer(0.3, release.set).start()  # the worker fails while shutdown's checkpoint waits for it
        await store.shutdown()
        worker.join()

    run(main)
    disk.power_loss()
    with reopened_store(config) as store:
        assert store.get_max_offset_in_queue("hot", 0) == 70
        got = store.get_message("hot", 0, 0, 1000, 1 << 30)
        assert [decode_message(w)[0].commit_log_offset for w in got.messages] == offsets


def test_a_wall_clock_step_does_not_make_a_periodic_checkpoint_thorough(
        root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """flushConsumeQueueThoroughInterval is a duration: a wall clock stepped hours ahead (NTP, an operator) must
    not count as the interval passing, nor one stepped back keep it from passing."""
    config = make_config(root)
    real_time = time.time

    async def main() -> None:
        store = DefaultMessageStore(config)
        await store.start()
        await _spread(store, QUEUES, {})
        store.flush_and_checkpoint()
        await _spread(store, QUEUES, {})
        monkeypatch.setattr(time, "time", lambda: real_time() + 3 * 3600)
        _periodic_checkpoint(store)
        assert store.checkpoint_offset < store.max_phy_offset and store.queues.pending  # the queues left
        monkeypatch.setattr(time, "time", lambda: real_time() - 3 * 3600)
        store._thorough_at -= config.flush_consume_queue_thorough_interval_ms / 1000
        _periodic_checkpoint(store)
        monkeypatch.undo()
        assert store.checkpoint_offset == store.max_phy_offset and not store.queues.pending
        await store.shutdown()

    run(main)


def test_retention_keeps_the_segment_holding_an_unflushed_queue_s_oldest_entry(
        root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A queue left unflushed across several periodic checkpoints while a hot queue fills segments, then retention
    with every record expired, then a power loss: the segment holding the unflushed queue's oldest entry (the
    recovery point) was kept, and every queue's entries from its first kept one match the log."""
    config = make_config(root, flush_interval_commit_log_ms=60_000, file_reserved_time_hours=1)
    disk = _powered(config, monkeypatch)
    expected: dict[tuple[str, int], list[int]] = {}

    async def main() -> None:
        store = DefaultMessageStore(config)
        await store.start()

        async def hot() -> None:
            for _ in range(2 * 4096 // CQ_ENTRY_SIZE):
                result = await store.put_message(msg("hot", b"h" * 100))
                expected.setdefault(("hot", 0), []).append(result.append_result.wrote_offset)
            _periodic_checkpoint(store)

        for _ in range(3):
            await hot()
        await _spread(store, QUEUES, expected)
        store.flush_and_checkpoint()
        await _spread(store, QUEUES, expected)  # left unflushed from here on
        light = min(expected[("spread", 0)][1:])
        for _ in range(4):
            await hot()
            assert store.checkpoint_offset <= light
        assert store.clean_expired_files(elapsed_ms=10**12) > 0
        assert 0 < store.min_phy_offset <= store.checkpoint_offset
        disk.off = True
        store.close_without_shutdown()

    run(main)
    disk.power_loss()
    with reopened_store(config) as store:
        low = store.min_phy_offset
        assert low > 0
        for (topic, qid), offsets in expected.items():
            kept = [o for o in offsets if o >= low]
            first = store.get_min_offset_in_queue(topic, qid)
            assert store.get_max_offset_in_queue(topic, qid) - first == len(kept), (topic, qid)
            got = store.get_message(topic, qid, first, 100_000, 1 << 30)
            assert [decode_message(w)[0].commit_log_offset for w in got.messages] == kept, (topic, qid)


def test_a_checkpoint_failing_while_a_topic_is_deleted_does_not_bring_its_queues_back(root: Path) -> None:
    """A periodic checkpoint took a queue to flush; the topic was deleted (its own checkpoint waits for the running
    one, which then fails: a full disk) and the failed checkpoint marks the queues it took unflushed again. A
    deleted queue among them kept the next checkpoints' recovery point at its entry and listed it with its count,
    so the next crash rebuilt the deleted topic's queue from the log."""
    config = make_config(root)

    async def main() -> None:
        store = DefaultMessageStore(config)
        await store.start()
        await _spread(store, 2 * QUEUES, {})
        store.flush_and_checkpoint()
        for _ in range(3):
            assert (await store.put_message(msg("doomed", b"d" * 20))).ok
        store._thorough_at -= config.flush_consume_queue_thorough_interval_ms / 1000
        snap = store._snapshot(thorough=False)  # the running checkpoint took every queue, "doomed" with them
        assert any(cq.topic == "doomed" for cq, _ in snap.cq_flushed)
        store.delete_topic("doomed")
        store._unflushed_again(snap)  # ... and failed
        doomed_at = store.max_phy_offset
        await _spread(store, QUEUES, {})
        _periodic_checkpoint(store)
        assert "doomed" not in store.checkpoint.load()[0].queues  # type: ignore[union-attr]
        assert store.checkpoint_offset >= doomed_at  # the spread queues' entries hold it, not the deleted queue's
        store.close_without_shutdown()

    run(main)
    with reopened_store(config) as store:
        assert "doomed" not in store.topics() and store.recovery_report.consume_queues_rebuilt == []


def test_a_checkpoint_written_after_an_earlier_one_failed_claims_nothing_that_one_left_unflushed(
        root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A periodic checkpoint took the queues to fsync and failed in its worker; before the loop put their unflushed
    state back, a checkpoint of stop, delete_topic or a truncation ran: the queues were not pending, so it neither
    fsynced them nor held its recovery point before them, and wrote a checkpoint counting their entries as durable.
    After a power loss recovery found them short and rebuilt them wholesale from the whole log. The worker's failed
    fsync loses durability: that checkpoint is not written (nor any later one), the one on disk stays, and recovery
    replays the tail. (Entries written to their files at once: with tails, a periodic thorough checkpoint puts them in
    its tails journal and fsyncs no queue.)"""
    config = make_config(root, flush_interval_commit_log_ms=60_000, consume_queue_write_behind_bytes=0)
    disk = _powered(config, monkeypatch)
    expected: dict[tuple[str, int], list[int]] = {}

    async def main() -> None:
        store = DefaultMessageStore(config)
        await store.start()
        await _spread(store, 2 * QUEUES, expected)
        store.flush_and_checkpoint()
        before = store.checkpoint_offset
        await _spread(store, 2 * QUEUES, expected)
        store._thorough_at -= config.flush_consume_queue_thorough_interval_ms / 1000
        first = store._snapshot(thorough=False)  # takes every queue
        real_flush = mapped_file.MappedFile.flush

        def failing(self: mapped_file.MappedFile) -> None:  # a queue's: the commit log is durable
            if "consumequeue" in self.directory:
                raise OSError(5, "Input/output error")
            real_flush(self)

        monkeypatch.setattr(mapped_file.MappedFile, "flush", failing)
        with pytest.raises(OSError):
            store._write_checkpoint(first)  # the worker's fsync of a queue fails
        monkeypatch.setattr(mapped_file.MappedFile, "flush", real_flush)
        with pytest.raises(OSError, match="failed an fsync"):
            store.flush_and_checkpoint()  # before the loop ran _unflushed_again
        assert store.checkpoint_offset == before
        store._unflushed_again(first)
        disk.off = True
        store.close_without_shutdown()

    run(main)
    _whole_after_power_loss(config, disk, expected)


# --- entries written behind: a queue's newest entries kept in memory (its tail) ---------------------------------


def _entries_on_disk(config: StoreConfig, topic: str, qid: int) -> int:
    """Non-empty entries in the queue's files as they are on disk now (read directly, not through the store)."""
    directory = os.path.join(config.store_path_root_dir, "consumequeue", topic, str(qid))
    if not os.path.isdir(directory):
        return 0
    count = 0
    for name in os.listdir(directory):
        with open(os.path.join(directory, name), "rb") as f:
            data = f.read()
        count += sum(1 for i in range(0, len(data), CQ_ENTRY_SIZE) if data[i : i + CQ_ENTRY_SIZE].strip(b"\0"))
    return count


def test_buffered_entries_read_as_written_ones_and_reach_the_file_by_the_page_or_the_checkpoint(root: Path) -> None:
    """Sends spread over many queues: each queue's few entries stay in memory, not one system call per send, and
    every read (pulls, lookups by offset and time, the last-entry check, the binary searches) finds them as it
    finds written ones, across the boundary between a queue's file and its tail. A queue written a page of entries
    writes them; a checkpoint that flushes a queue writes its tail first."""
    config = make_config(root, mapped_file_size_consume_queue=20 * 8)  # files roll every 8 entries

    async def main() -> None:
        store = DefaultMessageStore(config)
        await store.start()
        expected: dict[tuple[str, int], list[int]] = {}
        await _spread(store, 3 * QUEUES, expected)
        assert all(_entries_on_disk(config, "spread", q) == 0 for q in range(QUEUES))  # all buffered
        _assert_queues_match_the_log(store, expected)
        store.flush_and_checkpoint()  # writes and fsyncs every tail
        assert all(_entries_on_disk(config, "spread", q) == 3 for q in range(QUEUES))
        await _spread(store, 10 * QUEUES, expected)  # 3 entries in the files, 10 more buffered, over file bounds
        assert all(_entries_on_disk(config, "spread", q) == 3 for q in range(QUEUES))
        _assert_queues_match_the_log(store, expected)
        for (topic, qid), offsets in expected.items():
            cq = store.queues.find(topic, qid)
            assert cq is not None and cq.tail is not None and cq.tail_from == 3
            for qoff, phy in enumerate(offsets):
                assert store.get_commit_log_offset_in_queue(topic, qid, qoff) == phy
            stamps = [store.look_message_by_offset(phy).store_timestamp for phy in offsets]
            for qoff in (2, 3, 9, 12):  # in the file, the tail's first, within the tail, the last
                first = stamps.index(stamps[qoff])  # (records stored in the same millisecond share a stamp)
                assert store.get_offset_in_queue_by_time(topic, qid, stamps[qoff]) == first
            assert cq.last_entry_problem(store.max_phy_offset, 1 << 20) is None
            cq.correct_min_offset(offsets[5])
            assert cq.min_offset == 5
            cq.correct_min_offset(0)
        hot = [(await store.put_message(msg("hot", b"h" * 20))).append_result.wrote_offset
               for _ in range(message_store.PAGE_SIZE // CQ_ENTRY_SIZE + 5)]
        assert _entries_on_disk(config, "hot", 0) == message_store.PAGE_SIZE // CQ_ENTRY_SIZE + 1  # a page written
        expected[("hot", 0)] = hot
        _assert_queues_match_the_log(store, expected)
        await store.shutdown()
        assert all(_entries_on_disk(config, t, q) == len(o) for (t, q), o in expected.items())  # a stop writes all

    run(main)
    with reopened_store(config) as reopened:
        assert reopened.recovery_report.clean_shutdown and reopened.recovery_report.records_scanned == 0


def test_buffered_entries_stay_under_the_store_wide_bound(root: Path) -> None:
    """``consumeQueueWriteBehindBytes``: past it the oldest tails are written until half of it is left, so memory
    stays bounded however many queues are written and however fast."""
    limit = 20 * 2 * QUEUES  # two entries a queue
    config = make_config(root, consume_queue_write_behind_bytes=limit)

    async def main() -> None:
        store = DefaultMessageStore(config)
        await store.start()
        expected: dict[tuple[str, int], list[int]] = {}
        for _ in range(5):
            await _spread(store, QUEUES, expected)
            assert store.queues.tail_bytes <= limit
            assert sum(len(cq.tail or b"") for cq in store.queues.all()) == store.queues.tail_bytes
        on_disk = sum(_entries_on_disk(config, "spread", q) for q in range(QUEUES))
        assert on_disk >= 5 * QUEUES - limit // CQ_ENTRY_SIZE  # what is not buffered is written
        _assert_queues_match_the_log(store, expected)
        await store.shutdown()

    run(main)


def test_sigkill_with_entries_buffered_loses_none_answered(root: Path) -> None:
    """A real child spreads SYNC_FLUSH puts over many queues and is killed while their newest entries are still in
    memory (its periodic checkpoints leave those queues unflushed and unwritten): the files lack answered entries,
    and recovery rebuilds every one of them from the commit log, at its place."""
    lines = lines_until_killed(os.path.join(HERE, "crash_writer.py"), [str(root), "r0", str(QUEUES)], 0.6)
    assert lines, "the child acknowledged nothing"
    acked = [tuple(map(int, line.split()[:3])) for line in lines]
    config = make_config(root)
    per_queue = {qid: sum(1 for _, q, _ in acked if q == qid) for qid in range(QUEUES)}
    assert any(_entries_on_disk(config, "crash", q) < n for q, n in per_queue.items())  # lost with the process
    with reopened_store(config) as store:
        assert not store.recovery_report.clean_shutdown and store.recovery_report.consume_queues_rebuilt == []
        for off, qid, qoff in acked:
            assert store.get_commit_log_offset_in_queue("crash", qid, qoff) == off


def test_truncation_drops_buffered_entries_past_the_cut(root: Path) -> None:
    """A slave cut back to its master's log while the newest entries were buffered (in files and tails both): none
    past the cut survives, in memory or, once written, on disk; none before it is lost."""
    config = make_config(root, mapped_file_size_consume_queue=20 * 8)

    async def main() -> None:
        store = DefaultMessageStore(config)
        await store.start()
        expected: dict[tuple[str, int], list[int]] = {}
        await _spread(store, 4 * QUEUES, expected)
        store.flush_and_checkpoint()
        await _spread(store, 6 * QUEUES, expected)
        cut = expected[("spread", 0)][7]  # queue 0 keeps 7 entries, 4 written and 3 buffered
        store.replica_log.truncate(cut)
        for offsets in expected.values():
            offsets[:] = [o for o in offsets if o < cut]
        assert store.queues.tail_bytes == sum(len(cq.tail or b"") for cq in store.queues.all())
        _assert_queues_match_the_log(store, expected)
        await _spread(store, QUEUES, expected)  # the next entries follow the cut
        _assert_queues_match_the_log(store, expected)
        await store.shutdown()
        assert all(_entries_on_disk(config, t, q) == len(o) for (t, q), o in expected.items())

    run(main)


def test_a_checkpoint_with_buffered_entries_holds_its_recovery_point_before_them(
        root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A periodic checkpoint that leaves queues with buffered entries (new queues among them, whose files do not
    exist yet) keeps its recovery point at or before the oldest of them; after a power loss, recovery rebuilds
    every one from the log, rebuilding no queue wholesale."""
    config = make_config(root, flush_interval_commit_log_ms=60_000)
    disk = _powered(config, monkeypatch)
    expected: dict[tuple[str, int], list[int]] = {}

    async def main() -> None:
        store = DefaultMessageStore(config)
        await store.start()
        await _flushed_then_spread(store, expected, 2 * QUEUES)
        for qid in range(QUEUES):
            result = await store.put_message(msg("new", b"n" * 20, queue_id=qid))
            expected[("new", qid)] = [result.append_result.wrote_offset]
        _periodic_checkpoint(store)
        oldest = min(CQ_ENTRY.unpack_from(cq.tail)[0] for cq in store.queues.all() if cq.tail is not None)
        assert store.queues.tail_bytes and store.checkpoint_offset <= oldest
        disk.off = True
        store.close_without_shutdown()

    run(main)
    _whole_after_power_loss(config, disk, expected)


def test_a_thorough_checkpoint_writes_thousands_of_tails_a_batch_at_a_time(root: Path) -> None:
    """At 80,000 queues a thorough checkpoint has as many tails to write: it writes them a batch at a time and the
    loop serves between batches, instead of holding it for seconds. A new queue's first put created its file
    (that cost stays with the put, not with the checkpoint), so the batches only write."""
    config = make_config(root)
    queues = 3 * message_store.TAILS_PER_TURN

    async def main() -> None:
        store = DefaultMessageStore(config)
        await store.start()
        for qid in range(queues):
            assert (await store.put_message(msg("wide", b"w" * 20, queue_id=qid))).ok
        assert all(os.path.getsize(os.path.join(root, "consumequeue", "wide", str(q), "0" * 20))
                   == config.mapped_file_size_consume_queue for q in range(queues))
        assert all(_entries_on_disk(config, "wide", q) == 0 for q in range(queues))
        seen: list[int] = []

        async def watch() -> None:
            while len(seen) < 10:
                seen.append(sum(cq.tail is None for cq in store.queues.all()))
                await asyncio.sleep(0)

        watcher = asyncio.create_task(watch())
        await store._write_tails(0)  # what the checkpoint loop runs before a thorough snapshot
        await watcher
        assert any(0 < n < queues for n in seen)  # the loop ran while tails were being written
        assert all(_entries_on_disk(config, "wide", q) == 1 for q in range(queues))
        await store.shutdown()

    run(main)


# --- the checkpoint's bookkeeping: what it flushes, its recovery point and its counts, kept as queues change ---------


def _bookkeeping_as_a_walk_finds_it(store: DefaultMessageStore) -> None:
    """What the store keeps for the checkpoint equals what a walk over every queue computes: the pending queues, the
    due ones (a change to make durable, or ``flushConsumeQueueLeastPages`` written to the files since the last fsync),
    the oldest unflushed entry, and the counts (the next offset, or the oldest unflushed offset if lower)."""
    queues = store.queues
    least = store.config.flush_consume_queue_least_pages * message_store.PAGE_SIZE
    every = list(queues.all())
    unflushed = [cq for cq in every if cq.unflushed_from is not None]
    assert queues.pending == {cq for cq in every if cq.unflushed_from is not None or cq.flush_due}
    written = {cq: cq.tail_from if cq.tail is not None else cq.max_offset for cq in unflushed}
    assert set(queues.due) == {cq for cq in every if cq.flush_due} | {
        cq for cq in unflushed if (written[cq] - cq.unflushed_from) * CQ_ENTRY_SIZE >= least}  # type: ignore[operator]
    assert set(queues.unflushed) | queues.unordered == set(unflushed)
    in_order = [cq.unflushed_phy for cq in queues.unflushed if cq not in queues.unordered]
    assert in_order == sorted(in_order)
    assert queues.oldest_unflushed() == min((cq.unflushed_phy for cq in unflushed), default=None)
    counts: dict[str, dict[int, int]] = {}
    for cq in every:
        start = cq.unflushed_from
        counts.setdefault(cq.topic, {})[cq.queue_id] = cq.max_offset if start is None else min(cq.max_offset, start)
    assert queues.counts == counts


def test_queues_pending_in_some_order_and_older_ones_put_back_by_a_failed_checkpoint(
        root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A checkpoint takes every queue and fails in its worker; meanwhile newer entries made other queues unflushed
    first. Once the failed one's queues are back, the next checkpoint's recovery point is their oldest entry, not
    the oldest of the queues that became unflushed before them; and a power loss then loses nothing."""
    config = make_config(root, flush_interval_commit_log_ms=60_000)
    disk = _powered(config, monkeypatch)
    expected: dict[tuple[str, int], list[int]] = {}

    async def main() -> None:
        store = DefaultMessageStore(config)
        await store.start()
        await _spread(store, QUEUES, expected)
        store.flush_and_checkpoint()
        oldest = store.max_phy_offset
        await _spread(store, QUEUES, expected)  # every queue unflushed, from ``oldest`` on
        store._thorough_at -= config.flush_consume_queue_thorough_interval_ms / 1000
        failing = store._snapshot(thorough=False)  # takes every queue
        assert not store.queues.pending
        await _spread(store, QUEUES // 2, expected)  # newer entries: these queues unflushed first, in order
        assert store.queues.oldest_unflushed() > oldest  # type: ignore[operator]

        def refused(_: bytes) -> None:
            raise OSError(28, "No space left on device")

        with monkeypatch.context() as m:
            m.setattr(store.checkpoint, "write_document", refused)
            with pytest.raises(OSError):
                store._write_checkpoint(failing)
        store._unflushed_again(failing)
        _bookkeeping_as_a_walk_finds_it(store)
        assert store.queues.oldest_unflushed() == oldest
        _periodic_checkpoint(store)
        assert store.checkpoint_offset == oldest
        assert store.checkpoint.load()[0].queues == store.queues.counts  # type: ignore[union-attr]
        disk.off = True
        store.close_without_shutdown()

    run(main)
    _whole_after_power_loss(config, disk, expected)


def _a_power_loss_now_loses_nothing(store: DefaultMessageStore, disk: _Disk) -> None:
    """Against what the disk holds (``_Disk``: each file as last fsynced), not what the store keeps: every entry a
    queue holds that a power loss now would take is one recovery rebuilds, after the checkpoint on disk: it points
    at or past its recovery point (replayed), or lies below the queue's count (the queue rebuilt from the log)."""
    cp = store.checkpoint.load()[0]
    assert cp is not None
    for cq in store.queues.all():
        count = cp.queues.get(cq.topic, {}).get(cq.queue_id, 0)
        files = cq.opened_files
        offset = files.files[0].file_from_offset // CQ_ENTRY_SIZE if files is not None and files.files else 0
        while offset < cq.max_offset:
            raw = cq.read_entries(offset, cq.max_offset - offset)
            for i in range(0, len(raw), CQ_ENTRY_SIZE):
                pos = (offset + i // CQ_ENTRY_SIZE) * CQ_ENTRY_SIZE
                mf = files.find(pos) if files is not None else None
                image = disk.fsynced.get(os.path.realpath(mf.path), b"") if mf is not None else b""
                at = pos - mf.file_from_offset if mf is not None else 0
                entry = raw[i : i + CQ_ENTRY_SIZE]
                if image[at : at + CQ_ENTRY_SIZE] != entry and entry != bytes(CQ_ENTRY_SIZE):
                    phy = CQ_ENTRY.unpack(entry)[0]
                    assert phy >= cp.recovery_offset or pos // CQ_ENTRY_SIZE < count, (
                        cq.topic, cq.queue_id, pos // CQ_ENTRY_SIZE, phy, cp.recovery_offset, count)
            offset += max(1, len(raw) // CQ_ENTRY_SIZE)


@pytest.mark.parametrize("least_pages", [1, 0, 1000])  # 0: every checkpoint flushes all; 1000: only thorough ones
def test_the_checkpoint_s_bookkeeping_through_puts_checkpoints_failures_truncations_and_deletions(
        root: Path, monkeypatch: pytest.MonkeyPatch, least_pages: int) -> None:
    """Random puts (spread and hot, past the write-behind bound and past flushConsumeQueueLeastPages), periodic,
    thorough and failed checkpoints (entries put between the snapshot and its failure), periodic ones that cannot
    write some queues' tails and groups taken back (a full disk), a periodic one whose worker runs late (after a
    checkpoint written meanwhile, or after its loop was cancelled), a slave's truncation and topic deletions: after
    each (and between a truncation and its checkpoint), what the store keeps for the checkpoint is what a walk over
    every queue finds; each checkpoint written says the oldest unflushed entry and those counts, and a power loss
    right after it would take no entry recovery does not rebuild; a power loss after a last periodic checkpoint
    loses nothing. (``SEED`` and ``STEPS`` in the environment run others.)"""
    config = make_config(root, flush_interval_commit_log_ms=60_000, flush_consume_queue_least_pages=least_pages,
                         consume_queue_write_behind_bytes=20 * 40)
    disk = _powered(config, monkeypatch)
    expected: dict[tuple[str, int], list[int]] = {}
    rng = random.Random(int(os.environ.get('SEED', '33')))
    keys = [(f"t{t}", q) for t in range(4) for q in range(4)]

    def refused(_: bytes) -> None:
        raise OSError(28, "No space left on device")

    def checked(write_checkpoint: Callable[[int | None], None]) -> Callable[[int | None], None]:
        def check_then_write(below: int | None) -> None:
            _bookkeeping_as_a_walk_finds_it(store)
            write_checkpoint(below)
        return check_then_write

    async def put(key: tuple[str, int], n: int) -> None:
        results = await store.put_messages([msg(key[0], b"%d" % i, queue_id=key[1]) for i in range(n)])
        assert results.ok
        first = results.append_result.wrote_offset
        expected.setdefault(key, []).extend(
            [decode_message(w)[0].commit_log_offset for w in store.get_message(*key, len(expected.get(key, [])),
                                                                                n, 1 << 30).messages])
        assert expected[key][-n] == first

    async def main() -> None:
        nonlocal keys
        for step in range(int(os.environ.get('STEPS', '120'))):
            op = rng.choice(["spread"] * 6 + ["hot", "periodic", "periodic", "thorough", "failed", "delete",
                                               "truncate", "refused", "unwritable", "late"])
            if op == "spread":
                for key in rng.sample(keys, 5):
                    await put(key, rng.randint(1, 3))
            elif op == "hot":
                await put(rng.choice(keys), rng.randint(100, 300))
            elif op in ("periodic", "thorough"):
                if op == "thorough":
                    store._thorough_at -= config.flush_consume_queue_thorough_interval_ms / 1000
                _periodic_checkpoint(store)
                oldest = store.queues.oldest_unflushed()
                assert store.checkpoint_offset == (store.max_phy_offset if oldest is None else oldest), step
                assert store.checkpoint.load()[0].queues == store.queues.counts  # type: ignore[union-attr]
                _a_power_loss_now_loses_nothing(store, disk)
            elif op == "failed":
                if rng.random() < 0.5:  # a queue due (a page written) among those the failed one takes
                    await put(rng.choice(keys), 250)
                snap = store._snapshot(thorough=rng.random() < 0.3)
                for key in rng.sample(keys, 3):
                    await put(key, rng.randint(1, 3))
                with monkeypatch.context() as m:
                    m.setattr(store.checkpoint, "write_document", refused)
                    with pytest.raises(OSError):
                        store._write_checkpoint(snap)
                store._unflushed_again(snap)
            elif op == "refused":  # a full disk: the group's last queue cannot make its file, the group taken back
                fresh = (f"z{step}", 0)
                with monkeypatch.context() as m:
                    m.setattr(MappedFileQueue, "create",
                              lambda self, start, create=MappedFileQueue.create, fresh=fresh: refused(b"")
                              if self.directory.endswith(f"/{fresh[0]}/0") else create(self, start))
                    group = await asyncio.gather(*(store.put_message(msg(k[0], b"r", queue_id=k[1]))
                                                   for k in [*rng.sample(keys, 3), fresh]))
                    assert not any(r.ok for r in group)
                store.group_commit.disk.full = False  # room again (puts are refused while it is measured full)
            elif op == "unwritable":  # a periodic checkpoint that cannot write some queues' tails (a full disk)
                full = set(rng.sample(keys, 6))
                with monkeypatch.context() as m:
                    m.setattr(ConsumeQueue, "write_tail",
                              lambda self, write_tail=ConsumeQueue.write_tail, full=full: refused(b"")
                              if (self.topic, self.queue_id) in full and self.tail is not None else write_tail(self))
                    _periodic_checkpoint(store)
                _a_power_loss_now_loses_nothing(store, disk)
            elif op == "late":  # a periodic snapshot whose worker runs late
                snap = store._snapshot(thorough=False)
                for key in rng.sample(keys, 3):
                    await put(key, rng.randint(1, 3))
                if rng.random() < 0.5:
                    store.flush_and_checkpoint()  # a checkpoint written on the loop thread meanwhile
                else:
                    store._unflushed_again(snap)  # the checkpoint loop cancelled while the worker runs
                store._write_checkpoint(snap)
                _a_power_loss_now_loses_nothing(store, disk)
            elif op == "delete":
                topic = rng.choice(keys)[0]
                store.delete_topic(topic)
                for key in [k for k in expected if k[0] == topic]:
                    del expected[key]
                # A new name for its queues: ``_Disk`` would give a file made again at a deleted one's path the
                # deleted one's fsynced bytes, which no disk does.
                keys = [(f"{t}.{step}" if t == topic else t, q) for t, q in keys]
            elif op == "truncate" and store.max_phy_offset > store.checkpoint_offset:
                offsets = sorted(o for offs in expected.values() for o in offs if o >= store.checkpoint_offset)
                cut = offsets[len(offsets) // 2]
                with monkeypatch.context() as m:
                    # The truncation's checkpoint fails (its queues are put back): the one before the cut (nothing
                    # is cut), or the one after it.
                    failing = rng.choice([None, None, "before", "after"])
                    if failing == "before":
                        m.setattr(store.checkpoint, "write_document", refused)
                    elif failing == "after":
                        def cut_then_refuse(offset: int, truncate: Callable[[int], None] = store.commit_log.truncate,
                                            m: pytest.MonkeyPatch = m) -> None:
                            truncate(offset)
                            m.setattr(store.checkpoint, "write_document", refused)

                        m.setattr(store.commit_log, "truncate", cut_then_refuse)
                    # Cut back, before its checkpoint: what a checkpoint taken now would say is the walk's too (a
                    # queue's count no higher than what it holds: recovery would rebuild it from the whole log).
                    m.setattr(store.replica_log, "_write_checkpoint", checked(store.replica_log._write_checkpoint))
                    with pytest.raises(OSError) if failing else contextlib.nullcontext():
                        store.replica_log.truncate(cut)
                if failing != "before":
                    for offs in expected.values():
                        offs[:] = [o for o in offs if o < cut]
            _bookkeeping_as_a_walk_finds_it(store)
        _assert_queues_match_the_log(store, expected)
        _periodic_checkpoint(store)  # the log flushed (ASYNC_FLUSH: a power loss takes what was put after it)
        disk.off = True
        store.close_without_shutdown()

    store = DefaultMessageStore(config)
    run(lambda: _started(store, main))
    disk.power_loss()
    with reopened_store(config) as reopened:
        _bookkeeping_as_a_walk_finds_it(reopened)
        _assert_queues_match_the_log(reopened, {k: v for k, v in expected.items() if v})


async def _started(store: DefaultMessageStore, main: Callable[[], Awaitable[None]]) -> None:
    await store.start()
    await main()


def test_a_put_taken_back_then_put_again_lower_in_the_log_with_the_disk_still_full(
        root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A full disk: a group's third queue cannot make its file, so the group is taken back (the log to where it
    began, each queue to where it was) after the second queue had its entry put at the group's second record. The
    next put's entry in that queue is the log's first record after the cut, below the one taken back, at the same
    queue offset. The next checkpoint cannot write that queue's tail (the disk still full) and leaves it unflushed:
    its recovery point must be at or before that entry, or a power loss loses a put answered as stored. (The disk had
    room for a moment between: puts are refused while it is measured full.)"""
    config = make_config(root, flush_interval_commit_log_ms=60_000)
    disk = _powered(config, monkeypatch)
    expected: dict[tuple[str, int], list[int]] = {}

    def full(_: bytes) -> None:
        raise OSError(28, "No space left on device")

    async def put(topic: str) -> int:
        result = await store.put_message(msg(topic, b"body"))
        assert result.ok
        expected.setdefault((topic, 0), []).append(result.append_result.wrote_offset)
        return result.append_result.wrote_offset

    async def main() -> None:
        await put("W")
        await put("X")
        store.flush_and_checkpoint()
        create, write_tail = MappedFileQueue.create, ConsumeQueue.write_tail
        with monkeypatch.context() as m:
            m.setattr(MappedFileQueue, "create",
                      lambda self, start: full(b"") if "/Z/" in self.directory + "/" else create(self, start))
            refused = await asyncio.gather(*(store.put_message(msg(t, b"body")) for t in ("W", "X", "Z")))
            assert not any(r.ok for r in refused)
        cut = store.max_phy_offset
        await asyncio.sleep(0.15)  # room again at the next measure of the disk (a moment, another process's files)
        again = await put("X")  # the first record after the cut: below where X's taken-back entry was
        assert again == cut
        with monkeypatch.context() as m:  # the disk still full: X's tail cannot be written
            m.setattr(ConsumeQueue, "write_tail",
                      lambda self: full(b"") if self.topic == "X" and self.tail is not None else write_tail(self))
            _periodic_checkpoint(store)
        assert store.checkpoint_offset <= again
        disk.off = True
        store.close_without_shutdown()

    store = DefaultMessageStore(config)
    run(lambda: _started(store, main))
    disk.power_loss()
    with reopened_store(config) as reopened:
        _assert_queues_match_the_log(reopened, expected)


async def _hot_taken_then_a_topic_deleted(store: DefaultMessageStore,
                                          expected: dict[tuple[str, int], list[int]]) -> message_store._Snapshot:
    """A periodic checkpoint's snapshot takes a queue with a page written (its files to fsync), and before its
    worker thread has run, a topic deletion writes a checkpoint on the loop thread (as an admin request can)."""
    for i in range(10):
        assert (await store.put_message(msg("other", b"%d" % i))).ok
    store.flush_and_checkpoint()
    results = await store.put_messages([msg("hot", b"%04d" % i + b"." * 100) for i in range(250)])
    assert results.ok
    got = store.get_message("hot", 0, 0, 1000, 1 << 30).messages
    expected[("hot", 0)] = [decode_message(w)[0].commit_log_offset for w in got]
    earlier = store._snapshot(thorough=False)
    assert any(cq.topic == "hot" for cq, _ in earlier.cq_flushed)
    store.delete_topic("other")
    return earlier


def test_a_checkpoint_written_before_an_earlier_one_s_worker_ran_makes_that_one_s_files_durable(
        root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The deletion's checkpoint claims the queue the earlier snapshot took as flushed: a power loss before that
    snapshot's worker runs must find it whole, not rebuild it from the log (nor lose entries a partly written-back
    file would hide from the count)."""
    config = make_config(root, flush_interval_commit_log_ms=60_000, flush_consume_queue_least_pages=1)
    disk = _powered(config, monkeypatch)
    expected: dict[tuple[str, int], list[int]] = {}

    async def main() -> None:
        await _hot_taken_then_a_topic_deleted(store, expected)
        disk.off = True
        store.close_without_shutdown()

    store = DefaultMessageStore(config)
    run(lambda: _started(store, main))
    _whole_after_power_loss(config, disk, expected)


def test_an_earlier_checkpoint_s_worker_running_late_does_not_bring_a_deleted_topic_back(root: Path) -> None:
    """The earlier snapshot's worker runs after the deletion's checkpoint was written: its document (older, still
    counting the deleted topic's queue) must not replace the newer one, or the next open rebuilds the deleted
    topic's queue from the log."""
    config = make_config(root, flush_interval_commit_log_ms=60_000, flush_consume_queue_least_pages=1)
    expected: dict[tuple[str, int], list[int]] = {}

    async def main() -> None:
        earlier = await _hot_taken_then_a_topic_deleted(store, expected)
        store._write_checkpoint(earlier)  # its worker, late
        store.close_without_shutdown()

    store = DefaultMessageStore(config)
    run(lambda: _started(store, main))
    with reopened_store(config) as reopened:
        assert reopened.recovery_report.consume_queues_rebuilt == []
        assert reopened.get_max_offset_in_queue("other", 0) == 0
        _assert_queues_match_the_log(reopened, expected)


async def _doomed_and_kept_checkpointed(config: StoreConfig) -> DefaultMessageStore:
    """A started store holding ten messages of topic ``doomed`` and ten of ``kept``, all checkpointed."""
    store = DefaultMessageStore(config)
    await store.start()
    for i in range(10):
        assert (await store.put_message(msg("doomed", b"d%d" % i))).ok
        assert (await store.put_message(msg("kept", b"k%d" % i))).ok
    store.flush_and_checkpoint()
    return store


def test_a_deleted_topic_s_removal_is_durable_when_delete_topic_returns(
        root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``delete_topic`` writes a checkpoint that no longer lists the topic, but the removal of its files and
    directories is durable only once the directories that held them are fsynced: on a file system that keeps a
    directory change only then (POSIX; btrfs), a power loss after delete_topic returned brought the directory and
    its fsynced files back, and recovery loaded them as a queue: the deleted topic back with its old messages. The
    power-loss model here: a removal is durable once its parent directory was fsynced after it."""
    config = make_config(root)
    synced: list[str] = []
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        with_path = os.readlink(f"/proc/self/fd/{fd}")
        if os.path.isdir(with_path):
            synced.append(os.path.realpath(with_path))
        real_fsync(fd)

    base = os.path.join(config.store_path_root_dir, "consumequeue")
    kept = os.path.join(str(root), "doomed-copy")

    async def main() -> None:
        store = await _doomed_and_kept_checkpointed(config)
        shutil.copytree(os.path.join(base, "doomed"), kept)  # the directory as the disk holds it (fsynced)
        with monkeypatch.context() as m:
            m.setattr(os, "fsync", fsync)
            store.delete_topic("doomed")
        store.close_without_shutdown()  # the power goes out

    run(main)
    if os.path.realpath(base) not in synced:  # the rmdir of consumequeue/doomed was never made durable
        shutil.copytree(kept, os.path.join(base, "doomed"))
    store = DefaultMessageStore(config)
    try:
        assert "doomed" not in store.topics(), (sorted(set(synced)), store.recovery_report.events)
    finally:
        store.close_without_shutdown()


def test_a_deleted_topic_whose_directories_found_no_descriptor_stays_deleted_after_a_crash(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The directories' fsync cannot open one (EMFILE: no durability lost): delete_topic raised with the queues
    dropped in memory and the checkpoint that forgets them never written, and after a crash recovery rebuilt the
    topic from the log. The deletion's checkpoint is written; the removal is durable once the file system commits
    it."""
    config = make_config(tmp_path / "r")
    raised: list[BaseException] = []

    def no_descriptor(path: str) -> None:
        raise OSError(errno.EMFILE, "Too many open files", path)

    async def main() -> None:
        store = await _doomed_and_kept_checkpointed(config)
        with monkeypatch.context() as m:
            m.setattr(message_store, "fsync_dir", no_descriptor)
            try:
                store.delete_topic("doomed")
            except OSError as exc:
                raised.append(exc)
        assert "doomed" not in store.topics()  # gone, as far as this process can tell
        store.close_without_shutdown()  # a crash (SIGKILL) before any other checkpoint

    run(main)
    store = DefaultMessageStore(config)
    try:
        assert not raised and "doomed" not in store.topics(), (raised, store.recovery_report.consume_queues_rebuilt)
    finally:
        store.close_without_shutdown()


def test_a_failed_checkpoint_s_queue_cut_below_its_unflushed_entries_is_put_back_with_none(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``_unflushed_again`` reads a queue as it is when it puts a failed checkpoint's state back. A checkpoint takes
    queue T/0, unflushed from its entry 4 (the record at o4), and its write fails (its worker's fsync found no
    descriptor: no durability lost). Before the failure is put back, the queue is cut back to 3 entries with the
    log (as a slave's truncation cuts: ``ReplicaLog._drop_derived``; its own checkpoint puts back failed ones first,
    so this order is made here by hand), and records of other sizes (SYNC_FLUSH: acknowledged once flushed) are
    written from there, to a queue with enough to flush: o4 is inside one of them. T/0 has none of those unflushed
    entries any more, and the put-back must say so: put back as (4, o4), the queue's next put (entry 3, later in the
    log) kept o4 as its oldest unflushed record, and a periodic checkpoint that could not write T/0's tail (a full
    disk) took o4 as its recovery point; a crash's recovery found no record there and cut the log, every
    acknowledged record after it lost."""
    from txmq.store.config import FlushDiskType

    config = make_config(tmp_path / "r", flush_disk_type=FlushDiskType.SYNC_FLUSH)
    acked: list[int] = []

    async def put(topic: str, body: bytes) -> None:
        result = await store.put_message(msg(topic, body))
        assert result.ok
        acked.append(result.append_result.wrote_offset)

    async def main() -> None:
        await store.start()
        for i in range(4):
            await put("T", b"%03d" % i)
        store.flush_and_checkpoint()
        for i in range(4, 8):
            await put("T", b"%03d" % i)
        o3, o4 = acked[3], acked[4]
        cq = store.queues.find("T", 0)
        assert cq is not None and (cq.unflushed_from, cq.unflushed_phy) == (4, o4)
        snap = store._snapshot()  # T/0 taken: (4, o4)
        store.commit_log.truncate(o3)  # the slave's cut, made while the snapshot's worker runs
        store.replica_log._drop_derived(o3)
        del acked[3:]
        snap.failed = True  # then the worker fails
        store._dirty_again(snap)
        store._unflushed_again(snap)
        for i in range(20):
            await put("U", b"u%05d" % i + b"." * (i % 7))
        await put("T", b"again")  # T/0's entry 3, past o4 in the log, in its tail
        for i in range(20, 450):  # U/0 enough to flush (flushConsumeQueueLeastPages)
            await put("U", b"u%05d" % i)
        assert o4 not in acked  # inside a record now
        with monkeypatch.context() as m:  # the periodic checkpoint, T/0's tail not written (a full disk)
            real = ConsumeQueue.write_tail

            def write_tail(self: ConsumeQueue) -> None:
                if self.topic == "T" and self.tail is not None:
                    raise OSError(errno.ENOSPC, "No space left on device")
                real(self)

            m.setattr(ConsumeQueue, "write_tail", write_tail)
            store._write_checkpoint(store._snapshot(thorough=False))
        store.close_without_shutdown()  # a crash (SIGKILL)

    store = DefaultMessageStore(config)
    run(main)
    store = DefaultMessageStore(config)
    try:
        lost = [o for o in acked if o >= store.max_phy_offset]
        assert not store.recovery_report.lost_data and not lost, (len(lost), store.recovery_report.events)
    finally:
        store.close_without_shutdown()


def test_the_only_topic_deleted_without_its_directories_fsynced_serves_nothing_after_a_power_loss(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The store's only topic is deleted and its directories find no descriptor to fsync (EMFILE): the deletion's
    checkpoint is written, counting no queue, and a power loss brings the directories back with their files (the
    removals were never made durable). The queues the checkpoint does not count have none of their entries kept:
    taken for a checkpoint that counts no queue at all, recovery kept every entry and served the deleted
    topic's messages again."""
    config = make_config(tmp_path / "r")
    saved = tmp_path / "doomed"

    def no_descriptor(path: str) -> None:
        raise OSError(errno.EMFILE, "Too many open files", path)

    async def main() -> None:
        store = DefaultMessageStore(config)
        await store.start()
        for i in range(10):
            assert (await store.put_message(msg("doomed", b"d%d" % i))).ok
        store.flush_and_checkpoint()
        shutil.copytree(os.path.join(config.store_path_root_dir, "consumequeue", "doomed"), saved)
        with monkeypatch.context() as m:
            m.setattr(message_store, "fsync_dir", no_descriptor)
            store.delete_topic("doomed")
        store.close_without_shutdown()  # the power lost before the file system committed the removals

    run(main)
    shutil.copytree(saved, os.path.join(config.store_path_root_dir, "consumequeue", "doomed"))
    store = DefaultMessageStore(config)
    try:
        served = store.get_message("doomed", 0, 0, 100, 1 << 30).messages if "doomed" in store.topics() else []
        assert not served, ([decode_message(w)[0].body for w in served], store.recovery_report.events)
    finally:
        store.close_without_shutdown()
