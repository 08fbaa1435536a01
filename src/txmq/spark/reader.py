"""The batch and streaming readers of the ``txmq`` data source.

Spark's driver asks the name server for the queues of each topic and the brokers for their offsets; each
input partition is one queue's offset range (split when larger than ``maxRowsPerPartition``). Executors pull
that range with bounded pulls (``pullBatchSize`` ≤ 256 messages) and yield ``pyarrow.RecordBatch``es.

Only committed messages are read: a real topic's queues hold nothing else. Half messages live in
``RMQ_SYS_TRANS_HALF_TOPIC``, which the broker never serves to consumers, nor the op and discard topics
(``TRANS_CHECK_MAX_TIME_TOPIC``); ``includeSystemTopics=true`` only lets the reader name them.

Offsets, in the checkpoint and in ``startingOffsets``/``endingOffsets``: ``{"topic": {"broker:queueId": n}}``,
``n`` being the next queue offset to read (-2 earliest, -1 latest in options).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

from txmq.client.instance import MessageQueue
from txmq.client.pull_consumer import PullConsumer, PullStatus
from txmq.errors import BrokerError, ClientError
from txmq.message import MessageConst, MessageSysFlag
from txmq.spark._common import (
    AUDIT_TOPICS,
    EARLIEST,
    LATEST,
    ClientSecurity,
    OptionError,
    SourceOptions,
    cached_client,
    drop_client,
    queue_key,
    split_key,
)

Offsets = dict[str, dict[str, int]]

ARROW_SCHEMA = pa.schema([
    ("topic", pa.string()), ("queue_id", pa.int32()), ("queue_offset", pa.int64()), ("msg_id", pa.string()),
    ("keys", pa.string()), ("tags", pa.string()), ("body", pa.binary()),
    ("properties", pa.map_(pa.string(), pa.string())),
    ("born_timestamp", pa.timestamp("us", tz="UTC")), ("store_timestamp", pa.timestamp("us", tz="UTC")),
    ("transaction_id", pa.string()),
])
ROWS_PER_RECORD_BATCH = 4096


@dataclass(frozen=True)
class QueueRange(InputPartition):
    """One partition: ``[start, end)`` of one queue."""

    namesrv: str
    topic: str
    broker: str
    queue_id: int
    start: int
    end: int
    pull_batch_size: int
    audit: bool
    security: ClientSecurity


# --- the driver side: queues and their offsets -----------------------------------------------------------

def _pull_key(namesrv: str, group: str, security: ClientSecurity) -> tuple[str, ...]:
    return ("pull", namesrv, group, *security.cache_key())


def _consumer(namesrv: str, group: str, security: ClientSecurity) -> PullConsumer:
    """This process's started ``PullConsumer`` of ``group``: the driver's and each Python worker's tasks share it."""
    return cached_client(_pull_key(namesrv, group, security),
                         lambda: security.apply(PullConsumer(group, namesrv)))


def queue_bounds(opts: SourceOptions) -> dict[str, dict[str, tuple[int, int]]]:
    """topic → "broker:qid" → (min offset, max offset) as the brokers have them now."""
    out: dict[str, dict[str, tuple[int, int]]] = {}
    for attempt in range(3):
        consumer = _consumer(opts.namesrv, opts.group, opts.security)
        try:
            for topic in opts.topics:
                queues = _queues(consumer, opts.namesrv, topic, opts.security)
                out[topic] = {queue_key(q.broker_name, q.queue_id): (consumer.min_offset(q), consumer.max_offset(q))
                              for q in queues}
            return out
        except ClientError:
            drop_client(_pull_key(opts.namesrv, opts.group, opts.security))
            if attempt == 2:
                raise
            time.sleep(0.5)
    raise AssertionError("unreachable")


def _queues(consumer: PullConsumer, namesrv: str, topic: str, security: ClientSecurity) -> list[MessageQueue]:
    try:
        return consumer.fetch_subscribe_message_queues(topic)
    except ClientError:
        if topic not in AUDIT_TOPICS:
            raise
    # System topics have no route at the name server: queue 0 of every broker.
    from txmq.client.admin import Admin

    with security.apply(Admin(namesrv)) as admin:
        brokers = admin.brokers()
    assert consumer.instance is not None
    consumer.instance.broker_addrs.update(brokers)
    return [MessageQueue(topic, name, 0) for name in sorted(brokers)]


def resolve(spec: str | Offsets, bounds: dict[str, dict[str, tuple[int, int]]], for_new: int) -> Offsets:
    """Offsets for every known queue: named ones from ``spec``, others ``for_new`` (EARLIEST or LATEST)."""
    out: Offsets = {}
    for topic, queues in bounds.items():
        named = spec.get(topic, {}) if isinstance(spec, dict) else {}
        default = {"earliest": EARLIEST, "latest": LATEST}.get(spec, for_new) if isinstance(spec, str) else for_new
        out[topic] = {}
        for key, (lo, hi) in queues.items():
            want = named.get(key, default)
            out[topic][key] = lo if want == EARLIEST else hi if want == LATEST else min(max(want, lo), hi)
    return out


def make_partitions(opts: SourceOptions, start: Offsets, end: Offsets) -> list[QueueRange]:
    parts = []
    for topic, queues in end.items():
        for key, hi in sorted(queues.items()):
            lo = start.get(topic, {}).get(key, 0)  # a queue that appeared after ``start``: read it all
            broker, qid = split_key(key)
            step = max(1, opts.max_rows_per_partition)
            for s in range(lo, hi, step):
                parts.append(QueueRange(opts.namesrv, topic, broker, qid, s, min(hi, s + step),
                                        opts.pull_batch_size, topic in AUDIT_TOPICS, opts.security))
    return parts


# --- the executor side: pull a range, build Arrow record batches ------------------------------------------

MAX_EMPTY_ANSWERS = 60  # x EMPTY_ANSWER_WAIT_S: longer than a failover (docs/ha.md)
EMPTY_ANSWER_WAIT_S = 0.5


def read_range(part: QueueRange, group: str = "txmq-spark-reader") -> Iterator[pa.RecordBatch]:
    if not isinstance(part, QueueRange):  # Spark plans one empty partition when there are none
        return
    consumer = _consumer(part.namesrv, group, part.security)
    mq = MessageQueue(part.topic, part.broker, part.queue_id)
    cols: dict[str, list[Any]] = {name: [] for name in ARROW_SCHEMA.names}
    offset, failures, empty_answers = part.start, 0, 0
    while offset < part.end:
        try:
            if part.broker not in (consumer.instance.broker_addrs if consumer.instance else {}):
                _queues(consumer, part.namesrv, part.topic, part.security)
            result = consumer.pull(mq, "*", offset, min(part.pull_batch_size, part.end - offset))
        except (ClientError, BrokerError):
            failures += 1
            if failures > 5:
                raise
            drop_client(_pull_key(part.namesrv, group, part.security))
            consumer = _consumer(part.namesrv, group, part.security)
            time.sleep(0.2 * failures)
            continue
        if result.status == PullStatus.OFFSET_ILLEGAL:  # retention removed the start of the range
            if result.next_begin_offset <= offset:
                break
            offset = result.next_begin_offset
            continue
        if result.status in (PullStatus.NO_NEW_MSG, PullStatus.NO_MATCHED_MSG) and not result.msgs:
            # The range was planned below the queue's end, so its messages exist: the member that answered does
            # not have them (a slave behind, or asked while its group elects a new master). Ask again; never
            # end the range early, which would commit a batch without its rows.
            empty_answers += 1
            if empty_answers > MAX_EMPTY_ANSWERS:
                raise ClientError(f"{part.topic} {part.broker}:{part.queue_id}: offsets {offset}..{part.end} "
                                  f"planned but not served after {MAX_EMPTY_ANSWERS} attempts")
            time.sleep(EMPTY_ANSWER_WAIT_S)
            continue
        for m in result.msgs:
            if m.queue_offset >= part.end:
                break
            props = m.properties
            cols["topic"].append(m.topic)
            cols["queue_id"].append(m.queue_id)
            cols["queue_offset"].append(m.queue_offset)
            cols["msg_id"].append(m.msg_id)
            cols["keys"].append(props.get(MessageConst.KEYS))
            cols["tags"].append(props.get(MessageConst.TAGS))
            cols["body"].append(m.body)
            cols["properties"].append(list(props.items()))
            cols["born_timestamp"].append(m.born_timestamp * 1000)
            cols["store_timestamp"].append(m.store_timestamp * 1000)
            committed = MessageSysFlag.transaction_value(m.sys_flag) == MessageSysFlag.TRANSACTION_COMMIT_TYPE
            # A row of a committed half batch names its batch's transaction; a committed message is its own.
            cols["transaction_id"].append(props.get(MessageConst.TRANSACTION_ID)
                                          or props.get(MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX)
                                          if committed or part.audit else None)
        offset = result.next_begin_offset if result.next_begin_offset > offset else offset + 1
        empty_answers = 0
        if len(cols["topic"]) >= ROWS_PER_RECORD_BATCH:
            yield _record_batch(cols)
            cols = {name: [] for name in ARROW_SCHEMA.names}
    if cols["topic"]:
        yield _record_batch(cols)


def _record_batch(cols: dict[str, list[Any]]) -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays([pa.array(cols[f.name], f.type) for f in ARROW_SCHEMA], schema=ARROW_SCHEMA)


# --- Spark's reader interfaces ----------------------------------------------------------------------------

class TxmqBatchReader(DataSourceReader):
    def __init__(self, options: Any) -> None:
        self.opts = SourceOptions.parse(options, streaming=False)

    def partitions(self) -> list[QueueRange]:
        bounds = queue_bounds(self.opts)
        start = resolve(self.opts.starting, bounds, EARLIEST)
        end = resolve(self.opts.ending, bounds, LATEST)
        return make_partitions(self.opts, start, end)

    def read(self, partition: QueueRange) -> Iterator[pa.RecordBatch]:  # type: ignore[override]
        yield from read_range(partition, self.opts.group)


class TxmqStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Offsets per broker and queue; queues that appear later are read from their start."""

    def __init__(self, options: Any) -> None:
        self.opts = SourceOptions.parse(options, streaming=True)
        if self.opts.ending != "latest":
            raise OptionError("endingOffsets is for batch queries only")
        self._target: Offsets | None = None

    def initialOffset(self) -> dict:
        return resolve(self.opts.starting, queue_bounds(self.opts), LATEST)

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.opts.max_offsets_per_trigger:
            return ReadMaxRows(self.opts.max_offsets_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = {t: {k: hi for k, (_, hi) in qs.items()} for t, qs in queue_bounds(self.opts).items()}

    def latestOffset(self, start: dict | None = None, limit: ReadLimit | None = None) -> dict:
        bounds = queue_bounds(self.opts)
        latest: Offsets = {t: {k: hi for k, (_, hi) in qs.items()} for t, qs in bounds.items()}
        if self._target is not None:
            latest = {t: {k: min(hi, self._target.get(t, {}).get(k, 0)) for k, hi in qs.items()}
                      for t, qs in latest.items()}
        start = start or {}
        # Keep every queue already known (a queue never goes backwards), new ones start at 0.
        begin = {t: {k: start.get(t, {}).get(k, 0) for k in qs} for t, qs in latest.items()}
        for t, qs in start.items():
            for k, off in qs.items():
                latest.setdefault(t, {})
                latest[t][k] = max(latest[t].get(k, off), off)
                begin.setdefault(t, {})[k] = off
        if isinstance(limit, ReadMaxRows):
            latest = _rate_limit(begin, latest, limit.max_rows)
        return latest

    def partitions(self, start: dict, end: dict) -> list[QueueRange]:
        return make_partitions(self.opts, start, end)

    def read(self, partition: QueueRange) -> Iterator[pa.RecordBatch]:  # type: ignore[override]
        yield from read_range(partition, self.opts.group)

    def commit(self, end: dict) -> None:
        pass


def _rate_limit(begin: Offsets, latest: Offsets, max_rows: int) -> Offsets:
    """At most ``max_rows`` new offsets in all, shared among queues in proportion to their backlog (as Spark's
    Kafka source does), and at least one row when there is any backlog."""
    backlog = {(t, k): max(0, hi - begin[t][k]) for t, qs in latest.items() for k, hi in qs.items()}
    total = sum(backlog.values())
    if total <= max_rows:
        return latest
    out = {t: dict(qs) for t, qs in begin.items()}
    left = max(1, max_rows)
    for (t, k), n in sorted(backlog.items(), key=lambda kv: -kv[1]):
        take = min(n, left, max(1, n * max_rows // total)) if n else 0
        out[t][k] = begin[t][k] + take
        left -= take
    return out
