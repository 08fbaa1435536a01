"""A full disk against a real broker on a real tmpfs: over ``diskSpaceWarningLevelRatio`` sends are refused with
SERVICE_NOT_AVAILABLE before the disk is full; with the ratio off, a send the disk cannot take is answered the same
way and stores nothing (no phantom after a restart); once there is room, the producer's retry stores one copy."""

from __future__ import annotations

import os
import time

import pytest
from test_transactions import create_topic, scan_topic

from disk_helpers import fill_disk, leave_for, tmpfs
from txmq import BrokerError, Message, Producer, SendStatus
from txmq.remoting.codes import ResponseCode
from txmq.store.message_store import DISK_CHECK_INTERVAL_S

TOPIC = "disk_full"


def _refused(producer: Producer, body: bytes) -> str:
    with pytest.raises(BrokerError) as err:
        producer.send(Message(TOPIC, body))
    assert err.value.code == ResponseCode.SERVICE_NOT_AVAILABLE, err.value
    return err.value.remark or ""


def _stored(cluster) -> list[bytes]:
    msgs = scan_topic(cluster.namesrv_addr, TOPIC)
    assert [m.queue_offset for m in msgs] == list(range(len(msgs)))  # no hole
    return [m.body for m in msgs]


def test_a_full_disk_refuses_sends_and_a_failed_send_stores_nothing(cluster, tmp_path):
    with tmpfs(tmp_path / "disk") as disk:
        conf = {"storePathRootDir": f"{disk}/store", "mappedFileSizeCommitLog": 1 << 20}
        broker = cluster.start_broker("broker-a", conf)
        try:
            create_topic(cluster, TOPIC, 1)
            with Producer("p_disk", cluster.namesrv_addr) as producer:
                assert producer.send(Message(TOPIC, b"before")).status == SendStatus.SEND_OK
                fill_disk(disk, leave_for(disk, 95))
                time.sleep(DISK_CHECK_INTERVAL_S)
                remark = _refused(producer, b"over the ratio")
                assert "the disk is full" in remark and "diskSpaceWarningLevelRatio 90" in remark

            # The ratio check off: the disk fills up under the send itself (ENOSPC writing the log).
            broker.kill()
            broker = cluster.start_broker("broker-a", {**conf, "diskSpaceWarningLevelRatio": 100})
            fill_disk(disk, 0)
            with Producer("p_disk", cluster.namesrv_addr) as producer:
                remark = _refused(producer, b"n" * 8192)
                assert "the disk is full" in remark and "No space left on device" in remark
            broker.kill()
            broker.start()  # on the still full disk
            assert _stored(cluster) == [b"before"]

            os.unlink(os.path.join(disk, "filler"))
            time.sleep(DISK_CHECK_INTERVAL_S)
            with Producer("p_disk", cluster.namesrv_addr) as producer:
                assert producer.send(Message(TOPIC, b"n" * 8192)).status == SendStatus.SEND_OK
            broker.kill()
            broker.start()
            assert _stored(cluster) == [b"before", b"n" * 8192]
        finally:
            broker.kill()
