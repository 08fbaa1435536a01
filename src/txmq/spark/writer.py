"""The batch and streaming writers of the ``txmq`` data source, and the exactly-once streaming sink.

Input columns: ``body`` (binary or string) required; ``keys``, ``tags`` (string), ``properties``
(map<string,string>) and ``topic`` (string; else the ``topic`` option) optional.

Exactly-once streaming (``deliveryGuarantee=exactly-once``, the default for streams):

1. Each task sends its rows as **half messages** (invisible) of the sink's producer group, tagged with
   properties ``TXMQ_SPARK_QUERY``, ``TXMQ_SPARK_RUN``, ``TXMQ_SPARK_BATCH``, ``TXMQ_SPARK_PARTITION``: one
   half per ``rowsPerHalf`` rows (default 1000, at most ``Producer.batch_max_bytes`` of bodies), a *half batch*
   (``Producer.send_half_batch_async``), whose COMMIT makes each row a message of its own. Its commit message
   lists the halves it stored (broker, half offset, commit-log offset, offset id: a retried send that was
   stored twice leaves an orphan with another offset id, which check-back rolls back).
2. The driver's ``commit(messages, batchId)``: when the sink log already has ``batchId``, this is a replay
   after a restart, and the new halves are rolled back (nothing becomes visible twice). Otherwise it first
   writes the sink log record ``<checkpointLocation>/txmq-sink/commits/<batchId>.json`` (ids of the halves;
   written to a temporary file, fsynced, renamed: this is the commit point), then ends every half with
   COMMIT, in batches (``TransactionProducer.end_transactions``: one TXMQ_END_TRANSACTION_BATCH request per
   broker and about 10,000 rows, answered per half). ``abort`` ends them with ROLLBACK and records the abort.
3. A half whose end never arrived (the driver died after the tasks' sends, or between the log record and
   the COMMITs, or a task attempt failed after sending) is **checked back** by the broker. The process that
   holds a ``TransactionProducer`` of the sink's group (``SinkCheckResponder``: the driver-side workers that
   make the writer and run its commits, from the run's first batch until the query ends, see lifecycle.py; and
   the driver program when it starts one) answers from the sink log and Spark's checkpoint: COMMIT if the batch
   committed with this half (its offset id) in its list; ROLLBACK if the batch committed without it, or its run
   aborted it; UNKNOWN while the batch is undecided (a restarted query will replay it).

``at-least-once`` sends plain messages; a batch replayed after a crash is sent again (duplicates).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)

from txmq.client.instance import MessageQueue
from txmq.client.producer import Producer, SendFuture, SendResult, select_by_hash
from txmq.client.transaction import HalfMessageRef, LocalTransactionState, TransactionProducer
from txmq.errors import ClientError
from txmq.fileio import write_atomic
from txmq.message import Message, MessageConst, MessageExt
from txmq.remoting.codes import ResponseCode
from txmq.spark._common import ClientSecurity, cached_client, drop_client
from txmq.spark.lifecycle import query_id, responders
from txmq.spark.options import SINK, OptionError, Options
from txmq.wallclock import boot_id, elapsed_ns

log = logging.getLogger("txmq.spark")

P_QUERY = "TXMQ_SPARK_QUERY"
P_RUN = "TXMQ_SPARK_RUN"
P_BATCH = "TXMQ_SPARK_BATCH"
P_PARTITION = "TXMQ_SPARK_PARTITION"
EXACTLY_ONCE = "exactly-once"
AT_LEAST_ONCE = "at-least-once"
ROUND_ROBIN = "round-robin"
KEY_HASH = "key-hash"
KEEP_BATCHES = 100  # never pruned: Spark's own default spark.sql.streaming.minBatchesToRetain
PRUNE_EVERY_BATCHES = 100
ROWS_PER_END_REQUEST = 10_000
# Tests: "<batchId|*>:<marker file>" makes the driver's commit write the marker and hang, to be SIGKILLed there:
KILL_HOOK_ENV = "TXMQ_SPARK_TEST_HANG_BEFORE_COMMIT"  # before anything (the tasks' halves are sent)
KILL_AFTER_RECORD_ENV = "TXMQ_SPARK_TEST_HANG_AFTER_RECORD"  # past the commit point, before any COMMIT


@dataclass(frozen=True, slots=True)
class SinkOptions:
    namesrv: str
    topic: str | None
    guarantee: str
    group: str
    log_dir: str | None
    checkpoint: str | None  # the query's checkpointLocation: its metadata names the query (lifecycle.py)
    check_immunity_s: int
    max_in_flight: int
    log_retention_ms: int
    rows_per_half: int
    key_hash: bool  # queueSelector=key-hash: a row's queue from its key (RocketMQ's SelectMessageQueueByHash)
    security: ClientSecurity

    @classmethod
    def parse(cls, options: Any, streaming: bool) -> SinkOptions:
        opts = Options(options, SINK, "sink")
        guarantee = (opts.get("deliveryGuarantee") or (EXACTLY_ONCE if streaming else AT_LEAST_ONCE)).lower()
        if guarantee not in (EXACTLY_ONCE, AT_LEAST_ONCE):
            raise OptionError(f"deliveryGuarantee must be {EXACTLY_ONCE} or {AT_LEAST_ONCE}, not {guarantee!r}")
        if guarantee == EXACTLY_ONCE and not streaming:
            raise OptionError("exactly-once is for streaming writes; a batch write is one Spark job: use "
                              "at-least-once")
        selector = (opts.get("queueSelector") or ROUND_ROBIN).lower()
        if selector not in (ROUND_ROBIN, KEY_HASH):
            raise OptionError(f"queueSelector must be {ROUND_ROBIN} or {KEY_HASH}, not {selector!r}")
        checkpoint = opts.get("checkpointLocation")
        log_dir = opts.get("sinkLogDir") or (os.path.join(_local_path(checkpoint), "txmq-sink")
                                             if checkpoint else None)
        if guarantee == EXACTLY_ONCE and not log_dir:
            raise OptionError("the exactly-once sink needs option checkpointLocation (or sinkLogDir)")
        digest = hashlib.sha1((log_dir or "").encode()).hexdigest()[:12]
        return cls(namesrv=opts.namesrv(), topic=opts.get("topic"), guarantee=guarantee,
                   group=opts.get("producerGroup") or f"txmq-spark-sink-{digest}", log_dir=log_dir,
                   checkpoint=checkpoint,
                   check_immunity_s=opts.number("checkImmunitySeconds", 60, minimum=0),
                   max_in_flight=opts.number("maxInFlight", 2048),
                   log_retention_ms=int(float(opts.get("sinkLogRetentionMinutes") or 1440) * 60_000),
                   rows_per_half=opts.number("rowsPerHalf", 1000),
                   key_hash=selector == KEY_HASH, security=ClientSecurity.parse(opts))


def _local_path(location: str) -> str:
    if location.startswith("file://"):
        return location[len("file://"):]
    if location.startswith("file:"):
        return location[len("file:"):]
    if "://" in location:
        raise OptionError(f"the exactly-once sink keeps its log on a local or shared file system, not {location}")
    return location


# --- the sink log: which halves each batch committed -------------------------------------------------------

class SinkLog:
    """``commits/<batchId>.json`` = {"run", "ids", the stamp}; ``aborts/<batchId>.<run>`` = {the stamp}: the log's
    time when it was written (``SinkLogClock``). Files are written to a temporary name, fsynced and renamed, so a
    record is whole or absent."""

    def __init__(self, root: str) -> None:
        self.root = Path(root)
        self._cache: dict[int, dict[str, Any]] = {}

    def _commit_path(self, batch_id: int) -> Path:
        return self.root / "commits" / f"{batch_id}.json"

    def _abort_path(self, batch_id: int, run: str) -> Path:
        return self.root / "aborts" / f"{batch_id}.{run}"

    def committed(self, batch_id: int) -> dict[str, Any] | None:
        rec = self._cache.get(batch_id)
        if rec is None:
            try:
                rec = json.loads(self._commit_path(batch_id).read_bytes())
            except FileNotFoundError:
                return None
            rec["idset"] = frozenset(rec["ids"])
            self._cache[batch_id] = rec
        return rec

    def record_commit(self, batch_id: int, run: str, messages: list[SinkCommitMessage]) -> None:
        """The commit point of ``batch_id``: the ids of its halves, and what ending them again needs."""
        record = {"batch": batch_id, "run": run, "ids": [i for m in messages for i in m.ids],
                  **_SINK_CLOCK.stamp(self), "rows": sum(m.rows for m in messages),
                  "ordered": any(m.ordered for m in messages),
                  "halves": [[m.brokers[i], m.half_offsets[i], m.commit_log_offsets[i]]
                             for m in messages for i in range(len(m.ids))]}
        write_atomic(self._commit_path(batch_id), json.dumps(record).encode())

    @staticmethod
    def recorded_halves(record: dict[str, Any]) -> SinkCommitMessage:
        """The halves a record lists, to be ended again (records before "halves" was kept list none)."""
        halves = record.get("halves") or []
        return SinkCommitMessage(-1, record.get("rows", 0), record["run"], [], [h[0] for h in halves],
                                 [h[1] for h in halves], [h[2] for h in halves],
                                 record["ids"] if halves else [], record.get("ordered", False))

    def aborted(self, batch_id: int, run: str) -> bool:
        return self._abort_path(batch_id, run).exists()

    def record_abort(self, batch_id: int, run: str) -> None:
        write_atomic(self._abort_path(batch_id, run), json.dumps(_SINK_CLOCK.stamp(self)).encode())

    def prune(self, below_batch: int, written_before_ms: int) -> int:
        """Delete the records of batches below ``below_batch`` written before ``written_before_ms`` (the log's
        time); returns how many. A record is only needed to answer the check-back of an orphan of its batch, which
        the broker asks within its check window (immunity + transactionCheckMax x transactionCheckInterval)."""
        removed = 0
        for batch, path in self._records():
            if batch >= below_batch:
                continue
            try:
                if self._stamp_of(path)[0] < written_before_ms:
                    path.unlink()
                    self._cache.pop(batch, None)
                    removed += 1
            except FileNotFoundError:
                pass
        return removed

    def latest_ms(self, boot: str, elapsed: int, wall_ms: int) -> int | None:
        """The log's time by its records (None: it has none): the latest of their times, each advanced by the time
        that passed since it was written where that is known (written on boot ``boot``, ``elapsed`` counting from
        the same start). Records without a stamp (written by a txmq before stamps) count only in a log without
        stamped ones, and no later than ``wall_ms``, the wall clock now: their times are their writers' wall
        clocks, one of which may have been ahead (taken as the log's time, such a record would make every other look
        that much older)."""
        stamped: list[float] = []
        unstamped: list[float] = []
        for _, path in self._records():
            with contextlib.suppress(FileNotFoundError):
                written, written_boot, written_elapsed = self._stamp_of(path)
                if written_boot is None:
                    unstamped.append(written)
                    continue
                if boot and written_boot == boot and written_elapsed is not None and elapsed >= written_elapsed:
                    written += (elapsed - written_elapsed) // 1_000_000
                stamped.append(written)
        if stamped:
            return int(max(stamped))
        return int(min(max(unstamped), wall_ms)) if unstamped else None

    def _records(self) -> Iterator[tuple[int, Path]]:
        """Each record's batch and file (commits and aborts)."""
        for kind in ("commits", "aborts"):
            directory = self.root / kind
            if directory.is_dir():
                for path in directory.iterdir():
                    batch = path.name.split(".", 1)[0]
                    if batch.isdigit():
                        yield int(batch), path

    @staticmethod
    def _stamp_of(path: Path) -> tuple[float, str | None, int | None]:
        """A record's stamp: the log's time when it was written, the boot and elapsed time of its writing. A record
        without one (written by a txmq before stamps; an abort was empty) has its file's time, and no boot."""
        with contextlib.suppress(ValueError, KeyError, TypeError):
            doc = json.loads(path.read_bytes())
            written_elapsed = doc.get("elapsed_ns")
            return (float(doc["time_ms"]), doc.get("boot"),
                    written_elapsed if isinstance(written_elapsed, int) else None)
        return path.stat().st_mtime * 1000, None, None

    def spark_committed(self, batch_id: int) -> bool:
        """Spark's own checkpoint: ``commits/<batchId>`` exists once the batch is done."""
        return (self.root.parent / "commits" / str(batch_id)).exists()


class SinkCheckResponder:
    """The ``TransactionListener`` of the sink's producer group: answers the broker's check-back of an orphaned
    half message from the sink log and Spark's checkpoint (see the module docstring)."""

    def __init__(self, log_dir: str) -> None:
        self.log = SinkLog(log_dir)
        self.answers: dict[str, int] = {"COMMIT": 0, "ROLLBACK": 0, "UNKNOWN": 0}

    def execute_local_transaction(self, msg: Message, arg: Any) -> LocalTransactionState:
        return LocalTransactionState.UNKNOWN  # never used: tasks send halves, the driver ends them

    def check_local_transaction(self, msg: MessageExt) -> LocalTransactionState:
        state = self._decide(msg)
        self.answers[state.name] += 1
        return state

    def _decide(self, msg: MessageExt) -> LocalTransactionState:
        raw_batch = msg.properties.get(P_BATCH)
        if raw_batch is None:
            return LocalTransactionState.UNKNOWN
        batch_id, run = int(raw_batch), msg.properties.get(P_RUN, "")
        rec = self.log.committed(batch_id)
        if rec is not None:
            ok = msg.offset_msg_id in rec["idset"]
            return LocalTransactionState.COMMIT if ok else LocalTransactionState.ROLLBACK
        if self.log.aborted(batch_id, run) or self.log.spark_committed(batch_id):
            return LocalTransactionState.ROLLBACK
        return LocalTransactionState.UNKNOWN


def start_check_responder(namesrv: str, checkpoint_location: str | None = None, *, producer_group: str | None = None,
                          sink_log_dir: str | None = None, options: Mapping[str, str] | None = None
                          ) -> TransactionProducer:
    """Start a ``TransactionProducer`` of the sink's group that answers check-backs (call ``shutdown()`` when
    done). Run it in the driver program beside an exactly-once query, so orphans of a crashed run are resolved
    once the restarted query has committed their batch. ``options``: the query's others, e.g. ``accessKey``."""
    opts = SinkOptions.parse({**(options or {}), "namesrv": namesrv, "checkpointLocation": checkpoint_location,
                              "sinkLogDir": sink_log_dir, "producerGroup": producer_group}, streaming=True)
    return _new_responder(opts).start()


def _new_responder(opts: SinkOptions) -> TransactionProducer:
    assert opts.log_dir is not None
    return opts.security.apply(TransactionProducer(opts.group, SinkCheckResponder(opts.log_dir), opts.namesrv))


# --- tasks: rows to messages ----------------------------------------------------------------------------

@dataclass
class SinkCommitMessage(WriterCommitMessage):
    partition: int
    rows: int
    run: str = ""
    topics: list[str] = field(default_factory=list)
    # exactly-once: the halves this task stored (ids: their offset ids)
    brokers: list[str] = field(default_factory=list)
    half_offsets: list[int] = field(default_factory=list)
    commit_log_offsets: list[int] = field(default_factory=list)
    ids: list[str] = field(default_factory=list)
    ordered: bool = False  # rows went to chosen queues: their halves must be committed in order


def _task_context() -> tuple[int, str, int, str]:
    """(partition, run id, batch id, query id) from Spark's task context (local properties of the stream)."""
    from pyspark import TaskContext

    ctx = TaskContext.get()
    if ctx is None:
        return 0, "", -1, ""
    batch = ctx.getLocalProperty("streaming.sql.batchId")
    return (ctx.partitionId(), ctx.getLocalProperty("sql.streaming.runId") or "",
            int(batch) if batch is not None else -1, ctx.getLocalProperty("sql.streaming.queryId") or "")


Routed = tuple[Message, MessageQueue | None]  # a row's message and its queue (None: the producer's choice)


def _rows(opts: SinkOptions, producer: Producer, batches: Iterator[pa.RecordBatch]) -> Iterator[Routed]:
    """Messages of the rows, each with its queue: the ``queue_id`` column (an index into the topic's queues,
    sorted by broker and queue id: the queue id itself on one broker), else the key's hash with
    ``queueSelector=key-hash``, else none (round robin)."""
    queues: dict[str, list[MessageQueue]] = {}

    def queue_of(topic: str, index: int | None, key: str | None) -> MessageQueue | None:
        if index is None and not (opts.key_hash and key):
            return None
        mqs = queues.get(topic) or queues.setdefault(topic, sorted(producer.publish_queues(topic)))
        if index is None:
            return select_by_hash(mqs, Message(topic, b""), key)
        if not 0 <= index < len(mqs):
            raise OptionError(f"queue_id {index} out of range: topic {topic} has {len(mqs)} queues")
        return mqs[index]

    for rb in batches:
        names = rb.schema.names
        if "body" not in names:
            raise OptionError("the txmq sink needs a 'body' column (binary or string)")
        n = rb.num_rows
        cols: list[list[Any]] = [rb.column(names.index(c)).to_pylist() if c in names else [None] * n
                                 for c in ("body", "keys", "tags", "properties", "topic", "queue_id")]
        body, keys, tags, props, topics, qids = cols
        for i in range(n):
            topic = topics[i] or opts.topic
            if not topic:
                raise OptionError("no topic: give option 'topic' or a 'topic' column")
            p = props[i]
            msg = Message(topic, body[i], tags=tags[i], keys=keys[i], properties=dict(p) if p else None)
            yield msg, queue_of(topic, qids[i], keys[i])


def write_partition(opts: SinkOptions, batches: Iterator[pa.RecordBatch], transactional: bool,
                    run_id: str = "") -> SinkCommitMessage:
    partition, run, batch_id, query = _task_context()
    run = run or run_id
    key = ("producer", opts.namesrv, opts.group, *opts.security.cache_key())
    # The tasks' producer heartbeats as its own group: check-backs must reach the responder, not a task.
    producer: Producer = cached_client(key, lambda: opts.security.apply(
        Producer(f"{opts.group}-task", opts.namesrv, max_in_flight=opts.max_in_flight)))
    out = SinkCommitMessage(partition, 0, run)
    try:
        rows = _rows(opts, producer, batches)
        if transactional:
            _send_halves(opts, producer, rows, out, {
                P_QUERY: query, P_RUN: run, P_BATCH: str(batch_id), P_PARTITION: str(partition),
                MessageConst.CHECK_IMMUNITY_TIME_IN_SECONDS: str(opts.check_immunity_s)})
        else:
            _send_plain(producer, rows, out)
    except ClientError:
        drop_client(key)
        raise
    return out


def _send_plain(producer: Producer, rows: Iterator[Routed], out: SinkCommitMessage) -> None:
    """Rows without a queue go as async sends (the producer coalesces them); rows of one queue go in order, as
    batches of consecutive offsets, one at a time per queue (an orderly send)."""
    futures = []
    ordered: dict[MessageQueue, list[Message]] = {}
    for msg, mq in rows:
        if mq is None:
            futures.append(producer.send_async(msg))
        else:
            ordered.setdefault(mq, []).append(msg)
    for mq, msgs in ordered.items():
        for chunk in _chunks(producer, msgs, producer.batch_max_messages):
            _count(out, producer.send_batch(chunk, queue=mq), len(chunk))
    for fut in futures:
        _count(out, fut.result(60), 1)


def _chunks(producer: Producer, msgs: list[Message], max_rows: int) -> Iterator[list[Message]]:
    """``msgs`` in order, cut every ``max_rows`` rows and before ``batch_max_bytes`` of bodies."""
    chunk: list[Message] = []
    size = 0
    for msg in msgs:
        if chunk and (len(chunk) >= max_rows or size + len(msg.body) > producer.batch_max_bytes):
            yield chunk
            chunk, size = [], 0
        chunk.append(msg)
        size += len(msg.body)
    if chunk:
        yield chunk


def _send_halves(opts: SinkOptions, producer: Producer, rows: Iterator[Routed], out: SinkCommitMessage,
                 tags: dict[str, str]) -> None:
    """Send ``rows`` as half batches of one topic and queue, ``rows_per_half`` rows and ``batch_max_bytes`` of
    bodies at most, all in flight at once (within the producer's window), and list each half in ``out`` in the
    order of its rows (the order the driver commits them in)."""
    sent: list[tuple[SendFuture, int]] = []
    chunks: dict[tuple[str, MessageQueue | None], tuple[list[Message], int]] = {}  # open chunk, body bytes

    def flush(where: tuple[str, MessageQueue | None]) -> None:
        chunk, _ = chunks.pop(where)
        sent.append((producer.send_half_batch_async(chunk, opts.group, tags, queue=where[1]), len(chunk)))

    for msg, mq in rows:
        where = (msg.topic, mq)
        chunk, size = chunks.get(where) or ([], 0)
        if chunk and (len(chunk) >= opts.rows_per_half or size + len(msg.body) > producer.batch_max_bytes):
            flush(where)
            chunk, size = [], 0
        chunk.append(msg)
        chunks[where] = (chunk, size + len(msg.body))
        out.ordered = out.ordered or mq is not None
    for where in list(chunks):
        flush(where)
    for fut, rows_in_half in sent:
        result = fut.result(60)
        _count(out, result, rows_in_half)
        ref = HalfMessageRef.of(result)
        out.brokers.append(ref.broker_name)
        out.half_offsets.append(ref.tran_state_table_offset)
        out.commit_log_offsets.append(ref.commit_log_offset)
        out.ids.append(result.offset_msg_id)


def _count(out: SinkCommitMessage, result: SendResult, rows: int) -> None:
    out.rows += rows
    if result.message_queue.topic not in out.topics:
        out.topics.append(result.message_queue.topic)


# --- the driver: end the halves ---------------------------------------------------------------------------

def end_halves(producer: TransactionProducer, messages: list[SinkCommitMessage], commit: bool) -> int:
    """End every half listed in ``messages`` with batched, confirmed END_TRANSACTIONs (txmq's code 9005, a
    request per broker and about ``ROWS_PER_END_REQUEST`` rows); returns how many could not be ended now
    (check-back will)."""
    state = LocalTransactionState.COMMIT if commit else LocalTransactionState.ROLLBACK
    todo = [(HalfMessageRef(m.brokers[i], m.half_offsets[i], m.commit_log_offsets[i]), m.ids[i])
            for m in messages for i in range(len(m.ids))]
    # A request ends about ROWS_PER_END_REQUEST rows: the broker stores every row of a committed half batch.
    chunk = max(1, ROWS_PER_END_REQUEST * len(todo) // max(1, sum(m.rows for m in messages)))
    for attempt in range(3):
        if not todo:
            break
        if attempt:
            time.sleep(0.2 * attempt)
        # Halves of chosen queues are ended one request at a time, so their rows keep the order they were sent in.
        answers = producer.end_transactions([(ref, state) for ref, _ in todo], chunk=chunk,
                                            in_flight=1 if any(m.ordered for m in messages) else 4)
        left = []
        for (ref, ident), answer in zip(todo, answers, strict=True):
            if not answer.decided:
                left.append((ref, ident))
            elif answer.code != ResponseCode.SUCCESS:
                log.warning("half %s already decided otherwise: %s", ident, answer.remark)
        if left:
            failed = next(a for a in answers if not a.decided)
            log.warning("%d of %d halves not ended (%s), e.g. %s (%d): %s", len(left), len(todo),
                        "commit" if commit else "rollback", left[0][1], failed.code, failed.remark)
        todo = left
    return len(todo)


def _responder(opts: SinkOptions) -> TransactionProducer:
    """The driver's started responder of this sink, shared by its commits (one per process, log dir and group),
    stopped when its query ends (lifecycle.py)."""
    assert opts.log_dir is not None
    checkpoint = opts.checkpoint or ""
    local = checkpoint.startswith("file:") or (bool(checkpoint) and "://" not in checkpoint)
    query = query_id(_local_path(checkpoint)) if local else None
    return responders.get(("responder", opts.namesrv, opts.group, opts.log_dir, *opts.security.cache_key()), query,
                          lambda: _new_responder(opts))


class SinkLogClock:
    """The sink log's own time, which its records are stamped with and pruned against: no error of the driver's wall
    clock, either way, taken at its start or stepped later, makes a record younger than sinkLogRetentionMinutes
    look older (its batch's orphans would then be answered ROLLBACK).

    A process reads a log's time when it first uses the log (``SinkLog.latest_ms``): the latest of its records'
    times, each advanced by the time that passed since it was written where that is known (written on this boot:
    CLOCK_BOOTTIME, which also counts a suspend, saved in the record with the kernel's boot id); from there it
    counts CLOCK_BOOTTIME. So the log's time never runs ahead of the time that really passed since any of its
    records was written, and a record pruned when the log's time is past its own by the retention is older than
    the retention. The wall clock is read for an empty log, where its time begins (an error there is the same
    for every record after it), and as the bound of records without a stamp in a log of none else (written by a
    txmq before stamps: their times are their writers' wall clocks, which may have been ahead; they stand for the
    log's time no later than now's wall clock, and not at all once stamped records exist). Not counted: the time
    between a log's last record and a start after a reboot (records are kept that much longer, never deleted
    earlier). Thread-safe."""

    def __init__(self, wall_ns: Callable[[], int] = time.time_ns, elapsed: Callable[[], int] = elapsed_ns,
                 boot: Callable[[], str] = boot_id) -> None:
        self._wall_ns, self._elapsed_ns, self._boot = wall_ns, elapsed, boot
        self._lock = threading.Lock()
        self._bases: dict[Path, tuple[int, int]] = {}  # a log's root: its time (ms) at an elapsed time (ns)

    def now_ms(self, log: SinkLog) -> int:
        """The log's time now."""
        return self._at(log, self._elapsed_ns())

    def stamp(self, log: SinkLog) -> dict[str, Any]:
        """What a record of ``log`` written now carries: the log's time, and the boot and elapsed time of now."""
        elapsed = self._elapsed_ns()
        return {"time_ms": self._at(log, elapsed), "boot": self._boot(), "elapsed_ns": elapsed}

    def _at(self, log: SinkLog, elapsed: int) -> int:
        with self._lock:
            base = self._bases.get(log.root)
            if base is None:
                wall = self._wall_ns() // 1_000_000
                latest = log.latest_ms(self._boot(), elapsed, wall)
                base = self._bases[log.root] = (wall if latest is None else latest, elapsed)
        return base[0] + (elapsed - base[1]) // 1_000_000


_commit_lock = threading.Lock()
_SINK_CLOCK = SinkLogClock()


def _test_hook(env: str, batch_id: int) -> None:
    marker = os.environ.get(env)
    if marker:
        want, _, path = marker.partition(":")
        if want == str(batch_id) or want == "*":
            Path(path).write_text(str(os.getpid()))
            time.sleep(3600)  # the test SIGKILLs the driver here


class TxmqBatchWriter(DataSourceArrowWriter):
    def __init__(self, options: Any) -> None:
        self.opts = SinkOptions.parse(options, streaming=False)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> SinkCommitMessage:
        return write_partition(self.opts, iterator, transactional=False)


class TxmqStreamWriter(DataSourceStreamArrowWriter):
    def __init__(self, options: Any) -> None:
        self.opts = SinkOptions.parse(options, streaming=True)
        # Spark pickles this writer once per query run for its tasks: the id names the run in the halves.
        self.run_id = uuid.uuid4().hex
        if self.exactly_once:
            # Spark makes this writer on the driver side for a run's first micro-batch (a planner worker), and
            # for each commit: the sink's check responder starts here, so check-backs of its orphans are answered
            # while the query runs; it stops when the query ends (lifecycle.py).
            _responder(self.opts)

    @property
    def exactly_once(self) -> bool:
        return self.opts.guarantee == EXACTLY_ONCE

    def write(self, iterator: Iterator[pa.RecordBatch]) -> SinkCommitMessage:
        return write_partition(self.opts, iterator, transactional=self.exactly_once, run_id=self.run_id)

    def commit(self, messages: list[SinkCommitMessage | None], batchId: int) -> None:  # type: ignore[override]
        _test_hook(KILL_HOOK_ENV, batchId)
        if not self.exactly_once:
            return
        assert self.opts.log_dir is not None
        got = [m for m in messages if m is not None]
        with _commit_lock:
            producer = _responder(self.opts)
            sink_log = SinkLog(self.opts.log_dir)
            previous = sink_log.committed(batchId)
            if previous is not None:
                # A replay of a batch that committed before a crash: its new halves must never show, and the
                # recorded ones are committed again (the crash may have cut their COMMITs short; a repeat is
                # harmless), so no row waits for a check-back.
                fresh = [m for m in got if not set(m.ids) <= previous["idset"]]
                left = end_halves(producer, fresh, commit=False)
                left += end_halves(producer, [SinkLog.recorded_halves(previous)], commit=True)
                log.info("batch %d was committed by run %s: its halves committed again, %d replayed rows rolled "
                         "back (%d halves left to check-back)", batchId, previous["run"], sum(m.rows for m in fresh),
                         left)
                return
            run = next((m.run for m in got if m.run), "")
            sink_log.record_commit(batchId, run, got)  # the commit point
            _test_hook(KILL_AFTER_RECORD_ENV, batchId)
            started = time.monotonic()
            left = end_halves(producer, got, commit=True)
            log.info("batch %d committed: %d rows, their halves ended in %.2fs", batchId, sum(m.rows for m in got),
                     time.monotonic() - started)
            if left:
                log.warning("batch %d: %d halves not ended now; check-back commits them", batchId, left)
            if batchId % PRUNE_EVERY_BATCHES == 0 and batchId >= KEEP_BATCHES:
                removed = sink_log.prune(batchId - KEEP_BATCHES,
                                         _SINK_CLOCK.now_ms(sink_log) - self.opts.log_retention_ms)
                if removed:
                    log.info("sink log: %d records older than %d minutes removed", removed,
                             self.opts.log_retention_ms // 60_000)

    def abort(self, messages: list[SinkCommitMessage | None], batchId: int) -> None:  # type: ignore[override]
        if not self.exactly_once:
            return
        assert self.opts.log_dir is not None
        got = [m for m in messages if m is not None]
        with _commit_lock:
            sink_log = SinkLog(self.opts.log_dir)
            if sink_log.committed(batchId) is not None:
                return
            run = next((m.run for m in got if m.run), "")
            if run:
                sink_log.record_abort(batchId, run)
            end_halves(_responder(self.opts), got, commit=False)
