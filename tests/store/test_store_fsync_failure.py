"""A failed fsync (EIO, a writeback error) loses the store's durability until a restart: Linux reports such an error
once and may mark the failed pages clean, so a later fsync of the same file succeeds although those bytes never
reached the disk. The store never trusts that retry: the commit log's flushed offset stays before the failed range,
the checkpoint on disk keeps its recovery point, puts are refused, reads go on; a reopen recovers from the last
good checkpoint and takes puts again. The failure is injected where every store fsync goes
(``mapped_file.fsync_fd``), once, on a real store in a temporary directory."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import mmap
import os
import resource
import time
from collections.abc import Iterator

import pytest

import txmq.store.mapped_file as mapped_file
from tests.disk_helpers import fill_disk, tmpfs
from tests.store.store_helpers import SEGMENT, make_config, msg, reopened_bodies, reopened_store, run
from txmq.message import decode_message
from txmq.store import DefaultMessageStore, PutMessageStatus, StoreConfig
from txmq.store.config import FlushDiskType


def fail_once(monkeypatch: pytest.MonkeyPatch, directory: str) -> list[str]:
    """The next fsync of a file under a ``directory`` directory (``commitlog``, ``consumequeue``) raises EIO; every
    other fsync, and that one's later ones, reach the disk. Returns the paths whose fsync failed."""
    real = mapped_file.fsync_fd
    failed: list[str] = []

    def fsync_fd(fd: int) -> None:
        path = os.readlink(f"/proc/self/fd/{fd}")
        if not failed and f"{os.sep}{directory}{os.sep}" in path:
            failed.append(path)
            raise OSError(errno.EIO, os.strerror(errno.EIO))
        real(fd)

    monkeypatch.setattr(mapped_file, "fsync_fd", fsync_fd)
    return failed


def recovery_point(store: DefaultMessageStore) -> int:
    """The recovery point of the checkpoint file on disk."""
    cp, why = store.checkpoint.load()
    assert cp is not None, why
    return cp.recovery_offset


def bodies(store: DefaultMessageStore, topic: str = "T") -> list[bytes]:
    got = store.get_message(topic, 0, 0, 1000, 1 << 30)
    return [decode_message(w)[0].body for w in got.messages]


def assert_durability_lost(store: DefaultMessageStore, point: int) -> None:
    """Nothing moves forward, whatever a retried fsync answers: neither the flushed offset nor the checkpoint."""
    flushed = store.flushed_offset
    with pytest.raises(OSError, match="failed an fsync"):
        store.commit_log.flush()  # the flush thread's next round: it would succeed now
    with pytest.raises(OSError, match="failed an fsync"):
        store.flush_and_checkpoint()
    assert store.flushed_offset == flushed
    assert recovery_point(store) == point
    assert store.runtime_info()["durability_lost"] == 1


async def refused(store: DefaultMessageStore) -> str:
    result = await store.put_message(msg("T", b"refused"))
    assert result.status is PutMessageStatus.SERVICE_NOT_AVAILABLE and not result.ok, result
    return result.remark


def test_a_failed_commit_log_fsync_answers_its_sync_flush_put_not_durable_and_freezes_the_store(
        root, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    config = make_config(root, flush_disk_type=FlushDiskType.SYNC_FLUSH)

    async def main() -> None:
        async with DefaultMessageStore(config) as store:
            assert (await store.put_message(msg("T", b"before"))).ok
            point = store.flush_and_checkpoint()
            flushed = store.flushed_offset
            failed = fail_once(monkeypatch, "commitlog")
            began = time.monotonic()
            during = await store.put_message(msg("T", b"during"))
            assert during.status is PutMessageStatus.FLUSH_DISK_TIMEOUT, during  # stored, not durable
            assert "failed an fsync" in during.remark, during.remark
            assert time.monotonic() - began < config.sync_flush_timeout_ms / 1000  # answered at once, not timed out
            assert failed and store.flushed_offset == flushed < store.max_phy_offset
            assert_durability_lost(store, point)
            remark = await refused(store)
            assert "failed an fsync" in remark and "restarted" in remark and failed[0] in remark, remark
            assert bodies(store) == [b"before", b"during"]  # reads go on
        lost = [r.getMessage() for r in caplog.records if "durability lost" in r.getMessage()]
        assert len(lost) == 1 and failed[0] in lost[0] and "EIO" in lost[0], lost

    run(main)
    monkeypatch.undo()
    assert os.path.exists(root / "abort")  # the last checkpoint could not be written: the reopen recovers
    assert reopened_bodies(config)[0][:1] == [b"before"]
    run(lambda: _puts_again(config))


@pytest.mark.parametrize("replicated", [PutMessageStatus.NOT_ACKNOWLEDGED, PutMessageStatus.PUT_OK],
                         ids=["not-acknowledged", "acknowledged"])
def test_a_put_whose_fsync_failed_waits_for_its_replication_whose_failure_answers_it(
        root, monkeypatch: pytest.MonkeyPatch, replicated: PutMessageStatus) -> None:
    """A put's flush and its replication combine as in RocketMQ: a put whose fsync failed is answered once its
    replication is over too, and a failed replication's status wins. A controller-mode master whose fsync failed
    steps down, and its puts waiting for the SyncStateSet are NOT_ACKNOWLEDGED, which clients send again, never
    FLUSH_DISK_TIMEOUT ("stored"), which they do not, for a record the next master may lack."""
    config = make_config(root, flush_disk_type=FlushDiskType.SYNC_FLUSH)

    async def main() -> None:
        async with DefaultMessageStore(config) as store:
            waiting: list[asyncio.Future[PutMessageStatus]] = []

            def replicate(end: int) -> asyncio.Future[PutMessageStatus]:
                waiting.append(asyncio.get_running_loop().create_future())
                return waiting[-1]

            store.replicate = replicate
            fail_once(monkeypatch, "commitlog")
            put = asyncio.ensure_future(store.put_message(msg("T", b"during")))
            while not store.durability.lost:
                await asyncio.sleep(0.01)
            await asyncio.sleep(0.1)
            assert not put.done(), put.result()  # its fsync failed: its replication is still awaited
            waiting[0].set_result(replicated)
            result = await put
            expected = PutMessageStatus.FLUSH_DISK_TIMEOUT if replicated is PutMessageStatus.PUT_OK else replicated
            assert result.status is expected, result
            if expected is PutMessageStatus.FLUSH_DISK_TIMEOUT:
                assert "failed an fsync" in result.remark, result.remark

    run(main)


async def _puts_again(config: StoreConfig) -> None:
    """Reopened (recovery decides): durability is whole again and puts are taken."""
    async with DefaultMessageStore(config) as store:
        assert store.runtime_info()["durability_lost"] == 0
        assert (await store.put_message(msg("T", b"after the restart"))).ok
        assert bodies(store)[-1] == b"after the restart"


def test_a_failed_consume_queue_fsync_keeps_the_checkpoint_from_claiming_its_entries(
        root, monkeypatch: pytest.MonkeyPatch) -> None:
    """The checkpoint's fsync of a consume queue fails: the queue is put back as unflushed, and the next checkpoint
    would fsync it again and succeed, moving the recovery point past entries the file may never have got (after a
    crash, recovery would not rebuild them: messages no consumer sees). The recovery point stays."""
    config = make_config(root)

    async def main() -> None:
        async with DefaultMessageStore(config) as store:
            assert (await store.put_message(msg("T", b"before"))).ok
            point = store.flush_and_checkpoint()
            for i in range(3):
                assert (await store.put_message(msg("T", b"unflushed %d" % i))).ok
            failed = fail_once(monkeypatch, "consumequeue")
            with pytest.raises(OSError):
                store.flush_and_checkpoint()  # its queues are put back as unflushed
            assert failed and recovery_point(store) == point
            with contextlib.suppress(OSError):
                store.flush_and_checkpoint()  # the retry, whose fsync would succeed
            assert recovery_point(store) == point
            assert_durability_lost(store, point)
            remark = await refused(store)
            assert "failed an fsync" in remark and failed[0] in remark, remark
            assert bodies(store) == [b"before", b"unflushed 0", b"unflushed 1", b"unflushed 2"]

    run(main)
    monkeypatch.undo()
    assert reopened_bodies(config)[0] == [b"before", b"unflushed 0", b"unflushed 1", b"unflushed 2"]
    run(lambda: _puts_again(config))


def test_recovery_reads_the_log_s_tail_as_the_disk_holds_it(root, monkeypatch: pytest.MonkeyPatch) -> None:
    """After a failed fsync, pages whose writeback failed may stay in the page cache, clean, though the disk never
    got them: a restart without a reboot would read them as records and append after them, and a power loss would
    then take them and every record after them. Recovery drops the cached pages of the tail it validates
    (POSIX_FADV_DONTNEED drops clean pages only; dirty ones are written back), so it reads what the disk holds.
    (The kernel's side cannot be made to fail here: the test sees the advice given for the whole tail, from the
    page holding the recovery point on, every segment of it.)"""
    config = make_config(root)

    async def main() -> int:
        store = DefaultMessageStore(config)
        await store.start()
        assert (await store.put_message(msg("T", b"before"))).ok
        point = store.flush_and_checkpoint()
        while store.max_phy_offset < point + SEGMENT:  # a tail over two segments
            assert (await store.put_message(msg("T", b"t" * 1000))).ok
        store.close_without_shutdown()
        return point

    point = run(main)
    real = os.posix_fadvise
    advised: list[tuple[str, int, int, int]] = []

    def posix_fadvise(fd: int, offset: int, length: int, advice: int) -> None:
        advised.append((os.readlink(f"/proc/self/fd/{fd}"), offset, length, advice))
        real(fd, offset, length, advice)

    monkeypatch.setattr(os, "posix_fadvise", posix_fadvise)
    with reopened_store(config) as store:
        segments = [mf for mf in store.commit_log.queue.files if mf.end_offset > point]
        assert len(segments) == 2
        first = point - segments[0].file_from_offset
        expected = [(segments[0].path, first - first % mmap.PAGESIZE, 0, os.POSIX_FADV_DONTNEED),
                    (segments[1].path, 0, 0, os.POSIX_FADV_DONTNEED)]
        assert [a for a in advised if f"{os.sep}commitlog{os.sep}" in a[0]] == expected
        assert bodies(store)[0] == b"before"


def test_a_put_asked_for_before_durability_was_lost_and_written_after_is_refused_whole(root) -> None:
    """The flush thread may lose durability between a put and the loop turn that writes its group: the log refuses
    the append, and the put is answered as every later one, with nothing stored."""

    async def main() -> None:
        async with DefaultMessageStore(make_config(root)) as store:
            assert (await store.put_message(msg("T", b"before"))).ok
            end = store.max_phy_offset
            asked = store.put_message(msg("T", b"asked"))  # its group is written at the loop's next turn
            store.durability.lose("a segment", OSError(errno.EIO, os.strerror(errno.EIO)))
            result = await asked
            assert result.status is PutMessageStatus.SERVICE_NOT_AVAILABLE, result
            assert "failed an fsync" in result.remark and "nothing was stored" in result.remark, result.remark
            assert store.max_phy_offset == end and bodies(store) == [b"before"]

    run(main)


@contextlib.contextmanager
def no_descriptor_left() -> Iterator[None]:
    """The process at its open-file limit for the duration (lowered to what is open now, plus a few taken): the next
    ``open`` fails with EMFILE, as it does on a broker whose connections took every descriptor."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    held: list[int] = []
    resource.setrlimit(resource.RLIMIT_NOFILE, (len(os.listdir("/proc/self/fd")) + 8, hard))
    try:
        with contextlib.suppress(OSError):
            while True:
                held.append(os.open(os.devnull, os.O_RDONLY))
        yield
    finally:
        for fd in held:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_an_fsync_that_could_not_open_its_file_keeps_durability_and_is_made_again(root) -> None:
    """Out of descriptors (EMFILE), the checkpoint cannot open a consume-queue file, nor the flush the log's directory,
    to fsync them: no fsync ran, so no writeback failed and nothing can have been marked clean unwritten. Both fail as
    any error does, durability stays, and with descriptors again the next ones make the same files durable (the new
    queue's directory and the new segment's entry among them)."""
    config = make_config(root, flush_interval_commit_log_ms=60_000)  # the flush thread stays out of the way

    async def main() -> None:
        async with DefaultMessageStore(config) as store:
            assert (await store.put_message(msg("T", b"before"))).ok
            point = store.flush_and_checkpoint()
            assert (await store.put_message(msg("T", b"a new queue", queue_id=1))).ok
            with no_descriptor_left(), pytest.raises(OSError) as checkpointed:
                store.flush_and_checkpoint()
            while store.max_phy_offset < SEGMENT:  # a second segment: the log's directory has an entry to fsync
                assert (await store.put_message(msg("T", b"s" * 1000))).ok
            with no_descriptor_left(), pytest.raises(OSError) as flushed:
                store.commit_log.flush()
            assert checkpointed.value.errno == flushed.value.errno == errno.EMFILE
            assert store.runtime_info()["durability_lost"] == 0 and recovery_point(store) == point
            synced: list[str] = []
            real = mapped_file.fsync_dir
            mapped_file.fsync_dir = lambda path: (synced.append(path), real(path))[1]
            try:
                point = store.flush_and_checkpoint()
            finally:
                mapped_file.fsync_dir = real
            assert store.commit_log.queue.directory in synced  # the new segment's entry, whose fsync did not run
            assert os.path.join(root, "consumequeue", "T", "1") in synced
            assert store.flushed_offset == store.max_phy_offset and recovery_point(store) == point
            assert (await store.put_message(msg("T", b"after"))).ok

    run(main)


def test_a_put_whose_take_back_fails_its_fsync_is_refused_with_nothing_stored(tmp_path, monkeypatch) -> None:
    """A put whose consume-queue file cannot be made (a full disk) is taken back: the log is cut where the put began,
    and the cut fsynced. When that fsync fails, durability is lost, and the put is answered as every put is from then
    on (SERVICE_NOT_AVAILABLE saying why, nothing stored), not with the fsync's error raised out of the store."""
    with tmpfs(tmp_path / "disk") as disk:
        # The record fits in the log's last page; queue 1's first file needs a page: none is left.
        config = make_config(os.path.join(disk, "store"), disk_space_warning_level_ratio=100,
                             consume_queue_write_behind_bytes=0, flush_interval_commit_log_ms=60_000)

        async def main() -> None:
            async with DefaultMessageStore(config) as store:
                assert (await store.put_message(msg("T", b"before"))).ok
                end = store.max_phy_offset
                fill_disk(disk)
                failed = fail_once(monkeypatch, "commitlog")
                result = await store.put_message(msg("T", b"taken back", queue_id=1))
                assert failed and store.runtime_info()["durability_lost"] == 1
                assert result.status is PutMessageStatus.SERVICE_NOT_AVAILABLE and not result.stored, result
                assert "failed an fsync" in result.remark and "nothing was stored" in result.remark, result.remark
                assert store.max_phy_offset == end and store.get_max_offset_in_queue("T", 1) == 0
                assert bodies(store) == [b"before"]

        run(main)
