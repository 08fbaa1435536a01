"""The store's behaviour through its public API: put, get, queues, time and key lookups, flush, retention."""

from __future__ import annotations

import asyncio
import gc
import os
import re
import threading
import time
import weakref

import pytest

import txmq.store
import txmq.store.mapped_file as mapped_file
from tests.elapsed import advance
from tests.store.store_helpers import SEGMENT, make_config, msg, run
from txmq.errors import StoreError
from txmq.message import MessageConst, MessageSysFlag, decode_message, java_string_hash
from txmq.store import (
    BLANK_MAGIC_CODE,
    DefaultMessageStore,
    FlushDiskType,
    GetMessageStatus,
    PutMessageStatus,
)
from txmq.topic import SYSTEM_TOPICS

pytestmark = pytest.mark.dated  # run again at a fixed month end by make test (Makefile, DATED_AT)


def test_all_names_are_exported():
    for name in txmq.store.__all__:
        assert hasattr(txmq.store, name)
    public = {n for n in dir(txmq.store) if not n.startswith("_") and n[0].isupper()}
    assert public == set(txmq.store.__all__)


def test_put_get_many_topics_and_queues(root):
    config = make_config(root)

    async def main():
        store = DefaultMessageStore(config)
        await store.start()
        sent = {}
        for i in range(400):
            topic, qid = f"topic-{i % 5}", i % 4
            m = msg(topic, f"body-{i}".encode(), queue_id=qid, TAGS=f"tag{i % 3}")
            result = await store.put_message(m)
            assert result.ok
            assert result.append_result.wrote_offset == m.commit_log_offset
            sent.setdefault((topic, qid), []).append((i, result))
        assert store.topics() == {f"topic-{t}" for t in range(5)}
        assert store.queue_ids("topic-0") == [0, 1, 2, 3]
        for (topic, qid), items in sent.items():
            assert store.get_max_offset_in_queue(topic, qid) == len(items)
            got = store.get_message(topic, qid, 0, max_msg_nums=1000)
            assert got.status is GetMessageStatus.FOUND
            assert got.next_begin_offset == len(items)
            assert got.queue_offsets == list(range(len(items)))
            for qoff, (wire, (i, result)) in enumerate(zip(got.messages, items, strict=True)):
                decoded, end = decode_message(wire)
                assert end == len(wire)
                assert decoded.body == f"body-{i}".encode()
                assert decoded.topic == topic and decoded.queue_id == qid and decoded.queue_offset == qoff
                assert decoded.commit_log_offset == result.append_result.wrote_offset
                assert decoded.store_host == config.store_host and decoded.born_host == ("10.0.0.2", 4321)
                assert decoded.offset_msg_id == result.append_result.msg_id
                assert store.get_commit_log_offset_in_queue(topic, qid, qoff) == decoded.commit_log_offset
        await store.shutdown()

    run(main)


def test_segments_roll_and_records_never_span_them(root):
    config = make_config(root)

    async def main():
        store = DefaultMessageStore(config)
        await store.start()
        offsets = []
        for i in range(700):
            result = await store.put_message(msg(body=bytes([i % 251]) * (200 + i % 300)))
            offsets.append((result.append_result.wrote_offset, result.append_result.wrote_bytes))
        assert store.runtime_info()["segments"] >= 5
        for off, size in offsets:
            assert off // SEGMENT == (off + size - 1) // SEGMENT, "a record spans two segments"
        # The first segment ends with a BLANK marker covering the rest of it.
        first_in_second = min(off for off, _ in offsets if off >= SEGMENT)
        last_in_first = max((off, size) for off, size in offsets if off < SEGMENT)
        assert first_in_second == SEGMENT
        with open(os.path.join(config.store_path_root_dir, "commitlog", "0" * 20), "rb") as f:
            f.seek(sum(last_in_first))
            marker = f.read(8)
        assert int.from_bytes(marker[:4], "big") == SEGMENT - sum(last_in_first)
        assert int.from_bytes(marker[4:], "big") == BLANK_MAGIC_CODE
        got = store.get_message("T", 0, 0, max_msg_nums=700, max_total_bytes=1 << 30)
        assert got.message_count == 700
        for i, wire in enumerate(got.messages):
            assert decode_message(wire)[0].body == bytes([i % 251]) * (200 + i % 300)
        for i, (off, _) in enumerate(offsets):
            assert store.look_message_by_offset(off).body == bytes([i % 251]) * (200 + i % 300)
        await store.shutdown()

    run(main)


def test_get_message_statuses_and_limits(root):
    async def main():
        store = DefaultMessageStore(make_config(root))
        await store.start()
        assert store.get_message("nope", 0, 0).status is GetMessageStatus.NO_MATCHED_LOGIC_QUEUE
        for i in range(10):
            await store.put_message(msg(body=b"%03d" % i + b"." * 97))
        r = store.get_message("T", 0, 10)
        assert (r.status, r.next_begin_offset) == (GetMessageStatus.OFFSET_OVERFLOW_ONE, 10)
        r = store.get_message("T", 0, 15)
        assert (r.status, r.next_begin_offset) == (
            GetMessageStatus.OFFSET_OVERFLOW_BADLY,
            0,
        )  # as RocketMQ: min when min is 0
        r = store.get_message("T", 0, 3, max_msg_nums=4)
        assert (r.status, r.message_count, r.next_begin_offset) == (GetMessageStatus.FOUND, 4, 7)
        assert (r.min_offset, r.max_offset) == (0, 10)
        one = len(r.messages[0])
        r = store.get_message("T", 0, 0, max_total_bytes=one * 3 + 1)
        assert (r.message_count, r.next_begin_offset) == (3, 3)
        assert r.buffer_total_size == one * 3
        r = store.get_message("T", 0, 0, max_total_bytes=1)  # always at least one message
        assert r.message_count == 1
        with pytest.raises(StoreError):
            store.read_record(store.max_phy_offset)
        with pytest.raises(StoreError):
            store.read_record(-1)
        await store.shutdown()
        assert (await store.put_message(msg())).status is PutMessageStatus.SERVICE_NOT_AVAILABLE

    run(main)


def test_tag_filter_and_prepared_records(root):
    async def main():
        store = DefaultMessageStore(make_config(root))
        await store.start()
        for i in range(30):
            await store.put_message(msg(body=b"%d" % i, TAGS="A" if i % 3 == 0 else "B"))
        prepared = msg(body=b"half", KEYS="tx-key")
        prepared.sys_flag = MessageSysFlag.TRANSACTION_PREPARED_TYPE
        result = await store.put_message(prepared)
        assert result.ok and result.append_result.logics_offset == 0
        committed = msg(body=b"commit", TAGS="A")
        committed.sys_flag = MessageSysFlag.TRANSACTION_COMMIT_TYPE
        assert (await store.put_message(committed)).append_result.logics_offset == 30
        assert store.get_max_offset_in_queue("T", 0) == 31  # the prepared record has no entry
        assert store.look_message_by_offset(result.append_result.wrote_offset).body == b"half"
        assert [m.body for m in store.query_message("T", "tx-key")] == [b"half"]  # but it is indexed

        code_a = java_string_hash("A")
        got = store.get_message("T", 0, 0, max_msg_nums=100, tags_filter=lambda code: code == code_a)
        bodies = [decode_message(w)[0].body for w in got.messages]
        assert bodies == [b"%d" % i for i in range(0, 30, 3)] + [b"commit"]
        none = store.get_message("T", 0, 1, max_msg_nums=1, tags_filter=lambda code: False)
        assert none.status is GetMessageStatus.NO_MATCHED_MESSAGE and none.next_begin_offset > 1
        await store.shutdown()

    run(main)


def test_batch_put_is_one_write_with_consecutive_offsets(root):
    async def main():
        store = DefaultMessageStore(make_config(root))
        await store.start()
        await store.put_message(msg())
        batch = [msg(body=b"%d" % i * 50, KEYS=f"b{i}") for i in range(400)]  # ~2 segments: rolls inside
        result = await store.put_messages(batch)
        assert result.ok and result.append_result.msg_num == 400
        assert result.append_result.logics_offset == 1
        assert [m.queue_offset for m in batch] == list(range(1, 401))
        assert result.append_result.wrote_offset == batch[0].commit_log_offset
        assert store.runtime_info()["segments"] >= 2
        reads = []
        pread = mapped_file.MappedFile.read
        mapped_file.MappedFile.read = lambda mf, pos, size: reads.append(mf) or pread(mf, pos, size)
        try:
            got = store.get_message("T", 0, 1, max_msg_nums=400, max_total_bytes=1 << 30)
        finally:
            mapped_file.MappedFile.read = pread
        assert [decode_message(w)[0].body for w in got.messages] == [m.body for m in batch]
        log_reads = [mf for mf in reads if mf in store.commit_log.queue.files]
        # One read per run of records within a commit-log segment and a consume-queue file (64 entries here).
        assert 0 < len(log_reads) <= 400 // 64 + 1 + store.runtime_info()["segments"]
        assert [m.body for m in store.query_message("T", "b399")] == [batch[399].body]
        await store.shutdown()

    run(main)


def test_a_put_set_on_the_store_is_the_one_called(root):
    """Compiled, the store is an extension type whose put methods are C calls between themselves: one set on the
    instance (as tests and tools wrap them) is still the one ``put_message`` reaches."""
    async def main():
        async with DefaultMessageStore(make_config(root)) as store:
            seen: list[int] = []
            real_put = store.put_messages

            def counted(msgs, answer=None, waiter=None):
                seen.append(len(msgs))
                return real_put(msgs, answer, waiter)
            store.put_messages = counted  # type: ignore[method-assign]
            result = await store.put_message(msg(body=b"wrapped"))
            assert result.ok and seen == [1]
            del store.put_messages
            assert (await store.put_message(msg(body=b"plain"))).ok and seen == [1]

    run(main)


def test_illegal_messages_are_refused(root):
    async def main():
        store = DefaultMessageStore(make_config(root, max_message_size=1000))
        await store.start()
        # each refusal says why (the send's answer carries it): the size and the limit that was passed
        big = await store.put_message(msg(body=b"x" * 2000))
        assert big.status is PutMessageStatus.MESSAGE_ILLEGAL
        assert re.fullmatch(r"the stored record \(body, properties and header\) is \d+ bytes: it must fit "
                            r"maxMessageSize 1000", big.remark), big.remark
        big_props = await store.put_message(msg(big="y" * 40000))
        assert big_props.status is PutMessageStatus.PROPERTIES_SIZE_EXCEEDED and "properties" in big_props.remark
        assert (await store.put_message(msg("t" * 200))).status is PutMessageStatus.MESSAGE_ILLEGAL
        for bad_topic in ("", "..", "a/b"):
            refused = await store.put_message(msg(bad_topic))
            assert refused.status is PutMessageStatus.MESSAGE_ILLEGAL
            assert refused.remark == f"topic {bad_topic!r} queue 0 cannot be stored"
        assert (await store.put_message(msg(queue_id=-1))).remark == "topic 'T' queue -1 cannot be stored"
        assert store.max_phy_offset == 0
        await store.shutdown()
        # a record bigger than a commit-log segment is refused by the segment, and says so
        store = DefaultMessageStore(make_config(root, max_message_size=4 * SEGMENT))
        await store.start()
        over = await store.put_message(msg(body=b"x" * (SEGMENT + 1)))
        assert over.status is PutMessageStatus.MESSAGE_ILLEGAL and "a commit-log segment" in over.remark
        assert "mappedFileSizeCommitLog" in over.remark
        await store.shutdown()

    run(main)


def test_offset_in_queue_by_time(root):
    clock = [1_000_000]

    async def main():
        store = DefaultMessageStore(make_config(root))
        store.clock.wall_ns = lambda: clock[0] * 1_000_000
        await store.start()
        for i in range(50):
            clock[0] = 1_000_000 + i * 1000
            await store.put_message(msg())
        assert store.get_offset_in_queue_by_time("T", 0, 0) == 0
        assert store.get_offset_in_queue_by_time("T", 0, 1_000_000) == 0
        assert store.get_offset_in_queue_by_time("T", 0, 1_010_000) == 10
        assert store.get_offset_in_queue_by_time("T", 0, 1_010_001) == 11
        assert store.get_offset_in_queue_by_time("T", 0, 1_049_000) == 49
        assert store.get_offset_in_queue_by_time("T", 0, 2_000_000) == 50
        clock[0] = 500  # the clock steps back: a record is stamped with the wall clock of the moment, as RocketMQ's
        result = await store.put_message(msg())
        assert result.append_result.store_timestamp == store.last_store_timestamp == 500
        assert decode_message(store.get_message("T", 0, 50).messages[0])[0].store_timestamp == 500
        assert store.get_offset_in_queue_by_time("T", 0, 1_010_000) == 10
        await store.shutdown()

    run(main)


def test_query_by_key_and_uniq_key_with_hash_collisions(root):
    async def main():
        store = DefaultMessageStore(make_config(root, max_hash_slot_num=4, max_index_num=50))
        await store.start()
        for i in range(300):
            props = {
                MessageConst.KEYS: f"order-{i} customer-{i % 7}",
                MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX: f"U{i:04d}",
            }
            await store.put_message(msg("A" if i % 2 else "B", b"%d" % i, **props))
        assert store.runtime_info()["index_files"] > 5
        assert [m.body for m in store.query_message("B", "order-10")] == [b"10"]
        assert store.query_message("A", "order-10") == []  # the key belongs to topic B
        assert [m.body for m in store.query_message("A", "U0011")] == [b"11"]
        by_customer = store.query_message("A", "customer-3", max_num=100)
        expected = {b"%d" % i for i in range(300) if i % 2 and i % 7 == 3}
        assert {m.body for m in by_customer} == expected
        assert len(store.query_message("A", "customer-3", max_num=5)) == 5
        first = by_customer[-1].store_timestamp
        assert store.query_message("A", "customer-3", begin_ts=first + 10**9) == []
        await store.shutdown()
        reopened = DefaultMessageStore(make_config(root, max_hash_slot_num=4, max_index_num=50))
        assert [m.body for m in reopened.query_message("B", "order-298")] == [b"298"]
        await reopened.shutdown()

    run(main)


def test_dispatchers_and_arrival_listeners(root):
    seen, arrivals = [], []

    async def main():
        store = DefaultMessageStore(make_config(root))
        store.add_dispatcher(seen.append)
        store.add_arrival_listener(lambda t, q, m: arrivals.append((t, q, m)))
        await store.start()
        await store.put_message(msg("X", KEYS="a b", TAGS="tg"))
        await store.put_messages([msg("X"), msg("X", queue_id=2)])
        await store.shutdown()

    run(main)
    assert [(r.topic, r.queue_id, r.consume_queue_offset) for r in seen] == [("X", 0, 0), ("X", 0, 1), ("X", 2, 0)]
    assert seen[0].keys == "a b" and seen[0].tags_code == java_string_hash("tg")
    assert seen[0].msg_size == seen[1].commit_log_offset
    assert arrivals == [("X", 0, 1), ("X", 0, 2), ("X", 2, 1)]


def test_delete_topic(root):
    async def main():
        store = DefaultMessageStore(make_config(root))
        await store.start()
        await store.put_message(msg("gone"))
        await store.put_message(msg("kept"))
        store.delete_topic("gone")
        assert store.topics() == {"kept"}
        assert store.get_message("gone", 0, 0).status is GetMessageStatus.NO_MATCHED_LOGIC_QUEUE
        store.close_without_shutdown()  # a crash right after: the topic must not come back
        reopened = DefaultMessageStore(make_config(root))
        assert reopened.topics() == {"kept"} and reopened.recovery_report.consume_queues_rebuilt == []
        await reopened.shutdown()

    run(main)


def test_clean_unused_topic_drops_what_the_table_lacks_but_never_a_system_topic(root):
    async def main():
        store = DefaultMessageStore(make_config(root))
        await store.start()
        topics = ["kept", "gone", "%RETRY%g", "%DLQ%old", *SYSTEM_TOPICS]
        for topic in topics:
            await store.put_message(msg(topic))
        assert store.clean_unused_topic({"kept", "%RETRY%g"}) == ["%DLQ%old", "gone"]
        left = set(topics) - {"%DLQ%old", "gone"}
        assert store.topics() == left
        assert not os.path.exists(os.path.join(root, "consumequeue", "gone"))
        assert store.clean_unused_topic({"kept", "%RETRY%g"}) == []
        store.close_without_shutdown()  # a crash right after: the topics must not come back
        reopened = DefaultMessageStore(make_config(root))
        assert reopened.topics() == left and reopened.recovery_report.consume_queues_rebuilt == []
        await reopened.shutdown()

    run(main)


def test_a_topic_name_never_builds_a_path_outside_the_store(root):
    async def main():
        outside = root.parent / "victim"
        outside.mkdir()
        store = DefaultMessageStore(make_config(root))
        await store.start()
        await store.put_message(msg("%RETRY%"))  # consumequeue/%RETRY% exists, so %RETRY%/../.. resolves
        for name in ("%RETRY%/../../../victim", "..", ""):
            with pytest.raises(StoreError, match="consume-queue directory"):
                store.delete_topic(name)
            with pytest.raises(StoreError):
                store.queues.find_or_create(name, 0)
        assert outside.is_dir() and store.topics() == {"%RETRY%"}
        await store.shutdown()

    run(main)


def test_async_context_manager(root):
    async def main():
        async with DefaultMessageStore(make_config(root)) as store:
            await store.put_message(msg(body=b"ctx"))
        assert (await store.put_message(msg())).status is PutMessageStatus.SERVICE_NOT_AVAILABLE
        reopened = DefaultMessageStore(make_config(root))
        assert reopened.recovery_report.clean_shutdown
        assert reopened.look_message_by_offset(0).body == b"ctx"
        await reopened.aclose()

    run(main)


def test_store_directory_is_locked(root):
    async def main():
        store = DefaultMessageStore(make_config(root))
        with pytest.raises(StoreError, match="another process"):
            DefaultMessageStore(make_config(root))
        await store.shutdown()
        DefaultMessageStore(make_config(root)).close_without_shutdown()

    run(main)


def test_sync_flush_group_commit_shares_fsyncs(root, monkeypatch):
    config = make_config(root, flush_disk_type=FlushDiskType.SYNC_FLUSH)
    real_fsync = mapped_file.fsync_fd

    def disk_with_latency(fd):  # a 2 ms disk, so the test does not depend on how busy the machine is
        time.sleep(0.002)
        real_fsync(fd)

    monkeypatch.setattr(mapped_file, "fsync_fd", disk_with_latency)

    async def main():
        store = DefaultMessageStore(config)
        await store.start()
        results = await asyncio.gather(*(store.put_message(msg(queue_id=i % 4)) for i in range(600)))
        assert all(r.status is PutMessageStatus.PUT_OK for r in results)
        info = store.runtime_info()
        assert info["appends"] == 600
        assert 0 < info["fsyncs"] < 600 / 4, info
        assert info["records_per_fsync"] > 4
        assert store.flushed_offset == store.max_phy_offset
        await store.shutdown()

    run(main)


@pytest.mark.parametrize("replicated", [False, True])
def test_an_answered_sync_flush_group_is_freed_without_the_cyclic_collector(root, replicated):
    """Once answered, nothing of a group waiting for its fsync (and replication) is left in a reference cycle: its
    puts, messages and their answers go by reference counting, not by a full collection much later."""
    config = make_config(root, flush_disk_type=FlushDiskType.SYNC_FLUSH)

    class Answer:  # a put's answer the test can watch die
        def __call__(self, result):
            return result.status

    async def main():
        store = DefaultMessageStore(config)
        if replicated:
            async def acked(status=PutMessageStatus.PUT_OK):
                return status
            store.replicate = lambda end: asyncio.ensure_future(acked())
        await store.start()
        answers = [Answer() for _ in range(3)]
        gone = [weakref.ref(a) for a in answers]
        puts = [store.put_messages([msg(queue_id=i)], answer) for i, answer in enumerate(answers)]
        assert await asyncio.gather(*puts) == [PutMessageStatus.PUT_OK] * 3
        del answers, puts
        await asyncio.sleep(0)
        assert [ref() for ref in gone] == [None, None, None]
        await store.shutdown()

    gc.disable()
    try:
        run(main)
    finally:
        gc.enable()


def test_a_new_queue_directory_is_made_durable_with_its_parents(root, monkeypatch):
    """The checkpoint after a new topic's first message fsyncs the queue's directory and the directories its
    creation changed (``consumequeue/`` gained ``<topic>/``, which gained ``<queue id>/``), once."""
    synced: list[str] = []
    real_fsync_dir = mapped_file.fsync_dir

    def recording(path: str) -> None:
        synced.append(os.path.relpath(path, root))
        real_fsync_dir(path)
    monkeypatch.setattr(mapped_file, "fsync_dir", recording)

    async def main():
        store = DefaultMessageStore(make_config(root))
        await store.start()
        assert (await store.put_message(msg(topic="fresh", queue_id=2))).status is PutMessageStatus.PUT_OK
        store.flush_and_checkpoint()
        cq = os.path.join("consumequeue", "fresh")
        assert {os.path.join(cq, "2"), cq, "consumequeue"} <= set(synced)
        synced.clear()
        assert (await store.put_message(msg(topic="fresh", queue_id=2))).status is PutMessageStatus.PUT_OK
        store.flush_and_checkpoint()
        assert not any(path.startswith(cq) for path in synced)  # nothing new in those directories
        await store.shutdown()

    run(main)


def test_sync_flush_timeout(root, monkeypatch):
    """An fsync held until the put was answered: the answer is FLUSH_DISK_TIMEOUT whatever the machine's speed (a
    real fsync beside it could itself pass 50 ms on a loaded machine), and the record is stored all the same."""
    config = make_config(root, flush_disk_type=FlushDiskType.SYNC_FLUSH, sync_flush_timeout_ms=50)
    real_fsync = mapped_file.fsync_fd
    answered = threading.Event()

    def held_fsync(fd):
        answered.wait(10)
        real_fsync(fd)

    async def main():
        store = DefaultMessageStore(config)
        await store.start()
        monkeypatch.setattr(mapped_file, "fsync_fd", held_fsync)
        result = await store.put_message(msg(body=b"slow"))
        answered.set()
        assert result.status is PutMessageStatus.FLUSH_DISK_TIMEOUT
        assert store.look_message_by_offset(result.append_result.wrote_offset).body == b"slow"  # still written
        assert store.runtime_info()["flush_timeouts"] == 1
        monkeypatch.setattr(mapped_file, "fsync_fd", real_fsync)
        await store.shutdown()

    run(main)


def test_async_flush_flushes_in_the_background(root):
    async def main():
        store = DefaultMessageStore(make_config(root, flush_interval_commit_log_ms=500))
        await store.start()
        await store.put_message(msg())
        assert store.flushed_offset == 0  # acknowledged before any fsync
        for _ in range(300):
            if store.flushed_offset == store.max_phy_offset:
                break
            await asyncio.sleep(0.01)
        assert store.flushed_offset == store.max_phy_offset
        await store.shutdown()

    run(main)


def test_retention_deletes_old_segments_and_advances_queue_minimum(root):
    config = make_config(root, file_reserved_time_hours=1)

    async def main():
        store = DefaultMessageStore(config)
        await store.start()
        i = 0
        while len(store.commit_log.queue.files) < 4:  # three full segments, and the first record of a fourth
            await store.put_message(msg(body=b"%05d" % i + b"." * 200, KEYS=f"k{i}"))
            i += 1
        advance(store, 2 * 3600)  # two hours pass by the store's elapsed-time account: those are older than 1 h
        for n in range(i, 1200):
            await store.put_message(msg(body=b"%05d" % n + b"." * 200, KEYS=f"k{n}"))
        segments = sorted(os.listdir(os.path.join(config.store_path_root_dir, "commitlog")))
        assert len(segments) >= 5
        assert store.clean_expired_files() == 0  # nothing is below the checkpoint yet
        store.flush_and_checkpoint()
        cq_files_before = len(os.listdir(os.path.join(config.store_path_root_dir, "consumequeue", "T", "0")))
        assert store.clean_expired_files() == 3
        assert store.min_phy_offset == int(segments[3])
        min_q = store.get_min_offset_in_queue("T", 0)
        assert min_q > 0 and store.get_max_offset_in_queue("T", 0) == 1200
        cq_files_after = len(os.listdir(os.path.join(config.store_path_root_dir, "consumequeue", "T", "0")))
        assert cq_files_after < cq_files_before
        r = store.get_message("T", 0, 0)
        assert (r.status, r.next_begin_offset) == (GetMessageStatus.OFFSET_TOO_SMALL, min_q)
        r = store.get_message("T", 0, min_q, max_msg_nums=2000, max_total_bytes=1 << 30)
        assert r.message_count == 1200 - min_q
        assert decode_message(r.messages[0])[0].body.startswith(b"%05d" % min_q)
        assert store.query_message("T", "k0") == []
        assert [m.body[:5] for m in store.query_message("T", "k1199")] == [b"01199"]
        assert store.clean_expired_files() == 0  # the rest is young
        await store.shutdown()
        reopened = DefaultMessageStore(config)
        assert reopened.get_min_offset_in_queue("T", 0) == min_q
        assert reopened.recovery_report.events == []
        await reopened.shutdown()

    run(main)


def test_consume_queue_run_crosses_file_boundaries(tmp_path):
    """A batch writes its consume-queue entries as one run; a run that spans files is split, never lost."""
    from txmq.store.consume_queue_store import ConsumeQueueStore

    queues = ConsumeQueueStore(str(tmp_path), 5 * 20, threading.Lock(), 64, 0)  # five entries per file, no buffer
    cq = queues.find_or_create("T", 0)
    cq.put_run(0, [(1000 + i, 100 + i, i) for i in range(12)])
    cq.put_run(12, [(2000, 7, 99)])
    cq.put(13, 3000, 8, 98)
    assert cq.max_offset == 14
    assert [cq.entry(i) for i in range(14)] == [(1000 + i, 100 + i, i) for i in range(12)] + [(2000, 7, 99),
                                                                                            (3000, 8, 98)]
    assert len(cq.files.files) == 3
    cq.close()


async def _started_with_a_message(tmp_path) -> DefaultMessageStore:
    """A store started in ``tmp_path`` holding one message: its shutdown has background work to stop."""
    store = DefaultMessageStore(make_config(tmp_path))
    await store.start()
    assert (await store.put_message(msg())).ok
    return store


def _closed(store: DefaultMessageStore) -> bool:
    """The flush thread stopped and the abort file removed: the store's close ran to its end."""
    return store._flush_service is None and not os.path.exists(store._abort_path)


def test_a_shutdown_cancelled_as_it_stops_the_background_work_closes_the_store_all_the_same(tmp_path):
    """A timeout around a broker's stop can cancel the store's shutdown while it waits for its background tasks:
    it closed nothing then (the flush thread running, the files open, the abort file kept) and a second shutdown
    returned at once. It closes the store, then raises the cancel."""

    async def go() -> None:
        store = await _started_with_a_message(tmp_path)
        stopping = asyncio.create_task(store.shutdown())
        await asyncio.sleep(0)  # the shutdown waits for its background tasks now
        stopping.cancel()
        await asyncio.wait([stopping])
        assert stopping.cancelled()
        assert _closed(store)

    run(go)


def test_a_shutdown_cancelled_twice_closes_the_store_all_the_same(tmp_path):
    """A second cancel (a caller's timeout, then the task cancelled again as its loop ends) reached the shutdown while
    it waited out the first one's background tasks: it stopped there, the flush thread running, the files open and
    the abort file kept, and a shutdown called again returned at once. It closes the store, then raises the cancel."""

    async def go() -> None:
        store = await _started_with_a_message(tmp_path)
        stopping = asyncio.create_task(store.shutdown())
        await asyncio.sleep(0)  # the shutdown waits for its background tasks now
        stopping.cancel()
        await asyncio.sleep(0)  # it caught the cancel and waits for them again
        stopping.cancel()
        await asyncio.wait([stopping])
        assert stopping.cancelled()
        assert _closed(store)

    run(go)


def test_a_second_shutdown_during_the_first_waits_for_the_store_to_close(tmp_path):
    """A shutdown called while another runs (a cancelled stop's caller closing again) returned at once, before the
    store was closed: whoever went on after it (a reopen of the same files) found the flush thread still running.
    It returns once the store is closed."""

    async def go() -> None:
        store = await _started_with_a_message(tmp_path)
        first = asyncio.create_task(store.shutdown())
        await asyncio.sleep(0)
        await store.shutdown()
        assert _closed(store)
        await first

    run(go)
