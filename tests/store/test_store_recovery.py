"""Corrupt the files on purpose, reopen, and check what the store reports, serves and refuses."""

from __future__ import annotations

import os
import random
import shutil
from pathlib import Path

import pytest

from tests.killed_child import lines_until_killed
from tests.store.crash_writer import body_for
from tests.store.store_helpers import (
    assert_killed_cleanly,
    flip_byte,
    make_config,
    msg,
    run,
    segment_path,
    spoil_record,
)
from txmq.errors import CorruptRecordError
from txmq.message import MessageSysFlag, decode_message
from txmq.store import DefaultMessageStore, StoreConfig
from txmq.store.index import HEADER_SIZE, key_hash
from txmq.store.mapped_file import offset_to_name

HERE = os.path.dirname(os.path.abspath(__file__))


async def _fill(store: DefaultMessageStore, n: int, start: int = 0, queues: int = 1) -> list[int]:
    offsets = []
    for i in range(start, start + n):
        result = await store.put_message(msg(body=b"%06d" % i + b"." * 150, queue_id=i % queues, KEYS=f"k{i}"))
        assert result.ok
        offsets.append(result.append_result.wrote_offset)
    return offsets


def _crash(store: DefaultMessageStore) -> None:
    """Leave the files as a killed process would: no final flush, no checkpoint, abort file kept."""
    store.close_without_shutdown()


async def _checkpoint_then_crash(
    config: StoreConfig, head: int, tail: int, queues: int = 1
) -> tuple[int, list[int], int]:
    """Write ``head`` records, checkpoint, write ``tail`` more, crash; return the checkpoint's recovery point,
    the tail's commit-log offsets and the end of the log."""
    store = DefaultMessageStore(config)
    await store.start()
    await _fill(store, head, queues=queues)
    checkpoint = store.flush_and_checkpoint()
    tail_offsets = await _fill(store, tail, start=head, queues=queues)
    end = store.max_phy_offset
    _crash(store)
    return checkpoint, tail_offsets, end


def _bodies(store: DefaultMessageStore, topic: str = "T", queue_id: int = 0) -> list[bytes]:
    got = store.get_message(topic, queue_id, store.get_min_offset_in_queue(topic, queue_id), 100_000, 1 << 30)
    return [decode_message(w)[0].body for w in got.messages]


def _expected(ids) -> list[bytes]:
    return [b"%06d" % i + b"." * 150 for i in ids]


def test_clean_restart_trusts_the_checkpoint(root):
    config = make_config(root)

    async def main():
        async with DefaultMessageStore(config) as store:
            await _fill(store, 500)
            end = store.max_phy_offset
        reopened = DefaultMessageStore(config)
        report = reopened.recovery_report
        assert report.clean_shutdown and report.checkpoint_offset == end == report.end_offset
        assert report.records_scanned == 0 and not report.lost_data and report.events == []
        assert _bodies(reopened) == _expected(range(500))
        await reopened.shutdown()

    run(main)


def test_unclean_recovery_scans_only_the_tail(root):
    config = make_config(root, consume_queue_write_behind_bytes=0)  # entries written at once: the crash keeps them

    async def main():
        checkpoint, _, _ = await _checkpoint_then_crash(config, 2000, 37, queues=2)

        reopened = DefaultMessageStore(config)
        report = reopened.recovery_report
        assert not report.clean_shutdown and report.checkpoint_offset == checkpoint == report.scan_start
        assert report.records_scanned == 37 and not report.lost_data
        assert report.consume_queue_entries_truncated == 37  # rebuilt by dispatching the tail again
        assert _bodies(reopened, queue_id=0) == _expected(range(0, 2037, 2))
        assert _bodies(reopened, queue_id=1) == _expected(range(1, 2037, 2))
        assert [m.body for m in reopened.query_message("T", "k2036")] == _expected([2036])
        await reopened.start()
        assert (await reopened.put_message(msg())).append_result.logics_offset == 1019
        _crash(reopened)

        # Without a checkpoint the whole log is scanned (the slow path), and nothing is lost either.
        os.unlink(os.path.join(config.store_path_root_dir, "checkpoint"))
        full = DefaultMessageStore(config)
        assert full.recovery_report.checkpoint_offset is None
        assert full.recovery_report.records_scanned == 2038
        assert _bodies(full, queue_id=1) == _expected(range(1, 2037, 2))
        await full.shutdown()

    run(main)


def test_flipped_byte_in_old_record_is_refused_on_read(root):
    config = make_config(root)

    async def main():
        async with DefaultMessageStore(config) as store:
            offsets = await _fill(store, 600)
        victim = offsets[250]
        flip_byte(segment_path(config, victim), victim % config.mapped_file_size_commit_log + 100)

        reopened = DefaultMessageStore(config)
        assert not reopened.recovery_report.lost_data  # before the checkpoint: recovery does not look there
        with pytest.raises(CorruptRecordError):
            reopened.read_record(victim)
        with pytest.raises(CorruptRecordError):
            reopened.look_message_by_offset(victim)
        assert reopened.read_record(offsets[249]) and reopened.read_record(offsets[251])
        assert _bodies(reopened) == _expected(i for i in range(600) if i != 250)
        skipped = reopened.get_message("T", 0, 250, max_msg_nums=1)  # the bad one is skipped, not returned
        assert skipped.queue_offsets == [251] and skipped.next_begin_offset == 252
        reopened.read_record(offsets[-1])
        assert reopened.runtime_info()["corrupt_reads"] >= 3
        assert reopened.query_message("T", "k250") == []
        await reopened.shutdown()

    run(main)


def _spoil_in_place(config: StoreConfig, offset: int, size: int, field: str) -> None:
    """The record at ``offset`` spoiled (``spoil_record``) in its segment, its CRC right: what a slave wrote before it
    decoded the records of its master's frames."""
    path, pos = segment_path(config, offset), offset % config.mapped_file_size_commit_log
    with open(path, "r+b") as fh:
        fh.seek(pos)
        rec = bytearray(fh.read(size))
        spoil_record(rec, field)
        fh.seek(pos)
        fh.write(rec)


@pytest.mark.parametrize("where", ["header", "body", "trailer", "topic", "properties", "layout"])
def test_an_invalid_record_in_the_tail_truncates_there(root, where):
    """A record in the tail that fails its checks ends the log, as does one whose CRC is right but whose topic or
    properties are not UTF-8 or do not fill it (it cannot be dispatched; recovery raised and the store did not
    open)."""
    config = make_config(root)

    async def main():
        _, offsets, _ = await _checkpoint_then_crash(config, 300, 100)
        victim = offsets[40]
        size = offsets[41] - victim
        if where in ("topic", "properties", "layout"):
            _spoil_in_place(config, victim, size, where)
        else:
            pos = {"header": 21, "body": 90, "trailer": size - 2}[where]
            flip_byte(segment_path(config, victim), victim % config.mapped_file_size_commit_log + pos)

        reopened = DefaultMessageStore(config)
        report = reopened.recovery_report
        assert report.corrupt_offsets == [victim] and report.end_offset == victim
        assert report.records_scanned == 40 and report.truncated_bytes > 0 and report.lost_data
        assert reopened.max_phy_offset == victim
        assert _bodies(reopened) == _expected(range(340))
        assert reopened.get_max_offset_in_queue("T", 0) == 340
        await reopened.start()
        result = await reopened.put_message(msg(body=b"after"))
        assert result.append_result.wrote_offset == victim and result.append_result.logics_offset == 340
        await reopened.shutdown()
        again = DefaultMessageStore(config)
        assert again.recovery_report.events == []
        assert _bodies(again)[-1] == b"after"
        await again.shutdown()

    run(main)


def test_torn_last_record(root):
    config = make_config(root)

    async def main():
        store = DefaultMessageStore(config)
        await store.start()
        offsets = await _fill(store, 120)
        last, end = offsets[-1], store.max_phy_offset
        _crash(store)
        path = segment_path(config, last)
        with open(path, "r+b") as f:  # only the first half of the last record reached the disk
            f.seek(last % config.mapped_file_size_commit_log + (end - last) // 2)
            f.write(b"\0" * ((end - last) - (end - last) // 2))

        reopened = DefaultMessageStore(config)
        report = reopened.recovery_report
        assert not report.clean_shutdown
        assert report.checkpoint_offset is None  # never checkpointed: the whole log is scanned
        assert report.corrupt_offsets == [last] and report.records_scanned == 119
        assert report.truncated_bytes == (end - last) // 2
        assert _bodies(reopened) == _expected(range(119))
        with pytest.raises(Exception, match="outside"):
            reopened.read_record(last)
        await reopened.shutdown()

    run(main)


def test_garbage_after_the_last_record(root):
    config = make_config(root)

    async def main():
        _, _, end = await _checkpoint_then_crash(config, 500, 3)
        garbage = random.Random(7).randbytes(777)
        with open(segment_path(config, end), "r+b") as f:
            f.seek(end % config.mapped_file_size_commit_log)
            f.write(garbage)

        reopened = DefaultMessageStore(config)
        report = reopened.recovery_report
        assert report.end_offset == end and report.corrupt_offsets == [end]
        assert report.records_scanned == 3 and report.truncated_bytes == len(garbage.rstrip(b"\0"))
        assert _bodies(reopened) == _expected(range(503))
        await reopened.start()
        await _fill(reopened, 5, start=503)
        _crash(reopened)
        again = DefaultMessageStore(config)
        assert not again.recovery_report.lost_data
        assert _bodies(again) == _expected(range(508))
        await again.shutdown()

    run(main)


def test_deleted_consume_queue_file_is_rebuilt(root):
    config = make_config(root)  # 64 entries per consume-queue file

    async def main():
        async with DefaultMessageStore(config) as store:
            await _fill(store, 400, queues=2)
        qdir = os.path.join(config.store_path_root_dir, "consumequeue", "T", "1")
        names = sorted(os.listdir(qdir))
        assert len(names) >= 3
        os.unlink(os.path.join(qdir, names[1]))  # a file in the middle

        reopened = DefaultMessageStore(config)
        report = reopened.recovery_report
        assert report.consume_queues_rebuilt == ["T/1"] and not report.lost_data
        assert _bodies(reopened, queue_id=1) == _expected(range(1, 400, 2))
        assert _bodies(reopened, queue_id=0) == _expected(range(0, 400, 2))
        await reopened.shutdown()

        # The whole queue directory gone: the checkpoint still knows the queue existed.
        for name in os.listdir(qdir):
            os.unlink(os.path.join(qdir, name))
        os.rmdir(qdir)
        again = DefaultMessageStore(config)
        assert again.recovery_report.consume_queues_rebuilt == ["T/1"]
        assert _bodies(again, queue_id=1) == _expected(range(1, 400, 2))
        await again.shutdown()

    run(main)


def test_consume_queue_entry_pointing_past_the_log_is_rebuilt(root):
    config = make_config(root)

    async def main():
        checkpoint, _, _ = await _checkpoint_then_crash(config, 100, 0)
        qdir = os.path.join(config.store_path_root_dir, "consumequeue", "T", "0")
        with open(os.path.join(qdir, str(64 * 20).zfill(20)), "r+b") as f:  # entry 99 now claims a huge size
            f.seek((99 - 64) * 20 + 8)
            f.write((10**8).to_bytes(4, "big"))

        reopened = DefaultMessageStore(config)
        report = reopened.recovery_report
        assert report.consume_queues_rebuilt == ["T/0"] and report.checkpoint_offset == checkpoint
        assert _bodies(reopened) == _expected(range(100))
        await reopened.shutdown()

        with open(os.path.join(qdir, "0" * 20), "ab") as f:  # a file of the wrong size
            f.write(b"\1" * 20)
        again = DefaultMessageStore(config)
        assert again.recovery_report.consume_queues_rebuilt == ["T/0"]
        assert _bodies(again) == _expected(range(100))
        await again.shutdown()

    run(main)


def test_deleted_index_file_is_rebuilt(root):
    config = make_config(root, max_index_num=100)

    async def main():
        async with DefaultMessageStore(config) as store:
            await _fill(store, 400)
        idir = os.path.join(config.store_path_root_dir, "index")
        names = sorted(os.listdir(idir))
        assert len(names) >= 4
        lost = names[1]
        os.unlink(os.path.join(idir, lost))
        with open(os.path.join(idir, names[2]), "r+b") as f:  # and a broken header in another one
            f.write(b"\xff" * 40)

        reopened = DefaultMessageStore(config)
        report = reopened.recovery_report
        assert sorted(report.index_files_rebuilt) == [int(lost), int(names[2])]
        assert not report.lost_data
        for i in range(400):
            assert [m.body for m in reopened.query_message("T", f"k{i}")] == _expected([i]), i
        await reopened.shutdown()

    run(main)


def test_a_rebuilt_index_leaves_rollback_records_out_as_dispatch_does(root):
    config = make_config(root)

    async def main():
        async with DefaultMessageStore(config) as store:
            assert (await store.put_message(msg(KEYS="kept"))).ok  # the index file begins here
            rollback = msg(KEYS="rolled-back")
            rollback.sys_flag = MessageSysFlag.TRANSACTION_ROLLBACK_TYPE
            assert (await store.put_message(rollback)).ok
            assert store.query_message("T", "rolled-back") == []
        idir = os.path.join(config.store_path_root_dir, "index")
        for name in os.listdir(idir):
            os.unlink(os.path.join(idir, name))

        reopened = DefaultMessageStore(config)
        assert reopened.recovery_report.index_files_rebuilt
        assert reopened.query_message("T", "rolled-back") == []
        assert len(reopened.query_message("T", "kept")) == 1
        await reopened.shutdown()

    run(main)


@pytest.mark.slow
def test_crash_with_sigkill_keeps_every_acknowledged_record(root):
    rng = random.Random(1234)
    acked: dict[int, tuple[int, int, str]] = {}
    checkpoints = 0
    for run_id in range(5):
        lines = lines_until_killed(os.path.join(HERE, "crash_writer.py"), [str(root), f"r{run_id}"],
                                   rng.uniform(0.15, 0.6), min_lines=30)
        for line in lines:
            off, qid, qoff, key = line.split()
            acked[int(off)] = (int(qid), int(qoff), key)
        assert lines, "the child acknowledged nothing"

        store = DefaultMessageStore(make_config(root))
        report = store.recovery_report
        assert_killed_cleanly(report, acked)
        if report.checkpoint_offset:  # checkpoints run every 100 ms in the child: only the tail is scanned
            checkpoints += 1
            assert report.records_scanned < len(acked)
        for off, (qid, qoff, key) in acked.items():
            m = store.look_message_by_offset(off)
            assert (m.body, m.queue_id, m.queue_offset, m.keys) == (body_for(key), qid, qoff, key)
            assert store.get_commit_log_offset_in_queue("crash", qid, qoff) == off
            # The index (memory-mapped) kept or rebuilt the key: found by query, pointing at this record.
            assert off in [m.commit_log_offset for m in store.query_message("crash", key)], key
        for qid in range(3):
            got = store.get_message("crash", qid, 0, 100_000, 1 << 30)
            assert got.message_count == store.get_max_offset_in_queue("crash", qid)
            assert [decode_message(w)[0].queue_offset for w in got.messages] == list(range(got.message_count))
        store.close_without_shutdown()
    assert len(acked) > 100, len(acked)
    assert checkpoints >= 3, checkpoints


def test_dispatchers_see_the_recovered_tail(root):
    config = make_config(root)

    async def main():
        _, tail, _ = await _checkpoint_then_crash(config, 50, 5)

        early, late = [], []
        reopened = DefaultMessageStore(config, dispatchers=[early.append])
        assert [r.commit_log_offset for r in early] == tail  # during recovery
        reopened.add_dispatcher(late.append)
        assert late == []
        await reopened.start()  # replays the recovered tail to dispatchers added since
        assert [r.commit_log_offset for r in late] == tail
        assert [r.keys for r in late] == [f"k{i}" for i in range(50, 55)]
        await reopened.put_message(msg())
        assert len(early) == len(late) == 6
        await reopened.shutdown()

    run(main)


def test_random_damage_never_returns_bad_data(root, tmp_path):
    """Flip random bytes inside random records, before and after the checkpoint; reopen each time.

    Expected: a damaged record before the checkpoint is refused alone; a damaged record after it ends the
    log there. Everything else comes back byte for byte, and nothing else does.
    """
    config = make_config(root)
    template = tmp_path / "template"
    records: list[tuple[int, int]] = []  # (commit-log offset, stored size); the queue offset is the index

    async def build() -> int:
        store = DefaultMessageStore(config)
        await store.start()
        checkpoint = 0
        for i in range(400):
            if i == 300:
                checkpoint = store.flush_and_checkpoint()
            result = await store.put_message(msg(body=b"%06d" % i + b"." * 150, KEYS=f"k{i}"))
            records.append((result.append_result.wrote_offset, result.append_result.wrote_bytes))
        _crash(store)
        return checkpoint

    checkpoint = run(build)
    os.rename(root, template)
    rng = random.Random(99)
    for _ in range(12):
        shutil.rmtree(root, ignore_errors=True)
        shutil.copytree(template, root)
        damaged = sorted(rng.sample(range(len(records)), rng.randint(1, 3)))
        for k in damaged:
            off, size = records[k]
            flip_byte(segment_path(config, off), off % config.mapped_file_size_commit_log + rng.randrange(size))
        first_tail = next((k for k in damaged if records[k][0] >= checkpoint), len(records))
        expected = [k for k in range(first_tail) if k not in damaged]

        async def check(expected: list[int] = expected, first_tail: int = first_tail) -> None:
            store = DefaultMessageStore(config)
            report = store.recovery_report
            if first_tail < len(records):
                assert report.corrupt_offsets == [records[first_tail][0]]
            else:
                assert not report.lost_data
            got = store.get_message("T", 0, 0, 1000, 1 << 30)
            assert got.queue_offsets == expected
            assert [decode_message(w)[0].body for w in got.messages] == _expected(expected)
            await store.shutdown()

        run(check)


@pytest.mark.parametrize("crash", [True, False])
def test_a_queue_whose_only_file_left_is_empty_opens_without_a_rebuild(tmp_path, crash: bool) -> None:
    """A put taken back at the start of a new consume-queue file leaves that file empty as the queue's last; once
    retention has deleted every file before it (their records left the log), the queue's newest entry is in no
    file. Recovery took that for a lost entry and rebuilt the queue from the whole log at every open."""
    config = make_config(tmp_path, mapped_file_size_consume_queue=20 * 16, file_reserved_time_hours=1,
                         consume_queue_write_behind_bytes=0)

    async def main() -> None:
        store = DefaultMessageStore(config)
        await store.start()
        for _ in range(33):
            assert (await store.put_message(msg("q", b"x" * 300))).ok
        cq = store.queues.find("q", 0)
        cq.truncate_logical(32)  # what the group commit's take-back of the put at 32 does: its file stays, empty
        for _ in range(400):
            assert (await store.put_message(msg("other", b"y" * 300))).ok
        store.flush_and_checkpoint()
        assert store.clean_expired_files(elapsed_ms=10**12) > 0
        assert [mf.file_from_offset for mf in cq.files.files] == [32 * 20]
        if crash:
            store.close_without_shutdown()
        else:
            await store.shutdown()

    run(main)
    store = DefaultMessageStore(config)
    try:
        assert store.recovery_report.consume_queues_rebuilt == [], store.recovery_report.events
        assert store.get_min_offset_in_queue("q", 0) == store.get_max_offset_in_queue("q", 0) == 32
    finally:
        store.close_without_shutdown()


def test_a_segment_whose_tail_after_the_recovery_point_is_lost_while_the_next_segment_kept_its_records(root):
    """A power loss in which the kernel had written back the next segment's pages but not the end of the one before
    it (its writeback keeps no order between files): from the recovery point to the end of segment N zeros, segment
    N+1 holding records. All of them are after the log's last flush. The scan read on from the zeros' offset in
    segment N+1's file, read nothing, and the store did not open (``struct.error``). Zeros end the log there: the
    later segments go, so no queue keeps entries past a gap of lost records (a consumer stuck at the gap, a first
    offset found wrong by the search that takes entries in order); new records follow the cut."""
    config = make_config(root)

    async def main():
        recovery, tail, _ = await _checkpoint_then_crash(config, head=200, tail=400)
        size = config.mapped_file_size_commit_log
        seg_end = recovery - recovery % size + size
        assert tail[-1] >= seg_end, "the tail reaches the next segment"
        with open(segment_path(config, recovery), "r+b") as f:  # the end of segment N lost
            f.seek(recovery % size)
            f.write(b"\0" * (seg_end - recovery))
        reopened = DefaultMessageStore(config)
        report = reopened.recovery_report
        assert report.checkpoint_offset == recovery and report.end_offset == recovery and report.lost_data
        assert report.segments_deleted >= 1 and report.truncated_bytes > 0
        assert reopened.max_phy_offset == recovery
        assert not os.path.exists(segment_path(config, seg_end))
        assert _bodies(reopened) == _expected(range(200)) and reopened.get_max_offset_in_queue("T", 0) == 200
        await reopened.start()
        again = await _fill(reopened, 3, start=200)
        assert again[0] == recovery and _bodies(reopened) == _expected(range(203))
        await reopened.shutdown()

    run(main)


def test_a_stray_file_named_with_non_ascii_digits_beside_segments_and_index_files_does_not_stop_the_open(root):
    """``str.isdigit`` is true of '²', which ``int`` refuses: a file of twenty of them in ``commitlog/`` stopped the
    store opening (``ValueError``), and one in ``index/`` was opened as an index file. They are passed over, left
    where they are."""
    config = make_config(root)

    async def main():
        async with DefaultMessageStore(config) as store:
            await _fill(store, 50)

    run(main)
    strays = [os.path.join(str(root), directory, "\u00b2" * 20) for directory in ("commitlog", "index")]
    for path in strays:
        with open(path, "wb") as f:
            f.write(b"not a segment")
    reopened = DefaultMessageStore(config)
    try:
        assert reopened.recovery_report.clean_shutdown and reopened.recovery_report.events == []
        assert _bodies(reopened) == _expected(range(50))
        assert all(os.path.exists(path) for path in strays)
    finally:
        reopened.close_without_shutdown()


_PAGE = 4096


def _lose_the_log_after(config: StoreConfig, r: int) -> None:
    """A power loss's image of a log never flushed past ``r``: zeros from there, later segments gone."""
    size = config.mapped_file_size_commit_log
    commitlog = os.path.join(config.store_path_root_dir, "commitlog")
    for name in sorted(os.listdir(commitlog)):
        start = int(name)
        if start > r:
            os.unlink(os.path.join(commitlog, name))
        elif start + size > r:
            with open(os.path.join(commitlog, name), "r+b") as fh:
                fh.seek(r - start)
                fh.write(bytes(size - (r - start)))


def _one_page_written_back(path: str, durable: bytes, page: int | None) -> None:
    """The file as ``durable`` (its fsynced bytes), but page ``page`` as it is now: the kernel wrote it back."""
    with open(path, "rb") as fh:
        current = fh.read()
    image = bytearray(durable)
    if page is not None:
        image[page * _PAGE : (page + 1) * _PAGE] = current[page * _PAGE : (page + 1) * _PAGE]
    with open(path, "r+b") as fh:
        fh.write(image)


@pytest.mark.parametrize("variant", ["control: no page written back", "log from 0", "log past 4 GiB", "a whole page"])
def test_entries_past_the_checkpoints_count_torn_by_a_power_loss_are_cut(root: Path, variant: str) -> None:
    """A queue's first ``durable`` entries are fsynced by a checkpoint; 300 more are written to its file
    (consumeQueueWriteBehindBytes 0), not fsynced, and their records are lost with the power (the log after the
    checkpoint was not flushed). Of the queue file's pages written since, the kernel had written back one and not the
    one before it, so the entry that straddles their boundary is half old (zeros) and half new:

    - log from 0: page 3 (bytes 12288..) written back, page 2 not; entry 614 (bytes 12280..12299) has its
      commit-log offset from page 2 (0) and its size and tag hash from page 3;
    - log past 4 GiB (a log that starts at 2**32, as one that has written 4 GiB): page 4 written back, page 3 not;
      entry 819 (bytes 16380..16399) has the high word of its commit-log offset from page 3 (0), the rest new.

    Recovery drops every entry past the checkpoint's count (all point at or past the recovery point): the queue
    holds ``durable`` entries. The binary search for the first entry pointing at or past the recovery point alone
    cut just after the torn entry, which points below it (to 0, or 4 GiB lower) and passed the last entry's check:
    the empty slots and the torn entry stayed, and in the first variant a pull at its offset returned the log's
    first message again. (A whole page of entries lost before written-back ones: the queue was rebuilt from the
    whole log.)"""
    page, durable, torn = {"control: no page written back": (None, 600, 614), "log from 0": (3, 600, 614),
                           "log past 4 GiB": (4, 700, 819), "a whole page": (5, 1000, 1024)}[variant]
    config = make_config(root, mapped_file_size_consume_queue=20 * 2048, consume_queue_write_behind_bytes=0,
                         flush_interval_commit_log_ms=60_000)
    base = 1 << 32 if variant == "log past 4 GiB" else 0
    state: dict[str, object] = {}

    async def main() -> None:
        store = DefaultMessageStore(config)
        if base:
            store.start_replica_at(base)  # an empty store whose log starts at 4 GiB
        await store.start()
        for i in range(durable):
            assert (await store.put_message(msg(body=b"%06d" % i))).ok
        state["R"] = store.flush_and_checkpoint()
        cq_path = os.path.join(config.store_path_root_dir, "consumequeue", "T", "0", offset_to_name(0))
        with open(cq_path, "rb") as fh:
            state["durable"] = fh.read()
        state["cq"] = cq_path
        for i in range(durable, durable + 300):
            assert (await store.put_message(msg(body=b"%06d" % i))).ok
        store.close_without_shutdown()

    run(main)
    r = int(state["R"])  # type: ignore[call-overload]
    assert r > base
    _lose_the_log_after(config, r)  # the power loss: nothing after the recovery point (never flushed)
    _one_page_written_back(str(state["cq"]), state["durable"], page)  # type: ignore[arg-type]

    store = DefaultMessageStore(config)
    try:
        assert store.max_phy_offset == r
        kept = store.get_max_offset_in_queue("T", 0)
        wrong = store.get_message("T", 0, torn, 1, 1 << 30) if kept > torn else None
        assert kept == durable, (kept, store.get_queue_entries("T", 0, torn - 1, 2),
                                 wrong and [decode_message(w)[0].body for w in wrong.messages],
                                 store.recovery_report.events)
        assert store.recovery_report.consume_queues_rebuilt == [], store.recovery_report.events
    finally:
        store.close_without_shutdown()


@pytest.mark.parametrize("case", ["control: no page written back", "record lost", "record kept"])
def test_an_index_slot_page_kept_without_its_entry_page_hides_no_checkpointed_key(root: Path, case: str) -> None:
    """200 messages with keys k0..k199 are put and a checkpoint makes the index durable (msync + fsync). One more
    message with key k5 follows (its entry in the entries' second page, its slot in the first page). The power goes
    out; the kernel had written back the slot's page (a dirty page of the map, as any other) but not the entry's.
    The message with k5 before the checkpoint is durable in the log and was indexed durably, so
    ``query_message('T', 'k5')`` must still find it. The slot pointed past the entries counted at open, so the
    lookup stopped at once (and recovery's re-put of the new record started a new chain): the durable record was
    never found again."""
    record_survives = case != "record lost"
    config = make_config(root, max_index_num=1000, flush_interval_commit_log_ms=60_000)
    offsets: list[int] = []
    state: dict[str, object] = {}

    async def main() -> None:
        store = DefaultMessageStore(config)
        await store.start()
        for i in range(200):
            result = await store.put_message(msg(body=b"%06d" % i, KEYS=f"k{i}"))
            assert result.ok
            offsets.append(result.append_result.wrote_offset)
        state["R"] = store.flush_and_checkpoint()
        f = store.index.files[-1]
        with open(f.path, "rb") as fh:
            state["durable"] = fh.read()  # what the checkpoint's msync + fsync left on disk
        state["path"] = f.path
        result = await store.put_message(msg(body=b"again", KEYS="k5"))
        assert result.ok
        slot_pos = HEADER_SIZE + (key_hash("T", "k5") % f.hash_slot_num) * 4
        entry_pos = f._entry_pos(f.index_count - 1)
        state["slot_page"] = slot_pos // _PAGE
        assert slot_pos // _PAGE != entry_pos // _PAGE, (slot_pos, entry_pos)
        if record_survives:
            store.commit_log.flush()
        store.close_without_shutdown()

    run(main)
    # The power-loss image: the index as fsynced, but the slot's page as the kernel wrote it back.
    page = None if case.startswith("control") else int(state["slot_page"])  # type: ignore[call-overload]
    _one_page_written_back(str(state["path"]), state["durable"], page)  # type: ignore[arg-type]
    if not record_survives:  # the log's unflushed record lost with the power
        r = int(state["R"])  # type: ignore[call-overload]
        seg = segment_path(config, r)
        with open(seg, "r+b") as fh:
            fh.seek(r % config.mapped_file_size_commit_log)
            fh.write(bytes(config.mapped_file_size_commit_log - r % config.mapped_file_size_commit_log))

    store = DefaultMessageStore(config)
    try:
        found = [m.commit_log_offset for m in store.query_message("T", "k5", 10)]
        assert offsets[5] in found, (found, store.recovery_report.events)
    finally:
        store.close_without_shutdown()


def _pull_all(store: DefaultMessageStore, topic: str, qid: int) -> tuple[list[int], int | None]:
    """A consumer pulling from the queue's min offset, following next_begin_offset as a client does; returns the
    commit-log offsets it got and, if it stopped short of the max offset without moving (stuck), where."""
    got: list[int] = []
    pos = store.get_min_offset_in_queue(topic, qid)
    top = store.get_max_offset_in_queue(topic, qid)
    while pos < top:
        result = store.get_message(topic, qid, pos, 32, 1 << 30)
        got += [decode_message(w)[0].commit_log_offset for w in result.messages]
        if result.next_begin_offset <= pos:
            return got, pos
        pos = result.next_begin_offset
    return got, None


# --- 1. the index: a slot page written back without the entry page it points into ---------------------------------


async def _log_of_three_segments_then_crash(config: StoreConfig, offsets: list[int]) -> int:
    """1000 records in T/0 over three segments, a checkpoint, 20 more (the tail), a crash; the recovery point."""
    store = DefaultMessageStore(config)
    await store.start()
    for i in range(1020):
        if i == 1000:
            checkpoint = store.flush_and_checkpoint()
        result = await store.put_message(msg(body=b"%06d" % i + b"." * 100))
        assert result.ok
        offsets.append(result.append_result.wrote_offset)
    assert store.max_phy_offset > 2 * config.mapped_file_size_commit_log
    store.close_without_shutdown()
    return checkpoint


def _damage_and_lose_the_queue(config: StoreConfig, damage: bytes) -> tuple[int, int]:
    """One page of the first segment, well before the recovery point, damaged (read back as zeros: a sector the
    disk lost, or garbage); consume queue T/0 lost (its directory deleted). Returns the damaged range."""
    seg = os.path.join(config.store_path_root_dir, "commitlog", offset_to_name(0))
    start = 2 * _PAGE
    with open(seg, "r+b") as fh:
        fh.seek(start)
        fh.write(damage * _PAGE)
    shutil.rmtree(os.path.join(config.store_path_root_dir, "consumequeue", "T", "0"))
    return start, start + _PAGE


def test_a_rebuild_over_a_zeroed_page_before_the_recovery_point_keeps_the_later_segments(root: Path) -> None:
    """A lost consume queue is rebuilt by the scan of the log up to the recovery point, which skips over corrupt
    records (it only builds derived data). A page of zeros in the first segment, far before the recovery point,
    ended that scan (zeros end the log in recovery's own scan): the records of every later segment, intact and
    fsynced, were left out of the rebuilt queue. Zeros before the recovery point are skipped as garbage is, with
    the rest of their segment."""
    config = make_config(root)
    offsets: list[int] = []
    run(lambda: _log_of_three_segments_then_crash(config, offsets))
    _damage_and_lose_the_queue(config, b"\0")
    store = DefaultMessageStore(config)
    try:
        assert store.recovery_report.consume_queues_rebuilt == ["T/0"]
        # (entry by entry, not through a consumer: the next test shows the min offset a consumer is sent to)
        later = [q for q, o in enumerate(offsets) if o >= config.mapped_file_size_commit_log]
        missing = [q for q in later if store.get_commit_log_offset_in_queue("T", 0, q) != offsets[q]]
        assert not missing, (f"{len(missing)} of the {len(later)} records of later segments not in the rebuilt "
                             f"queue (queue offsets {missing[0]}..{missing[-1]})", store.recovery_report.events)
    finally:
        store.close_without_shutdown()


@pytest.mark.parametrize("damage", [b"", b"\0", b"\xff"], ids=["control: no damage", "zeros", "garbage"])
def test_a_rebuild_over_a_damaged_page_keeps_the_records_before_it_and_is_not_done_again(
        root: Path, damage: bytes) -> None:
    """As above (zeros), or a page of garbage. The records before the damaged page are intact and the rebuild puts
    them back (entries 0..39); the rebuilt queue has a hole after them (the skipped records), and the entries after
    it are put at their QUEUEOFFSET. The search for the queue's first entry still in the log, a binary search over
    entries that are not monotone any more, landed past the hole, so a consumer starting at 0 was moved past
    entries 0..39; and only the files the later entries fall in were made, so the next open found "a segment is
    missing" and rebuilt the queue again, at every open. The first entry is the first put back, and the files
    between are made."""
    config = make_config(root)
    offsets: list[int] = []
    run(lambda: _log_of_three_segments_then_crash(config, offsets))
    begin, _ = _damage_and_lose_the_queue(config, damage)
    before = [o for o in offsets if o + 300 < begin]  # records wholly before the damaged page (each < 300 bytes)
    store = DefaultMessageStore(config)
    try:
        assert store.recovery_report.consume_queues_rebuilt == ["T/0"]
        got, _ = _pull_all(store, "T", 0)
        missing = [o for o in before if o not in got]
        problems = [f"{len(missing)} of the {len(before)} records before the damage not served; queue min offset "
                    f"{store.get_min_offset_in_queue('T', 0)}"] if missing else []
        store.flush_and_checkpoint()  # the rebuilt queue durable and counted as it now is
    finally:
        store.close_without_shutdown()
    store = DefaultMessageStore(config)
    try:
        if store.recovery_report.consume_queues_rebuilt:
            problems.append(f"rebuilt again at the next open: {store.recovery_report.events}")
    finally:
        store.close_without_shutdown()
    assert not problems, problems


def test_a_rebuild_skips_a_record_that_does_not_decode_and_puts_back_the_others(root: Path) -> None:
    """A record before the recovery point whose CRC is right but whose topic is not UTF-8 (a slave wrote it before
    it decoded its master's frames), and its consume queue lost: the rebuild's scan raised and the store did not
    open. The rebuild skips it as it skips a record that fails its checks; every other record is put back."""
    config = make_config(root)
    offsets: list[int] = []
    run(lambda: _log_of_three_segments_then_crash(config, offsets))
    _spoil_in_place(config, offsets[500], offsets[501] - offsets[500], "topic")
    shutil.rmtree(os.path.join(config.store_path_root_dir, "consumequeue", "T", "0"))
    store = DefaultMessageStore(config)
    try:
        report = store.recovery_report
        assert report.consume_queues_rebuilt == ["T/0"] and report.end_offset == store.max_phy_offset
        assert any(f"rebuild skipped an invalid record at {offsets[500]}" in e for e in report.events), report.events
        put_back = [q for q, o in enumerate(offsets) if store.get_commit_log_offset_in_queue("T", 0, q) == o]
        assert put_back == [q for q in range(len(offsets)) if q != 500]
    finally:
        store.close_without_shutdown()


@pytest.mark.parametrize("page, only_topic_deleted", [(3, False), (None, False), (3, True)])
def test_a_queue_made_after_the_checkpoint_torn_by_a_power_loss_is_cut(tmp_path: Path, page: int | None,
                                                                        only_topic_deleted: bool) -> None:
    """As above, for a queue made after the checkpoint (no count in it): all its entries follow the recovery point,
    and its records were lost with the power; a page of its file written back was kept by the search's cut, and a
    pull served another queue's first message at its place. No entry of it is kept. ``only_topic_deleted``: after
    a checkpoint that counts no queue (the deletion's of the store's only topic), which says it as well (taken for
    one that counts none, the search's cut kept the page)."""
    config = make_config(tmp_path / "r", mapped_file_size_consume_queue=20 * 2048, consume_queue_write_behind_bytes=0,
                         flush_interval_commit_log_ms=60_000)
    state: dict[str, object] = {}

    async def main() -> None:
        store = DefaultMessageStore(config)
        await store.start()
        for i in range(600):
            assert (await store.put_message(msg("old" if only_topic_deleted else "T", body=b"%06d" % i))).ok
        if only_topic_deleted:
            store.flush_and_checkpoint()
            store.delete_topic("old")  # its checkpoint counts no queue
        state["R"] = store.flush_and_checkpoint()
        for i in range(700):  # a new queue: T/1, not in the checkpoint
            assert (await store.put_message(msg(body=b"new%06d" % i, queue_id=1))).ok
        state["cq"] = os.path.join(config.store_path_root_dir, "consumequeue", "T", "1", offset_to_name(0))
        store.close_without_shutdown()

    run(main)
    r = int(state["R"])  # type: ignore[call-overload]
    _lose_the_log_after(config, r)
    cq_path = str(state["cq"])
    _one_page_written_back(cq_path, bytes(os.path.getsize(cq_path)), page)  # a new file: its pages zeros but one

    store = DefaultMessageStore(config)
    try:
        assert store.max_phy_offset == r
        kept = store.get_max_offset_in_queue("T", 1)
        got = store.get_message("T", 1, 0, 1, 1 << 30) if kept > 0 else None
        bodies = got and [decode_message(w)[0].body for w in got.messages]
        last = store.get_message("T", 1, kept - 1, 1, 1 << 30) if kept > 0 else None
        lbodies = last and [decode_message(w)[0].body for w in last.messages]
        assert kept == 0, (kept, store.get_min_offset_in_queue("T", 1), bodies, lbodies,
                           store.recovery_report.events)
    finally:
        store.close_without_shutdown()
