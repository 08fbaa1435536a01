"""Topic configs are kept as a snapshot plus a journal of changes (``ConfigJournal``): a creation appends one record
instead of rewriting every topic, a crash loses no answered change, and a torn record corrupts nothing."""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import random
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.killed_child import lines_until_killed
from txmq.broker import config_journal
from txmq.broker.config_journal import ConfigJournal, encode_record
from txmq.broker.topic_config_manager import TopicConfigManager
from txmq.topic import TopicConfig

HERE = os.path.dirname(os.path.abspath(__file__))


def _manager(root: Path) -> TopicConfigManager:
    return TopicConfigManager(root, auto_create=True, default_queue_nums=8, delay_levels=18)


def _updated(manager: TopicConfigManager, *configs: TopicConfig) -> None:
    """``configs`` changed one after another, each durable before the next."""

    async def main() -> None:
        for cfg in configs:
            await manager.update(cfg)

    asyncio.run(main())


def test_a_creation_appends_and_leaves_the_snapshot_alone(tmp_path: Path) -> None:
    manager = _manager(tmp_path)
    _updated(manager, *(TopicConfig(f"t{i}", 8, 8) for i in range(300)))
    manager.persist()  # the table folded into topics.json
    snapshot = manager.path.stat()
    _updated(manager, TopicConfig("one_more", 8, 8))
    after = manager.path.stat()
    assert (after.st_ino, after.st_size, after.st_mtime_ns) == (snapshot.st_ino, snapshot.st_size,
                                                                snapshot.st_mtime_ns)
    journal = tmp_path / "config" / "topics.json.changes"
    assert 0 < journal.stat().st_size < 400  # one record, whatever the number of topics
    assert asyncio.run(manager.delete("t7"))
    reopened = _manager(tmp_path)
    assert "one_more" in reopened.table and "t7" not in reopened.table and "t8" in reopened.table
    assert reopened.table == manager.table


def test_the_journal_is_folded_in_once_it_outgrows_the_table(tmp_path: Path) -> None:
    journal = ConfigJournal(tmp_path / "c.json", min_compact=10)
    journal.load()
    folded = []

    async def main() -> None:
        for i in range(25):
            await journal.append_soon({"put": [i]}, entries=5, snapshot=lambda i=i: folded.append(i) or {"n": i})

    asyncio.run(main())
    assert folded == [10, 21]  # 10 records, then fold and start again
    assert journal.records == 3
    snapshot, records = journal.load()
    assert snapshot == {"n": 21} and list(records) == [{"put": [22]}, {"put": [23]}, {"put": [24]}]


def _torn_after(root: Path, topics: int, torn: str, cut: Callable[[bytes], int]) -> tuple[Path, bytes]:
    """Topics t0..t{topics-1} created, then the record creating ``torn`` cut short at ``cut(record)`` bytes, as a
    kill mid-write leaves it: the journal's path and the torn bytes."""
    manager = _manager(root)
    _updated(manager, *(TopicConfig(f"t{i}", 8, 8) for i in range(topics)))
    journal = manager.journal.journal_path
    whole = encode_record({"put": [TopicConfig(torn, 8, 8).to_json()]})
    with open(journal, "ab") as f:
        f.write(whole[: cut(whole)])
    return journal, whole[: cut(whole)]


def test_a_torn_or_corrupt_tail_is_dropped_and_nothing_before_it(tmp_path: Path) -> None:
    journal, _ = _torn_after(tmp_path, 5, "t5", lambda whole: len(whole) // 2)
    reopened = _manager(tmp_path)
    assert {f"t{i}" for i in range(5)} <= set(reopened.table) and "t5" not in reopened.table
    _updated(reopened, TopicConfig("t6", 8, 8))  # appended after the torn bytes were dropped
    assert "t6" in _manager(tmp_path).table
    # A record whose bytes changed fails its CRC: it and what follows are dropped, not misread.
    assert journal.stat().st_size == 0  # each open folds the journal into the snapshot
    with open(journal, "ab") as f:
        f.write(encode_record({"put": [TopicConfig("t7", 8, 8).to_json()]}).replace(b"t7", b"t8"))
    table = _manager(tmp_path).table
    assert "t6" in table and "t7" not in table and "t8" not in table


def test_a_kill_mid_write_loses_no_created_topic(tmp_path: Path) -> None:
    """A real process creates topics until SIGKILL, five times over one directory: every topic whose creation
    returned is there after each kill, and the files always load."""
    rng = random.Random(33)
    created: set[str] = set()
    for run_id in range(5):
        lines = lines_until_killed(os.path.join(HERE, "topic_writer.py"), [str(tmp_path), f"r{run_id}"],
                                   rng.uniform(0.2, 0.8))
        assert lines, "the child created nothing"
        created.update(lines)
        table = _manager(tmp_path).table
        assert created <= set(table), sorted(created - set(table))[:5]


def _append_raw(journal: Path, *records: object) -> None:
    with open(journal, "ab") as f:
        for record in records:
            f.write(encode_record(record))


def test_odd_records_with_valid_crcs_are_skipped_and_the_valid_ones_kept(tmp_path: Path) -> None:
    """A record that passes its CRC but is not a change this version understands (not an object, a put that is not
    a list of topic configs, a delete that is not a list of names) is skipped with a log line: the broker starts,
    and every valid record before and after it is applied."""
    manager = _manager(tmp_path)
    _updated(manager, TopicConfig("before", 8, 8))
    journal = manager.journal.journal_path
    _append_raw(journal,
                [1, 2, 3], "text", 42, None,
                {"put": "not-a-list"}, {"put": [17, {"readQueueNums": 4}, {"topicName": "t", "perm": "rw"}]},
                {"delete": "before"}, {"delete": [7]},
                {"put": [TopicConfig("after", 4, 4).to_json()], "future": {"x": 1}},
                {"put": [TopicConfig("with_extra", 2, 2).to_json() | {"newField": [1]}]})
    table = _manager(tmp_path).table
    assert {"before", "after", "with_extra"} <= set(table)
    assert table["after"].read_queue_nums == 4 and table["with_extra"].write_queue_nums == 2
    assert "t" not in table  # its perm was no number: the entry skipped, not guessed


def test_a_corrupt_record_inside_the_journal_loses_none_of_the_valid_records_after_it(tmp_path: Path) -> None:
    """Each record is fdatasynced before the next is written, so a crash tears only the last one; a bad record
    followed by valid ones is damage, not a torn write. Dropping everything after it, then folding the journal
    into the snapshot, lost answered topics for good: it is skipped with a log line instead."""
    manager = _manager(tmp_path)
    _updated(manager, TopicConfig("first", 8, 8))
    journal = manager.journal.journal_path
    with open(journal, "ab") as f:
        f.write(encode_record({"put": [TopicConfig("flipped", 8, 8).to_json()]}).replace(b"flipped", b"flopped"))
    _append_raw(journal, {"put": [TopicConfig("later", 8, 8).to_json()]})
    _updated(manager, TopicConfig("last", 8, 8))
    table = _manager(tmp_path).table
    assert {"first", "later", "last"} <= set(table)
    assert "flipped" not in table and "flopped" not in table
    assert "later" in _manager(tmp_path).table  # and still there once the journal was folded


def test_a_crash_between_the_fold_s_snapshot_and_the_journal_s_truncation_changes_nothing(tmp_path: Path) -> None:
    """The snapshot already holds every record the journal still has: replaying them (a put, a delete, a put and
    delete of the same topic, two updates of one) gives the same table, with no deleted topic back."""
    manager = _manager(tmp_path)

    async def main() -> None:
        for i in range(4):
            await manager.update(TopicConfig(f"t{i}", 8, 8))
        await manager.update(TopicConfig("t1", 2, 2))
        assert await manager.delete("t2")
        await manager.update(TopicConfig("t9", 8, 8))
        assert await manager.delete("t9")

    asyncio.run(main())
    journal = manager.journal.journal_path
    kept = journal.read_bytes()
    manager.persist()  # the fold: snapshot replaced, journal emptied
    journal.write_bytes(kept)  # ... as if the crash came before the truncation
    reopened = _manager(tmp_path)
    assert reopened.table == manager.table
    assert reopened.table["t1"].read_queue_nums == 2 and "t2" not in reopened.table and "t9" not in reopened.table


def test_an_update_then_a_torn_update_of_the_same_topic_keeps_the_answered_one(tmp_path: Path) -> None:
    manager = _manager(tmp_path)
    _updated(manager, TopicConfig("t", 8, 8), TopicConfig("t", 4, 4))  # answered
    whole = encode_record({"put": [TopicConfig("t", 2, 2).to_json()]})
    with open(manager.journal.journal_path, "ab") as f:
        f.write(whole[:-1])  # the kill came before its last byte: never answered
    table = _manager(tmp_path).table
    assert (table["t"].read_queue_nums, table["t"].write_queue_nums) == (4, 4)


def test_a_full_disk_at_open_does_not_stop_the_broker_and_a_torn_tail_still_goes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A crash on a full disk, then a start: the fold of the journal into topics.json cannot write the new
    snapshot. The broker used to refuse to start; it now starts from the journal as it is, with the torn tail cut
    off (a truncation needs no space) so later records are not appended after it."""
    journal, torn = _torn_after(tmp_path, 3, "torn", lambda whole: 20)

    def full(path: Path, data: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device", str(path))

    monkeypatch.setattr(config_journal, "write_json_atomic", full)
    reopened = _manager(tmp_path)
    assert {"t0", "t1", "t2"} <= set(reopened.table) and "torn" not in reopened.table
    assert not journal.read_bytes().endswith(torn)
    _updated(reopened, TopicConfig("after", 8, 8))  # appended after the valid records, not after the torn bytes
    monkeypatch.undo()
    table = _manager(tmp_path).table
    assert {"t0", "t1", "t2", "after"} <= set(table) and "torn" not in table


def test_a_change_whose_append_fails_is_neither_served_nor_stored_later(tmp_path: Path) -> None:
    """An answer of failure means "not stored": a creation, update or deletion whose record could not be appended
    must not stay in the table (routes registered, sends accepted) for the next fold to store after all."""
    manager = _manager(tmp_path)
    _updated(manager, TopicConfig("kept", 4, 4))
    journal = manager.journal.journal_path
    journal.unlink()
    journal.mkdir()  # the append fails as a full disk or an IO error makes it fail: OSError

    async def main() -> None:
        with pytest.raises(OSError):
            await manager.update(TopicConfig("failed", 8, 8))
        with pytest.raises(OSError):
            await manager.update(TopicConfig("kept", 8, 8))
        with pytest.raises(OSError):
            await manager.delete("kept")
        assert manager.create_all_absent(["%RETRY%a", "%RETRY%b"], 1)
        with pytest.raises(OSError):
            await manager.durable("%RETRY%a")

    asyncio.run(main())
    assert "failed" not in manager.table and "%RETRY%a" not in manager.table
    assert manager.table["kept"].read_queue_nums == 4
    journal.rmdir()
    journal.touch()
    manager.persist()
    table = _manager(tmp_path).table
    assert "failed" not in table and "%RETRY%a" not in table and table["kept"].read_queue_nums == 4


def test_a_slave_drops_the_master_s_topics_whose_names_are_illegal(tmp_path: Path,
                                                                   caplog: pytest.LogCaptureFixture) -> None:
    """Every name in the table is a legal topic's (a send looks the table up instead of checking the name), the
    master's too: an illegal one, or one that does not parse, is dropped with one log line, the others taken."""
    manager = _manager(tmp_path)
    with caplog.at_level(logging.WARNING, "txmq.broker"):
        asyncio.run(manager.replace_all([TopicConfig(name, 8, 8).to_json() for name in ("orders", "../escape", "a b")]
                                        + [{"readQueueNums": 2}]))
    assert set(manager.table) == {"orders"}
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1 and lines[0].startswith("3 topic configs from the master dropped") and "a b" in lines[0]


def test_durable_returns_only_once_the_topic_is_no_longer_pending(tmp_path: Path) -> None:
    """A creation's record made durable, its future done but the callbacks that settle it not run yet (they run in
    a later turn of the loop): ``durable`` still returns only once the topic has left ``pending``. Returning at
    once, a send retried after it (remoting's ``_once_durable``, gRPC's loop) found the topic still pending and
    retried again without ever yielding: unbounded recursion (a crash) or a loop that never returned."""
    manager = _manager(tmp_path)

    async def main() -> bool:
        assert manager.create_if_absent("Fresh", 4) is not None
        assert "Fresh" in manager.pending
        manager.journal.close()  # on the loop: the writer done, its result queued ahead of the task made next

        async def retried() -> bool:
            await manager.durable("Fresh")
            return "Fresh" in manager.pending

        return await asyncio.ensure_future(retried())

    assert asyncio.run(main()) is False
