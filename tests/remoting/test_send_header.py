"""The send header's written parser (``SendMessageRequestHeader.from_ext``/``from_v2_ext``, every send), and
END_TRANSACTION's (every decision), give exactly the header, or exactly the ``RemoteProtocolError``, that the generic
spec-driven ``_parse`` gives (the send header's in both wire forms), for the ext fields each client writes and for
every kind of bad or missing field."""

from __future__ import annotations

import dataclasses
import itertools

import pytest

from txmq.errors import RemoteProtocolError
from txmq.remoting import request_headers
from txmq.remoting.request_headers import EndTransactionRequestHeader
from txmq.remoting.request_headers import SendMessageRequestHeader as Header

# The ext fields each client writes for one message (SEND_MESSAGE's long names).
JAVA = {"producerGroup": "pg", "topic": "T", "defaultTopic": "TBW102", "defaultTopicQueueNums": "4", "queueId": "3",
        "sysFlag": "0", "bornTimestamp": "1764000000000", "flag": "0",
        "properties": "UNIQ_KEY\x01A\x02WAIT\x01true\x02", "reconsumeTimes": "0", "unitMode": "false", "batch": "false"}
CPP = {**JAVA, "unitMode": "0", "batch": "0", "maxReconsumeTimes": "", "flag": "", "properties": ""}
GO = {**JAVA, "unitMode": "false", "maxReconsumeTimes": "16", "batch": "true"}
TXMQ = Header("pg", "T", queue_id=1, born_timestamp=5, properties="a\x01b\x02").to_ext()
CLIENTS = [JAVA, CPP, GO, TXMQ, {"producerGroup": "", "topic": ""}]

# One bad value per kind: not an integer, beyond an Int32, beyond a Long, not a boolean, a sign alone, spaces.
BAD = {"defaultTopicQueueNums": "x", "queueId": str(2**31), "sysFlag": "1.5", "bornTimestamp": str(2**63),
       "flag": str(-2**31 - 1), "reconsumeTimes": " 1", "unitMode": "yes", "batch": "2", "maxReconsumeTimes": "-"}


def _outcome(parse, ext: dict[str, str]) -> object:
    try:
        header = parse(ext)
    except RemoteProtocolError as exc:
        return "error", str(exc)
    return [(f.name, type(getattr(header, f.name)), getattr(header, f.name)) for f in dataclasses.fields(Header)]


def _generic(ext: dict[str, str]) -> Header:
    return request_headers._parse(Header, Header._spec(), ext)


def _cases() -> list[dict[str, str]]:
    cases = list(CLIENTS)
    for base, wire in itertools.product(CLIENTS[:4], (f.wire for f in Header._spec())):
        cases.append({k: v for k, v in base.items() if k != wire})  # absent
        cases.append({**base, wire: ""})  # empty
        if wire in BAD:
            cases.append({**base, wire: BAD[wire]})
    cases.append({**JAVA, "queueId": "2147483647", "bornTimestamp": str(-2**63), "flag": "-2147483648"})  # extremes
    cases.append({**JAVA, "unitMode": "TRUE", "batch": "1", "queueId": "+2", "sysFlag": "-0"})
    cases.append({**JAVA, "queueId": "bad", "producerGroup": None})  # type: ignore[dict-item]  # first error wins
    cases.append({"topic": "T", "queueId": "bad"})  # a missing required field before a bad one
    cases.append({**JAVA, "extra": "kept out", "bname": "broker-a"})  # fields the header has no use for
    return cases


@pytest.mark.parametrize("ext", _cases())
def test_written_parser_is_the_generic_one(ext: dict[str, str]) -> None:
    ext = {k: v for k, v in ext.items() if v is not None}
    want = _outcome(_generic, ext)
    assert _outcome(Header.from_ext, ext) == want
    letters = {Header.V2_LETTERS.get(k, k): v for k, v in ext.items()}
    assert _outcome(Header.from_v2_ext, letters) == want


def test_errors_name_the_long_field_and_a_header_round_trips() -> None:
    with pytest.raises(RemoteProtocolError, match="missing field topic"):
        Header.from_v2_ext({"a": "pg"})
    with pytest.raises(RemoteProtocolError, match="'queueId' is out of range"):
        Header.from_v2_ext({"a": "pg", "b": "T", "e": str(2**31)})
    h = Header.from_ext(GO)
    assert Header.from_v2_ext(h.to_v2_ext()) == h == Header.from_ext(h.to_ext())


def test_a_long_name_among_letters_is_read_as_the_generic_path_reads_it() -> None:
    """No client sends both forms; when one does, the later of a letter and its long name wins, as it did."""
    for ext in ({"a": "pg", "b": "T", "topic": "U"}, {"a": "pg", "topic": "U", "b": "T"}, {"a": "pg", "topic": "U"},
                {"a": "pg", "b": "T", "e": "x", "queueId": "1"}):
        names = Header.V2_NAMES
        assert _outcome(Header.from_v2_ext, ext) == _outcome(_generic, {names.get(k, k): v for k, v in ext.items()})


def test_the_written_parser_reads_every_field_of_the_spec() -> None:
    """A field added to the dataclass but not to ``_parse_send`` would be left unset: caught here."""
    h = Header.from_ext({"producerGroup": "pg", "topic": "T"})
    assert all(hasattr(h, f.name) for f in dataclasses.fields(Header))
    assert not Header.ALIASES


# END_TRANSACTION's header (``_parse_end``, every transaction's decision) as each client writes it, and bad fields.
END = {"producerGroup": "pg", "tranStateTableOffset": "7", "commitLogOffset": "123456", "commitOrRollback": "8",
       "fromTransactionCheck": "false", "msgId": "C0A8", "transactionId": "7F00"}
END_CLIENTS = [END, {**END, "fromTransactionCheck": "0", "msgId": "", "transactionId": ""},
               {**END, "fromTransactionCheck": "true", "commitOrRollback": "12"},
               EndTransactionRequestHeader("pg", 0, 0, 0).to_ext()]
END_BAD = {"tranStateTableOffset": "x", "commitLogOffset": str(2**63), "commitOrRollback": str(2**31),
           "fromTransactionCheck": "yes"}


def _end_cases() -> list[dict[str, str]]:
    cases = list(END_CLIENTS)
    for base, wire in itertools.product(END_CLIENTS, (f.wire for f in EndTransactionRequestHeader._spec())):
        cases.append({k: v for k, v in base.items() if k != wire})  # absent
        cases.append({**base, wire: ""})  # empty
        if wire in END_BAD:
            cases.append({**base, wire: END_BAD[wire]})
    cases.append({**END, "tranStateTableOffset": "bad", "producerGroup": None})  # type: ignore[dict-item]
    cases.append({**END, "commitOrRollback": "-0", "fromTransactionCheck": "TRUE", "extra": "kept out"})
    return cases


@pytest.mark.parametrize("ext", _end_cases())
def test_the_end_transaction_parser_is_the_generic_one(ext: dict[str, str]) -> None:
    ext = {k: v for k, v in ext.items() if v is not None}
    try:
        want: object = request_headers._parse(EndTransactionRequestHeader, EndTransactionRequestHeader._spec(), ext)
    except RemoteProtocolError as exc:
        want = str(exc)
    try:
        got: object = EndTransactionRequestHeader.from_ext(ext)
    except RemoteProtocolError as exc:
        got = str(exc)
    assert got == want
    if isinstance(got, EndTransactionRequestHeader):
        assert [type(getattr(got, f.name)) for f in dataclasses.fields(got)] == \
            [type(getattr(want, f.name)) for f in dataclasses.fields(got)]
