"""Subscription groups are kept as topics are (``ConfigJournal``): a change appends one record to
``config/subscriptionGroup.json.changes`` instead of rewriting every group, a reopen replays it, a torn tail is
dropped and odd records are skipped; a file written before the journal still loads."""

from __future__ import annotations

import asyncio
import errno
import json
import os
from pathlib import Path

import pytest

from tests.broker.test_journal_off_loop import SlowOs
from txmq.broker import config_journal
from txmq.broker.config_journal import encode_record
from txmq.broker.subscription_group_manager import SubscriptionGroupConfig, SubscriptionGroupManager


def _updated(manager: SubscriptionGroupManager, *configs: SubscriptionGroupConfig) -> None:
    """``configs`` changed one after another, each durable before the next."""

    async def main() -> None:
        for cfg in configs:
            await manager.update(cfg)

    asyncio.run(main())


def test_a_change_appends_and_leaves_the_snapshot_alone(tmp_path: Path) -> None:
    manager = SubscriptionGroupManager(tmp_path)
    _updated(manager, *(SubscriptionGroupConfig(f"g{i}") for i in range(300)))
    manager.persist()  # the table folded into subscriptionGroup.json
    snapshot = manager.path.stat()
    _updated(manager, SubscriptionGroupConfig("one_more", retry_max_times=3),
             SubscriptionGroupConfig("g1", consume_enable=False))
    assert asyncio.run(manager.delete("g7")) and not asyncio.run(manager.delete("g7"))
    after = manager.path.stat()
    assert (after.st_ino, after.st_size, after.st_mtime_ns) == (snapshot.st_ino, snapshot.st_size,
                                                                snapshot.st_mtime_ns)
    journal = tmp_path / "config" / "subscriptionGroup.json.changes"
    assert 0 < journal.stat().st_size < 1200  # three records, whatever the number of groups
    reopened = SubscriptionGroupManager(tmp_path)
    assert reopened.table == manager.table
    assert reopened.table["one_more"].retry_max_times == 3 and not reopened.table["g1"].consume_enable
    assert "g7" not in reopened.table and "g8" in reopened.table


def test_a_torn_tail_and_odd_records_lose_no_valid_change(tmp_path: Path) -> None:
    manager = SubscriptionGroupManager(tmp_path)
    _updated(manager, SubscriptionGroupConfig("before"))
    journal = manager.journal.journal_path
    with open(journal, "ab") as f:
        for odd in ([1, 2], {"put": "x"}, {"put": [{"groupName": ""}]}, {"delete": [3]}):
            f.write(encode_record(odd))
        f.write(encode_record({"put": [SubscriptionGroupConfig("after").to_json()]}))
        f.write(encode_record({"put": [SubscriptionGroupConfig("torn").to_json()]})[:30])
    reopened = SubscriptionGroupManager(tmp_path)
    assert set(reopened.table) == {"before", "after"}
    _updated(reopened, SubscriptionGroupConfig("next"))  # appended after the torn bytes were dropped
    assert set(SubscriptionGroupManager(tmp_path).table) == {"before", "after", "next"}


def test_a_file_written_before_the_journal_still_loads(tmp_path: Path) -> None:
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "subscriptionGroup.json").write_text(json.dumps({"subscriptionGroupTable": {
        "old": SubscriptionGroupConfig("old", retry_queue_nums=2).to_json()}}))
    manager = SubscriptionGroupManager(tmp_path)
    assert manager.table["old"].retry_queue_nums == 2
    _updated(manager, SubscriptionGroupConfig("new"))
    assert set(SubscriptionGroupManager(tmp_path).table) == {"old", "new"}


def test_a_change_whose_append_fails_is_neither_served_nor_stored_later(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """An answer of failure means "not stored": the change must not stay in the table, where the broker would act
    on it and the next fold into the snapshot would store it after all."""
    manager = SubscriptionGroupManager(tmp_path)
    _updated(manager, SubscriptionGroupConfig("kept", retry_max_times=3))
    journal = manager.journal.journal_path
    journal.unlink()
    journal.mkdir()  # the append fails as a full disk or an IO error makes it fail: OSError
    for change in (SubscriptionGroupConfig("failed"), SubscriptionGroupConfig("kept", retry_max_times=9)):
        with pytest.raises(OSError):
            _updated(manager, change)
    with pytest.raises(OSError):
        asyncio.run(manager.delete("kept"))
    assert set(manager.table) == {"kept"} and manager.table["kept"].retry_max_times == 3
    journal.rmdir()
    journal.touch()
    manager.persist()  # a fold writes the table as it is
    assert set(SubscriptionGroupManager(tmp_path).table) == {"kept"}

    def full(path: Path, data: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device", str(path))

    manager.journal.min_compact, manager.journal.records = 1, 5  # the next change folds the journal in
    monkeypatch.setattr(config_journal, "write_json_atomic", full)
    _updated(manager, SubscriptionGroupConfig("appended_not_folded"))  # its record durable, only the fold failed
    assert "appended_not_folded" in manager.table
    monkeypatch.undo()
    assert "appended_not_folded" in SubscriptionGroupManager(tmp_path).table


def test_a_group_stored_before_names_and_fields_were_checked_is_dropped_alone(tmp_path: Path) -> None:
    """A snapshot or journal written when an illegal name or an ill-typed field was still accepted: that group is
    dropped with a log line, the others load, and the broker starts."""
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "subscriptionGroup.json").write_text(json.dumps({"subscriptionGroupTable": {
        "bad name": {"groupName": "bad name"}, "typed": {"groupName": "typed", "retryQueueNums": [1]},
        "good": SubscriptionGroupConfig("good", retry_max_times=2).to_json()}}))
    (tmp_path / "config" / "subscriptionGroup.json.changes").write_bytes(
        encode_record({"put": [{"groupName": "x" * 300}, SubscriptionGroupConfig("later").to_json()]}))
    manager = SubscriptionGroupManager(tmp_path)
    assert set(manager.table) == {"good", "later"} and manager.table["good"].retry_max_times == 2


def test_a_fold_that_fails_once_the_snapshot_holds_the_change_answers_as_it_stored(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A change whose record folds the journal into the snapshot, the snapshot written but emptying the journal
    failing (its fdatasync's EIO): the change is answered, served and found after a restart alike. It was answered
    as failed and never served, yet the snapshot held it, so a restart brought it back."""
    manager = SubscriptionGroupManager(tmp_path)
    _updated(manager, SubscriptionGroupConfig("g", retry_max_times=5))

    def fdatasync(fd: int) -> None:
        if os.fstat(fd).st_size == 0:  # the journal just emptied by the fold
            raise OSError(errno.EIO, "Input/output error")
        os.fdatasync(fd)

    monkeypatch.setattr(config_journal, "os", SlowOs(fdatasync))
    manager.journal.min_compact, manager.journal.records = 1, 5  # the next change folds the journal in
    try:
        _updated(manager, SubscriptionGroupConfig("g", retry_max_times=1))
        answered = 1
    except OSError:
        answered = 5
    monkeypatch.undo()
    served = manager.table["g"].retry_max_times
    assert (answered, served, SubscriptionGroupManager(tmp_path).table["g"].retry_max_times) == (answered,) * 3
