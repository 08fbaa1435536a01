import calendar
import socket
import struct
import time

import pytest

from txmq.errors import RemoteProtocolError
from txmq.message import (
    MessageConst,
    MessageExt,
    UniqIdGenerator,
    _topic_part,
    create_offset_msg_id,
    decode_message,
    decode_messages,
    decode_offset_msg_id,
    encode_message,
    inner_message,
    java_string_hash,
    properties_to_string,
    string_to_properties,
)

pytestmark = pytest.mark.dated  # run again at a fixed month end by make test (Makefile, DATED_AT)


def _msg(**kw) -> MessageExt:
    m = MessageExt("orders", b"hello", {"TAGS": "TagA", "KEYS": "k1 k2", "x": "y"}, queue_id=3, **kw)
    return m


def test_roundtrip_keeps_every_field():
    m = _msg(queue_offset=7, commit_log_offset=1234, sys_flag=4, born_timestamp=11, store_timestamp=12,
             born_host=("10.0.0.1", 5555), store_host=("127.0.0.1", 10911), reconsume_times=2,
             prepared_transaction_offset=99, flag=5)
    raw = encode_message(m)
    out, end = decode_message(raw)
    assert end == len(raw) == out.store_size
    for f in ("topic", "body", "properties", "queue_id", "queue_offset", "commit_log_offset", "sys_flag",
              "born_timestamp", "store_timestamp", "born_host", "store_host", "reconsume_times",
              "prepared_transaction_offset", "flag"):
        assert getattr(out, f) == getattr(m, f), f
    assert out.tags == "TagA" and out.keys == "k1 k2"


def test_decode_rejects_corruption():
    raw = bytearray(encode_message(_msg()))
    raw[90] ^= 0xFF  # inside the body: CRC must catch it
    with pytest.raises(RemoteProtocolError):
        decode_message(bytes(raw))
    with pytest.raises(RemoteProtocolError):
        decode_message(bytes(raw[:50]))
    bad_magic = bytearray(encode_message(_msg()))
    bad_magic[4] ^= 1
    with pytest.raises(RemoteProtocolError):
        decode_message(bytes(bad_magic))


def test_decode_many():
    raws = b"".join(encode_message(_msg(queue_offset=i)) for i in range(5))
    assert [m.queue_offset for m in decode_messages(raws)] == list(range(5))


def test_properties_format():
    text = properties_to_string({"a": "1", "b": "2"})
    assert text == "a\x011\x02b\x012\x02"
    assert string_to_properties(text) == {"a": "1", "b": "2"}
    assert string_to_properties("junk\x02a\x011") == {"a": "1"}


def test_offset_msg_id_roundtrip():
    mid = create_offset_msg_id(("127.0.0.1", 10911), 123456789)
    assert len(mid) == 32 and mid == mid.upper()
    assert decode_offset_msg_id(mid) == (("127.0.0.1", 10911), 123456789)


def test_offset_msg_id_is_the_layout_of_ip_port_and_signed_offset_for_every_int64():
    """The host's digits are cached per host; the offset's must still be the 8 signed big-endian bytes."""
    for host in (("127.0.0.1", 10911), ("10.0.0.2", 0), ("255.255.255.255", 65535)):
        for offset in (0, 1, 0x7F, 2**40 + 7, 2**63 - 1, -1, -(2**63)):
            expected = (socket.inet_aton(host[0]) + struct.pack(">iq", host[1], offset)).hex().upper()
            assert create_offset_msg_id(host, offset) == expected
            assert decode_offset_msg_id(expected) == (host, offset)
    for offset in (2**63, -(2**63) - 1):
        with pytest.raises(struct.error):
            create_offset_msg_id(("127.0.0.1", 1), offset)


def test_inner_message_is_the_keyword_constructors_message_owning_its_properties():
    props = {MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX: "U1", "WAIT": "true"}
    m = inner_message("orders", b"hi", props, 5, 2, 4, 1_700_000_000_000, ("10.0.0.1", 5), ("127.0.0.1", 10911), 1)
    want = MessageExt("orders", b"hi", dict(props), flag=5, queue_id=2, sys_flag=4, born_timestamp=1_700_000_000_000,
                      born_host=("10.0.0.1", 5), store_host=("127.0.0.1", 10911), reconsume_times=1)
    assert encode_message(m) == encode_message(want)
    assert m.properties is props and m.transaction_id == "U1" and m.store_size == 0


def test_layout_and_ids_stay_right_past_the_host_and_topic_caches():
    """More hosts than their cache keeps (1,024: it empties and refills), and topics: every message still right."""
    for i in range(1100):
        host = (f"10.{i >> 8}.{i & 255}.1", i)
        m = MessageExt(f"t{i}", b"x", {}, born_host=host, store_host=host, commit_log_offset=i)
        back, _ = decode_message(encode_message(m))
        assert (back.topic, back.born_host, back.store_host) == (f"t{i}", host, host)
        assert decode_offset_msg_id(create_offset_msg_id(host, i)) == (host, i)


def test_the_topic_cache_keeps_every_topic_sends_spread_over_and_a_flood_of_names_stays_bounded():
    """10,000 topics in turn (a broker's sends spread over its table) are each encoded once: a cache emptied at
    1,024 encoded every one again. Names past the bound are encoded per call, rightly, and stored nowhere."""
    topics = [f"spread_t{i}" for i in range(10_000)]
    parts = [_topic_part(t) for t in topics]
    assert all(_topic_part(t) is part for t, part in zip(topics, parts, strict=True))
    flood = [f"flood_{i}" for i in range(20_000)]
    assert all(_topic_part(name) == bytes((len(name),)) + name.encode() for name in flood)
    assert _topic_part(flood[-1]) is not _topic_part(flood[-1])  # not kept: the cache stopped at its bound
    assert all(_topic_part(t) is part for t, part in zip(topics, parts, strict=True))


def test_uniq_ids_unique_and_ordered():
    gen = UniqIdGenerator("192.168.1.2")
    ids = [gen.next_id() for _ in range(20000)]
    assert len(set(ids)) == len(ids)
    assert ids == sorted(ids)
    assert UniqIdGenerator("192.168.1.2").next_id()[:20] != ids[0][:20]  # another process salt


def _utc_ms(*fields: int) -> int:
    return calendar.timegm(fields) * 1000


@pytest.mark.parametrize("start", [
    (2026, 11, 24, 20, 0, 0),   # day 24.86: 2^31 ms after the month's start
    (2026, 11, 30, 23, 59, 0),  # a 30-day month's end
    (2026, 12, 31, 23, 59, 0),  # a 31-day month's end and the year's
    (2027, 2, 28, 23, 59, 0),   # February of a common year
    (2028, 2, 28, 23, 59, 0),   # leap day
    (2028, 2, 29, 23, 59, 0),
    (2038, 1, 19, 3, 13, 0),    # 2^31 s since the epoch
    (2106, 2, 7, 6, 27, 0),     # 2^32 s since the epoch
])
def test_uniq_ids_through_calendar_boundaries(start):
    """Driven through a boundary by an injected clock, 100 ms a step for 2 hours: every id is 32 hex digits,
    unique and in order, and its time field is the ms since the start of the UTC month of the moment."""
    now = [_utc_ms(*start)]
    gen = UniqIdGenerator("10.0.0.1", clock_ms=lambda: now[0])
    ids = []
    for _ in range(72_000):
        ids.append(gen.next_id())
        t = time.gmtime(now[0] // 1000)
        month_start = calendar.timegm((t.tm_year, t.tm_mon, 1, 0, 0, 0)) * 1000
        assert int(ids[-1][20:28], 16) == now[0] - month_start
        now[0] += 100
    assert all(len(i) == 32 for i in ids)
    assert len(set(ids)) == len(ids)
    assert ids == sorted(ids)


def test_uniq_ids_when_the_clock_steps_back():
    """A clock stepped back (within the month, and back across a month boundary) neither repeats an id nor orders
    one before an earlier one; the time field carries on from the last id."""
    now = [_utc_ms(2027, 1, 1, 0, 0, 5)]
    gen = UniqIdGenerator("10.0.0.1", clock_ms=lambda: now[0])
    ids = [gen.next_id() for _ in range(3)]
    now[0] -= 3_600_000  # an hour back: into December
    ids += [gen.next_id() for _ in range(70_000)]  # past one counter's wrap
    now[0] += 7_200_000
    ids += [gen.next_id() for _ in range(3)]
    assert len(set(ids)) == len(ids)
    assert ids == sorted(ids)
    assert int(ids[-1][20:28], 16) == 3_605_000


def test_uniq_ids_when_the_clock_steps_back_before_the_months_first_id():
    """A process that started its month (at its start, or at the month's first id) and whose clock then stepped back
    into the month before, before its next id: the time field is not before the month's start (it wrapped to
    0xFFFFFFFF, 49.7 days into the month, and those ids sorted after every later one)."""
    now = [_utc_ms(2027, 2, 1, 0, 0, 5)]
    gen = UniqIdGenerator("10.0.0.1", clock_ms=lambda: now[0])
    now[0] -= 3_600_000  # an hour back: into January
    ids = [gen.next_id() for _ in range(3)]
    now[0] += 7_200_000
    ids += [gen.next_id() for _ in range(3)]
    assert len(set(ids)) == len(ids)
    assert ids == sorted(ids)
    assert [int(i[20:28], 16) for i in ids] == [0, 0, 0, 3_605_000, 3_605_000, 3_605_000]


def test_java_string_hash_matches_java():
    assert java_string_hash("TagA") == 2598919  # "TagA".hashCode() in Java
    assert java_string_hash("") == 0
    assert java_string_hash("polygenelubricants") == -2147483648
    assert MessageConst.TAGS == "TAGS"


def test_a_stored_record_is_the_message_layout_with_its_trailer():
    """The store joins a record straight from the message's parts (``encode_record``): dropping its trailer must give
    ``encode_message``'s bytes exactly, and a message it cannot encode is refused the same way."""
    from txmq.errors import InvalidMessageError
    from txmq.store.record import TRAILER_SIZE, encode_record, to_wire

    for m in (_msg(), _msg(born_host=("10.0.0.1", 5555), flag=-1), MessageExt("t", b"", {}),
              MessageExt("t", b"x" * 70000, {"KEYS": "ü€"})):
        rec = encode_record(m)
        assert isinstance(rec, bytearray) and rec[-TRAILER_SIZE:] == bytes(TRAILER_SIZE)
        assert struct.unpack_from(">i", rec)[0] == len(rec)
        assert to_wire(rec) == encode_message(m)
    for bad in (MessageExt("t", b"x", {"p": "v" * 40000}), MessageExt("t" * 128, b"x", {}),
                MessageExt("t", b"x", {}, born_host=("::1", 1))):
        with pytest.raises(InvalidMessageError):
            encode_message(bad)
        with pytest.raises(InvalidMessageError):
            encode_record(bad)
