"""A full disk on a real tmpfs: a put that fails stores nothing, whichever file could not grow (a new commit-log
segment, a new index file, a new consume-queue file), before and after a restart; the retry stores one copy.
And the store refuses puts once the disk is fuller than ``disk_space_warning_level_ratio``."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from tests.disk_helpers import fill_disk, leave_for, tmpfs
from tests.elapsed import advance
from tests.store.store_helpers import SEGMENT, make_config, msg, reopened_bodies, run
from txmq.message import MessageExt, decode_message
from txmq.store import DefaultMessageStore, PutMessageStatus, StoreConfig
from txmq.store.consume_queue import ConsumeQueue
from txmq.store.group_commit import DISK_CHECK_INTERVAL_S
from txmq.store.mapped_file import MappedFileQueue


async def _fill_segment(store: DefaultMessageStore) -> None:
    """Messages until the active segment has no room for one of 8 KB: the next such one opens a segment."""
    while SEGMENT - store.max_phy_offset % SEGMENT > 2048:
        assert (await store.put_message(msg("T", b"s" * 1000))).ok


async def _fill_index_file(store: DefaultMessageStore) -> None:
    """Keyed messages until the index file is full: the next key needs a new index file."""
    i = 0
    while not (store.index.files and store.index.files[-1].full):
        assert (await store.put_message(msg("T", b"i", KEYS=f"k{i}"))).ok
        i += 1


async def _one_message(store: DefaultMessageStore) -> None:
    assert (await store.put_message(msg("T", b"first"))).ok


CASES = {
    # The 8 KB record goes to a new segment, and cannot be written: no page left.
    "commit-log segment": ({}, _fill_segment, 0, msg("T", b"n" * 8192), "commit log"),
    # The record and its consume-queue entry fit in the 64 KB left; the new index file (400 KB) does not.
    "index file": ({"max_hash_slot_num": 100_000}, _fill_index_file, 64 * 1024, msg("T", b"n", KEYS="new"), "index"),
    # The record fits in the log's last page; queue 1's first file needs a page: none is left. (Entries written at
    # once: buffered, the entry would wait for the checkpoint, and the put would succeed.)
    "consume queue": ({"consume_queue_write_behind_bytes": 0}, _one_message, 0, msg("T", b"n", queue_id=1),
                      "consume queue"),
}


@pytest.mark.parametrize("case", CASES)
def test_a_put_failing_on_a_full_disk_stores_nothing_and_its_retry_stores_one_copy(tmp_path, case):
    overrides, setup, leave, failing, where = CASES[case]
    with tmpfs(tmp_path / "disk") as disk:
        # The ratio check is off (100 %): the disk really fills up under the put.
        config = make_config(os.path.join(disk, "store"), disk_space_warning_level_ratio=100, **overrides)

        async def fail() -> tuple[dict[int, list[bytes]], list[str]]:
            store = DefaultMessageStore(config)
            await store.start()
            await setup(store)
            before = {q: store.get_max_offset_in_queue("T", q) for q in (0, 1)}
            log_end, index_names = store.max_phy_offset, sorted(os.listdir(f"{disk}/store/index"))
            segments = sorted(os.listdir(f"{disk}/store/commitlog"))
            fill_disk(disk, leave)
            result = await store.put_message(failing)
            assert result.status is PutMessageStatus.SERVICE_NOT_AVAILABLE and not result.stored
            assert "disk is full" in result.remark and where in result.remark
            assert {q: store.get_max_offset_in_queue("T", q) for q in (0, 1)} == before
            assert store.max_phy_offset == log_end
            assert sorted(os.listdir(f"{disk}/store/index")) == index_names  # no file left per attempt
            assert sorted(os.listdir(f"{disk}/store/commitlog")) == segments
            store.close_without_shutdown()  # a crash right after the failed put
            return before, segments

        before, _ = run(fail)
        stored = reopened_bodies(config)  # no phantom after the restart
        assert {q: len(b) for q, b in stored.items()} == {q: n for q, n in before.items() if n}
        assert failing.body not in {b for bodies in stored.values() for b in bodies}

        os.unlink(os.path.join(disk, "filler"))

        async def retry() -> None:
            async with DefaultMessageStore(config) as store:
                again = MessageExt(failing.topic, failing.body, dict(failing.properties), queue_id=failing.queue_id)
                result = await store.put_message(again)
                assert result.ok and result.append_result.logics_offset == before[failing.queue_id]

        run(retry)
        after = reopened_bodies(config)
        assert after[failing.queue_id] == [*stored.get(failing.queue_id, []), failing.body]
        assert sum(len(b) for b in after.values()) == sum(before.values()) + 1



def test_puts_are_refused_above_the_warning_ratio_until_under_the_clean_forcibly_ratio(tmp_path):
    with tmpfs(tmp_path / "disk") as disk:
        config = make_config(os.path.join(disk, "store"))  # RocketMQ's defaults: 90 % and 85 %

        async def main() -> None:
            async with DefaultMessageStore(config) as store:
                assert (await store.put_message(msg("T", b"before"))).ok
                for used, accepted in ((95, False), (87, False), (50, True)):
                    fill_disk(disk, leave_for(disk, used))
                    await asyncio.sleep(DISK_CHECK_INTERVAL_S)  # puts measure the disk at most this often
                    result = await store.put_message(msg("T", f"at {used} %".encode()))
                    assert result.ok is accepted, used
                    if not accepted:
                        assert result.status is PutMessageStatus.SERVICE_NOT_AVAILABLE
                        assert "disk is full" in result.remark and "diskSpaceWarningLevelRatio 90" in result.remark

        run(main)
        assert reopened_bodies(config) == {0: [b"before", b"at 50 %"]}


def test_retention_runs_at_once_above_the_max_used_ratio(tmp_path):
    with tmpfs(tmp_path / "disk") as disk:
        config = make_config(os.path.join(disk, "store"), file_reserved_time_hours=1)

        async def main() -> None:
            async with DefaultMessageStore(config) as store:
                while len(store.commit_log.queue.files) < 3:
                    assert (await store.put_message(msg("T", b"o" * 1000))).ok
                store.flush_and_checkpoint()
                advance(store, 2 * 3600)  # by the store's elapsed-time account, all of it is older than 1 h
                await asyncio.sleep(DISK_CHECK_INTERVAL_S)
                assert (await store.put_message(msg("T", b"at 10 %"))).ok
                assert store.min_phy_offset == 0  # expired, but retention's tick (60 s) has not come
                fill_disk(disk, leave_for(disk, 80))
                await asyncio.sleep(DISK_CHECK_INTERVAL_S)
                assert (await store.put_message(msg("T", b"at 80 %"))).ok
                assert store.min_phy_offset == 2 * SEGMENT  # both full segments went, the active one stays

        run(main)


def test_a_buffered_entry_the_checkpoint_cannot_write_keeps_the_recovery_point_before_it(tmp_path):
    """Entries written behind: a put whose queue needs a new file on a full disk is stored (its entry buffered).
    The checkpoint that cannot write the entry leaves the queue unflushed, so the next one, with room again, keeps
    its recovery point before the record; after a crash the entry is rebuilt at its place."""
    with tmpfs(tmp_path / "disk") as disk:
        config = make_config(os.path.join(disk, "store"), disk_space_warning_level_ratio=100)

        async def main() -> int:
            store = DefaultMessageStore(config)
            await store.start()
            await _one_message(store)
            store.flush_and_checkpoint()
            fill_disk(disk, 0)
            result = await store.put_message(msg("T", b"n", queue_id=1))
            assert result.ok and store.get_max_offset_in_queue("T", 1) == 1
            with pytest.raises(OSError):
                store.flush_and_checkpoint()  # neither the queue's new file nor the checkpoint can be written
            cq = store.queues.find("T", 1)
            assert cq is not None and cq.tail is not None and cq.unflushed_from == 0 and cq in store.queues.pending
            os.unlink(os.path.join(disk, "filler"))
            store._write_checkpoint(store._snapshot(thorough=False))  # a periodic one leaves the queue
            assert store.checkpoint_offset <= result.append_result.wrote_offset
            store.close_without_shutdown()
            return result.append_result.wrote_offset

        offset = run(main)
        assert [decode_message(w)[0].commit_log_offset for w in _raw(config)[1]] == [offset]


def _raw(config: StoreConfig) -> dict[int, list[bytes]]:
    """Reopen the store and read every message of topic T in wire form, by queue."""

    async def main() -> dict[int, list[bytes]]:
        async with DefaultMessageStore(config) as store:
            return {q: store.get_message("T", q, 0, 100, 1 << 30).messages for q in store.queue_ids("T")}

    return run(main)


def test_a_put_taken_back_leaves_no_recovery_point_inside_a_record(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A group of three puts, to queues hot/0, light/0 and a new topic's queue whose first file cannot be made (a
    full disk), is refused and taken back: the log goes back to its end E and each queue back to its previous max
    offset. But ``put_run`` had marked light/0 unflushed from its record's offset (E + the size of hot's record),
    and the take-back (``truncate_logical``) left ``unflushed_phy`` there. The next puts (SYNC_FLUSH, answered once
    flushed) write other records from E, of other sizes: that offset is now inside one of them. A periodic
    checkpoint flushes hot/0 (due) and leaves light/0 (not due): its recovery point was light's stale offset,
    inside a record. A crash (a SIGKILL is enough, no power loss): recovery started the scan there, found no valid
    record, "the log ends there", and truncated the log: every record after it was gone, every one of them
    acknowledged as durable. (The journal model's seed 2009 found it.)"""
    from txmq.store.config import FlushDiskType

    config = make_config(root, flush_disk_type=FlushDiskType.SYNC_FLUSH)
    acked: list[int] = []

    async def main() -> None:
        store = DefaultMessageStore(config)
        await store.start()
        for topic in ("hot", "light"):
            assert (await store.put_message(msg(topic, b"first"))).ok
        store.flush_and_checkpoint()  # every queue flushed
        real_create = MappedFileQueue.create

        def create(self: MappedFileQueue, start: int) -> object:
            if self.directory.endswith("/fresh/0"):
                raise OSError(28, "No space left on device")
            return real_create(self, start)

        with monkeypatch.context() as m:
            m.setattr(MappedFileQueue, "create", create)
            group = await asyncio.gather(store.put_message(msg("hot", b"h")), store.put_message(msg("light", b"l")),
                                         store.put_message(msg("fresh", b"f")))
        assert not any(r.ok for r in group)
        store.group_commit.disk.full = False  # room again
        for i in range(300):
            result = await store.put_message(msg("hot", b"%04d" % i + b"." * 150))
            assert result.ok
            acked.append(result.append_result.wrote_offset)
        assert (await store.put_message(msg("light", b"l2"))).ok  # (in its tail, after the stale offset)
        stale = store.queues.find("light", 0).unflushed_phy  # type: ignore[union-attr]
        with monkeypatch.context() as m:  # the periodic checkpoint, light's tail not written (the disk still full)
            m.setattr(ConsumeQueue, "write_tail", _refusing_tail_of("light"))
            store._write_checkpoint(store._snapshot(thorough=False))
        assert store.checkpoint.load()[0].recovery_offset == stale  # type: ignore[union-attr]
        assert stale not in acked, "the recovery point is inside a record"
        store.close_without_shutdown()  # a crash (SIGKILL)

    run(main)
    store = DefaultMessageStore(config)
    try:
        report = store.recovery_report
        lost = [o for o in acked if o + 150 > store.max_phy_offset]
        assert not report.lost_data and not lost, (f"{len(lost)} of {len(acked)} acknowledged records lost",
                                                   report.events)
    finally:
        store.close_without_shutdown()


def _refusing_tail_of(topic: str):  # type: ignore[no-untyped-def]
    """``ConsumeQueue.write_tail`` refusing the tails of ``topic``'s queues (a full disk, or EMFILE reopening the
    file)."""
    real = ConsumeQueue.write_tail

    def write_tail(self: ConsumeQueue) -> None:
        if self.topic == topic and self.tail is not None:
            raise OSError(28, "No space left on device")
        real(self)

    return write_tail
