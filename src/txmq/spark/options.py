"""The options of the ``txmq`` data source: every key must be known (a silently ignored option is a wrong
result the user does not see), Kafka's names where they mean the same, rocketmq-spark's as aliases."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

EARLIEST = -2
LATEST = -1

Offsets = dict[str, dict[str, int]]


class OptionError(ValueError):
    """An option of the txmq data source is missing, malformed or unknown (the user's fault)."""


class DataLossError(RuntimeError):
    """Offsets a query still had to read were removed by retention (``failOnDataLoss=true``)."""


# canonical name -> aliases (Kafka's or rocketmq-spark's spelling of the same thing)
COMMON = {"namesrv": ("namesrvAddr", "nameServer"), "accessKey": (), "secretKey": (), "tls": (), "tlsTrustCertPath": ()}
SOURCE = {
    **COMMON,
    "topic": ("topics", "subscribe"), "subscribePattern": (), "assign": (),
    "startingOffsets": (), "startingTimestamp": (), "startingOffsetsByTimestamp": (),
    "endingOffsets": (), "endingTimestamp": (), "endingOffsetsByTimestamp": (),
    "failOnDataLoss": (), "maxOffsetsPerTrigger": (), "minOffsetsPerTrigger": (), "maxTriggerDelay": (),
    "maxRowsPerPartition": ("maxRecordsPerPartition",), "minRowsPerPartition": (), "pullBatchSize": (),
    "includeSystemTopics": (),
    "group": (), "tags": ("subExpression",), "commitOffsetsToBroker": (), "brokerSuspendMaxTimeMillis": (),
}
SINK = {
    **COMMON,
    "topic": (), "deliveryGuarantee": (), "checkpointLocation": (), "sinkLogDir": (), "producerGroup": (),
    "checkImmunitySeconds": (), "maxInFlight": (), "rowsPerHalf": (), "sinkLogRetentionMinutes": (),
    "queueSelector": (),
}


class Options:
    """Spark's options (keys arrive lower-cased) by canonical name; unknown keys are refused, naming the known."""

    def __init__(self, raw: Mapping[str, Any], known: Mapping[str, tuple[str, ...]], what: str) -> None:
        names = {alias.lower(): name for name, aliases in known.items() for alias in (name, *aliases)}
        self.values: dict[str, str] = {}
        unknown = []
        for key, value in raw.items():
            name = names.get(key.lower())
            if name is None:
                unknown.append(key)
            elif value is not None:
                if name in self.values and self.values[name] != str(value):
                    raise OptionError(f"option {name!r} given twice (an alias) with different values")
                self.values[name] = str(value)
        if unknown:
            listed = ", ".join(n + (f" ({'/'.join(a)})" if a else "") for n, a in known.items())
            raise OptionError(f"unknown option(s) {', '.join(sorted(unknown))} for the txmq {what}; "
                              f"known options: {listed}")

    def get(self, name: str, default: str | None = None) -> str | None:
        return self.values.get(name, default)

    def flag(self, name: str, default: bool) -> bool:
        raw = self.values.get(name)
        if raw is None:
            return default
        if raw.lower() not in ("true", "false"):
            raise OptionError(f"{name} must be true or false, not {raw!r}")
        return raw.lower() == "true"

    def number(self, name: str, default: int, minimum: int = 1) -> int:
        value = self.optional_number(name, minimum)
        return default if value is None else value

    def optional_number(self, name: str, minimum: int = 1) -> int | None:
        raw = self.values.get(name)
        if raw is None:
            return None
        try:
            value = int(raw)
        except ValueError:
            value = minimum - 1
        if value < minimum:
            raise OptionError(f"{name} must be a whole number of at least {minimum}, not {raw!r}")
        return value

    def namesrv(self) -> str:
        namesrv = self.get("namesrv")
        if not namesrv:
            raise OptionError("option 'namesrv' (host:port of the txmq name server) is required")
        return namesrv


def queue_key(broker: str, queue_id: int) -> str:
    return f"{broker}:{queue_id}"


def split_key(key: str) -> tuple[str, int]:
    broker, _, qid = key.rpartition(":")
    if not broker or not qid.lstrip("-").isdigit():
        raise OptionError(f"offset key {key!r} is not 'brokerName:queueId'")
    return broker, int(qid)


def _json(name: str, text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError as exc:
        raise OptionError(f"{name} is not JSON: {exc}") from None


def per_queue(name: str, text: str, minimum: int) -> Offsets:
    """``{"topic": {"broker-a:0": n}}`` with every ``n >= minimum``."""
    raw = _json(name, text)
    if not isinstance(raw, dict) or not all(isinstance(v, dict) for v in raw.values()):
        raise OptionError(f'{name} must look like {{"topic": {{"broker-a:0": 12}}}}')
    out: Offsets = {}
    for topic, queues in raw.items():
        out[topic] = {}
        for key, value in queues.items():
            split_key(key)
            if not isinstance(value, int) or value < minimum:
                raise OptionError(f"{name}: {topic} {key} must be an integer >= {minimum}, not {value!r}")
            out[topic][key] = value
    return out


@dataclass(frozen=True, slots=True)
class ByTime:
    """A start or end by store time (ms): the first offset stored at or after it (SEARCH_OFFSET_BY_TIMESTAMP),
    the queue's max offset when none is; ``every`` for all queues, else ``named`` per queue."""

    every: int | None
    named: Offsets


Spec = str | Offsets | ByTime  # "earliest" / "latest", offsets per queue, or by time


def bound_spec(opts: Options, which: str, default: str) -> Spec:
    """``<which>Timestamp`` wins over ``<which>OffsetsByTimestamp``, which wins over ``<which>Offsets``, as in
    Kafka's connector."""
    ts = opts.get(f"{which}Timestamp")
    if ts is not None:
        if not ts.isdigit():
            raise OptionError(f"{which}Timestamp must be milliseconds since the epoch, not {ts!r}")
        return ByTime(int(ts), {})
    by_ts = opts.get(f"{which}OffsetsByTimestamp")
    if by_ts is not None:
        return ByTime(None, per_queue(f"{which}OffsetsByTimestamp", by_ts, 0))
    text = (opts.get(f"{which}Offsets") or default).strip()
    if text in ("earliest", "latest"):
        return text
    return per_queue(f"{which}Offsets", text, EARLIEST)


def parse_assign(text: str) -> dict[str, set[str | int]]:
    """``{"topic": [0, "broker-a:1"]}``: queue ids (on every broker) or ``broker:queueId`` keys."""
    raw = _json("assign", text)
    if not isinstance(raw, dict) or not all(isinstance(v, list) and v for v in raw.values()):
        raise OptionError('assign must look like {"topic": [0, 1]} or {"topic": ["broker-a:0"]}')
    out: dict[str, set[str | int]] = {}
    for topic, queues in raw.items():
        for q in queues:
            if isinstance(q, str):
                split_key(q)
            elif not isinstance(q, int) or q < 0:
                raise OptionError(f"assign: {topic}: {q!r} is neither a queue id nor 'broker:queueId'")
        out[topic] = set(queues)
    return out


def duration_ms(name: str, text: str) -> int:
    """Kafka's durations: ``15m``, ``30s``, ``500ms``, ``1h``, or plain milliseconds."""
    m = re.fullmatch(r"\s*(\d+)\s*(ms|s|m|min|h)?\s*", text)
    if not m:
        raise OptionError(f"{name} must be a duration such as 30s, 15m or 1h, not {text!r}")
    unit = {"ms": 1, "s": 1000, "m": 60_000, "min": 60_000, "h": 3_600_000}[m.group(2) or "ms"]
    return int(m.group(1)) * unit
