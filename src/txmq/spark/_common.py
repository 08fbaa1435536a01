"""What the reader and the writers share: options, the row schema, offsets as Spark's Kafka options spell
them, and a small cache of txmq clients per Python worker (workers are reused between tasks)."""

from __future__ import annotations

import atexit
import contextlib
import json
import threading
from dataclasses import dataclass
from typing import Any, TypeVar

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

EARLIEST = -2
LATEST = -1
AUDIT_TOPICS = frozenset({RMQ_SYS_TRANS_HALF_TOPIC, RMQ_SYS_TRANS_OP_HALF_TOPIC, RMQ_SYS_TRANS_CHECK_MAX_TIME_TOPIC})


class OptionError(ValueError):
    """An option of the txmq data source is missing or malformed (the user's fault)."""


def queue_key(broker: str, queue_id: int) -> str:
    return f"{broker}:{queue_id}"


def split_key(key: str) -> tuple[str, int]:
    broker, _, qid = key.rpartition(":")
    if not broker or not qid.lstrip("-").isdigit():
        raise OptionError(f"offset key {key!r} is not 'brokerName:queueId'")
    return broker, int(qid)


def namesrv_option(options: Any) -> str:
    """The ``namesrv`` option (alias ``namesrvAddr``), which every reader and writer needs."""
    namesrv = options.get("namesrv") or options.get("namesrvAddr")
    if not namesrv:
        raise OptionError("option 'namesrv' (host:port of the txmq name server) is required")
    return str(namesrv)


def parse_offsets(text: str | None, default: str) -> str | dict[str, dict[str, int]]:
    """``earliest``, ``latest`` or ``{"topic": {"broker-a:0": 12, "broker-a:1": -2}}`` (-2 earliest, -1 latest)."""
    text = (text or default).strip()
    if text in ("earliest", "latest"):
        return text
    try:
        raw = json.loads(text)
    except ValueError as exc:
        raise OptionError(f"offsets must be 'earliest', 'latest' or JSON: {exc}") from None
    if not isinstance(raw, dict) or not all(isinstance(v, dict) for v in raw.values()):
        raise OptionError('offsets JSON must look like {"topic": {"broker-a:0": 12}}')
    out: dict[str, dict[str, int]] = {}
    for topic, queues in raw.items():
        out[topic] = {}
        for key, off in queues.items():
            split_key(key)
            if not isinstance(off, int) or off < EARLIEST:
                raise OptionError(f"offset of {topic} {key} must be an integer >= -2, not {off!r}")
            out[topic][key] = off
    return out


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
        tls = str(options.get("tls", "false")).lower() == "true"
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
    topics: tuple[str, ...]
    starting: str | dict[str, dict[str, int]]
    ending: str | dict[str, dict[str, int]]
    max_offsets_per_trigger: int | None
    max_rows_per_partition: int
    pull_batch_size: int
    include_system_topics: bool
    group: str
    security: ClientSecurity

    @classmethod
    def parse(cls, options: Any, streaming: bool) -> SourceOptions:
        namesrv = namesrv_option(options)
        raw = options.get("topic") or options.get("topics") or options.get("subscribe")
        if not raw:
            raise OptionError("option 'topic' (one topic, or several separated by commas) is required")
        topics = tuple(t.strip() for t in raw.split(",") if t.strip())
        include_system = str(options.get("includeSystemTopics", "false")).lower() == "true"
        hidden = [t for t in topics if t in AUDIT_TOPICS]
        if hidden and not include_system:
            raise OptionError(f"{hidden} are txmq system topics: set includeSystemTopics=true to read them (audit)")
        mopt = options.get("maxOffsetsPerTrigger")
        return cls(
            namesrv=namesrv, topics=topics,
            starting=parse_offsets(options.get("startingOffsets"), "latest" if streaming else "earliest"),
            ending=parse_offsets(options.get("endingOffsets"), "latest"),
            max_offsets_per_trigger=int(mopt) if mopt else None,
            max_rows_per_partition=int(options.get("maxRowsPerPartition", 100_000)),
            pull_batch_size=min(256, int(options.get("pullBatchSize", 256))),
            include_system_topics=include_system,
            group=options.get("group", "txmq-spark-reader"),
            security=ClientSecurity.parse(options),
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


@atexit.register
def _close_clients() -> None:
    for key in list(_clients):
        drop_client(key)
