"""A full disk against a real broker on a real tmpfs: over ``diskSpaceWarningLevelRatio`` sends are refused with
SERVICE_NOT_AVAILABLE before the disk is full; with the ratio off, a send the disk cannot take (its record, or the
new index file it needs) is answered the same way and stores nothing: no phantom after a restart on the full disk,
no hole; once there is room, the producer's retry stores one copy."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from tests.disk_helpers import fill_disk, leave_for, tmpfs
from tests.e2e.test_transactions import create_topic, scan_topic
from txmq import Admin, BrokerError, Message, Producer, SendStatus
from txmq.remoting.codes import ResponseCode
from txmq.store.group_commit import DISK_CHECK_INTERVAL_S

TOPIC = "disk_full"


def _send(cluster, body: bytes) -> None:
    with Producer("p_disk", cluster.namesrv_addr) as producer:
        assert producer.send(Message(TOPIC, body)).status == SendStatus.SEND_OK


def _refused(cluster, body: bytes) -> str:
    with Producer("p_disk", cluster.namesrv_addr) as producer, pytest.raises(BrokerError) as err:
        producer.send(Message(TOPIC, body))
    assert err.value.code == ResponseCode.SERVICE_NOT_AVAILABLE, err.value
    return err.value.remark or ""


def _stored(cluster) -> list[bytes]:
    msgs = scan_topic(cluster.namesrv_addr, TOPIC)
    assert [m.queue_offset for m in msgs] == list(range(len(msgs)))  # no hole
    return [m.body for m in msgs]


def _fails_then_retried(cluster, broker, disk: str, before: list[bytes], body: bytes) -> None:
    """The send of ``body`` on the filled disk stores nothing, across a restart; freed, its retry stores one."""
    remark = _refused(cluster, body)
    assert "the disk is full" in remark and "No space left on device" in remark, remark
    broker.stop()  # a clean stop on the full disk: it cannot checkpoint, it still stops
    assert broker.popen is not None and broker.popen.returncode == 0
    broker.start()  # on the still full disk
    assert _stored(cluster) == before
    os.unlink(os.path.join(disk, "filler"))
    time.sleep(DISK_CHECK_INTERVAL_S)
    _send(cluster, body)
    broker.kill()
    broker.start()
    assert _stored(cluster) == [*before, body]


def test_sends_are_refused_over_the_ratio_and_a_send_hitting_enospc_stores_nothing(cluster, tmp_path: Path):
    with tmpfs(tmp_path / "disk") as disk:
        conf = {"storePathRootDir": f"{disk}/store", "mappedFileSizeCommitLog": 1 << 20}
        broker = cluster.start_broker("broker-a", conf)
        try:
            create_topic(cluster, TOPIC, 1)
            _send(cluster, b"before")
            fill_disk(disk, leave_for(disk, 95))
            time.sleep(DISK_CHECK_INTERVAL_S)
            remark = _refused(cluster, b"over the ratio")
            assert "the disk is full" in remark and "diskSpaceWarningLevelRatio 90" in remark, remark
            with Admin(cluster.namesrv_addr) as admin:
                store = next(iter(admin.stats().values()))["store"]
            assert store["disk_full"] == 1 and store["disk_used_percent"] >= 95, store

            # The ratio check off: the disk fills up under the send itself (ENOSPC writing the log).
            broker.kill()
            broker = cluster.start_broker("broker-a", {**conf, "diskSpaceWarningLevelRatio": 100})
            fill_disk(disk, 0)
            _fails_then_retried(cluster, broker, disk, [b"before"], b"n" * 8192)
        finally:
            broker.kill()


def test_a_send_whose_new_index_file_does_not_fit_stores_nothing(cluster, tmp_path: Path):
    with tmpfs(tmp_path / "disk") as disk:
        # Index files of 64 entries and 400 KB of slots: the 64th message needs a new one, which 64 KB cannot hold.
        broker = cluster.start_broker("broker-a", {"storePathRootDir": f"{disk}/store", "maxIndexNum": 64,
                                                   "maxHashSlotNum": 100_000, "diskSpaceWarningLevelRatio": 100})
        try:
            create_topic(cluster, TOPIC, 1)
            before = [f"m{i}".encode() for i in range(63)]  # one UNIQ_KEY each: the file's 63 entries
            for body in before:
                _send(cluster, body)
            index = f"{disk}/store/index"
            files = os.listdir(index)
            fill_disk(disk, 64 * 1024)
            _fails_then_retried(cluster, broker, disk, before, b"needs a new index file")
            assert len(os.listdir(index)) == len(files) + 1  # made by the retry; none left by the failed send
        finally:
            broker.kill()
