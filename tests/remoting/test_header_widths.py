"""Header numbers are read as RocketMQ's Java headers type them: ``Integer`` fields within 32 bits, ``Long``
fields within 64, anything else a ``RemoteProtocolError`` naming the field (never a ValueError or struct.error
later, in a handler)."""

from __future__ import annotations

import pytest

from txmq.errors import RemoteProtocolError
from txmq.remoting.headers import parse_int
from txmq.remoting.request_headers import SendMessageRequestHeader

BASE = {"producerGroup": "g", "topic": "t"}


@pytest.mark.parametrize(("field", "value"), [
    ("flag", str(2**31)), ("queueId", str(-2**31 - 1)), ("sysFlag", "9" * 12), ("reconsumeTimes", str(2**40)),
    ("bornTimestamp", str(2**63)), ("bornTimestamp", "1" * 5000),
])
def test_out_of_range_fields_are_the_peers_fault(field, value):
    with pytest.raises(RemoteProtocolError, match=f"'{field}' is out of range"):
        SendMessageRequestHeader.from_ext({**BASE, field: value})


def test_the_extremes_are_accepted():
    h = SendMessageRequestHeader.from_ext({**BASE, "flag": str(2**31 - 1), "queueId": str(-2**31),
                                           "bornTimestamp": str(2**63 - 1)})
    assert (h.flag, h.queue_id, h.born_timestamp) == (2**31 - 1, -2**31, 2**63 - 1)
    assert parse_int(str(-2**63), "x") == -2**63


def test_the_values_parsed_once_read_as_the_rule_reads_them() -> None:
    """``parse_int`` sums short unsigned digit strings in one loop and ``parse_bool`` answers the common values from
    a table: the same numbers and booleans the string rule gives, for every width, with the loop's edges (signs,
    leading zeros, the longest digit counts in range by length alone and one more, digits that are not ASCII) going
    through the rule."""
    from txmq.remoting.headers import parse_bool, parse_int32

    for text in [str(n) for n in range(-300, 300)] + ["-0", "+1", "01", "-01", "+0", "999999999", "-999999999"]:
        assert parse_int(text, "f") == parse_int32(text, "f") == int(text)
    for text in ["9" * 18, "1" * 19, "0" * 17 + "7", str(2**63 - 1), "1764000000000"]:
        assert parse_int(text, "f") == int(text)
    assert parse_int32("2147483647", "f") == 2**31 - 1 and parse_int32("0000000000012", "f") == 12
    for text in ["\u0661\u0662", "1\u00b2", "", " 1", "1 ", "0x1", "1_000"]:
        with pytest.raises(RemoteProtocolError, match="'f' is not an integer"):
            parse_int(text, "f")
    for text, want in [("true", True), ("false", False), ("1", True), ("0", False), ("TRUE", True), ("False", False)]:
        assert parse_bool(text, "f") is want
    with pytest.raises(RemoteProtocolError, match="'f' is not a boolean"):
        parse_bool("2", "f")
