"""The periodic thorough checkpoint (every ``flushConsumeQueueThoroughInterval``) puts every consume queue's tail in
one journal file instead of writing each to its queue's file: with sends spread over 80,000 queues that was a write,
and mostly a close and an open, per queue. The tails stay in memory; recovery writes the journal the checkpoint
names back into the queues' files. What it must keep: a power loss loses no entry and makes recovery rebuild no
queue; entries journaled and later written to their files are fsynced before a newer journal drops them; a
journal that cannot be read costs a rebuild from the log, never an entry; stale journals are deleted."""

from __future__ import annotations

from pathlib import Path

import pytest

import txmq.store.mapped_file as mapped_file
import txmq.store.tail_journal as tail_journal
from tests.store.store_helpers import flip_byte, make_config, reopened_store, run
from tests.store.test_consume_queue_flush import (
    QUEUES,
    _a_power_loss_now_loses_nothing,
    _assert_queues_match_the_log,
    _periodic_checkpoint,
    _powered,
    _spread,
    _whole_after_power_loss,
)
from tests.store.test_consume_queue_write_behind import _buffered_every_way
from txmq.store import DefaultMessageStore, StoreConfig
from txmq.store.consume_queue import ConsumeQueue


def _config(root: Path) -> StoreConfig:
    """Every periodic checkpoint thorough; small files and a small write-behind bound, so that tails lie over file
    boundaries and the bound writes some."""
    return make_config(root, mapped_file_size_consume_queue=20 * 8, consume_queue_write_behind_bytes=20 * 5 * QUEUES,
                       flush_consume_queue_thorough_interval_ms=0, flush_interval_commit_log_ms=60_000)


def _journals(config: StoreConfig) -> list[int]:
    return tail_journal.numbers(config.store_path_root_dir)


def test_a_thorough_periodic_checkpoint_journals_every_tail_writes_none_and_a_power_loss_rebuilds_nothing(
        root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The checkpoint writes no queue file (the queues the bound wrote are fsynced), keeps the tails, counts every
    queue flushed and puts its recovery point at the log's end. After a power loss recovery scans nothing, writes
    the journal back and rebuilds no queue; a second power loss right after that open (its entries written back
    are in no fsynced file) loses nothing either."""
    config = _config(root)
    disk = _powered(config, monkeypatch)
    expected: dict[tuple[str, int], list[int]] = {}
    writes: list[str] = []
    real_write = mapped_file.MappedFile.write

    def counting_write(self: mapped_file.MappedFile, *a: object, **kw: object) -> object:
        writes.append(self.path)
        return real_write(self, *a, **kw)

    async def main() -> int:
        store = DefaultMessageStore(config)
        await store.start()
        await _buffered_every_way(store, expected)
        tails = {cq: bytes(cq.tail) for cq in store.queues.tails}  # type: ignore[arg-type]
        with monkeypatch.context() as m:
            m.setattr(mapped_file.MappedFile, "write", counting_write)
            _periodic_checkpoint(store)
        assert [w for w in writes if "consumequeue" in w] == []
        assert {cq: bytes(cq.tail) for cq in store.queues.tails} == tails  # type: ignore[arg-type]
        assert not store.queues.pending and store.checkpoint_offset == store.max_phy_offset
        cp = store.checkpoint.load()[0]
        assert cp is not None and cp.tails is not None and _journals(config) == [cp.tails]
        assert cp.queues == {t: {q: n for q, n in qs.items()} for t, qs in store.queues.counts.items()}
        _a_power_loss_now_loses_nothing(store, disk)
        disk.off = True
        store.close_without_shutdown()
        return len(tails)

    journaled = run(main)
    assert journaled > QUEUES
    disk.power_loss()
    with reopened_store(config) as store:
        report = store.recovery_report
        assert report.records_scanned == 0 and report.consume_queues_rebuilt == []
        assert report.tails_restored == journaled
        _assert_queues_match_the_log(store, expected)
        disk.off = True
    _whole_after_power_loss(config, disk, expected)


def test_journaled_entries_that_reach_their_files_are_fsynced_before_a_newer_journal_drops_them(
        root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """After a journal, queues' tails reach their files without new entries (the write-behind bound, retention's
    write) or with a page of them; the next thorough checkpoint's journal no longer holds them, so it must have
    fsynced them: a power loss after it, and after a periodic one in between, loses nothing and rebuilds nothing."""
    config = _config(root)
    disk = _powered(config, monkeypatch)
    expected: dict[tuple[str, int], list[int]] = {}

    async def main() -> None:
        store = DefaultMessageStore(config)
        await store.start()
        await _spread(store, 3 * QUEUES, expected)
        _periodic_checkpoint(store)  # journal 1: every queue's three entries
        journaled = list(store.queues.tails)
        for cq in journaled[: QUEUES // 2]:
            cq.write_tail()  # as the bound writes the oldest tails: no new entry in these queues
        assert store.queues.pending == set(journaled[: QUEUES // 2])
        store._thorough_at += 3600  # a periodic checkpoint that is not thorough: journal 1 still named
        store._write_checkpoint(store._snapshot(thorough=False))
        assert store.checkpoint.load()[0].tails == _journals(config)[0]  # type: ignore[union-attr]
        store._thorough_at -= 7200
        for cq in journaled[QUEUES // 2 :][:3]:
            cq.write_tail()
        _periodic_checkpoint(store)  # journal 2 holds none of the written tails
        _a_power_loss_now_loses_nothing(store, disk)
        assert len(_journals(config)) == 1
        disk.off = True
        store.close_without_shutdown()

    run(main)
    _whole_after_power_loss(config, disk, expected)


def test_a_journal_that_fails_its_check_costs_a_rebuild_from_the_log_and_no_entry(
        root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = _config(root)
    disk = _powered(config, monkeypatch)
    expected: dict[tuple[str, int], list[int]] = {}

    async def main() -> None:
        store = DefaultMessageStore(config)
        await store.start()
        await _buffered_every_way(store, expected)
        _periodic_checkpoint(store)
        disk.off = True
        store.close_without_shutdown()

    run(main)
    disk.power_loss()
    (seq,) = _journals(config)
    flip_byte(tail_journal.path_of(config.store_path_root_dir, seq), 40)
    with reopened_store(config) as store:
        report = store.recovery_report
        assert any("fails its magic, version, length or CRC check" in e for e in report.events), report.events
        assert report.tails_journal is None and report.consume_queues_rebuilt
        _assert_queues_match_the_log(store, expected)
    assert _journals(config) == []  # the broken one is not named again


def test_a_journal_that_cannot_be_written_is_written_by_the_next_checkpoint(
        root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A full disk refuses the journal: that checkpoint is not written, none of its fsyncs is made, and its queues
    count as unflushed again; the next one (periodic, not thorough) names the same journal, writes it, keeps its
    recovery point before the entries left unflushed, and a power loss after it loses nothing."""
    config = _config(root)
    disk = _powered(config, monkeypatch)
    expected: dict[tuple[str, int], list[int]] = {}

    def full(*_: object) -> None:
        raise OSError(28, "No space left on device")

    async def main() -> None:
        store = DefaultMessageStore(config)
        await store.start()
        await _buffered_every_way(store, expected)
        before = store.checkpoint_offset
        snap = store._snapshot(thorough=False)
        with monkeypatch.context() as m:
            m.setattr(tail_journal, "write_atomic", full)
            with pytest.raises(OSError):
                store._write_checkpoint(snap)
        store._unflushed_again(snap)
        assert store.checkpoint_offset == before and _journals(config) == []
        await _spread(store, QUEUES, expected)
        store._thorough_at += 3600
        store._write_checkpoint(store._snapshot(thorough=False))
        assert store.checkpoint.load()[0].tails == snap.tails.seq == _journals(config)[0]  # type: ignore[union-attr]
        assert store.checkpoint_offset == store.queues.oldest_unflushed() < store.max_phy_offset  # type: ignore
        _a_power_loss_now_loses_nothing(store, disk)
        disk.off = True
        store.close_without_shutdown()

    run(main)
    _whole_after_power_loss(config, disk, expected)


def test_older_journals_are_deleted_and_a_stop_leaves_none(root: Path) -> None:
    config = _config(root)
    expected: dict[tuple[str, int], list[int]] = {}

    async def main() -> None:
        store = DefaultMessageStore(config)
        await store.start()
        for _ in range(3):
            await _spread(store, QUEUES, expected)
            _periodic_checkpoint(store)
        assert len(_journals(config)) == 1
        await store.shutdown()  # writes every tail: its checkpoint names no journal

    run(main)
    assert _journals(config) == []
    with reopened_store(config) as store:
        assert store.recovery_report.clean_shutdown and store.recovery_report.records_scanned == 0
        assert store.checkpoint.load()[0].tails is None  # type: ignore[union-attr]
        _assert_queues_match_the_log(store, expected)


def test_a_checkpoint_that_cannot_write_some_tails_names_a_new_journal_of_them(
        root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A checkpoint that writes every tail (``flush_and_checkpoint``) on a disk too full for some: those queues'
    entries were only in the last journal, so its document names a new journal holding the tails as they are now
    (not the old one: a truncation or a deletion since may have changed the queues it holds); a power loss after it
    loses nothing and rebuilds nothing."""
    config = _config(root)
    disk = _powered(config, monkeypatch)
    expected: dict[tuple[str, int], list[int]] = {}

    async def main() -> None:
        store = DefaultMessageStore(config)
        await store.start()
        await _spread(store, 3 * QUEUES, expected)
        _periodic_checkpoint(store)
        journal = store.checkpoint.load()[0].tails  # type: ignore[union-attr]
        full = set(list(store.queues.tails)[:3])
        real = ConsumeQueue.write_tail

        def refusing(self: ConsumeQueue) -> None:
            if self in full and self.tail is not None:
                raise OSError(28, "No space left on device")
            real(self)

        with monkeypatch.context() as m:
            m.setattr(ConsumeQueue, "write_tail", refusing)
            store.flush_and_checkpoint()
        named = store.checkpoint.load()[0].tails  # type: ignore[union-attr]
        assert named is not None and named > journal and _journals(config) == [named]  # type: ignore[operator]
        records, _ = tail_journal.read(config.store_path_root_dir, named)
        assert {(t, q): e for t, q, _, e in records} == {  # type: ignore[union-attr]
            (cq.topic, cq.queue_id): bytes(cq.tail) for cq in full}  # type: ignore[arg-type]
        _a_power_loss_now_loses_nothing(store, disk)
        disk.off = True
        store.close_without_shutdown()

    run(main)
    _whole_after_power_loss(config, disk, expected)


def test_a_written_checkpoint_keeps_none_of_the_state_it_took(root: Path) -> None:
    """A thorough checkpoint takes every queue's unflushed state (for a put-back if it fails): once written, none of
    it stays referenced. The checkpoint loop held its last snapshot until the next checkpoint, at 80,000 queues
    about 10 MB of it."""
    import asyncio
    import gc

    from txmq.store.message_store import _Snapshot

    config = make_config(root, checkpoint_interval_ms=50, flush_consume_queue_thorough_interval_ms=0,
                         flush_interval_commit_log_ms=60_000)

    async def main() -> tuple[int, int]:
        store = DefaultMessageStore(config)
        await store.start()
        try:
            await _spread(store, 4 * QUEUES, {})
            written = store._counters["checkpoints"]
            while store._counters["checkpoints"] < written + 2:  # one that took the queues' state, written
                await asyncio.sleep(0.02)
            gc.collect()
            held = [s for s in gc.get_objects() if isinstance(s, _Snapshot) and s.done]
            return len(held), sum(len(s.cq_flushed) + len(s.cq_files) + len(s.document) for s in held)
        finally:
            await store.shutdown()

    snapshots, state = run(main)
    assert snapshots > 0  # the loop's last one is still referenced...
    assert state == 0  # ...holding nothing
