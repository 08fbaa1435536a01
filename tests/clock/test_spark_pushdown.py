"""The Spark batch source pushes ``store_timestamp >= t`` down as its start (the broker's search by time): after a
step back of the broker's clock, that start must not land past rows the filter selects. The broker runs under
libfaketime; the reader is driven as Spark drives it (``pushFilters``, ``partitions``, ``read``), Spark's own
evaluation of the filter done here."""

from __future__ import annotations

from datetime import UTC, datetime

from tests.clock.conftest import Faked
from txmq import Message, Producer, PullConsumer

TOPIC = "pushdown_step"


def _rows(namesrv: str, since: datetime, push: bool) -> list[bytes]:
    from pyspark.sql.datasource import GreaterThanOrEqual

    from txmq.spark.reader import TxmqBatchReader

    reader = TxmqBatchReader({"namesrv": namesrv, "topic": TOPIC})
    condition = GreaterThanOrEqual(("store_timestamp",), since)
    if push:
        list(reader.pushFilters([condition]))  # the filter is returned: Spark keeps evaluating it
    out = []
    for part in reader.partitions():
        for batch in reader.read(part):
            for body, stored in zip(batch.column("body").to_pylist(), batch.column("store_timestamp").to_pylist(),
                                    strict=True):
                if stored >= since:  # Spark's evaluation of the filter
                    out.append(bytes(body))
    return sorted(out)


def test_a_pushed_store_time_filter_keeps_rows_stored_before_a_step_back(faked: Faked) -> None:
    faked.start({}, {TOPIC: 1})
    with Producer("p_pushdown_step", faked.namesrv) as producer:
        producer.send(Message(TOPIC, b"a"))
        producer.send(Message(TOPIC, b"b"))
        faked.clock.step(-120)  # NTP corrects the broker's clock, two minutes fast
        producer.send(Message(TOPIC, b"c"))
        producer.send(Message(TOPIC, b"d"))
    with PullConsumer("g_pushdown_step", faked.namesrv) as pc:
        [mq] = pc.fetch_subscribe_message_queues(TOPIC)
        stamps = {m.body: m.store_timestamp for m in pc.pull(mq, "*", 0, 32).msgs}
    since = datetime.fromtimestamp(stamps[b"b"] / 1000, UTC)
    expected = sorted(body for body, stamp in stamps.items() if stamp >= stamps[b"b"])
    assert expected == [b"b"], stamps
    assert _rows(faked.namesrv, since, push=False) == expected
    pushed = _rows(faked.namesrv, since, push=True)
    assert pushed == expected, f"store_timestamp >= {since}: {pushed} with pushdown, {expected} without ({stamps})"
    assert not faked.broker_errors()
