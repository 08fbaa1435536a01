"""The tails journal through sequences that could make a reopen lose an entry, put one at a wrong place, rebuild a
queue wholesale, or not open at all: retention, topic deletion and a slave's truncation while a tail cannot be
written, a journal that cannot be written after a reopen, odd names beside the journals, and a randomized model
of all of it with power losses at random moments."""

from __future__ import annotations

import asyncio
import os
import random
from collections.abc import Callable
from pathlib import Path

import pytest

import txmq.store.tail_journal as tail_journal
from tests.store.store_helpers import make_config, msg, reopened_store, run
from tests.store.test_consume_queue_flush import (
    _bookkeeping_as_a_walk_finds_it,
    _Disk,
    _periodic_checkpoint,
    _powered,
)
from txmq.message import decode_message
from txmq.store import DefaultMessageStore, StoreConfig
from txmq.store.consume_queue import ConsumeQueue
from txmq.store.mapped_file import MappedFileQueue


def _due_thorough(store: DefaultMessageStore) -> None:
    """``flushConsumeQueueThoroughInterval`` passed: the next periodic checkpoint is thorough (a tails journal)."""
    store._thorough_at -= store.config.flush_consume_queue_thorough_interval_ms / 1000 + 1


def _thorough(store: DefaultMessageStore) -> None:
    """The periodic thorough checkpoint: the one that writes a tails journal."""
    _due_thorough(store)
    _periodic_checkpoint(store)
    assert store.checkpoint.load()[0].tails is not None  # type: ignore[union-attr]


def _q_whole_after_power_loss(config: StoreConfig, disk: _Disk, expected: list[int]) -> None:
    """A power loss, then a reopen: nothing rebuilt, queue q/0 holding ``expected``."""
    disk.power_loss()
    with reopened_store(config) as store:
        assert store.recovery_report.consume_queues_rebuilt == [], store.recovery_report.events
        assert _kept(store, "q", 0) == expected


def _kept(store: DefaultMessageStore, topic: str, qid: int) -> list[int]:
    first = store.get_min_offset_in_queue(topic, qid)
    got = store.get_message(topic, qid, first, 100_000, 1 << 30)
    return [decode_message(w)[0].commit_log_offset for w in got.messages]


def test_retention_deletes_a_file_holding_journaled_entries_then_a_crash(root: Path) -> None:
    """A light queue's tail (never a page) lies over two of its files and is journaled; retention later writes it
    and deletes the first file (its records are gone from the log); a crash before the next thorough checkpoint.
    Recovery writes back only the journaled entries from the queue's first file on: a file made again before it
    was not found in its place, and the next write failed, so the store did not open."""
    config = make_config(root, mapped_file_size_consume_queue=20 * 8, file_reserved_time_hours=1,
                         flush_interval_commit_log_ms=60_000)
    light: list[int] = []

    async def main() -> None:
        store = DefaultMessageStore(config)
        await store.start()
        for i in range(8):  # entries 0..7: the queue's first file
            light.append((await store.put_message(msg("light", b"l%d" % i))).append_result.wrote_offset)
        for _ in range(4):  # other records: segments for retention to delete
            for _ in range(2 * 4096 // 20):
                assert (await store.put_message(msg("hot", b"h" * 100))).ok
            _periodic_checkpoint(store)
        for i in range(4):  # entries 8..11: its second file, records that stay
            light.append((await store.put_message(msg("light", b"L%d" % i))).append_result.wrote_offset)
        cq = store.queues.find("light", 0)
        assert cq is not None and cq.tail is not None and cq.tail_from == 0
        _thorough(store)  # journal: light's twelve entries
        assert store.clean_expired_files(elapsed_ms=10**12) > 0
        assert light[7] < store.min_phy_offset <= light[8]
        # (no checkpoint after it: the document on disk names the journal)
        store.close_without_shutdown()  # a crash (SIGKILL)

    run(main)
    with reopened_store(config) as store:
        report = store.recovery_report
        assert report.consume_queues_rebuilt == [], report.events
        assert _kept(store, "light", 0) == light[8:]
        files = store.queues.find("light", 0).opened_files.files  # type: ignore[union-attr]
        starts = [mf.file_from_offset for mf in files]
        assert starts == sorted(starts), starts


def _refusing(full: set[str]):  # type: ignore[no-untyped-def]
    """``ConsumeQueue.write_tail`` refusing the tails of the topics in ``full`` (a full disk)."""
    real = ConsumeQueue.write_tail

    def write_tail(self: ConsumeQueue) -> None:
        if self.topic in full and self.tail is not None:
            raise OSError(28, "No space left on device")
        real(self)

    return write_tail


async def _journaled_x_and_doomed(store: DefaultMessageStore) -> None:
    """One entry in topic x and three in topic doomed, their tails in a thorough checkpoint's journal."""
    assert (await store.put_message(msg("x", b"x"))).ok
    for i in range(3):
        assert (await store.put_message(msg("doomed", b"d%d" % i))).ok
    _thorough(store)


def test_a_deleted_topic_stays_deleted_when_its_checkpoint_could_not_write_another_tail(
        root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A topic's tail is journaled; the topic is deleted while another queue's journaled tail cannot be written (a
    full disk). The deletion's checkpoint names a new journal of the tails as they are (the old one still holds the
    deleted queue's entries): after a crash the topic is not there again."""
    config = make_config(root, flush_interval_commit_log_ms=60_000)

    async def main() -> None:
        store = DefaultMessageStore(config)
        await store.start()
        await _journaled_x_and_doomed(store)
        with monkeypatch.context() as m:
            m.setattr(ConsumeQueue, "write_tail", _refusing({"x"}))
            store.delete_topic("doomed")
        assert "doomed" not in store.checkpoint.load()[0].queues  # type: ignore[union-attr]
        store.close_without_shutdown()  # a crash (SIGKILL)

    run(main)
    with reopened_store(config) as store:
        assert "doomed" not in store.topics()
        assert store.get_max_offset_in_queue("doomed", 0) == 0


def test_a_slave_s_truncation_with_a_tail_it_cannot_write_leaves_no_stale_journal_named(
        root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A queue's tail (entries 0..2) is journaled. A slave's truncation at its entry 1 while another queue's tail
    cannot be written is refused, nothing cut (its checkpoint would have to name a journal holding entries past
    the cut); with room again it cuts. New records follow the cut (larger ones: their offsets differ from the old
    ones'); a checkpoint that writes every tail, the other one refused again, flushes and counts them and names a
    new journal of the tails as they are: after a crash no old entry is written over a new one."""
    config = make_config(root, flush_interval_commit_log_ms=60_000)
    expected: list[int] = []

    async def main() -> None:
        store = DefaultMessageStore(config)
        await store.start()
        assert (await store.put_message(msg("x", b"x"))).ok  # below the cut: its tail stays
        for i in range(3):
            expected.append((await store.put_message(msg("q", b"old%d" % i))).append_result.wrote_offset)
        _thorough(store)
        cut = expected[1]
        with monkeypatch.context() as m:
            m.setattr(ConsumeQueue, "write_tail", _refusing({"x"}))
            end = store.max_phy_offset
            with pytest.raises(OSError):
                store.replica_log.truncate(cut)
            assert store.max_phy_offset == end and _kept(store, "q", 0) == expected
        store.replica_log.truncate(cut)
        with monkeypatch.context() as m:
            m.setattr(ConsumeQueue, "write_tail", _refusing({"x"}))
            del expected[1:]
            for i in range(3):  # what the master has after the cut
                result = await store.put_message(msg("q", b"new%d" % i + b"." * 300))
                expected.append(result.append_result.wrote_offset)
            store.flush_and_checkpoint()
        assert store.checkpoint.load()[0].queues["q"][0] == 4  # type: ignore[union-attr]
        store.close_without_shutdown()  # a crash (SIGKILL)

    run(main)
    with reopened_store(config) as store:
        assert _kept(store, "q", 0) == expected, store.recovery_report.events



def _refused(*_: object) -> None:
    raise OSError(28, "No space left on device")


def test_a_deleted_topic_stays_deleted_when_its_checkpoint_failed_and_a_later_one_is_written(
        root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A topic's tail is journaled (J); the topic is deleted and the deletion's checkpoint cannot write its document
    (a full disk: no fsync failed, durability is not lost). The next periodic checkpoint, written normally, never
    names J again (its counts no longer list the topic): after a crash the deleted topic is not there again."""
    config = make_config(root, flush_interval_commit_log_ms=60_000)

    async def main() -> None:
        store = DefaultMessageStore(config)
        await store.start()
        await _journaled_x_and_doomed(store)  # journal J
        with monkeypatch.context() as m:
            m.setattr(store.checkpoint, "write_document", _refused)
            with pytest.raises(OSError):
                store.delete_topic("doomed")
        assert "doomed" not in store.topics()
        assert not store.durability.lost
        _periodic_checkpoint(store)  # written normally
        cp = store.checkpoint.load()[0]
        assert "doomed" not in cp.queues  # type: ignore[union-attr]
        store.close_without_shutdown()  # a crash (SIGKILL)

    run(main)
    with reopened_store(config) as store:
        assert "doomed" not in store.topics(), store.recovery_report
        assert store.get_max_offset_in_queue("doomed", 0) == 0


def test_a_topic_made_again_after_a_failed_deletion_keeps_its_own_entries(
        root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """As above, and the topic is made again: its new entries 0..249 are flushed by a periodic checkpoint (due: a
    page written) past the recovery point. Had that document named the old J, whose entries 0..2 point at the
    deleted topic's old records, recovery would write those over the new queue's first entries: after a crash the
    new topic reads its own messages."""
    config = make_config(root, flush_interval_commit_log_ms=60_000, flush_consume_queue_least_pages=1)
    expected: list[int] = []

    async def main() -> None:
        store = DefaultMessageStore(config)
        await store.start()
        for i in range(3):
            assert (await store.put_message(msg("t", b"old%d" % i))).ok
        _thorough(store)  # journal J: t's tail 0..2
        with monkeypatch.context() as m:
            m.setattr(store.checkpoint, "write_document", _refused)
            with pytest.raises(OSError):
                store.delete_topic("t")
        for i in range(250):  # the topic made again: more than a page, so the periodic checkpoint flushes it
            expected.append((await store.put_message(msg("t", b"new%d" % i))).append_result.wrote_offset)
        _periodic_checkpoint(store)
        cp = store.checkpoint.load()[0]
        assert cp.queues["t"][0] == 250 and cp.recovery_offset > expected[-1]  # type: ignore[union-attr]
        store.close_without_shutdown()  # a crash (SIGKILL)

    run(main)
    with reopened_store(config) as store:
        assert _kept(store, "t", 0) == expected, store.recovery_report.events


class _PowerCut(Exception):
    pass


@pytest.mark.parametrize("failure", ["journal refused", "power cut before the document"])
def test_a_journaled_checkpoint_after_a_reopen_that_fails_leaves_no_queue_shorter_than_counted(
        root: Path, monkeypatch: pytest.MonkeyPatch, failure: str) -> None:
    """A queue flushed and counted while another queue holds the recovery point before its entries; a power loss:
    recovery cuts the queue's entries at the recovery point from its file (in memory, not fsynced) and puts them
    back in its tail. The first periodic thorough checkpoint after the reopen writes that tail (the queue was cut)
    before it fsyncs the file, and writes its journal before any fsync; it then fails: its journal refused (a full
    disk), or the power goes out before its document. The document on disk counts what the file holds, and a
    power loss now rebuilds no queue."""
    config = make_config(root, flush_interval_commit_log_ms=60_000, flush_consume_queue_least_pages=1)
    disk = _powered(config, monkeypatch)
    expected: list[int] = []

    async def main() -> None:
        store = DefaultMessageStore(config)
        await store.start()
        assert (await store.put_message(msg("x", b"x"))).ok  # unflushed below: the recovery point stays here
        for i in range(4096 // 20 + 1):  # a page: the periodic checkpoint flushes this queue, not x
            expected.append((await store.put_message(msg("q", b"q%d" % i))).append_result.wrote_offset)
        _periodic_checkpoint(store)
        cp = store.checkpoint.load()[0]
        assert cp.queues["q"][0] == len(expected) and cp.recovery_offset == 0  # type: ignore[union-attr]
        disk.off = True
        store.close_without_shutdown()

    def cut(*_: object) -> None:
        disk.off = True  # the power goes out here
        raise _PowerCut

    async def after_reopen() -> None:
        store = DefaultMessageStore(config)
        assert store.recovery_report.consume_queues_rebuilt == []
        await store.start()
        _due_thorough(store)
        snap = store._snapshot(thorough=False)
        assert snap.tails is not None
        with monkeypatch.context() as m:
            if failure == "journal refused":
                m.setattr(tail_journal, "write_atomic", _refused)
            else:
                m.setattr(store.checkpoint, "write_document", cut)
            with pytest.raises((OSError, _PowerCut)):
                store._write_checkpoint(snap)
        store._unflushed_again(snap)
        disk.off = True
        store.close_without_shutdown()

    run(main)
    disk.power_loss()
    run(after_reopen)
    _q_whole_after_power_loss(config, disk, expected)


def test_a_checkpoint_that_cannot_write_a_tail_keeps_the_journaled_entries_written_since_covered(
        root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A queue's tail (entries 0..2) is journaled (J1, counted 3); the write-behind bound writes it to its file (not
    fsynced: the queue is due); one more put (entry 3, in a new tail). A checkpoint that writes every tail cannot
    write this queue's (a full disk): it takes the queue as a journal takes it, fsyncs its file (entries 0..2) and
    names a new journal holding its tail (entry 3), counted 4: after a power loss nothing is rebuilt."""

    config = make_config(root, flush_interval_commit_log_ms=60_000)
    disk = _powered(config, monkeypatch)
    expected: list[int] = []

    async def main() -> None:
        store = DefaultMessageStore(config)
        await store.start()
        for i in range(3):
            expected.append((await store.put_message(msg("q", b"q%d" % i))).append_result.wrote_offset)
        _thorough(store)  # J1: entries 0..2
        store.queues.find("q", 0).write_tail()  # the bound (or a page) writes them: due, not fsynced
        expected.append((await store.put_message(msg("q", b"q3"))).append_result.wrote_offset)
        with monkeypatch.context() as m:
            m.setattr(ConsumeQueue, "write_tail", _refusing({"q"}))
            store.flush_and_checkpoint()
        cp = store.checkpoint.load()[0]
        assert cp.queues["q"][0] == 4 and cp.tails is not None  # type: ignore[union-attr]
        disk.off = True
        store.close_without_shutdown()

    run(main)
    _q_whole_after_power_loss(config, disk, expected)


# --- a randomized model: puts, journals, bound writes, failures, late workers, truncations, deletions, retention,
# --- and power losses (twice over) at random moments --------------------------------------------------------------


def _model(root: Path, monkeypatch: pytest.MonkeyPatch, seed: int, steps: int, least_pages: int) -> None:
    """Random operations; after each, what a power loss would leave holds every entry the checkpoint on disk counts
    (``covered``); at random moments a power loss (sometimes a second one before any checkpoint), after which the
    store opens, rebuilds no queue, and every queue holds exactly its records still in the log."""
    config = make_config(root, flush_interval_commit_log_ms=60_000, flush_consume_queue_least_pages=least_pages,
                         consume_queue_write_behind_bytes=20 * 40, mapped_file_size_consume_queue=20 * 16,
                         file_reserved_time_hours=1)
    disk = _powered(config, monkeypatch)
    expected: dict[tuple[str, int], list[int]] = {}
    rng = random.Random(seed)
    keys = [(f"t{t}", q) for t in range(4) for q in range(4)]
    trace: list[str] = []

    def refused(*_: object) -> None:
        raise OSError(28, "No space left on device")

    def refusing(full: set[tuple[str, int]]) -> Callable[[ConsumeQueue], None]:
        real = ConsumeQueue.write_tail
        return lambda self: refused() if (self.topic, self.queue_id) in full and self.tail is not None else real(self)

    async def put(store: DefaultMessageStore, key: tuple[str, int], n: int) -> None:
        results = await store.put_messages([msg(key[0], b"%d" % i + b"." * rng.randint(0, 200), queue_id=key[1])
                                            for i in range(n)])
        assert results.ok
        have = expected.setdefault(key, [])
        got = store.get_message(*key, store.get_max_offset_in_queue(*key) - n, n, 1 << 30).messages
        have.extend(decode_message(w)[0].commit_log_offset for w in got)
        assert have[-n] == results.append_result.wrote_offset

    def write_half_the_tails(store: DefaultMessageStore) -> None:
        for cq in rng.sample(list(store.queues.tails), len(store.queues.tails) // 2):
            cq.write_tail()

    async def puts_and_writes_behind_it(store: DefaultMessageStore) -> None:
        """What happens between a snapshot and its worker: puts, and maybe tails written by the bound."""
        for key in rng.sample(keys, 3):
            await put(store, key, rng.randint(1, 3))
        if rng.random() < 0.5:
            write_half_the_tails(store)

    def check(store: DefaultMessageStore, where: str) -> None:
        low = store.min_phy_offset
        for (topic, qid), offsets in expected.items():
            kept = [o for o in offsets if o >= low]
            first = store.get_min_offset_in_queue(topic, qid)
            got = store.get_message(topic, qid, first, 100_000, 1 << 30)
            assert [decode_message(w)[0].commit_log_offset for w in got.messages] == kept, (where, topic, qid, trace)
            if not kept or not offsets or offsets[0] >= low:
                assert store.get_max_offset_in_queue(topic, qid) == len(offsets), (where, topic, qid, trace)

    def crash(store: DefaultMessageStore) -> None:
        disk.off = True
        store.close_without_shutdown()
        if store.queues._drain is not None:  # a crashed process runs nothing more (the loop here goes on)
            store.queues._drain.cancel()

    async def power_loss(store: DefaultMessageStore, twice: bool) -> DefaultMessageStore:
        crash(store)
        disk.power_loss()
        for n in range(2 if twice else 1):
            try:
                reopened = DefaultMessageStore(config)
            except Exception as exc:
                raise AssertionError(f"the store does not open after {trace}") from exc
            report = reopened.recovery_report
            end = reopened.max_phy_offset
            for offs in expected.values():
                offs[:] = [o for o in offs if o < end]
            if report.consume_queues_rebuilt and os.environ.get("VERBOSE"):
                print("EVENTS", report.events, "\nTRACE", trace)
            assert report.consume_queues_rebuilt == [], (report.events, trace)
            _bookkeeping_as_a_walk_finds_it(reopened)
            check(reopened, f"reopen {n}")
            if twice and n == 0:  # a second power loss before any checkpoint
                crash(reopened)
                disk.power_loss()
        await reopened.start()
        return reopened

    def covered(store: DefaultMessageStore, where: str) -> None:
        """What a power loss now leaves (each queue file as last fsynced, and the journal the document on disk
        names) holds every entry the document counts, each pointing at its record."""
        root_dir = config.store_path_root_dir
        cp = store.checkpoint.load()[0]
        if cp is None:
            return
        journal: dict[tuple[str, int], dict[int, bytes]] = {}
        if cp.tails is not None:
            records, problem = tail_journal.read(root_dir, cp.tails)
            assert records is not None, (where, problem, trace)
            for topic, qid, first, entries in records:
                for i in range(0, len(entries), 20):
                    journal.setdefault((topic, qid), {})[first + i // 20] = entries[i : i + 20]
        size = config.mapped_file_size_consume_queue
        for topic, qids in cp.queues.items():
            for qid, count in qids.items():
                directory = os.path.realpath(os.path.join(root_dir, "consumequeue", topic, str(qid)))
                names = sorted(n for n in os.listdir(directory) if n.isdigit()) if os.path.isdir(directory) else []
                low = int(names[0]) // 20 if names else 0
                offsets = expected.get((topic, qid), [])
                for pos in range(low, count):
                    if pos < len(offsets) and offsets[pos] >= cp.recovery_offset:
                        continue  # replayed from the log (but its count must still be met: step 2's check)
                    start = pos * 20 - pos * 20 % size
                    image = disk.fsynced.get(os.path.join(directory, f"{start:020d}"), b"")
                    # The journal's entry where it has one: recovery writes it over the file, which may hold an
                    # entry cut since it was fsynced (a put taken back, a truncation) and put again elsewhere
                    entry = journal.get((topic, qid), {}).get(pos) or image[pos * 20 - start : pos * 20 - start + 20]
                    if (len(entry) < 20 or entry == bytes(20)) and os.environ.get("VERBOSE"):
                        cq = store.queues.find(topic, qid)
                        print("UNCOVERED", where, topic, qid, pos, count, "doc tails", cp.tails,
                              "R", cp.recovery_offset,
                              "journal has", sorted(journal.get((topic, qid), {})), "files", names,
                              "mem", cq and (cq.max_offset, cq.tail_from if cq.tail is not None else None,
                                             cq.unflushed_from, cq in store.queues.pending),
                              "expected", offsets, "\nTRACE", trace[-12:], "journals on disk",
                              tail_journal.numbers(root_dir), "store._tails", store._tails and store._tails.seq)
                    assert len(entry) == 20 and entry != bytes(20), (where, topic, qid, pos, count, trace)
                    if pos < len(offsets) and offsets[pos] >= store.min_phy_offset:
                        assert int.from_bytes(entry[:8], "big") == offsets[pos], (where, topic, qid, pos, trace)

    async def main() -> None:
        nonlocal keys
        store = DefaultMessageStore(config)
        await store.start()
        ops = ["spread"] * 6 + ["hot", "periodic", "periodic", "journal", "journal", "full", "bound", "bound",
                                "failed", "journal_refused", "late", "late_journal", "unwritable",
                                "unwritable_full", "truncate", "delete", "refused", "retention", "crash", "crash"]
        for step in range(steps):
            op = rng.choice(ops)
            trace.append(op)
            if op == "spread":
                for key in rng.sample(keys, 5):
                    await put(store, key, rng.randint(1, 3))
            elif op == "hot":
                await put(store, rng.choice(keys), rng.randint(50, 300))
            elif op == "periodic":
                _periodic_checkpoint(store)
            elif op == "journal":
                _due_thorough(store)
                store._write_checkpoint(store._snapshot(thorough=False))
            elif op == "full":
                store.flush_and_checkpoint()
            elif op == "bound":  # the write-behind bound (or a page) writes journaled tails
                write_half_the_tails(store)
            elif op in ("failed", "journal_refused"):
                if rng.random() < 0.5:
                    await put(store, rng.choice(keys), 250)
                thorough = op == "journal_refused" or rng.random() < 0.5
                if thorough:
                    _due_thorough(store)
                snap = store._snapshot(thorough=False)
                await puts_and_writes_behind_it(store)
                with monkeypatch.context() as m:
                    if op == "journal_refused" and snap.tails is not None and not snap.tails.written:
                        m.setattr(tail_journal, "write_atomic", refused)
                    else:
                        m.setattr(store.checkpoint, "write_document", refused)
                    with pytest.raises(OSError):
                        store._write_checkpoint(snap)
                if rng.random() < 0.3:  # a checkpoint on the loop thread before the loop resumes the failed job
                    store.flush_and_checkpoint()
                store._unflushed_again(snap)
            elif op in ("late", "late_journal"):
                if op == "late_journal":
                    _due_thorough(store)
                snap = store._snapshot(thorough=False)
                await puts_and_writes_behind_it(store)
                r = rng.random()
                if r < 0.4:
                    store.flush_and_checkpoint()
                elif r < 0.8:
                    store._unflushed_again(snap)
                if rng.random() < 0.3:
                    trace.append("crash-before-late-worker")
                    store = await power_loss(store, rng.random() < 0.5)
                    covered(store, "after crash-before-late-worker")
                    continue
                store._write_checkpoint(snap)
            elif op in ("unwritable", "unwritable_full"):
                full = set(rng.sample(keys, 6))
                with monkeypatch.context() as m:
                    m.setattr(ConsumeQueue, "write_tail", refusing(full))
                    if op == "unwritable":
                        _periodic_checkpoint(store)
                    else:
                        store.flush_and_checkpoint()
            elif op == "refused":
                fresh = (f"z{step}", 0)
                with monkeypatch.context() as m:
                    m.setattr(MappedFileQueue, "create",
                              lambda self, start, create=MappedFileQueue.create, fresh=fresh: refused()
                              if self.directory.endswith(f"/{fresh[0]}/0") else create(self, start))
                    group = await asyncio.gather(*(store.put_message(msg(k[0], b"r", queue_id=k[1]))
                                                   for k in [*rng.sample(keys, 3), fresh]))
                    assert not any(r.ok for r in group)
                store.group_commit.disk.full = False
            elif op == "delete":
                topic = rng.choice(keys)[0]
                store.delete_topic(topic)
                for key in [k for k in expected if k[0] == topic]:
                    del expected[key]
                keys = [(f"{t}.{step}" if t == topic else t, q) for t, q in keys]
            elif op == "truncate" and store.max_phy_offset > store.checkpoint_offset:
                offsets = sorted(o for offs in expected.values() for o in offs if o >= store.checkpoint_offset)
                if offsets:
                    cut = offsets[len(offsets) // 2]
                    store.replica_log.truncate(cut)
                    for offs in expected.values():
                        offs[:] = [o for o in offs if o < cut]
            elif op == "retention":
                store.clean_expired_files(elapsed_ms=10**12)
            elif op == "crash":
                if rng.random() < 0.5:  # (or not: the power loss takes the records after the log's last flush)
                    store.commit_log.flush()
                store = await power_loss(store, rng.random() < 0.5)
                covered(store, "after crash")
                continue
            _bookkeeping_as_a_walk_finds_it(store)
            covered(store, f"after {op}")
        check(store, "end")
        store.commit_log.flush()
        store = await power_loss(store, True)
        await store.shutdown()

    run(main)


@pytest.mark.parametrize("least_pages", [1, 0, 1000])
@pytest.mark.parametrize("seed", range(int(os.environ.get("SEEDS", "4"))))
def test_the_journal_through_puts_failures_truncations_deletions_retention_and_power_losses(
        root: Path, monkeypatch: pytest.MonkeyPatch, least_pages: int, seed: int) -> None:
    """(``SEEDS`` and ``STEPS`` in the environment run more.)"""
    _model(root, monkeypatch, seed, int(os.environ.get("STEPS", "120")), least_pages)


def test_an_odd_name_in_the_journals_directory_does_not_stop_the_store_opening(root: Path) -> None:
    """``str.isdigit`` is true of '²' (and other non-ASCII digits), which ``int`` refuses: ``tail_journal.numbers``
    raises at open."""
    config = make_config(root)
    os.makedirs(os.path.join(config.store_path_root_dir, tail_journal.DIRECTORY))
    open(os.path.join(config.store_path_root_dir, tail_journal.DIRECTORY, "\u00b2"), "wb").close()
    with reopened_store(config) as store:
        assert store.recovery_report.new_store or store.recovery_report.records_scanned == 0
