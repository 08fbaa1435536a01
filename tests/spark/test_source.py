"""The reader: batch reads see exactly the committed messages; streams restart from their checkpoint without
loss or duplicates, also after SIGKILL of the driver."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.spark.spark_helpers import create_topic, wait_no_pending
from txmq import LocalTransactionState, Message, Producer, TransactionProducer

CHILD = Path(__file__).parent / "child_driver.py"
# the child imports the suite's helpers as the package they are (tests.spark...): the repository on its path
CHILD_ENV = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}


class Decider:
    """Local transactions by body: c… commits, r… rolls back, u… is UNKNOWN then commits on check, x… is
    UNKNOWN then rolls back on check."""

    def execute_local_transaction(self, msg: Message, arg: Any) -> LocalTransactionState:
        return {b"c": LocalTransactionState.COMMIT, b"r": LocalTransactionState.ROLLBACK}.get(
            msg.body[:1], LocalTransactionState.UNKNOWN)

    def check_local_transaction(self, msg: Message) -> LocalTransactionState:
        return LocalTransactionState.COMMIT if msg.body[:1] == b"u" else LocalTransactionState.ROLLBACK


def send_transactions(cluster: Any, topic: str, n: int, prefix: str = "") -> set[bytes]:
    """n transactions of each kind, plus n plain messages; returns the bodies that must become visible."""
    expected = set()
    with TransactionProducer(f"tx-{topic}", Decider(), cluster.namesrv_addr) as tp:
        for i in range(n):
            for kind in "crux":
                body = f"{kind}{prefix}{i}".encode()
                tp.send_message_in_transaction(Message(topic, body, keys=f"k{i}", tags=kind))
                if kind in "cu":
                    expected.add(body)
        with Producer(f"plain-{topic}", cluster.namesrv_addr) as p:
            for i in range(n):
                body = f"p{prefix}{i}".encode()
                p.send(Message(topic, body, properties={"n": str(i)}))
                expected.add(body)
        wait_no_pending(cluster, topic)
    return expected


def test_batch_read_is_exactly_the_committed_messages(spark: Any, txmq_cluster: Any) -> None:
    create_topic(txmq_cluster, "sp-batch", 4)
    expected = send_transactions(txmq_cluster, "sp-batch", 25)
    df = spark.read.format("txmq").option("namesrv", txmq_cluster.namesrv_addr).option("topic", "sp-batch") \
        .option("maxRowsPerPartition", 10).load()
    assert df.rdd.getNumPartitions() >= 8  # one per queue, split in ranges of 10
    rows = df.collect()
    bodies = [bytes(r.body) for r in rows]
    assert len(bodies) == len(set(bodies)) == len(expected)
    assert set(bodies) == expected
    by_body = {bytes(r.body): r for r in rows}
    committed = by_body[b"c0"]
    assert committed.transaction_id and committed.tags == "c" and committed.keys == "k0"
    assert committed.topic == "sp-batch" and committed.store_timestamp is not None
    assert by_body[b"p3"].transaction_id is None and by_body[b"p3"].properties["n"] == "3"
    # offsets: a JSON range per broker and queue
    start = json.dumps({"sp-batch": {"broker-a:0": 2}})
    end = json.dumps({"sp-batch": {"broker-a:0": 5, "broker-a:1": 0, "broker-a:2": 0, "broker-a:3": 0}})
    part = spark.read.format("txmq").option("namesrv", txmq_cluster.namesrv_addr).option("topic", "sp-batch") \
        .option("startingOffsets", start).option("endingOffsets", end).load().collect()
    assert sorted((r.queue_id, r.queue_offset) for r in part) == [(0, 2), (0, 3), (0, 4)]


def test_system_topics_need_the_audit_option(spark: Any, txmq_cluster: Any) -> None:
    from pyspark.errors import PySparkException

    with pytest.raises((PySparkException, Exception), match="includeSystemTopics"):
        spark.read.format("txmq").option("namesrv", txmq_cluster.namesrv_addr) \
            .option("topic", "RMQ_SYS_TRANS_HALF_TOPIC").load().collect()


def test_stream_available_now_restarts_from_checkpoint(spark: Any, txmq_cluster: Any, tmp_path: Path) -> None:
    from txmq import Admin

    create_topic(txmq_cluster, "sp-stream", 2)
    expected = send_transactions(txmq_cluster, "sp-stream", 10, "a")
    out, ckpt = str(tmp_path / "out"), str(tmp_path / "ckpt")

    def run() -> Any:
        q = (spark.readStream.format("txmq").option("namesrv", txmq_cluster.namesrv_addr)
             .option("topic", "sp-stream").option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", 15)
             .load().writeStream.format("parquet").option("path", out).option("checkpointLocation", ckpt)
             .trigger(availableNow=True).start())
        q.awaitTermination(120)
        return q

    q = run()
    assert q.lastProgress is not None and q.lastProgress["sources"][0]["numInputRows"] <= 15
    # how far behind: the queues' latest offsets beside the batch's end (reportLatestOffset)
    source = q.lastProgress["sources"][0]
    assert json.loads(source["latestOffset"]) == json.loads(source["endOffset"])  # availableNow read them all
    first = spark.read.parquet(out).count()
    assert first == len(expected)
    # more messages, and two new queues on the topic
    with Admin(txmq_cluster.namesrv_addr) as admin:
        admin.create_topic("sp-stream", 4)
    time.sleep(0.5)
    expected |= send_transactions(txmq_cluster, "sp-stream", 10, "b")
    run()
    rows = spark.read.parquet(out).select("body", "queue_id").collect()
    bodies = [bytes(r.body) for r in rows]
    assert len(bodies) == len(set(bodies))
    assert set(bodies) == expected
    assert {r.queue_id for r in rows} == {0, 1, 2, 3}


def run_child(cfg: dict[str, Any], log: Path, kill_when: Any = None, timeout: float = 120,
              env: dict[str, str] | None = None) -> bool:
    """Run the child driver; with ``kill_when`` SIGKILL its process group once that returns True. Returns
    True when the child was killed, False when it finished (exit 0)."""
    with open(log, "a") as out:
        p = subprocess.Popen([sys.executable, str(CHILD), json.dumps(cfg)], cwd=str(CHILD.parent), stdout=out,
                             stderr=subprocess.STDOUT, start_new_session=True, env={**CHILD_ENV, **(env or {})})
        try:
            deadline = time.monotonic() + timeout
            while p.poll() is None and time.monotonic() < deadline:
                if kill_when is not None and kill_when():
                    os.killpg(p.pid, signal.SIGKILL)
                    p.wait(20)
                    return True
                time.sleep(0.05)
            if p.poll() is None:
                raise TimeoutError(f"child driver did not finish: {log.read_text()[-3000:]}")
            assert p.returncode == 0, log.read_text()[-3000:]
            return False
        finally:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait(20)


def commits(ckpt: Path) -> int:
    d = ckpt / "commits"
    return len([f for f in d.iterdir() if f.name.isdigit()]) if d.exists() else 0


def test_stream_reader_killed_and_restarted_reads_each_message_once(spark: Any, txmq_cluster: Any,
                                                                     tmp_path: Path) -> None:
    create_topic(txmq_cluster, "sp-kill", 4)
    expected = send_transactions(txmq_cluster, "sp-kill", 40)
    ckpt, out = tmp_path / "ckpt", tmp_path / "out"
    cfg = {"namesrv": txmq_cluster.namesrv_addr, "source": "sp-kill", "sink": "parquet", "out": str(out),
           "checkpoint": str(ckpt), "maxOffsetsPerTrigger": 20}
    assert run_child(cfg, tmp_path / "child.log", kill_when=lambda: commits(ckpt) >= 2)
    done_before = commits(ckpt)
    assert done_before >= 2
    assert not run_child(cfg, tmp_path / "child.log")
    assert commits(ckpt) > done_before
    bodies = [bytes(r.body) for r in spark.read.parquet(str(out)).select("body").collect()]
    assert len(bodies) == len(set(bodies))
    assert set(bodies) == expected
