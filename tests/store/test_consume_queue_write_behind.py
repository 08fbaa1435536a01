"""Consume-queue entries written behind (a queue's newest entries in a bytearray tail): the store-wide bound, reads at
every boundary between the files and the tails, a deleted topic, retention and a full disk at each point where a
tail is written."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import random
import shutil
import threading
from collections.abc import AsyncIterator, Awaitable
from pathlib import Path

import pytest

import txmq.store.consume_queue_store as consume_queue_store
import txmq.store.message_store as message_store
from tests.disk_helpers import fill_disk, tmpfs
from tests.store.store_helpers import make_config, msg, reopened_bodies, run
from tests.store.test_consume_queue_flush import (
    QUEUES,
    _assert_queues_match_the_log,
    _powered,
    _spread,
)
from txmq.message import decode_message
from txmq.store import DefaultMessageStore, GetMessageStatus, PutMessageStatus, StoreConfig
from txmq.store.consume_queue import CQ_ENTRY, CQ_ENTRY_SIZE, ConsumeQueue
from txmq.store.consume_queue_store import ConsumeQueueStore
from txmq.store.mapped_file import offset_to_name


class _CountingTails(dict):  # type: ignore[type-arg]
    """The store's tails, counting the walks over them: each walk starts at the front of the dict, over every slot
    that tails written since its last resize left there."""

    walks = 0

    def __iter__(self):  # type: ignore[no-untyped-def]
        type(self).walks += 1
        return super().__iter__()


def test_passing_the_bound_walks_the_tails_once_not_once_per_tail_written(root: Path) -> None:
    """With sends spread over many queues the bound is passed with thousands of small tails, and half of them are
    written in one go. Finding the oldest tail afresh for each (``next(iter(tails))``) walks over the slots the
    tails written before it left at the front of the dict: quadratic in the tails written (at 80,000 queues,
    seconds of the loop thread for the one put that passed the bound). One walk per pass is enough."""
    queues = 400
    limit = CQ_ENTRY_SIZE * queues  # passed at the 401st put: every queue holds one entry
    config = make_config(root, consume_queue_write_behind_bytes=limit)

    async def main() -> None:
        store = DefaultMessageStore(config)
        await store.start()
        store.queues.tails = _CountingTails()
        for qid in range(queues):
            assert (await store.put_message(msg("wide", b"w", queue_id=qid))).ok
        assert store.queues.tail_bytes == limit and _CountingTails.walks == 0
        assert (await store.put_message(msg("wide", b"w", queue_id=0))).ok  # past the bound
        assert store.queues.tail_bytes <= limit // 2
        assert len(store.queues.tails) < queues // 2 + 1  # half the tails and more were written ...
        assert _CountingTails.walks <= 2  # ... in one walk
        assert store.get_max_offset_in_queue("wide", 0) == 2
        assert all(store.get_max_offset_in_queue("wide", q) == 1 for q in range(1, queues))
        await store.shutdown()

    run(main)



def test_the_put_that_passes_the_bound_writes_a_batch_and_the_loop_the_rest(root: Path) -> None:
    """Half of thousands of small tails written by the one put that passed the bound held the loop for as long
    (0.4 s of CPU at 80,000 queues): that put writes one batch of the oldest, and the loop writes the rest a batch
    per turn, serving in between, until half the bound is left. Buffered bytes never pass the bound by more than a
    put's entries, and every entry reads the same throughout; outside a loop (recovery) all are written at once."""
    batch = consume_queue_store.TAILS_PER_TURN
    n = 4 * batch
    limit = CQ_ENTRY_SIZE * n

    def queues_of(store: ConsumeQueueStore) -> list[ConsumeQueue]:
        queues = [store.find_or_create("wide", qid) for qid in range(n + 1)]
        for qid, cq in enumerate(queues[:n]):
            cq.put(0, 100 * qid, 100, 0)
        assert len(store.tails) == n and store.tail_bytes == limit
        return queues

    async def main() -> None:
        store = ConsumeQueueStore(str(root / "a"), CQ_ENTRY_SIZE * 8, threading.Lock(), 64, limit)
        queues = queues_of(store)
        queues[n].put(0, 100 * n, 100, 0)  # past the bound
        assert len(store.tails) == n + 1 - batch  # one batch written by the put
        seen = []
        while store.tail_bytes > limit // 2:
            await asyncio.sleep(0)
            seen.append(len(store.tails))
        assert seen[0] == n + 1 - 2 * batch and len(seen) == 2  # a batch a turn, the loop serving in between
        await asyncio.sleep(0)
        assert len(store.tails) == seen[-1]  # and no more once half is left
        assert [_phys(cq, 0, 2) for cq in queues] == [[100 * qid] for qid in range(n + 1)]
        assert store.tail_bytes == sum(len(cq.tail or b"") for cq in queues)

    run(main)
    store = ConsumeQueueStore(str(root / "b"), CQ_ENTRY_SIZE * 8, threading.Lock(), 64, limit)
    queues = queues_of(store)
    queues[n].put(0, 100 * n, 100, 0)  # no loop running: all at once
    assert store.tail_bytes <= limit // 2
    assert [_phys(cq, 0, 2) for cq in queues] == [[100 * qid] for qid in range(n + 1)]


# --- a full disk where a tail is written --------------------------------------------------------------------------


async def _room_in_the_log_page(store: DefaultMessageStore, records: int) -> None:
    """Puts (to queue 0, written at once by a checkpoint) until the commit log's last page has room for ``records``
    more small records: on a disk filled up to the last byte, those still go to the log, and only a consume-queue
    file that needs a new page fails."""
    size = 0
    while size == 0 or PAGE - store.max_phy_offset % PAGE < (records + 1) * size:
        result = await store.put_message(msg("T", b"p"))
        assert result.ok
        size = result.append_result.wrote_bytes
    store.flush_and_checkpoint()


PAGE = 4096


def test_a_put_whose_tail_reaches_a_page_on_a_full_disk_stores_nothing(tmp_path: Path) -> None:
    """The put that fills a queue's tail to a page writes it, and the disk has no page for it: the put is answered
    SERVICE_NOT_AVAILABLE and stores nothing (the queue keeps its buffered entries, the part of the page already
    written is taken back); after a crash and with room again, the retry stores one copy at the next offset."""
    per_page = PAGE // CQ_ENTRY_SIZE  # 204: the 205th entry makes the tail a page
    with tmpfs(tmp_path / "disk") as disk:
        config = make_config(os.path.join(disk, "store"), disk_space_warning_level_ratio=100)

        async def fail() -> None:
            store = DefaultMessageStore(config)
            await store.start()
            for i in range(per_page):
                assert (await store.put_message(msg("T", b"b%d" % i, queue_id=1))).ok
            await _room_in_the_log_page(store, 1)
            for i in range(per_page):
                assert (await store.put_message(msg("T", b"c%d" % i, queue_id=1))).ok
            cq = store.queues.find("T", 1)
            assert cq is not None and cq.tail is not None and len(cq.tail) == per_page * CQ_ENTRY_SIZE
            fill_disk(disk, 0)
            log_end = store.max_phy_offset
            before = store.get_max_offset_in_queue("T", 1)
            result = await store.put_message(msg("T", b"failing", queue_id=1))
            assert result.status is PutMessageStatus.SERVICE_NOT_AVAILABLE and not result.stored
            assert "consume queue" in result.remark
            assert store.get_max_offset_in_queue("T", 1) == before and store.max_phy_offset == log_end
            got = store.get_message("T", 1, 0, 10_000, 1 << 30)
            assert [decode_message(w)[0].body for w in got.messages][-1] == b"c%d" % (per_page - 1)
            assert got.queue_offsets == list(range(before))
            assert store.queues.tail_bytes == sum(len(cq.tail or b"") for cq in store.queues.all())
            store.close_without_shutdown()

        run(fail)
        os.unlink(os.path.join(disk, "filler"))
        stored = reopened_bodies(config)
        assert stored[1] == [b"b%d" % i for i in range(per_page)] + [b"c%d" % i for i in range(per_page)]

        async def retry() -> None:
            async with DefaultMessageStore(config) as store:
                result = await store.put_message(msg("T", b"failing", queue_id=1))
                assert result.ok and result.append_result.logics_offset == 2 * per_page

        run(retry)
        assert reopened_bodies(config)[1] == stored[1] + [b"failing"]


def test_a_put_that_passes_the_bound_when_another_queue_s_tail_cannot_be_written(tmp_path: Path) -> None:
    """Past ``consumeQueueWriteBehindBytes`` a put writes the oldest tails, another queue's among them, and that
    queue's new file gets no page on the full disk: the put is answered SERVICE_NOT_AVAILABLE and stores nothing,
    the other queue keeps its buffered entry (read as before, rebuilt after a crash), and nothing is lost."""
    with tmpfs(tmp_path / "disk") as disk:
        config = make_config(os.path.join(disk, "store"), disk_space_warning_level_ratio=100,
                             consume_queue_write_behind_bytes=CQ_ENTRY_SIZE)

        async def fail() -> int:
            store = DefaultMessageStore(config)
            await store.start()
            await _room_in_the_log_page(store, 3)
            assert store.queues.tail_bytes == 0
            assert (await store.put_message(msg("T", b"other", queue_id=1))).ok  # buffered: its new file is empty
            assert store.queues.tail_bytes == CQ_ENTRY_SIZE and _entries_in(f"{disk}/store/consumequeue/T/1") == 0
            fill_disk(disk, 0)
            before = store.get_max_offset_in_queue("T", 0)
            result = await store.put_message(msg("T", b"failing", queue_id=0))
            assert result.status is PutMessageStatus.SERVICE_NOT_AVAILABLE and not result.stored
            assert store.get_max_offset_in_queue("T", 0) == before
            assert store.get_max_offset_in_queue("T", 1) == 1
            got = store.get_message("T", 1, 0, 10, 1 << 30)
            assert [decode_message(w)[0].body for w in got.messages] == [b"other"]
            assert store.queues.tail_bytes == sum(len(cq.tail or b"") for cq in store.queues.all())
            store.close_without_shutdown()
            return before

        before = run(fail)
        os.unlink(os.path.join(disk, "filler"))
        stored = reopened_bodies(config)
        assert stored[1] == [b"other"] and len(stored.get(0, [])) == before and b"failing" not in stored[0]


# --- a deleted topic, entries put back in place, reads at every boundary ---------------------------------------------


def test_a_topic_deleted_with_buffered_entries_leaves_no_tail_and_no_file(root: Path) -> None:
    """A topic whose queues hold buffered entries (one with files and a tail, one with a tail only, its file empty)
    is deleted: the tails go with it (the store's account back to zero), and neither the checkpoints nor the stop
    write them back to a file."""
    config = make_config(root, mapped_file_size_consume_queue=20 * 8)

    async def main() -> None:
        store = DefaultMessageStore(config)
        await store.start()
        for i in range(10):
            assert (await store.put_message(msg("gone", b"g%d" % i, queue_id=0))).ok
        store.flush_and_checkpoint()
        for i in range(5):
            assert (await store.put_message(msg("gone", b"h%d" % i, queue_id=0))).ok
        assert (await store.put_message(msg("gone", b"only", queue_id=1))).ok
        assert (await store.put_message(msg("kept", b"k"))).ok
        assert store.queues.tail_bytes == 7 * CQ_ENTRY_SIZE
        assert _entries_in(os.path.join(root, "consumequeue", "gone", "1")) == 0
        store.delete_topic("gone")  # (and a checkpoint, which writes the other topic's tail)
        assert store.queues.tail_bytes == 0 and not store.queues.tails and store.queues.pending == set()
        assert not os.path.exists(os.path.join(root, "consumequeue", "gone"))
        store.flush_and_checkpoint()
        await store.shutdown()
        assert not os.path.exists(os.path.join(root, "consumequeue", "gone"))
        assert store.queues.tail_bytes == 0 and not store.queues.tails

    run(main)

    async def reopen() -> None:
        async with DefaultMessageStore(config) as store:
            assert "gone" not in store.topics()
            assert store.get_max_offset_in_queue("kept", 0) == 1

    run(reopen)


def _queue(root: Path, per_file: int = 8) -> tuple[ConsumeQueueStore, ConsumeQueue]:
    queues = ConsumeQueueStore(str(root), CQ_ENTRY_SIZE * per_file, threading.Lock(), 16, 1 << 20)
    return queues, queues.find_or_create("T", 0)


def _phys(cq: ConsumeQueue, offset: int, count: int) -> list[int]:
    """What a reader gets from ``offset`` reading on from where each read stopped, as a pull does."""
    out: list[int] = []
    while count > 0:
        raw = cq.read_entries(offset, count)
        if not raw:
            break
        got = [CQ_ENTRY.unpack_from(raw, i)[0] for i in range(0, len(raw), CQ_ENTRY_SIZE)]
        out += got
        offset += len(got)
        count -= len(got)
    return out


def test_reads_at_every_boundary_between_files_and_tail(root: Path) -> None:
    """A queue of 8-entry files: entries 0-10 written (the second file part full), 11-20 buffered (the tail spans the
    end of the second file and the whole third, which the put made and which holds nothing yet). Every (offset,
    count) reads exactly the entries there, a read from below the first file or past the end reads nothing, and a
    queue whose only entries are buffered (its file empty) reads as well."""
    queues, cq = _queue(root)
    for i in range(11):
        cq.put(i, 100 * i, 100, 0)
    cq.write_tail()
    for i in range(11, 21):
        cq.put(i, 100 * i, 100, 0)
    assert cq.tail_from == 11 and cq.max_offset == 21
    assert sorted(os.listdir(cq.directory)) == [offset_to_name(0), offset_to_name(160), offset_to_name(320)]
    assert _entries_in(cq.directory) == 11
    for offset in range(-1, 23):
        for count in range(0, 24):
            want = [100 * i for i in range(max(offset, 0), min(offset + count, 21))] if offset >= 0 else []
            assert _phys(cq, offset, count) == want, (offset, count)
    cq.correct_min_offset(100 * 13)
    assert cq.min_offset == 13
    assert cq.first_offset_where(0, 21, lambda phy, _: phy >= 1650) == 17
    assert cq.truncate_dirty(100 * 19) == 2 and cq.max_offset == 19 and len(cq.tail or b"") == 8 * CQ_ENTRY_SIZE
    assert _phys(cq, 0, 30) == [100 * i for i in range(19)]
    only = queues.find_or_create("T", 1)
    only.put(0, 7, 100, 0)
    assert only.tail is not None and _entries_in(only.directory) == 0
    assert _phys(only, 0, 5) == [7] and only.entry(0) == (7, 100, 0) and _phys(only, 1, 5) == []
    only.correct_min_offset(8)
    assert only.min_offset == 1
    assert only.delete_expired_files(8) == 0 and _phys(only, 0, 5) == [7] and only.min_offset == 1


def test_a_put_makes_the_files_its_run_falls_in_and_no_others(root: Path) -> None:
    """A run makes the files it falls in when it is put (not when its tail is written): the first put of a queue, a
    run that starts a file, and one that starts inside a file and rolls into the next two; a run inside the file
    the queue's end is in makes none."""
    _, cq = _queue(root)
    names = lambda: sorted(os.listdir(cq.directory))  # noqa: E731
    cq.put_run(0, [(100 * i, 100, 0) for i in range(3)])
    assert names() == [offset_to_name(0)]
    cq.put_run(3, [(100 * i, 100, 0) for i in range(3, 6)])
    assert names() == [offset_to_name(0)]
    cq.put_run(6, [(100 * i, 100, 0) for i in range(6, 18)])  # entries 6-7, 8-15 and 16-17: three files
    assert names() == [offset_to_name(0), offset_to_name(160), offset_to_name(320)]
    cq.put_run(18, [(1800, 100, 0)])
    cq.write_tail()
    cq.put_run(19, [(1900 + 100 * i, 100, 0) for i in range(6)])  # 19-23 in the third file, 24 starts a fourth
    assert names() == [offset_to_name(0), offset_to_name(160), offset_to_name(320), offset_to_name(480)]
    assert _phys(cq, 0, 30) == [100 * i for i in range(25)]


def _entries_in(directory: str) -> int:
    """Non-empty entries in a queue's files as they are on disk (read directly, not through the store)."""
    count = 0
    for name in os.listdir(directory):
        with open(os.path.join(directory, name), "rb") as f:
            data = f.read()
        count += sum(1 for i in range(0, len(data), CQ_ENTRY_SIZE) if data[i : i + CQ_ENTRY_SIZE].strip(b"\0"))
    return count


def _phy(cq: ConsumeQueue, offset: int) -> int | None:
    entry = cq.entry(offset)
    return None if entry is None else entry[0]


def test_entries_put_back_in_place_or_past_a_gap_while_a_tail_is_buffered(root: Path) -> None:
    """A put not at the end of the queue (a rebuild putting an entry back, or a slave's entries after a gap) writes
    the tail first and then the entry at its place; the next put at the end starts a new tail after it. Nothing is
    lost, doubled or moved, in memory or on disk."""
    queues, cq = _queue(root)
    for i in range(6):
        cq.put(i, 100 * i, 100, 0)
    cq.write_tail()
    for i in range(6, 10):
        cq.put(i, 100 * i, 100, 0)
    cq.put(3, 300, 100, 0)  # back in place
    assert cq.tail is None and cq.unflushed_from == 0
    assert _phys(cq, 0, 20) == [100 * i for i in range(10)]
    cq.put(12, 1200, 100, 0)  # past a gap of two empty slots
    assert cq.max_offset == 13 and cq.tail is None and cq.entry(10) is None and cq.entry(11) is None
    cq.put(13, 1300, 100, 0)
    assert cq.tail is not None and cq.tail_from == 13
    assert [_phy(cq, i) for i in range(14)] == [100 * i for i in range(10)] + [None, None, 1200, 1300]
    assert queues.tail_bytes == CQ_ENTRY_SIZE
    cq.close()
    reloaded = ConsumeQueueStore(str(root), CQ_ENTRY_SIZE * 8, threading.Lock(), 16, 1 << 20).find_or_create("T", 0)
    reloaded.load()
    assert reloaded.max_offset == 14
    assert [_phy(reloaded, i) for i in range(14)] == [100 * i for i in range(10)] + [None, None, 1200, 1300]


# --- a power loss once the tails were written and fsynced ----------------------------------------------------------


async def _buffered_every_way(store: DefaultMessageStore, expected: dict[tuple[str, int], list[int]]) -> None:
    """Tails of every kind at once: queues with files and a tail over a file boundary, new queues with a tail only,
    and tails the bound wrote (not fsynced)."""
    await _spread(store, 3 * QUEUES, expected)
    store.flush_and_checkpoint()
    await _spread(store, 10 * QUEUES, expected)
    for qid in range(QUEUES):
        result = await store.put_message(msg("new", b"n", queue_id=qid))
        expected[("new", qid)] = [result.append_result.wrote_offset]
    assert store.queues.tail_bytes and any(cq.tail is None for cq in store.queues.all() if cq.topic == "spread")


def test_a_power_loss_right_after_a_stop_loses_no_buffered_entry(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The stop's checkpoint writes every tail and makes it durable: a power loss right after it leaves a store
    that opens as after a clean stop, scanning nothing, with every entry at its place."""
    config = make_config(root, mapped_file_size_consume_queue=20 * 8, consume_queue_write_behind_bytes=20 * 5 * QUEUES)
    disk = _powered(config, monkeypatch)
    expected: dict[tuple[str, int], list[int]] = {}

    async def main() -> None:
        store = DefaultMessageStore(config)
        await store.start()
        await _buffered_every_way(store, expected)
        await store.shutdown()
        disk.off = True

    run(main)
    disk.power_loss()
    store = DefaultMessageStore(config)
    try:
        assert store.recovery_report.clean_shutdown and store.recovery_report.records_scanned == 0
        _assert_queues_match_the_log(store, expected)
    finally:
        store.close_without_shutdown()


def test_retention_with_buffered_entries_reads_on_from_the_first_kept_one(root: Path) -> None:
    """Retention deletes commit-log segments while queues hold buffered entries (tails over file boundaries, the
    hot queue's last file part written): each queue's min offset is its first entry still in the log, whether in a
    file or in the tail; a pull below it is sent there, and one from there reads every kept entry in order, the
    buffered ones included; no file holding a buffered entry is deleted."""
    config = make_config(root, mapped_file_size_consume_queue=20 * 8, file_reserved_time_hours=1)
    expected: dict[tuple[str, int], list[int]] = {}

    async def main() -> None:
        store = DefaultMessageStore(config)
        await store.start()
        for _ in range(3):
            for _ in range(200):
                result = await store.put_message(msg("hot", b"h" * 300))
                expected.setdefault(("hot", 0), []).append(result.append_result.wrote_offset)
            await _spread(store, QUEUES, expected)
        store.flush_and_checkpoint()
        await _spread(store, 9 * QUEUES, expected)  # buffered, over file boundaries
        assert store.clean_expired_files(elapsed_ms=10**12) > 0
        low = store.min_phy_offset
        assert low > 0 and store.queues.tail_bytes == sum(len(cq.tail or b"") for cq in store.queues.all())
        for (topic, qid), offsets in expected.items():
            kept = [o for o in offsets if o >= low]
            first = store.get_min_offset_in_queue(topic, qid)
            assert store.get_max_offset_in_queue(topic, qid) - first == len(kept), (topic, qid)
            if first:
                below = store.get_message(topic, qid, 0, 10, 1 << 30)
                assert below.status is GetMessageStatus.OFFSET_TOO_SMALL and below.next_begin_offset == first
            got = store.get_message(topic, qid, first, 100_000, 1 << 30)
            assert [decode_message(w)[0].commit_log_offset for w in got.messages] == kept, (topic, qid)
        await store.shutdown()

    run(main)


def test_puts_reads_and_periodic_checkpoints_in_their_thread_all_at_once(root: Path) -> None:
    """Periodic checkpoints fsync in their worker thread while the loop puts (tails growing, written at a page, by
    the bound and by the checkpoints' snapshots), reads every queue and deletes a topic: every read finds each queue
    exactly as the log has it, the account of buffered bytes stays exact, and after a stop and a reopen nothing
    was lost, doubled or moved."""
    config = make_config(root, mapped_file_size_consume_queue=20 * 8, checkpoint_interval_ms=5,
                         flush_consume_queue_least_pages=1, consume_queue_write_behind_bytes=20 * 3 * QUEUES)
    expected: dict[tuple[str, int], list[int]] = {}

    async def main() -> None:
        store = DefaultMessageStore(config)
        await store.start()
        rng = random.Random(7)
        for round_ in range(30):
            for _ in range(rng.randrange(QUEUES, 4 * QUEUES)):
                qid = rng.randrange(QUEUES) if rng.random() < 0.7 else 0
                result = await store.put_message(msg("mix", b"m" * rng.randrange(1, 200), queue_id=qid))
                assert result.ok
                expected.setdefault(("mix", qid), []).append(result.append_result.wrote_offset)
                assert (await store.put_message(msg("doomed", b"d", queue_id=qid % 3))).ok
            await asyncio.sleep(0.01)  # a checkpoint or two in their thread
            assert store.queues.tail_bytes == sum(len(cq.tail or b"") for cq in store.queues.all())
            assert store.queues.tail_bytes <= config.consume_queue_write_behind_bytes + message_store.PAGE_SIZE
            _assert_queues_match_the_log(store, expected)
            if round_ % 10 == 9:
                store.delete_topic("doomed")
        assert store._counters["checkpoints"] > 3
        await store.shutdown()

    run(main)

    async def reopen() -> None:
        async with DefaultMessageStore(config) as store:
            assert store.recovery_report.clean_shutdown
            _assert_queues_match_the_log(store, expected)

    run(reopen)


@contextlib.asynccontextmanager
async def _master_and_slave(
        master_root: Path, slave_config: StoreConfig) -> AsyncIterator[tuple[DefaultMessageStore, DefaultMessageStore]]:
    """A master store and a started slave store (stopped after the block)."""
    async with DefaultMessageStore(make_config(master_root)) as master:
        slave = DefaultMessageStore(slave_config)
        slave.replica = True
        await slave.start()
        yield master, slave
        await slave.shutdown()


async def _replicate(master: DefaultMessageStore, slave: DefaultMessageStore, *puts: tuple[int, bytes]) -> None:
    """Put (queue id, body) messages of topic T on the master, then append what the slave lacks as HA would."""
    for qid, body in puts:
        assert (await master.put_message(msg("T", body, queue_id=qid))).ok
    start = slave.max_phy_offset
    slave.append_replicated(start, master.commit_log.read_raw(start, master.max_phy_offset - start))


def _assert_holds(store: DefaultMessageStore, bodies_by_queue: dict[int, list[bytes]]) -> None:
    """Topic T's queues hold exactly these bodies, from offset 0, and nothing after them."""
    for qid, bodies in bodies_by_queue.items():
        got = store.get_message("T", qid, 0, 10, 1 << 30)
        assert [decode_message(w)[0].body for w in got.messages] == bodies, qid
        assert store.get_max_offset_in_queue("T", qid) == len(bodies), qid


def test_a_slave_whose_consume_queue_write_fails_on_a_full_disk_loses_no_entry(tmp_path: Path) -> None:
    """A slave appends its master's records (queue 0's and queue 2's in one chunk) while its disk is full: queue 0's
    put passes the bound and writes the oldest tail, queue 1's, whose new file gets no page. The append fails and
    the HA session starts again from the slave's log end, which holds both records. No entry of the chunk may be
    lost for that: once there is room, every queue holds every record at its place."""
    with tmpfs(tmp_path / "disk") as disk:
        slave_config = make_config(os.path.join(disk, "slave"), disk_space_warning_level_ratio=100,
                                   consume_queue_write_behind_bytes=CQ_ENTRY_SIZE)

        async def main() -> None:
            async with _master_and_slave(tmp_path / "master", slave_config) as (master, slave):

                def replicate(*puts: tuple[int, bytes]) -> Awaitable[None]:
                    return _replicate(master, slave, *puts)

                size = 0
                while size == 0 or PAGE - master.max_phy_offset % PAGE < 4 * size:  # room for 3 more in the page
                    before = master.max_phy_offset
                    await replicate((9, b"p"))
                    size = master.max_phy_offset - before
                slave.flush_and_checkpoint()  # no tail left
                await replicate((1, b"b"))  # buffered: queue 1's new file is empty, none of its pages allocated
                assert slave.queues.tail_bytes == CQ_ENTRY_SIZE and slave.queues.find("T", 1).tail is not None
                fill_disk(disk, 0)
                with pytest.raises(OSError):
                    await replicate((0, b"a"), (2, b"c"))
                assert slave.max_phy_offset == master.max_phy_offset  # the records are in the slave's log
                os.unlink(os.path.join(disk, "filler"))
                await replicate((2, b"c2"), (0, b"a2"))
                _assert_holds(slave, {0: [b"a", b"a2"], 1: [b"b"], 2: [b"c", b"c2"]})

        run(main)


def test_the_confirm_offset_bounds_reads_wherever_it_falls_among_written_and_buffered_entries(root: Path) -> None:
    """Controller mode: a consumer's reads stop at the confirm offset, found by a binary search over the queue's
    entries. With the newest buffered (the tail over a file boundary), every bound, in a file, at the tail's start or
    within it, gives exactly the entries whose records end at or before it."""
    config = make_config(root, mapped_file_size_consume_queue=20 * 8)

    async def main() -> None:
        store = DefaultMessageStore(config)
        await store.start()
        ends: list[int] = []
        for i in range(6):
            result = await store.put_message(msg("T", b"w%d" % i))
            ends.append(result.append_result.wrote_offset + result.append_result.wrote_bytes)
        store.flush_and_checkpoint()
        for i in range(6, 20):
            result = await store.put_message(msg("T", b"w%d" % i))
            ends.append(result.append_result.wrote_offset + result.append_result.wrote_bytes)
        cq = store.queues.find("T", 0)
        assert cq is not None and cq.tail_from == 6 and cq.max_offset == 20
        for n, end in enumerate([0, *ends]):
            for bound in (end, end + 1):  # the n first records end at or before either
                store.set_confirm_offset(bound)
                assert store.get_max_offset_in_queue("T", 0, confirmed=True) == n, (n, bound)
                got = store.get_message("T", 0, 0, 100, 1 << 30, confirmed=True)
                assert [decode_message(w)[0].body for w in got.messages] == [b"w%d" % i for i in range(n)]
        await store.shutdown()

    run(main)


def test_a_slave_whose_new_queue_file_cannot_be_made_loses_no_entry(tmp_path: Path) -> None:
    """A slave's disk has no inode left when its master's records for a new queue arrive: the queue's directory and
    file cannot be made by the put. The entry is buffered all the same (the tail writes the file later, making what
    is missing), the other queue of the chunk gets its entry, and once there is room every queue holds every
    record at its place: no hole where the first record of the new queue was."""
    with tmpfs(tmp_path / "disk", size="8m,nr_inodes=64") as disk:
        slave_config = make_config(os.path.join(disk, "slave"), disk_space_warning_level_ratio=100)

        async def main() -> None:
            async with _master_and_slave(tmp_path / "master", slave_config) as (master, slave):

                def replicate(*puts: tuple[int, bytes]) -> Awaitable[None]:
                    return _replicate(master, slave, *puts)

                await replicate((2, b"c0"))
                slave.flush_and_checkpoint()
                fillers = os.path.join(disk, "fillers")
                os.mkdir(fillers)
                n = 0
                with contextlib.suppress(OSError):
                    while True:
                        open(os.path.join(fillers, str(n)), "wb").close()
                        n += 1
                with pytest.raises(OSError):
                    await replicate((0, b"a"), (2, b"c"))
                assert slave.max_phy_offset == master.max_phy_offset  # the records are in the slave's log
                shutil.rmtree(fillers)
                await replicate((0, b"a2"), (2, b"c2"))
                _assert_holds(slave, {0: [b"a", b"a2"], 2: [b"c0", b"c", b"c2"]})

        run(main)


def test_a_slave_whose_index_file_cannot_be_made_loses_no_entry(tmp_path: Path) -> None:
    """A slave's disk is full when its master's records fill its index file (128 entries here) and the next one must
    be made: the records are in the slave's log before they are dispatched, so the index's error may not stop the
    dispatch half way. Every record of the chunk gets its consume-queue entry and its arrival is told; the error is
    raised after, and once there is room every record is at its place in its queue (the HA session goes on from the
    slave's log end: a record left out then was never put)."""
    with tmpfs(tmp_path / "disk") as disk:
        slave_config = make_config(os.path.join(disk, "slave"), disk_space_warning_level_ratio=100,
                                   mapped_file_size_consume_queue=20 * 256)

        async def main() -> None:
            async with _master_and_slave(tmp_path / "master", slave_config) as (master, slave):
                bodies: list[bytes] = []
                arrived: list[int] = []
                slave.confirm.listeners.append(lambda topic, qid, next_offset: arrived.append(next_offset))

                async def replicate(n: int) -> None:
                    for _ in range(n):
                        bodies.append(b"m%d" % len(bodies))
                        assert (await master.put_message(msg("T", bodies[-1], KEYS=bodies[-1].decode()))).ok
                    start = slave.max_phy_offset
                    slave.append_replicated(start, master.commit_log.read_raw(start, master.max_phy_offset - start))

                await replicate(120)
                slave.flush_and_checkpoint()
                fill_disk(disk, 0)
                with pytest.raises(OSError) as raised:
                    await replicate(20)  # the index file is full at its 128th entry
                assert raised.value.errno == errno.ENOSPC
                assert slave.max_phy_offset == master.max_phy_offset  # the records are in the slave's log
                assert arrived[-1] == 140
                os.unlink(os.path.join(disk, "filler"))
                await replicate(2)
                assert slave.get_max_offset_in_queue("T", 0) == len(bodies) == 142
                got = [slave.get_message("T", 0, i, 1, 1 << 30).messages for i in range(len(bodies))]
                assert [decode_message(w[0])[0].body for w in got] == bodies

        run(main)
