"""The writers: batch writes, and the exactly-once stream sink under SIGKILL of its driver (each row once),
against at-least-once under the same kill (duplicates)."""

from __future__ import annotations

import collections
import json
import os
import random
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.spark.spark_helpers import create_topic, wait_no_pending
from tests.spark.test_source import run_child
from txmq import Admin, Message, Producer
from txmq.admin.client import MQAdminExt
from txmq.errors import ClientError
from txmq.spark._common import OptionError
from txmq.spark.writer import KILL_AFTER_RECORD_ENV, KILL_HOOK_ENV, SinkOptions


def test_batch_write_then_read(spark: Any, txmq_cluster: Any) -> None:
    create_topic(txmq_cluster, "sp-bw", 2)
    create_topic(txmq_cluster, "sp-bw2", 2)
    rows = [(f"v{i}", f"k{i}", "t" if i % 2 else None, {"i": str(i)}, "sp-bw2" if i == 7 else None)
            for i in range(40)]
    df = spark.createDataFrame(rows, "body string, keys string, tags string, properties map<string,string>, "
                                     "topic string")
    df.write.format("txmq").option("namesrv", txmq_cluster.namesrv_addr).option("topic", "sp-bw") \
        .mode("append").save()
    got = spark.read.format("txmq").option("namesrv", txmq_cluster.namesrv_addr).option("topic", "sp-bw,sp-bw2") \
        .load().collect()
    assert sorted(bytes(r.body).decode() for r in got) == sorted(r[0] for r in rows)
    by = {bytes(r.body).decode(): r for r in got}
    assert by["v3"].keys == "k3" and by["v3"].tags == "t" and by["v3"].properties["i"] == "3"
    assert by["v4"].tags is None and by["v7"].topic == "sp-bw2"


def _source(cluster: Any, topic: str, n: int) -> set[bytes]:
    create_topic(cluster, topic, 2)
    with Producer(f"src-{topic}", cluster.namesrv_addr) as p:
        for i in range(n):
            p.send(Message(topic, f"row-{i}".encode(), keys=str(i)))
    return {f"row-{i}".encode() for i in range(n)}


def _counts(spark: Any, cluster: Any, topic: str) -> collections.Counter[bytes]:
    rows = spark.read.format("txmq").option("namesrv", cluster.namesrv_addr).option("topic", topic).load() \
        .select("body").collect()
    return collections.Counter(bytes(r.body) for r in rows)


def _killed_run(cluster: Any, tmp_path: Path, source: str, out: str, guarantee: str,
                random_kills: int) -> None:
    ckpt = tmp_path / f"ckpt-{guarantee}"
    cfg = {"namesrv": cluster.namesrv_addr, "source": source, "sink": "txmq", "out": out, "checkpoint": str(ckpt),
           "guarantee": guarantee, "maxOffsetsPerTrigger": 40}
    log = tmp_path / f"child-{guarantee}.log"
    # 1. deterministic: batch 1's tasks have sent everything, the driver hangs in commit and is killed
    marker = tmp_path / f"hang-{guarantee}"
    assert run_child(cfg, log, kill_when=marker.exists, env={KILL_HOOK_ENV: f"1:{marker}"})
    # 2. random points
    rng = random.Random(6)
    for _ in range(random_kills):
        at = time.monotonic() + rng.uniform(4.0, 9.0)
        run_child(cfg, log, kill_when=lambda at=at: time.monotonic() > at)
    # 3. to the end
    assert not run_child(cfg, log)


def test_exactly_once_sink_survives_kills(spark: Any, txmq_cluster: Any, tmp_path: Path) -> None:
    expected = _source(txmq_cluster, "sp-eo-in", 200)
    create_topic(txmq_cluster, "sp-eo-out", 2)
    _killed_run(txmq_cluster, tmp_path, "sp-eo-in", "sp-eo-out", "exactly-once", random_kills=2)
    # No responder was started by hand: the sink's own answered check-backs while each run lived; orphans of a
    # killed run that no later run was alive to answer are discarded by the broker at its orphan bound (45 s here),
    # never shown, including those a killed run's responder had answered UNKNOWN (the final run may replay only
    # the last batch and end before their next check).
    wait_no_pending(txmq_cluster, "sp-eo-out", 90)
    counts = _counts(spark, txmq_cluster, "sp-eo-out")
    assert set(counts) == expected
    assert max(counts.values()) == 1, [b for b, c in counts.items() if c > 1][:5]


def _responder_connections(cluster: Any, group: str) -> int:
    """How many producers of the sink's group (its check responders) the broker has connected."""
    with MQAdminExt(cluster.namesrv_addr) as admin:
        try:
            return len(admin.producer_connection(group)["connectionSet"])
        except ClientError:  # "the producer group ... not exist": none connected
            return 0


def _until(pred: Any, timeout: float, what: str) -> float:
    """Seconds until ``pred()`` holds (polled every 0.2 s); fails after ``timeout``."""
    start = time.monotonic()
    while not pred():
        assert time.monotonic() - start < timeout, f"{what}: not within {timeout}s"
        time.sleep(0.2)
    return time.monotonic() - start


def test_exactly_once_sinks_responder_stops_with_its_query(spark: Any, txmq_cluster: Any, tmp_path: Path) -> None:
    """The sink's check responder starts with the query's first micro-batch and stops when the query stops (Spark
    pools the driver's Python workers for a minute or more after their last use, so it used to outlive the query);
    a restarted query (same checkpoint, same query id) gets one again with its first batch."""
    expected = _source(txmq_cluster, "sp-life-in", 30)
    create_topic(txmq_cluster, "sp-life-out", 2)
    ckpt = str(tmp_path / "ckpt")
    group = SinkOptions.parse({"namesrv": txmq_cluster.namesrv_addr, "checkpointLocation": ckpt}, streaming=True).group

    def start() -> Any:
        return (spark.readStream.format("txmq").option("namesrv", txmq_cluster.namesrv_addr)
                .option("topic", "sp-life-in").option("startingOffsets", "earliest").load().selectExpr("body", "keys")
                .writeStream.format("txmq").option("namesrv", txmq_cluster.namesrv_addr).option("topic", "sp-life-out")
                .option("checkpointLocation", ckpt).trigger(processingTime="1 second").start())

    for run in range(2):
        if run:
            with Producer("src-sp-life-in", txmq_cluster.namesrv_addr) as p:
                for i in range(30, 35):
                    p.send(Message("sp-life-in", f"row-{i}".encode()))
            expected |= {f"row-{i}".encode() for i in range(30, 35)}
        query = start()
        try:
            _until(lambda: _responder_connections(txmq_cluster, group) > 0, 30, f"run {run}: a responder")
            _until(lambda want=expected: set(_counts(spark, txmq_cluster, "sp-life-out")) == want, 60,
                   f"run {run}: the rows")
            if run == 0:
                time.sleep(2.5)  # idle triggers, more than two of the responders' stop checks
                assert query.isActive and _responder_connections(txmq_cluster, group) > 0
        finally:
            query.stop()
        _until(lambda: _responder_connections(txmq_cluster, group) == 0, 15, f"run {run}: the responders' stop")
    assert max(_counts(spark, txmq_cluster, "sp-life-out").values()) == 1


def test_exactly_once_sink_across_brokers_killed_past_its_commit_point(spark: Any, three_brokers: Any,
                                                                        tmp_path: Path) -> None:
    """The driver dies after batch 1's sink record and before any COMMIT, with the output on two brokers. Check-back
    cannot help within the test (immunity 600 s): the restarted query's replay of batch 1 commits the recorded
    halves again, on both brokers, and rolls its own back; every row shows once, nothing stays pending."""
    create_topic(three_brokers, "sp-eo2-in", 2, ["broker-s"])
    with Producer("src-sp-eo2-in", three_brokers.namesrv_addr) as p:
        for i in range(120):
            p.send(Message("sp-eo2-in", f"row-{i}".encode(), keys=str(i)))
    create_topic(three_brokers, "sp-eo2-out", 2, ["broker-s", "broker-t"])
    cfg = {"namesrv": three_brokers.namesrv_addr, "source": "sp-eo2-in", "sink": "txmq", "out": "sp-eo2-out",
           "checkpoint": str(tmp_path / "ckpt"), "guarantee": "exactly-once", "maxOffsetsPerTrigger": 40,
           "sinkOptions": {"checkImmunitySeconds": 600, "rowsPerHalf": 5}}  # halves round-robin over 4 queues
    marker = tmp_path / "hang"
    assert run_child(cfg, tmp_path / "child.log", kill_when=marker.exists, env={KILL_AFTER_RECORD_ENV: f"1:{marker}"})
    assert not run_child(cfg, tmp_path / "child.log")
    rows = spark.read.format("txmq").option("namesrv", three_brokers.namesrv_addr).option("topic", "sp-eo2-out") \
        .load().select("body").collect()
    counts = collections.Counter(bytes(r.body) for r in rows)
    assert set(counts) == {f"row-{i}".encode() for i in range(120)}
    assert max(counts.values()) == 1
    with Admin(three_brokers.namesrv_addr) as admin:
        stats = admin.stats()
    assert {b for b, st in stats.items() if st["transactions"]["pendingPerTopic"].get("sp-eo2-out")} == set()
    from txmq.client.instance import MessageQueue
    from txmq.client.pull_consumer import PullConsumer

    with PullConsumer("sp-eo2-probe", three_brokers.namesrv_addr) as consumer:
        stored = {b: sum(consumer.max_offset(MessageQueue("sp-eo2-out", b, q)) for q in (0, 1))
                  for b in ("broker-s", "broker-t")}
    assert sum(stored.values()) == 120 and min(stored.values()) > 0, stored  # both brokers hold rows


def test_at_least_once_sink_duplicates_under_the_same_kill(spark: Any, txmq_cluster: Any, tmp_path: Path) -> None:
    expected = _source(txmq_cluster, "sp-alo-in", 200)
    create_topic(txmq_cluster, "sp-alo-out", 2)
    _killed_run(txmq_cluster, tmp_path, "sp-alo-in", "sp-alo-out", "at-least-once", random_kills=0)
    counts = _counts(spark, txmq_cluster, "sp-alo-out")
    assert set(counts) == expected  # nothing lost
    assert sum(c - 1 for c in counts.values()) > 0  # batch 1 was sent twice


def test_sink_log_prunes_old_records_and_keeps_recent_ones(tmp_path: Path) -> None:
    """The sink log does not grow without end: records of old batches written before the retention go; the
    responder then has no record for them (UNKNOWN), so retention must outlast the broker's check window."""
    import os

    from txmq.message import MessageConst, MessageExt
    from txmq.spark.writer import P_BATCH, P_RUN, SinkCheckResponder, SinkCommitMessage, SinkLog, SinkOptions

    def half(batch: int, commit_log_offset: int | None = None) -> MessageExt:
        """A half of ``batch`` as check-back hands it over: the sink log names a half by its offset id."""
        return MessageExt("t", b"x", {P_BATCH: str(batch), P_RUN: "run1",
                                      MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX: f"id{batch}"},
                          store_host=("127.0.0.1", 10911), commit_log_offset=commit_log_offset or 1000 * batch)

    log = SinkLog(str(tmp_path / "txmq-sink"))
    for batch in range(6):
        log.record_commit(batch, "run1", [SinkCommitMessage(0, 1, "run1", ["t"], ["broker-a"], [7], [1000 * batch],
                                                             [half(batch).offset_msg_id])])
    log.record_abort(1, "run0")
    (tmp_path / "txmq-sink" / "aborts" / "3.run0").write_bytes(b"")  # as a txmq before stamps wrote it: its file's time
    old = time.time() - 7200

    def age(path: Path) -> None:  # written two hours ago: its own time and its file's
        if path.read_bytes():
            record = json.loads(path.read_bytes())
            path.write_text(json.dumps({**record, "time_ms": int(old * 1000)}))
        os.utime(path, (old, old))

    for path in [*(tmp_path / "txmq-sink" / "commits").iterdir(), *(tmp_path / "txmq-sink" / "aborts").iterdir()]:
        if int(path.name.split(".")[0]) < 4:
            age(path)
    age(tmp_path / "txmq-sink" / "commits" / "5.json")  # old, but not below the batch bound
    responder = SinkCheckResponder(str(tmp_path / "txmq-sink"))

    def check(batch: int) -> str:
        return responder.check_local_transaction(half(batch)).name

    assert check(2) == "COMMIT"  # cached from here on in this responder, as a record is immutable
    # A second copy of that half (a send retried after a lost answer): same UNIQ_KEY, another offset id.
    assert responder.check_local_transaction(half(2, 2024)).name == "ROLLBACK"
    removed = log.prune(below_batch=5, written_before_ms=int((time.time() - 3600) * 1000))
    assert removed == 6  # commits 0-3 and the aborts of batches 1 and 3; 4 is recent, 5 is not below the bound
    assert sorted(p.name for p in (tmp_path / "txmq-sink" / "commits").iterdir()) == ["4.json", "5.json"]
    assert not list((tmp_path / "txmq-sink" / "aborts").iterdir())
    fresh = SinkCheckResponder(str(tmp_path / "txmq-sink"))
    assert fresh.check_local_transaction(half(0)).name == "UNKNOWN"
    assert check(4) == "COMMIT" and check(5) == "COMMIT"
    opts = SinkOptions.parse({"namesrv": "127.0.0.1:1", "checkpointLocation": str(tmp_path),
                              "sinkLogRetentionMinutes": "30"}, streaming=True)
    assert opts.log_retention_ms == 30 * 60_000 and opts.rows_per_half == 1000
    for bad in ("0", "-3", "many"):
        with pytest.raises(OptionError, match="rowsPerHalf"):
            SinkOptions.parse({"namesrv": "127.0.0.1:1", "checkpointLocation": str(tmp_path), "rowsPerHalf": bad},
                              streaming=True)


def _batch_50_checked_after_200(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, step_s: Callable[[int], int],
                                behind_mtime: bool = False, restarts: tuple[int, ...] = (),
                                before: tuple[int, Callable[[Path], None]] | None = None) -> str:
    """The driver commits 200 batches (the 200th prunes), its wall clock stepped by ``step_s(batch)`` seconds
    while it does, and started again (a new process: its clock read afresh) before each batch of ``restarts``;
    batch 50's COMMITs do not reach the broker (left to check-back); ``before`` (batch, what) is done to the sink
    log's directory before that batch. The check-back's answer for batch 50's half,
    its record written seconds ago: COMMIT unless its record was pruned (then ROLLBACK: Spark's checkpoint has the
    batch, the sink log no longer names the half, and its rows are lost)."""
    from types import SimpleNamespace

    import txmq.spark.writer as writer
    from txmq.message import MessageConst, MessageExt
    from txmq.spark.writer import P_BATCH, P_RUN, SinkCheckResponder, SinkCommitMessage, SinkLogClock, TxmqStreamWriter

    def half(batch: int) -> MessageExt:
        return MessageExt("t", b"x", {P_BATCH: str(batch), P_RUN: "run1",
                                      MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX: f"id{batch}"},
                          store_host=("127.0.0.1", 10911), commit_log_offset=1000 * batch)

    class Producer:  # END_TRANSACTIONs answered, but those of batch 50
        def end_transactions(self, todo: Any, chunk: Any, in_flight: Any) -> list[SimpleNamespace]:
            return [SimpleNamespace(decided=ref.tran_state_table_offset != 50, code=0, remark="") for ref, _ in todo]

    step_ns = [0]
    monkeypatch.setattr(writer, "_responder", lambda opts: Producer())
    ckpt = tmp_path / "ckpt"
    (ckpt / "commits").mkdir(parents=True)
    sink = TxmqStreamWriter({"namesrv": "127.0.0.1:1", "checkpointLocation": str(ckpt)})
    for batch in range(201):
        step_ns[0] = step_s(batch) * 10**9
        if before is not None and before[0] == batch:
            before[1](ckpt / "txmq-sink")
        if batch == 0 or batch in restarts:
            monkeypatch.setattr(writer, "_SINK_CLOCK", SinkLogClock(wall_ns=lambda: time.time_ns() + step_ns[0]))
        sink.commit([SinkCommitMessage(0, 1, "run1", ["t"], ["broker-a"], [batch], [1000 * batch],
                                       [half(batch).offset_msg_id])], batch)
        if batch == 50 and behind_mtime:  # its file's time: the kernel's wall clock at the write, as stepped
            stepped = time.time() + step_s(batch)
            os.utime(ckpt / "txmq-sink" / "commits" / "50.json", (stepped, stepped))
        (ckpt / "commits" / str(batch)).write_text("v1\n{}")  # Spark's own commit of the batch, after the sink's
    return SinkCheckResponder(str(ckpt / "txmq-sink")).check_local_transaction(half(50)).name


def test_a_forward_step_of_the_drivers_clock_prunes_no_recent_record(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """Its wall clock steps 25 h forward (NTP correcting a clock a day slow) before batch 200, whose commit
    prunes: pruned against the stepped clock, every record looked older than the retention."""
    assert _batch_50_checked_after_200(tmp_path, monkeypatch, lambda b: 25 * 3600 if b == 200 else 0) == "COMMIT"


def test_a_record_written_while_the_drivers_clock_was_behind_is_kept_once_corrected(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Batches 40-59 are written while the driver's clock is 25 h behind, then it is corrected: by its file's time
    batch 50's record looked 25 h old. Its own time (``latest_ms``, never behind the time that passed) is read."""
    assert _batch_50_checked_after_200(tmp_path, monkeypatch, lambda b: -25 * 3600 if 40 <= b < 60 else 0,
                                       behind_mtime=True) == "COMMIT"


def test_a_driver_started_while_its_clock_is_ahead_prunes_no_recent_record(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The driver is started again before batch 200 (whose commit prunes) with its clock 25 h ahead, more than the
    retention: a time taken from its clock at the start made every record look older than the retention."""
    assert _batch_50_checked_after_200(tmp_path, monkeypatch, lambda b: 25 * 3600 if b >= 200 else 0,
                                       restarts=(200,)) == "COMMIT"


def test_records_of_a_driver_started_while_its_clock_was_behind_are_kept_by_the_next(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A driver started with its clock 25 h behind writes batches 0-149; the next, started before batch 150 with
    a correct clock, prunes at batch 200: batch 50's record, written seconds ago, looked 25 h old."""
    assert _batch_50_checked_after_200(tmp_path, monkeypatch, lambda b: -25 * 3600 if b < 150 else 0,
                                       behind_mtime=True, restarts=(150,)) == "COMMIT"


def _written_before_stamps_one_25_h_ahead(log_dir: Path) -> None:
    """The sink log as a txmq before stamps left it: commit records carry only their wall-clock time, aborts are
    empty; one abort's file time is 25 h ahead (its driver's clock was ahead then, corrected since). Batches below
    100 are pruned only at batch 200: it is still there at 200."""
    for path in (log_dir / "commits").iterdir():
        record = json.loads(path.read_bytes())
        path.write_text(json.dumps({k: v for k, v in record.items() if k not in ("boot", "elapsed_ns")}))
    ahead = log_dir / "aborts" / "0.run0"
    ahead.parent.mkdir(exist_ok=True)
    ahead.write_bytes(b"")
    os.utime(ahead, (time.time() + 25 * 3600,) * 2)


@pytest.mark.parametrize("upgraded, step_s", [(200, lambda b: 0), (150, lambda b: 25 * 3600 if b >= 200 else 0)],
                         ids=["upgraded before batch 200", "upgraded, then started with its clock ahead"])
def test_a_record_from_the_future_written_before_stamps_prunes_no_recent_record(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, upgraded: int, step_s: Callable[[int], int]) -> None:
    """Batches before ``upgraded`` written by a txmq before stamps, one of its aborts with a file time 25 h ahead;
    the driver, upgraded, started again before that batch, and again before batch 200 (whose commit prunes), its
    clock then 25 h ahead in the second case. That one record, taken as the log's time (in the second case as far as
    the clock then said), made every other look 25 h older, and batch 50's, written seconds ago, was pruned."""
    assert _batch_50_checked_after_200(tmp_path, monkeypatch, step_s, restarts=(upgraded, 200),
                                       before=(upgraded, _written_before_stamps_one_25_h_ahead)) == "COMMIT"


class FakeProducer:
    """A unit of logic: what ``Responders`` calls on a ``TransactionProducer``."""

    group = "g"
    stopped = False

    def start(self) -> FakeProducer:
        return self

    def shutdown(self) -> None:
        self.stopped = True


def test_query_marks_stop_a_responder_once_its_own_run_ended(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The marks' logic (lifecycle.py) without Spark: a late end of an older run does not stop the next run's
    responder; a responder started after the end is not stopped by it; the query id comes from the checkpoint."""
    import tempfile

    from txmq.spark.lifecycle import Responders, mark_run, query_id

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))

    held = Responders()
    mark_run("q1", "run1", stopped=False)
    first = held.get(("k",), "q1", FakeProducer)
    mark_run("q1", "run2", stopped=False)
    mark_run("q1", "run1", stopped=True)  # run 1's end delivered after run 2's start: ignored
    assert held.stop_ended() == 0 and held.get(("k",), "q1", FakeProducer) is first
    time.sleep(0.01)
    mark_run("q1", "run2", stopped=True)
    assert held.stop_ended() == 1 and first.stopped
    second = held.get(("k",), "q1", FakeProducer)
    assert second is not first and held.stop_ended() == 0  # started after the end it would be stopped by
    held.stop_all()
    assert second.stopped
    (tmp_path / "ckpt").mkdir()
    (tmp_path / "ckpt" / "metadata").write_text('{"id":"5f0c7a4e-query"}\n')
    assert query_id(str(tmp_path / "ckpt")) == "5f0c7a4e-query"
    assert query_id(str(tmp_path / "none")) is None and query_id(None) is None


def test_a_query_s_end_stops_its_responder_whatever_the_wall_clock_did(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """The wall clock stepped back an hour between a responder's start and its query's end: the end is still after
    the start (the marks and the responders' starts are on the driver's host, and read its monotonic clock)."""
    import tempfile

    from txmq.spark import lifecycle

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))

    held = lifecycle.Responders()
    lifecycle.mark_run("q1", "run1", stopped=False)
    responder = held.get(("k",), "q1", FakeProducer)
    real_time = time.time
    monkeypatch.setattr(lifecycle.time, "time", lambda: real_time() - 3600)
    time.sleep(0.01)
    lifecycle.mark_run("q1", "run1", stopped=True)
    assert held.stop_ended() == 1 and responder.stopped
    held.stop_all()


def test_a_next_runs_start_marked_during_an_older_runs_end_is_kept(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """The listener's start (the query's thread) and an older run's end (the listener bus) may be called at once:
    a start written between the end's check of the latest run and its write must not be overwritten."""
    import tempfile
    import threading

    from txmq.spark import lifecycle

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    lifecycle.mark_run("q1", "run1", stopped=False)
    real_prune = lifecycle._prune_marks
    starter = threading.Thread(target=lifecycle.mark_run, args=("q1", "run2", False))

    def prune_while_run2_starts() -> None:  # between the end's check and its write
        starter.start()
        time.sleep(0.2)
        real_prune()
    monkeypatch.setattr(lifecycle, "_prune_marks", prune_while_run2_starts)
    lifecycle.mark_run("q1", "run1", stopped=True)
    starter.join(5)
    assert not starter.is_alive()
    mark = lifecycle._read_mark("q1")
    assert mark is not None and (mark["run"], mark["stopped"]) == ("run2", False), mark


def test_the_sink_logs_time_counts_what_passed_on_this_boot_and_no_wall_clock(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The log's time after a restart: its latest record's, plus the time that passed since on the same boot
    (CLOCK_BOOTTIME), whatever the wall clock says; after a reboot, the latest record's (the downtime not counted:
    records kept longer). Only an empty log takes the wall clock."""
    import txmq.spark.writer as writer
    from txmq.spark.writer import SinkLog, SinkLogClock

    hour_ns, wall_ns = 3600 * 10**9, 1_800_000_000 * 10**9
    log = SinkLog(str(tmp_path / "txmq-sink"))
    first = SinkLogClock(wall_ns=lambda: wall_ns, elapsed=lambda: 5 * hour_ns, boot=lambda: "b1")
    assert first.now_ms(log) == wall_ns // 10**6
    monkeypatch.setattr(writer, "_SINK_CLOCK", first)
    log.record_abort(1, "run1")
    restarted = SinkLogClock(wall_ns=lambda: wall_ns + 25 * hour_ns, elapsed=lambda: 7 * hour_ns, boot=lambda: "b1")
    assert restarted.now_ms(log) == (wall_ns + 2 * hour_ns) // 10**6
    rebooted = SinkLogClock(wall_ns=lambda: wall_ns + 72 * hour_ns, elapsed=lambda: hour_ns, boot=lambda: "b2")
    assert rebooted.now_ms(log) == wall_ns // 10**6
