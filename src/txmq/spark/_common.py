"""What the reader and the writers share: the row schema, the source's options as parsed, and a small cache of
txmq clients per Python worker (workers are reused between tasks)."""

from __future__ import annotations

import atexit
import contextlib
import re
import threading
from dataclasses import dataclass
from typing import Any, TypeVar

from txmq.client.pull_consumer import PullConsumer
from txmq.spark.options import (
    SOURCE,
    OptionError,
    Options,
    Spec,
    bound_spec,
    duration_ms,
    parse_assign,
)
from txmq.topic import (
    RMQ_SYS_TRANS_CHECK_MAX_TIME_TOPIC,
    RMQ_SYS_TRANS_HALF_TOPIC,
    RMQ_SYS_TRANS_OP_HALF_TOPIC,
)

# The reader's columns (docs/spark.md). Timestamps are Spark TIMESTAMP (UTC), from the broker's milliseconds.
SCHEMA_DDL = (
    "topic string, queue_id int, queue_offset long, msg_id string, keys string, tags string, body binary, "
    "properties map<string,string>, born_timestamp timestamp, store_timestamp timestamp, transaction_id string"
)

AUDIT_TOPICS = frozenset({RMQ_SYS_TRANS_HALF_TOPIC, RMQ_SYS_TRANS_OP_HALF_TOPIC, RMQ_SYS_TRANS_CHECK_MAX_TIME_TOPIC})


_C = TypeVar("_C")


@dataclass(frozen=True, slots=True)
class ClientSecurity:
    """The account and TLS of every client a reader or writer makes: options ``accessKey`` and ``secretKey``,
    ``tls`` (true/false) and ``tlsTrustCertPath``. Options left out fall back, as for any txmq client, to
    ``$TXMQ_ACCESS_KEY``, ``$TXMQ_SECRET_KEY``, ``$TXMQ_TLS`` and ``$TXMQ_TLS_TRUST_CERT_PATH`` where the client
    runs."""

    access_key: str = ""
    secret_key: str = ""
    tls_trust_cert_path: str | None = None  # None: the environment decides; "": the system's CAs

    @classmethod
    def parse(cls, options: Any) -> ClientSecurity:
        ak, sk = options.get("accessKey") or "", options.get("secretKey") or ""
        if bool(ak) != bool(sk):
            raise OptionError("options accessKey and secretKey go together")
        tls = str(options.get("tls") or "false").lower() == "true"
        return cls(ak, sk, (options.get("tlsTrustCertPath") or "") if tls else None)

    def apply(self, client: _C) -> _C:
        if self.access_key:
            client.set_session_credentials(self.access_key, self.secret_key)  # type: ignore[attr-defined]
        if self.tls_trust_cert_path is not None:
            client.use_tls(self.tls_trust_cert_path)  # type: ignore[attr-defined]
        return client

    def cache_key(self) -> tuple[str, ...]:
        """What tells cached clients of different accounts or TLS settings apart (never the secret itself)."""
        return (self.access_key, "tls" if self.tls_trust_cert_path is not None else "", self.tls_trust_cert_path or "")


@dataclass(frozen=True, slots=True)
class SourceOptions:
    namesrv: str
    topics: tuple[str, ...]  # empty with ``pattern``: the topics are listed at the name server
    pattern: re.Pattern[str] | None
    assign: dict[str, set[str | int]] | None
    starting: Spec
    ending: Spec
    fail_on_data_loss: bool
    max_offsets_per_trigger: int | None
    min_offsets_per_trigger: int | None
    max_trigger_delay_ms: int
    max_rows_per_partition: int
    min_rows_per_partition: int  # a stream's smaller ranges share a partition up to this many (reader.pack)
    pull_batch_size: int
    include_system_topics: bool
    group: str
    tags: str
    commit_offsets_to_broker: bool
    broker_suspend_max_ms: int  # the stream reader's held pulls when nothing is new (long_poll.py); 0: none
    security: ClientSecurity
    sql: str | None = None  # the SQL92 expression of filters pushed down (pushdown.py): the broker filters

    @classmethod
    def parse(cls, options: Any, streaming: bool) -> SourceOptions:
        opts = Options(options, SOURCE, "source")
        topic, pattern, assign = opts.get("topic"), opts.get("subscribePattern"), opts.get("assign")
        if sum(x is not None for x in (topic, pattern, assign)) != 1:
            raise OptionError("give exactly one of 'topic' (alias subscribe: topics separated by commas), "
                              "'subscribePattern' (a regular expression) or 'assign' (JSON of topics and queues)")
        assigned = parse_assign(assign) if assign is not None else None
        topics = tuple(assigned) if assigned else tuple(t.strip() for t in (topic or "").split(",") if t.strip())
        if topic is not None and not topics:
            raise OptionError("option 'topic' names no topic")
        try:
            compiled = re.compile(pattern) if pattern is not None else None
        except re.error as exc:
            raise OptionError(f"subscribePattern is not a regular expression: {exc}") from None
        include_system = opts.flag("includeSystemTopics", False)
        hidden = [t for t in topics if t in AUDIT_TOPICS]
        if hidden and not include_system:
            raise OptionError(f"{hidden} are txmq system topics: set includeSystemTopics=true to read them (audit)")
        ending = bound_spec(opts, "ending", "latest")
        if streaming and ending != "latest":
            raise OptionError("endingOffsets, endingTimestamp and endingOffsetsByTimestamp are for batch queries")
        delay = opts.get("maxTriggerDelay")
        return cls(
            namesrv=opts.namesrv(), topics=topics, pattern=compiled, assign=assigned,
            starting=bound_spec(opts, "starting", "latest" if streaming else "earliest"), ending=ending,
            fail_on_data_loss=opts.flag("failOnDataLoss", True),
            max_offsets_per_trigger=opts.optional_number("maxOffsetsPerTrigger"),
            min_offsets_per_trigger=opts.optional_number("minOffsetsPerTrigger"),
            max_trigger_delay_ms=duration_ms("maxTriggerDelay", delay) if delay else 15 * 60_000,
            max_rows_per_partition=opts.number("maxRowsPerPartition", 100_000),
            min_rows_per_partition=opts.number("minRowsPerPartition", 4096),
            pull_batch_size=min(256, opts.number("pullBatchSize", 256)),
            include_system_topics=include_system,
            group=opts.get("group") or "txmq-spark-reader",
            tags=(opts.get("tags") or "*").strip() or "*",
            commit_offsets_to_broker=opts.flag("commitOffsetsToBroker", True),
            broker_suspend_max_ms=opts.number("brokerSuspendMaxTimeMillis", 500, minimum=0),
            security=ClientSecurity.parse(opts),
        )


# --- clients cached per Python worker process -----------------------------------------------------------

_clients: dict[tuple[str, ...], Any] = {}
_clients_lock = threading.Lock()


def cached_client(key: tuple[str, ...], factory: Any) -> Any:
    """One started client per key and process: Spark reuses Python workers, so tasks share a connection."""
    with _clients_lock:
        client = _clients.get(key)
        if client is None:
            client = factory()
            client.start()
            _clients[key] = client
        return client


def drop_client(key: tuple[str, ...]) -> None:
    with _clients_lock:
        client = _clients.pop(key, None)
    if client is not None:
        with contextlib.suppress(Exception):  # a broken client is being thrown away anyway
            client.shutdown()


def pull_key(namesrv: str, group: str, security: ClientSecurity) -> tuple[str, ...]:
    return ("pull", namesrv, group, *security.cache_key())


def pull_consumer(namesrv: str, group: str, security: ClientSecurity) -> PullConsumer:
    """This process's started ``PullConsumer`` of ``group``: the driver's and each Python worker's tasks share it."""
    return cached_client(pull_key(namesrv, group, security), lambda: security.apply(PullConsumer(group, namesrv)))


@atexit.register
def _close_clients() -> None:
    for key in list(_clients):
        drop_client(key)
