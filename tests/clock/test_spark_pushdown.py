"""The Spark batch source pushes ``store_timestamp >= t`` down as its start (the broker's search by time): after a
step back of the broker's clock, that start must not land past rows the filter selects. The broker runs under
libfaketime; the reader is driven as Spark drives it (``pushFilters``, ``partitions``, ``read``), Spark's own
evaluation of the filter done here."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime
from typing import Any

from tests.clock.conftest import Faked
from tests.clock.faketime import SETTLE_S
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


def _sent_across_a_step_back_of_80_ms(faked: Faked) -> tuple[list[Any], int]:
    """Messages sent every 10 ms while the broker's clock steps back 80 ms (under its 100 ms tolerance: no anchor);
    the messages as stored, and the index of the first stamped lower than the one before it."""
    with Producer("p_pushdown_step", faked.namesrv) as producer:
        faked.clock.step(-0.08, settle=False)
        deadline = time.monotonic() + SETTLE_S + 0.5
        sent = 0
        while time.monotonic() < deadline:
            producer.send(Message(TOPIC, b"%04d" % sent))
            sent += 1
            time.sleep(0.01)
    with PullConsumer("g_pushdown_step", faked.namesrv) as pc:
        [mq] = pc.fetch_subscribe_message_queues(TOPIC)
        msgs: list[Any] = []
        while len(msgs) < sent:
            msgs += pc.pull(mq, "*", len(msgs), 32).msgs
    stamps = [m.store_timestamp for m in msgs]
    [back] = [i for i in range(1, len(stamps)) if stamps[i] < stamps[i - 1]]
    assert stamps[back - 1] - stamps[back] < 100, stamps  # under the tolerance
    return msgs, back


def _assert_pushed_rows_exact(faked: Faked, msgs: list[Any], back: int) -> None:
    """The filter from each of the last stamps before the step back keeps, pushed down, the rows Spark selects
    without the pushdown."""
    stamps = [m.store_timestamp for m in msgs]
    for stamp in sorted(set(stamps[max(0, back - 8) : back])):
        since = datetime.fromtimestamp(stamp / 1000, UTC)
        expected = sorted(m.body for m in msgs if m.store_timestamp >= stamp)
        assert _rows(faked.namesrv, since, push=False) == expected
        pushed = _rows(faked.namesrv, since, push=True)
        assert pushed == expected, f"store_timestamp >= {stamp}: {len(pushed)} rows with pushdown, {len(expected)} "\
            f"without (the step back after offset {back - 1}: {stamps[back - 8 : back + 8]})"
    assert not faked.broker_errors()


def test_a_pushed_store_time_filter_keeps_rows_stored_before_a_step_back_of_80_ms(faked: Faked) -> None:
    """A step back under the broker clock's 100 ms tolerance (no anchor): messages are sent every 10 ms while the
    broker takes the step, and the filter from each of the last stamps before it keeps the rows Spark selects
    without the pushdown; the pushed start begins at ``t`` itself."""
    faked.start({}, {TOPIC: 1})
    msgs, back = _sent_across_a_step_back_of_80_ms(faked)
    _assert_pushed_rows_exact(faked, msgs, back)


def test_a_pushed_store_time_filter_keeps_rows_stored_before_a_step_back_of_80_ms_before_marks(
        faked: Faked) -> None:
    """The same step back taken by a broker whose store's clock file has no marks (written by a txmq before them,
    as every store upgraded holds for its older records; and as a broker not upgraded answers the search): its
    search by time splits no stretch at a step under 100 ms and may answer up to about 200 ms late, which the
    pushdown's start must not pass on as rows lost."""
    faked.start({}, {TOPIC: 1})
    msgs, back = _sent_across_a_step_back_of_80_ms(faked)
    broker = faked.broker
    assert broker is not None
    broker.stop()
    clock_file = faked.cluster.root / "broker-a" / "clock"
    saved = json.loads(clock_file.read_bytes())
    assert saved.pop("marks")
    clock_file.write_bytes(json.dumps(saved).encode())
    broker.start()
    faked.pids.add(broker.pid or 0)
    faked.cluster.wait_route(TOPIC)
    _assert_pushed_rows_exact(faked, msgs, back)
