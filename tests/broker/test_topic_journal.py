"""Topic configs are kept as a snapshot plus a journal of changes (``ConfigJournal``): a creation appends one record
instead of rewriting every topic, a crash loses no answered change, and a torn record corrupts nothing."""

from __future__ import annotations

import os
import random
from pathlib import Path

from tests.killed_child import lines_until_killed
from txmq.broker.config_journal import ConfigJournal, encode_record
from txmq.broker.topic_config_manager import TopicConfigManager
from txmq.topic import TopicConfig

HERE = os.path.dirname(os.path.abspath(__file__))


def _manager(root: Path) -> TopicConfigManager:
    return TopicConfigManager(root, auto_create=True, default_queue_nums=8, delay_levels=18)


def test_a_creation_appends_and_leaves_the_snapshot_alone(tmp_path: Path) -> None:
    manager = _manager(tmp_path)
    for i in range(300):
        manager.update(TopicConfig(f"t{i}", 8, 8))
    manager.persist()  # the table folded into topics.json
    snapshot = manager.path.stat()
    manager.update(TopicConfig("one_more", 8, 8))
    after = manager.path.stat()
    assert (after.st_ino, after.st_size, after.st_mtime_ns) == (snapshot.st_ino, snapshot.st_size,
                                                                snapshot.st_mtime_ns)
    journal = tmp_path / "config" / "topics.json.changes"
    assert 0 < journal.stat().st_size < 400  # one record, whatever the number of topics
    manager.delete("t7")
    reopened = _manager(tmp_path)
    assert "one_more" in reopened.table and "t7" not in reopened.table and "t8" in reopened.table
    assert reopened.table == manager.table


def test_the_journal_is_folded_in_once_it_outgrows_the_table(tmp_path: Path) -> None:
    journal = ConfigJournal(tmp_path / "c.json", min_compact=10)
    journal.load()
    folded = []
    for i in range(25):
        journal.append({"put": [i]}, entries=5, snapshot=lambda i=i: folded.append(i) or {"n": i})
    assert folded == [10, 21]  # 10 records, then fold and start again
    assert journal.records == 3
    snapshot, records = journal.load()
    assert snapshot == {"n": 21} and list(records) == [{"put": [22]}, {"put": [23]}, {"put": [24]}]


def test_a_torn_or_corrupt_tail_is_dropped_and_nothing_before_it(tmp_path: Path) -> None:
    manager = _manager(tmp_path)
    for i in range(5):
        manager.update(TopicConfig(f"t{i}", 8, 8))
    journal = manager.journal.journal_path
    whole = encode_record({"put": [TopicConfig("t5", 8, 8).to_json()]})
    with open(journal, "ab") as f:
        f.write(whole[: len(whole) // 2])  # a write the kill cut short
    reopened = _manager(tmp_path)
    assert {f"t{i}" for i in range(5)} <= set(reopened.table) and "t5" not in reopened.table
    reopened.update(TopicConfig("t6", 8, 8))  # appended after the torn bytes were dropped
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
