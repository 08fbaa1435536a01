"""A store holds at most ``maxOpenConsumeQueueFiles`` consume-queue files open, however many queues it has: the
least recently used are closed and opened again when used. Without the bound a broker holds one descriptor per
consume-queue file, and past the open-file limit every send fails (16,044 at 2,000 topics of 8 queues)."""

from __future__ import annotations

import os

import pytest

from tests.store.store_helpers import make_config, msg, run
from txmq.message import decode_message
from txmq.store import DefaultMessageStore, GetMessageStatus

QUEUES = 40  # topics x queues, each with a consume-queue file of its own
LIMIT = 4


def open_consume_queue_files(root) -> int:
    prefix = os.path.join(str(root), "consumequeue") + os.sep
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{fd}").startswith(prefix):
                count += 1
        except OSError:
            continue
    return count


def test_many_queues_are_written_read_checkpointed_and_recovered_with_few_files_open(root):
    config = make_config(root, max_open_consume_queue_files=LIMIT)

    async def write() -> dict[tuple[str, int], list[bytes]]:
        sent: dict[tuple[str, int], list[bytes]] = {}
        async with DefaultMessageStore(config) as store:
            for i in range(QUEUES * 5):  # round-robin: every put uses a file the pool closed
                topic, qid = f"t{i % (QUEUES // 4)}", (i // (QUEUES // 4)) % 4
                body = f"b{i}".encode()
                assert (await store.put_message(msg(topic, body, queue_id=qid))).ok
                sent.setdefault((topic, qid), []).append(body)
                assert open_consume_queue_files(root) <= LIMIT
            assert len(sent) == QUEUES
            store.flush_and_checkpoint()  # fsyncs files whose descriptors were closed for room
            for (topic, qid), bodies in sent.items():
                got = store.get_message(topic, qid, 0, max_msg_nums=100)
                assert got.status is GetMessageStatus.FOUND and got.queue_offsets == list(range(len(bodies)))
            assert open_consume_queue_files(root) <= LIMIT
        assert open_consume_queue_files(root) == 0  # shutdown closed them all
        return sent

    sent = run(write)

    async def reopen() -> None:
        store = DefaultMessageStore(config)  # loading every queue opens each file once, within the bound
        assert open_consume_queue_files(root) <= LIMIT
        await store.start()
        for (topic, qid), bodies in sent.items():
            assert store.get_max_offset_in_queue(topic, qid) == len(bodies)
            got = store.get_message(topic, qid, 0, max_msg_nums=100)
            assert [decode_message(wire)[0].body for wire in got.messages] == bodies
        assert store.recovery_report.events == []
        await store.shutdown()

    run(reopen)


def test_recovery_after_a_crash_opens_each_consume_queue_file_once(root, monkeypatch):
    """Recovery checks each queue (its count, its entries past the recovery point, its last entry, its first entry
    still in the log) in one visit while its file is open. Done in passes over all queues, with more queues than
    ``maxOpenConsumeQueueFiles`` each pass found the file closed for others' and opened it again: at 10,000 topics
    three opens of each of 80,000 files. Odd names beside the queues' directories (a file named as a queue, a
    non-ASCII digit, a leading zero) are passed over."""
    config = make_config(root, max_open_consume_queue_files=LIMIT)

    async def write() -> dict[tuple[str, int], int]:
        store = DefaultMessageStore(config)
        await store.start()
        sent: dict[tuple[str, int], int] = {}
        for i in range(QUEUES * 3):
            key = (f"t{i % (QUEUES // 4)}", (i // (QUEUES // 4)) % 4)
            assert (await store.put_message(msg(*key[:1], f"b{i}".encode(), queue_id=key[1]))).ok
            sent[key] = sent.get(key, 0) + 1
        store.flush_and_checkpoint()
        for i in range(QUEUES // 2):  # a tail past the checkpoint, dispatched again at the reopen
            key = (f"t{i % (QUEUES // 4)}", i % 4)
            assert (await store.put_message(msg(key[0], b"tail", queue_id=key[1]))).ok
            sent[key] += 1
        store.commit_log.flush()
        store.close_without_shutdown()  # a crash
        return sent

    sent = run(write)
    os.mkdir(os.path.join(str(root), "consumequeue", "t0", "\u00b2"))
    os.mkdir(os.path.join(str(root), "consumequeue", "t0", "07"))  # (int: 7, a directory '7' that is not there)
    with open(os.path.join(str(root), "consumequeue", "t1", "7"), "wb"):
        pass
    prefix = os.path.join(str(root), "consumequeue") + os.sep
    opened: list[str] = []
    real_open = os.open

    def counting(path, *args, **kwargs):
        if str(path).startswith(prefix):
            opened.append(str(path))
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(os, "open", counting)
    store = DefaultMessageStore(config)
    monkeypatch.undo()
    try:
        report = store.recovery_report
        assert not report.clean_shutdown and report.records_scanned == QUEUES // 2
        assert report.consume_queues_rebuilt == []
        assert len(opened) == QUEUES and len(set(opened)) == QUEUES  # each queue's one file, once
        for (topic, qid), count in sent.items():
            assert store.get_max_offset_in_queue(topic, qid) == count
            assert store.get_min_offset_in_queue(topic, qid) == 0
    finally:
        store.close_without_shutdown()


@pytest.mark.parametrize("where", ["topic not UTF-8", "queue id past 32 bits"])
def test_an_odd_directory_under_consumequeue_does_not_stop_checkpoints(root, where):
    """A stray directory whose name is not UTF-8 (listed with surrogates) or a queue directory of 20 digits was
    taken for a queue, whose count goes in every checkpoint document: its encoder refused it, so no checkpoint was
    written again, and shutdown raised past its handler and left the abort file. Both are passed over."""
    base = os.path.join(str(root), "consumequeue")
    os.makedirs(base)
    if where == "topic not UTF-8":
        os.makedirs(os.path.join(os.fsencode(base), b"stray\xff", b"0"))
    else:
        os.makedirs(os.path.join(base, "T", "99999999999999999999"))
    config = make_config(root)

    async def main() -> None:
        store = DefaultMessageStore(config)
        await store.start()
        assert (await store.put_message(msg("T", b"x"))).ok
        try:
            store.flush_and_checkpoint()
        finally:
            await store.shutdown()
        assert not os.path.exists(os.path.join(str(root), "abort"))

    run(main)
