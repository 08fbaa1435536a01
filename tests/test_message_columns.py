"""``txmq.message_columns`` gives the columns ``decode_message`` + ``prepare_for_user`` give, and raises their
errors, compiled and interpreted (the ``.py`` loaded by path), so the two builds and the two decoders cannot drift.
Real pulled bodies: tests/spark/test_source_decoder.py."""

from __future__ import annotations

import importlib.util
import random
import zlib
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

import txmq.message_columns as compiled
from txmq.client.consumer import prepare_for_user
from txmq.errors import RemoteProtocolError
from txmq.message import MessageConst, MessageExt, MessageSysFlag, decode_messages, encode_message

COLUMNS = ("topic", "queue_id", "queue_offset", "msg_id", "keys", "tags", "body", "properties", "born_timestamp",
           "store_timestamp", "transaction_id")
NO_END = (1 << 63) - 1


def _interpreted() -> ModuleType:
    path = Path(compiled.__file__).parent / "message_columns.py"
    spec = importlib.util.spec_from_file_location("txmq_message_columns_interpreted", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(params=["compiled", "interpreted"], scope="module")
def mc(request: pytest.FixtureRequest) -> ModuleType:
    if request.param == "compiled":
        assert compiled.__file__.endswith(".so"), f"txmq.message_columns was not compiled: {compiled.__file__}"
        return compiled
    module = _interpreted()
    assert module.__file__.endswith(".py")
    return module


def columns(mc: ModuleType, body: bytes, end: int = NO_END, tags: set[str] | None = None,
            audit: bool = False) -> dict[str, list[Any]]:
    rows = mc.SourceRows()
    mc.add_pulled(rows, body, end, tags, audit)
    out = {name: list(getattr(rows, name)) for name in COLUMNS if name != "properties"}
    off = rows.prop_offsets
    out["properties"] = [list(zip(rows.prop_keys[off[i]:off[i + 1]], rows.prop_values[off[i]:off[i + 1]],
                                  strict=True)) for i in range(len(rows))]
    return out


def reference(body: bytes, end: int = NO_END, tags: set[str] | None = None, audit: bool = False) -> dict[str, list]:
    """The columns as the source built them from ``PullConsumer.pull``'s ``MessageExt``s before this decoder."""
    out: dict[str, list[Any]] = {name: [] for name in COLUMNS}
    for m in decode_messages(body):
        if (tags is not None and m.tags not in tags) or m.queue_offset >= end:
            continue
        try:
            m = prepare_for_user(m)
        except zlib.error as exc:
            raise RemoteProtocolError(f"compressed message body does not inflate: {exc}") from None
        p = m.properties
        committed = MessageSysFlag.transaction_value(m.sys_flag) == MessageSysFlag.TRANSACTION_COMMIT_TYPE
        for name, value in (
            ("topic", m.topic), ("queue_id", m.queue_id), ("queue_offset", m.queue_offset), ("msg_id", m.msg_id),
            ("keys", p.get(MessageConst.KEYS)), ("tags", p.get(MessageConst.TAGS)), ("body", m.body),
            ("properties", list(p.items())), ("born_timestamp", _micros(m.born_timestamp)),
            ("store_timestamp", _micros(m.store_timestamp)),
            ("transaction_id", p.get(MessageConst.TRANSACTION_ID) or p.get(MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX)
             if audit or committed else None),
        ):
            out[name].append(value)
    return out


def _micros(ms: int) -> int | None:
    """What the source promises for a stored time: microseconds, or None for a time no Spark timestamp holds (Spark's
    range is Python's datetime's, years 1 to 9999)."""
    try:
        datetime(1970, 1, 1, tzinfo=UTC) + timedelta(milliseconds=ms)
    except OverflowError:
        return None
    return ms * 1000


def record(topic: str = "orders", body: bytes = b"hello", props: dict[str, str] | None = None, **kw: Any) -> bytes:
    fields: dict[str, Any] = {"queue_id": 3, "queue_offset": 7, "commit_log_offset": 4096,
                              "born_timestamp": 1_700_000_000_000, "store_timestamp": 1_700_000_000_123,
                              "store_host": ("10.1.2.3", 10911), **kw}
    return encode_message(MessageExt(topic, body, props, **fields))


UNIQ = MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX
COMMIT = MessageSysFlag.TRANSACTION_COMMIT_TYPE
CASES = {
    "plain": record(props={"TAGS": "TagA", "KEYS": "k1 k2", UNIQ: "7F00000100002A9F0000000000000001", "x": "y"}),
    "utf8": record(topic="заказы", props={"ключ": "значение ✓", "TAGS": "тег"}, body="тело".encode()),
    "offset id": record(props={"TAGS": "TagB"}, commit_log_offset=123_456_789_012),
    "committed": record(props={UNIQ: "U1"}, sys_flag=COMMIT),
    "half batch row": record(props={UNIQ: "U2", MessageConst.TRANSACTION_ID: "T-batch"}, sys_flag=COMMIT),
    "prepared": record(props={UNIQ: "U3", MessageConst.TRANSACTION_ID: "T3"},
                       sys_flag=MessageSysFlag.TRANSACTION_PREPARED_TYPE),
    "compressed": record(body=zlib.compress(b"abc" * 500), props={"TAGS": "TagA"},
                         sys_flag=MessageSysFlag.COMPRESSED | COMMIT),
    "retry": record(topic="%RETRY%billing", props={MessageConst.RETRY_TOPIC: "orders", UNIQ: "U4"}),
    "odd properties": record(props={"K": "v1\x02K\x01v2\x02junk\x02x\x01y\x01z\x02\x02"}),
    "no properties": record(props={}, body=b""),
    "wide fields": record(props={}, queue_id=-1, queue_offset=(1 << 62) + 5, born_timestamp=-5,
                          store_timestamp=1 << 62, commit_log_offset=(1 << 63) - 1),  # µs beyond int64
}


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("audit", [False, True])
def test_each_kind_of_message_gives_the_same_columns(mc: ModuleType, case: str, audit: bool) -> None:
    body = CASES[case]
    assert columns(mc, body, audit=audit) == reference(body, audit=audit)


def test_the_columns_hold_what_the_source_promises(mc: ModuleType) -> None:
    got = columns(mc, b"".join(CASES.values()))
    by_case = dict(zip(CASES, zip(*(got[c] for c in COLUMNS), strict=True), strict=True))
    col = {name: i for i, name in enumerate(COLUMNS)}
    assert by_case["compressed"][col["body"]] == b"abc" * 500
    assert by_case["retry"][col["topic"]] == "orders"
    assert by_case["half batch row"][col["transaction_id"]] == "T-batch"
    assert by_case["committed"][col["transaction_id"]] == "U1"
    assert by_case["prepared"][col["transaction_id"]] is None and by_case["plain"][col["transaction_id"]] is None
    assert by_case["offset id"][col["msg_id"]] == "0A01020300002A9F0000001CBE991A14"
    assert by_case["odd properties"][col["properties"]] == [("K", "v2"), ("x", "y\x01z")]
    assert by_case["wide fields"][col["queue_id"]] == -1 and by_case["wide fields"][col["born_timestamp"]] == -5000
    assert by_case["wide fields"][col["store_timestamp"]] is None  # 2^62 ms: after the year 9999


@pytest.mark.parametrize("ms", [1 << 62, -(1 << 62), (1 << 63) - 1, 253_402_300_800_000, -62_135_596_800_001])
def test_a_stored_time_no_timestamp_holds_reads_as_null(mc: ModuleType, ms: int) -> None:
    """A record stamped outside years 1-9999 (written before born timestamps were checked, or by another program)
    reads as NULL instead of failing the whole read; the edges of the range stay timestamps."""
    from txmq.spark.reader import _record_batch

    rows = mc.SourceRows()
    edges = (253_402_300_799_999, -62_135_596_800_000)
    mc.add_pulled(rows, b"".join(record(born_timestamp=ms, store_timestamp=t) for t in edges), 1 << 62, None, False)
    batch = _record_batch(rows)
    assert batch.column("born_timestamp").null_count == 2
    assert [t.value for t in batch.column("store_timestamp")] == [e * 1000 for e in edges]


def test_rows_are_filtered_by_tag_and_end_offset_and_appended_across_bodies(mc: ModuleType) -> None:
    body = b"".join(record(props={"TAGS": tag} if tag else {}, queue_offset=i)
                    for i, tag in enumerate(["A", "B", "A", None, "A"]))
    assert columns(mc, body, end=4, tags={"A"}) == reference(body, end=4, tags={"A"})
    assert columns(mc, body, end=4, tags={"A"})["queue_offset"] == [0, 2]
    rows = mc.SourceRows()
    mc.add_pulled(rows, body, NO_END, None, False)
    mc.add_pulled(rows, body, 2, None, False)
    assert rows.queue_offset == [0, 1, 2, 3, 4, 0, 1]
    assert rows.prop_offsets == [0, 1, 2, 3, 3, 4, 5, 6]


def _error(fn: Any) -> str | None:
    try:
        fn()
    except RemoteProtocolError as exc:
        return str(exc)
    return None


def test_malformed_bodies_raise_the_errors_of_decode_message_and_append_nothing(mc: ModuleType) -> None:
    good = CASES["plain"]
    rows = mc.SourceRows()
    mc.add_pulled(rows, good, NO_END, None, False)
    before = (list(rows.topic), list(rows.prop_offsets), list(rows.prop_keys))

    def check(body: bytes) -> str:
        want = _error(lambda: reference(body))
        assert want is not None, body
        got = _error(lambda: mc.add_pulled(rows, body, NO_END, None, False))
        assert got == want
        assert (rows.topic, rows.prop_offsets, rows.prop_keys) == before  # the good record before it went too
        return got

    for cut in range(1, len(good)):  # truncated anywhere, after a whole record
        check(good + good[:cut])
    bad_magic = bytearray(good)
    bad_magic[4] ^= 1
    assert check(good + bytes(bad_magic)).startswith("bad message magic")
    bad_crc = bytearray(good)
    bad_crc[88] ^= 1  # the body's first byte
    assert check(bytes(bad_crc) + good) == "message body CRC mismatch"
    not_utf8 = record(props={"K": "v"}).replace(b"K\x01v", b"\xff\x01v")
    assert check(good + not_utf8) == "message topic or properties are not UTF-8"
    not_zlib = record(body=b"not zlib", sys_flag=MessageSysFlag.COMPRESSED)
    assert check(good + not_zlib).startswith("compressed message body does not inflate")


def test_random_damage_gives_the_same_error_or_the_same_columns(mc: ModuleType) -> None:
    """The drift guard: any bytes decode to the same columns as ``decode_message``'s or raise the same error."""
    rng = random.Random(17)
    base = b"".join([CASES["plain"], CASES["half batch row"], CASES["utf8"]])
    for _ in range(400):
        data = bytearray(base)
        for _ in range(rng.randint(1, 3)):
            i = rng.randrange(len(data))
            op = rng.random()
            if op < 0.6:
                data[i] = rng.randrange(256)
            elif op < 0.8:
                del data[i:i + rng.randint(1, 8)]
            else:
                data[i:i] = rng.randbytes(rng.randint(1, 8))
        body = bytes(data)
        want = _error(lambda body=body: reference(body))
        got = _error(lambda body=body: columns(mc, body))
        assert got == want, body.hex()
        if want is None:
            assert columns(mc, body) == reference(body)
