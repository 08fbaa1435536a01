"""The batch and streaming readers of the ``txmq`` data source.

Spark's driver asks the name server for the queues of each topic and the brokers for their offsets; each
input partition is one queue's offset range (split when larger than ``maxRowsPerPartition``). Executors pull
that range with bounded pulls (``pullBatchSize`` ≤ 256 messages, filtered by ``tags``; the next pull in flight
while the last one is turned into columns) and yield ``pyarrow.RecordBatch``es.

Only committed messages are read: a real topic's queues hold nothing else. Half messages live in
``RMQ_SYS_TRANS_HALF_TOPIC``, which the broker never serves to consumers; with ``includeSystemTopics=true``
the reader may name the discard topic (``TRANS_CHECK_MAX_TIME_TOPIC``) and, on a broker started with
``auditReadSystemTopicsEnable=true``, the half and op topics (for audit jobs).

Offsets, in the checkpoint and in ``startingOffsets``/``endingOffsets``: ``{"topic": {"broker:queueId": n}}``,
``n`` being the next queue offset to read (-2 earliest, -1 latest in options); by store time with Kafka's
``*Timestamp`` options. Offsets that retention removed before they were read fail the query
(``failOnDataLoss=true``, Kafka's default) or are skipped and counted.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader, Filter, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

from txmq.client.consumer import TagFilter
from txmq.client.instance import MessageQueue
from txmq.client.pull_consumer import PullConsumer, PullResult, PullStatus
from txmq.errors import BrokerError, ClientError
from txmq.message_columns import SourceRows, add_pulled
from txmq.spark._common import (
    AUDIT_TOPICS,
    SCHEMA_DDL,
    ClientSecurity,
    OptionError,
    SourceOptions,
    drop_client,
    pull_consumer,
    pull_key,
)
from txmq.spark.broker_offsets import BrokerOffsetCommitter
from txmq.spark.long_poll import ArrivalWatch
from txmq.spark.options import (
    EARLIEST,
    LATEST,
    ByTime,
    DataLossError,
    Offsets,
    Spec,
    queue_key,
    split_key,
)
from txmq.spark.pushdown import Pushed, apply, push
from txmq.topic import is_system_topic

log = logging.getLogger("txmq.spark")

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
    """One partition: ``[start, end)`` of one queue, and how to read it."""

    namesrv: str
    group: str
    topic: str
    broker: str
    queue_id: int
    start: int
    end: int
    pull_batch_size: int
    audit: bool
    tags: str
    fail_on_data_loss: bool
    security: ClientSecurity
    sql: str | None = None  # filters pushed down: the broker sends only the messages this selects
    property_columns: tuple[str, ...] = ()  # string columns the schema adds: each message's property of that name


@dataclass(frozen=True)
class PackedRanges(InputPartition):
    """One partition of several small ranges, read one after the other (a stream's small batches: one task
    instead of one per queue, ``minRowsPerPartition``)."""

    ranges: tuple[QueueRange, ...]


# --- the driver side: queues and their offsets -----------------------------------------------------------

Bounds = dict[str, dict[str, tuple[int, int]]]


def queue_bounds(opts: SourceOptions) -> Bounds:
    """topic → "broker:qid" → (min offset, max offset) as the brokers have them now, for the topics and queues
    the options name (``subscribePattern``: the name server's topics that match, system topics never)."""
    out: Bounds = {}
    for attempt in range(3):
        consumer = pull_consumer(opts.namesrv, opts.group, opts.security)
        try:
            for topic in _topics(opts):
                queues = [q for q in _queues(consumer, opts.namesrv, topic, opts.security) if _assigned(opts, q)]
                out[topic] = {queue_key(q.broker_name, q.queue_id): (consumer.min_offset(q), consumer.max_offset(q))
                              for q in queues}
            return out
        except ClientError:
            drop_client(pull_key(opts.namesrv, opts.group, opts.security))
            if attempt == 2:
                raise
            time.sleep(0.5)
    raise AssertionError("unreachable")


def _topics(opts: SourceOptions) -> tuple[str, ...]:
    if opts.pattern is None:
        return opts.topics
    from txmq.client.admin import Admin

    with opts.security.apply(Admin(opts.namesrv)) as admin:
        names = admin.list_topics()
    return tuple(t for t in names if opts.pattern.fullmatch(t) and not is_system_topic(t))


def _assigned(opts: SourceOptions, q: MessageQueue) -> bool:
    if opts.assign is None:
        return True
    wanted = opts.assign[q.topic]
    return q.queue_id in wanted or queue_key(q.broker_name, q.queue_id) in wanted


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


def resolve(opts: SourceOptions, spec: Spec, bounds: Bounds, for_new: int) -> Offsets:
    """Offsets for every known queue: named ones from ``spec`` (offsets or store times), others ``for_new``
    (EARLIEST or LATEST). Offsets named beyond a queue's max are its max; below its min, they stay (a loss that
    ``check_loss`` reports)."""
    out: Offsets = {}
    consumer = pull_consumer(opts.namesrv, opts.group, opts.security) if isinstance(spec, ByTime) else None
    for topic, queues in bounds.items():
        out[topic] = {}
        for key, (lo, hi) in queues.items():
            if isinstance(spec, ByTime) and (spec.every is not None or key in spec.named.get(topic, {})):
                assert consumer is not None
                ts = spec.every if spec.every is not None else spec.named[topic][key]
                broker, qid = split_key(key)
                out[topic][key] = consumer.search_offset(MessageQueue(topic, broker, qid), ts)
                continue
            named = spec.get(topic, {}) if isinstance(spec, dict) else {}
            default = {"earliest": EARLIEST, "latest": LATEST}.get(spec, for_new) if isinstance(spec, str) else for_new
            want = named.get(key, default)
            out[topic][key] = lo if want == EARLIEST else hi if want == LATEST else min(want, hi)
    return out


def check_loss(opts: SourceOptions, start: Offsets, bounds: Bounds) -> tuple[Offsets, int]:
    """Start offsets that retention removed: with ``failOnDataLoss`` a ``DataLossError`` naming them, else the
    start moved to the queue's min offset; returns the starts and how many offsets were skipped."""
    lost: list[tuple[str, str, int, int]] = []
    out = {t: dict(qs) for t, qs in start.items()}
    for topic, queues in start.items():
        for key, off in queues.items():
            lo = bounds.get(topic, {}).get(key, (0, 0))[0]
            if off < lo:
                lost.append((topic, key, off, lo))
                out[topic][key] = lo
    if lost and opts.fail_on_data_loss:
        where = "; ".join(f"{t} {k} offsets [{a}, {b})" for t, k, a, b in lost[:5])
        raise DataLossError(f"retention removed messages before the query read them: {where}. The query stops "
                            "(failOnDataLoss=true); set failOnDataLoss=false to skip them and go on")
    skipped = sum(b - a for _, _, a, b in lost)
    if skipped:
        log.warning("failOnDataLoss=false: skipping %d offsets removed by retention (%s)", skipped,
                    ", ".join(f"{t} {k} [{a}, {b})" for t, k, a, b in lost[:5]))
    return out, skipped


def property_columns(schema: Any) -> tuple[str, ...]:
    """The columns a user's schema adds after the source's own (``SCHEMA_DDL``): each a string column holding the
    message's property of that name (NULL without it), so that Spark can push a filter on it down to the broker
    (it pushes none on ``properties['x']``). Any other schema is refused."""
    if schema is None:
        return ()
    names, fields = ARROW_SCHEMA.names, list(schema.fields)
    if [f.name for f in fields[:len(names)]] != names:
        raise OptionError(f"a schema for the txmq source starts with its columns ({SCHEMA_DDL}) and may add "
                          "string columns after them, each a message property")
    extra = fields[len(names):]
    for f in extra:
        if f.dataType.typeName() != "string":
            raise OptionError(f"schema column {f.name!r} is a {f.dataType.simpleString()}: a column after the "
                              "source's own is a message property, a string")
    return tuple(f.name for f in extra)


def make_partitions(opts: SourceOptions, start: Offsets, end: Offsets,
                    columns: tuple[str, ...] = ()) -> list[QueueRange]:
    parts = []
    for topic, queues in end.items():
        for key, hi in sorted(queues.items()):
            lo = start.get(topic, {}).get(key, 0)  # a queue that appeared after ``start``: read it all
            broker, qid = split_key(key)
            step = max(1, opts.max_rows_per_partition)
            for s in range(lo, hi, step):
                parts.append(QueueRange(opts.namesrv, opts.group, topic, broker, qid, s, min(hi, s + step),
                                        opts.pull_batch_size, topic in AUDIT_TOPICS, opts.tags,
                                        opts.fail_on_data_loss, opts.security, opts.sql, columns))
    return parts


def pack(parts: list[QueueRange], min_rows: int) -> list[QueueRange | PackedRanges]:
    """Ranges of fewer than ``min_rows`` offsets put together, in order, until a partition holds ``min_rows``: a
    task costs Spark and its Python worker a round trip of its own, which a small batch pays once per queue (a
    stream at a zero trigger, whose batches are what arrived during the last one). Large ranges stay one task
    each, for parallelism."""
    out: list[QueueRange | PackedRanges] = []
    group: list[QueueRange] = []
    rows = 0
    for part in parts:
        if part.end - part.start >= min_rows:
            out.append(part)
            continue
        group.append(part)
        rows += part.end - part.start
        if rows >= min_rows:
            out.append(group[0] if len(group) == 1 else PackedRanges(tuple(group)))
            group, rows = [], 0
    if group:
        out.append(group[0] if len(group) == 1 else PackedRanges(tuple(group)))
    return out


# --- the executor side: pull a range, build Arrow record batches ------------------------------------------

MAX_EMPTY_ANSWERS = 60  # x EMPTY_ANSWER_WAIT_S: how long planned offsets may go unserved, longer than a failover
EMPTY_ANSWER_WAIT_S = 0.5


def _pull(part: QueueRange, offset: int, block_s: float = 0.0) -> PullResult:
    """One pull of the range from ``offset``, retried over a fresh connection on transport errors; with
    ``block_s`` the broker holds it until a message arrives at ``offset`` (long polling)."""
    mq = MessageQueue(part.topic, part.broker, part.queue_id)
    for failures in range(6):
        consumer = pull_consumer(part.namesrv, part.group, part.security)
        try:
            if part.broker not in (consumer.instance.broker_addrs if consumer.instance else {}):
                _queues(consumer, part.namesrv, part.topic, part.security)
            return consumer.pull(mq, part.tags, offset, min(part.pull_batch_size, part.end - offset), block_s,
                                 decode=False, sql=part.sql)
        except (ClientError, BrokerError):
            if failures == 5:
                raise
            drop_client(pull_key(part.namesrv, part.group, part.security))
            time.sleep(0.2 * (failures + 1))
    raise AssertionError("unreachable")


def _pulls(part: QueueRange) -> Iterator[PullResult]:
    """The range's pull results in order; the next pull is in flight while the caller decodes this one."""
    with ThreadPoolExecutor(1, thread_name_prefix="txmq-pull") as pool:
        pending: Future[PullResult] | None = pool.submit(_pull, part, part.start)
        offset, empty_since, asked = part.start, 0.0, time.monotonic()
        while pending is not None:
            result = pending.result()
            pending = None
            if result.status == PullStatus.OFFSET_ILLEGAL:  # retention removed offsets while the query ran
                if result.next_begin_offset <= offset:
                    return
                if part.fail_on_data_loss:
                    raise DataLossError(f"retention removed {part.topic} {part.broker}:{part.queue_id} offsets "
                                        f"[{offset}, {result.next_begin_offset}) before they were read "
                                        "(failOnDataLoss=true; set it to false to skip them)")
                log.warning("failOnDataLoss=false: skipping %d offsets of %s %s:%d removed by retention",
                            result.next_begin_offset - offset, part.topic, part.broker, part.queue_id)
                offset = result.next_begin_offset
                pending = pool.submit(_pull, part, offset)
                continue
            if not result.body and result.next_begin_offset <= offset:
                # The range was planned below the queue's end, so its messages exist: the member that answered
                # does not have them (a slave behind, or asked while its group elects a new master). Ask again, the
                # pull held by the broker until they are there; never end the range early, which would commit a
                # batch without its rows.
                now = time.monotonic()
                empty_since = empty_since or now
                if now - empty_since > MAX_EMPTY_ANSWERS * EMPTY_ANSWER_WAIT_S:
                    raise ClientError(f"{part.topic} {part.broker}:{part.queue_id}: offsets {offset}..{part.end} "
                                      f"planned but not served for {now - empty_since:.0f} s")
                if now - asked < EMPTY_ANSWER_WAIT_S / 2:  # answered at once, not held: do not ask in a loop
                    time.sleep(EMPTY_ANSWER_WAIT_S)
                asked = time.monotonic()
                pending = pool.submit(_pull, part, offset, EMPTY_ANSWER_WAIT_S)  # held until the member has it
                continue
            empty_since = 0.0
            offset = result.next_begin_offset if result.next_begin_offset > offset else offset + 1
            if offset < part.end:
                pending = pool.submit(_pull, part, offset)
            yield result


def read_partition(part: QueueRange | PackedRanges) -> Iterator[pa.RecordBatch]:
    for one in part.ranges if isinstance(part, PackedRanges) else (part,):
        yield from read_range(one)


def read_range(part: QueueRange) -> Iterator[pa.RecordBatch]:
    if not isinstance(part, QueueRange):  # Spark plans one empty partition when there are none
        return
    tags = TagFilter(part.tags).tags
    rows = SourceRows()
    for result in _pulls(part):
        add_pulled(rows, result.body, part.end, tags, part.audit)
        if len(rows) >= ROWS_PER_RECORD_BATCH:
            yield _record_batch(rows, part.property_columns)
            rows = SourceRows()
    if len(rows):
        yield _record_batch(rows, part.property_columns)


def _record_batch(rows: SourceRows, columns: tuple[str, ...] = ()) -> pa.RecordBatch:
    f = ARROW_SCHEMA.field
    properties = pa.MapArray.from_arrays(pa.array(rows.prop_offsets, pa.int32()), pa.array(rows.prop_keys, pa.string()),
                                         pa.array(rows.prop_values, pa.string()), type=f("properties").type)
    arrays = [pa.array(getattr(rows, name), f(name).type) if name != "properties" else properties
              for name in ARROW_SCHEMA.names]
    if not columns:
        return pa.RecordBatch.from_arrays(arrays, schema=ARROW_SCHEMA)
    offsets, keys, values = rows.prop_offsets, rows.prop_keys, rows.prop_values
    per_row = [dict(zip(keys[offsets[i]:offsets[i + 1]], values[offsets[i]:offsets[i + 1]], strict=True))
               for i in range(len(offsets) - 1)]
    arrays += [pa.array([props.get(name) for props in per_row], pa.string()) for name in columns]
    schema = pa.schema([*ARROW_SCHEMA, *(pa.field(name, pa.string()) for name in columns)])
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


# --- Spark's reader interfaces ----------------------------------------------------------------------------

class TxmqBatchReader(DataSourceReader):
    def __init__(self, options: Any, schema: Any = None) -> None:
        self.opts = SourceOptions.parse(options, streaming=False)
        self.columns = property_columns(schema)
        self.pushed = Pushed()

    def pushFilters(self, filters: list[Filter]) -> Iterator[Filter]:
        """Filters on tags, keys and property columns go to the broker as SQL92; a store-time bound moves the
        start (pushdown.py). Called once, on the driver, before ``partitions``."""
        yield from push(filters, self.pushed, self.columns, self.opts.tags)
        if self.pushed.sql or self.pushed.stored_since_ms is not None:
            log.info("txmq source %s: pushed down %s", ",".join(self.opts.topics), self.pushed.describe())

    def partitions(self) -> list[QueueRange]:
        opts = apply(self.opts, self.pushed)
        bounds = queue_bounds(opts)
        start, _ = check_loss(opts, resolve(opts, opts.starting, bounds, EARLIEST), bounds)
        end = resolve(opts, opts.ending, bounds, LATEST)
        return make_partitions(opts, start, end, self.columns)

    def read(self, partition: QueueRange) -> Iterator[pa.RecordBatch]:  # type: ignore[override]
        yield from read_range(partition)


class TxmqStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Offsets per broker and queue; queues that appear later are read from their start. Spark keeps this
    object for the query's run (in a Python worker of the driver), so it may count and remember."""

    def __init__(self, options: Any, schema: Any = None) -> None:
        self.opts = SourceOptions.parse(options, streaming=True)
        self.columns = property_columns(schema)
        self._target: Offsets | None = None
        self._latest: Offsets = {}
        self._bounds: Bounds | None = None  # fetched by the last latestOffset, for the partitions of its batch
        self._last_batch = time.monotonic()
        self.skipped = 0  # offsets removed by retention and skipped (failOnDataLoss=false)
        self._driver_side()

    def _driver_side(self) -> None:
        """What only the driver's copy uses; Spark pickles the reader for its tasks, each of which gets its own."""
        self._committer = BrokerOffsetCommitter(self.opts) if self.opts.commit_offsets_to_broker else None
        self._watch = ArrivalWatch(self.opts)

    def __getstate__(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k not in ("_committer", "_watch")}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._driver_side()

    def initialOffset(self) -> dict:
        return resolve(self.opts, self.opts.starting, queue_bounds(self.opts), LATEST)

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.opts.max_offsets_per_trigger:
            return ReadMaxRows(self.opts.max_offsets_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = _maxes(queue_bounds(self.opts))

    def latestOffset(self, start: dict | None = None, limit: ReadLimit | None = None) -> dict:
        if start and self._committer is not None:
            self._committer.submit(start)  # Spark asks only once every batch up to ``start`` has finished
        start = start or {}
        begin, latest = self._next(start, limit)
        wait_ms = self.opts.broker_suspend_max_ms
        if latest == begin and wait_ms and self._target is None and self._watch.wait(self._latest, wait_ms / 1000):
            begin, latest = self._next(start, limit)  # something arrived while the pulls were held: plan it now
        if latest != begin:
            self._last_batch = time.monotonic()
            log.info("txmq source %s: batch of %d offsets; %d behind the latest after it (%d skipped so far)",
                     ",".join(latest), _count(begin, latest), _count(latest, self._latest), self.skipped)
        return latest

    def _next(self, start: Offsets, limit: ReadLimit | None) -> tuple[Offsets, Offsets]:
        """(where the next batch begins, where it ends) from the queues' offsets now."""
        self._bounds = queue_bounds(self.opts)
        latest = self._latest = _maxes(self._bounds)
        if self._target is not None:
            latest = {t: {k: min(hi, self._target.get(t, {}).get(k, 0)) for k, hi in qs.items()}
                      for t, qs in latest.items()}
        # Keep every queue already known (a queue never goes backwards), new ones start at 0.
        begin = {t: {k: start.get(t, {}).get(k, 0) for k in qs} for t, qs in latest.items()}
        for t, qs in start.items():
            for k, off in qs.items():
                latest.setdefault(t, {})
                latest[t][k] = max(latest[t].get(k, off), off)
                begin.setdefault(t, {})[k] = off
        minimum = self.opts.min_offsets_per_trigger
        if (minimum and self._target is None and _count(begin, latest) < minimum
                and (time.monotonic() - self._last_batch) * 1000 < self.opts.max_trigger_delay_ms):
            return begin, begin  # minOffsetsPerTrigger: no batch until enough arrived or maxTriggerDelay passed
        if isinstance(limit, ReadMaxRows):
            latest = _rate_limit(begin, latest, limit.max_rows)
        return begin, latest

    def reportLatestOffset(self) -> dict | None:
        """The queues' max offsets at the last trigger: Spark's progress shows them beside ``endOffset``, so
        ``latestOffset - endOffset`` is how far behind the query is."""
        return self._latest or None

    def partitions(self, start: dict, end: dict) -> list[QueueRange | PackedRanges]:
        # The bounds that planned this batch, moments ago (a batch replayed after a restart fetches them anew).
        bounds, self._bounds = self._bounds or queue_bounds(self.opts), None
        start, skipped = check_loss(self.opts, start, bounds)
        self.skipped += skipped
        packed_up_to = min(self.opts.min_rows_per_partition, self.opts.max_rows_per_partition)
        return pack(make_partitions(self.opts, start, end, self.columns), packed_up_to)

    def read(self, partition: QueueRange | PackedRanges) -> Iterator[pa.RecordBatch]:  # type: ignore[override]
        yield from read_partition(partition)

    def commit(self, end: dict) -> None:
        """The checkpoint is the source of truth; the broker gets the offsets for operators (broker_offsets.py)."""
        if self._committer is not None:
            self._committer.submit(end)

    def stop(self) -> None:
        self._watch.close()
        if self._committer is not None and not self._committer.flush():
            log.warning("the query stopped before its last offsets reached the broker (group %s)", self.opts.group)


def _maxes(bounds: Bounds) -> Offsets:
    return {t: {k: hi for k, (_, hi) in qs.items()} for t, qs in bounds.items()}


def _count(begin: Offsets, end: Offsets) -> int:
    """Offsets from ``begin`` to ``end`` over all queues (a queue missing from ``begin`` from 0)."""
    return sum(max(0, hi - begin.get(t, {}).get(k, 0)) for t, qs in end.items() for k, hi in qs.items())


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
