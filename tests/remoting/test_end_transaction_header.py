"""The END_TRANSACTION header's written parser (``EndTransactionRequestHeader.from_ext``, every transaction's
decision) gives exactly the header, or exactly the ``RemoteProtocolError``, that the generic spec-driven ``_parse``
gives, for the ext fields each client writes and for every kind of bad or missing field."""

from __future__ import annotations

import dataclasses

import pytest

from txmq.errors import RemoteProtocolError
from txmq.remoting import request_headers
from txmq.remoting.request_headers import EndTransactionRequestHeader as Header

# The ext fields each client writes for one decision: Java (oneway, a producer's own), Java answering a check,
# C++ (empty strings for unset fields), Go, and txmq's own client.
JAVA = {"producerGroup": "pg", "tranStateTableOffset": "7", "commitLogOffset": "123456", "commitOrRollback": "8",
        "fromTransactionCheck": "false", "msgId": "7F0000010000000000000000001E240", "transactionId": "AC1100"}
JAVA_CHECK = {**JAVA, "fromTransactionCheck": "true", "commitOrRollback": "12"}
CPP = {**JAVA, "fromTransactionCheck": "0", "msgId": "", "transactionId": ""}
GO = {"producerGroup": "pg", "tranStateTableOffset": "0", "commitLogOffset": "0", "commitOrRollback": "0",
      "fromTransactionCheck": "false", "msgId": "m", "transactionId": "t"}
TXMQ = Header("pg", 3, 99, 8, msg_id="m").to_ext()
CLIENTS = [JAVA, JAVA_CHECK, CPP, GO, TXMQ]

# One bad value per kind: beyond a Long, not an integer, beyond an Int32, not a boolean, a sign alone, spaces.
BAD = {"tranStateTableOffset": str(2**63), "commitLogOffset": "1.5", "commitOrRollback": str(2**31),
       "fromTransactionCheck": "yes"}
ODD = {"tranStateTableOffset": "-", "commitLogOffset": " 1", "commitOrRollback": "x", "fromTransactionCheck": "2"}


def _outcome(parse, ext: dict[str, str]) -> object:
    try:
        header = parse(ext)
    except RemoteProtocolError as exc:
        return "error", str(exc)
    return [(f.name, type(getattr(header, f.name)), getattr(header, f.name)) for f in dataclasses.fields(Header)]


def _generic(ext: dict[str, str]) -> Header:
    return request_headers._parse(Header, Header._spec(), ext)


def _cases() -> list[dict[str, str]]:
    cases = [*CLIENTS, {"producerGroup": "", "tranStateTableOffset": "1", "commitLogOffset": "2",
                        "commitOrRollback": "8"}]
    for base in CLIENTS[:4]:
        for f in Header._spec():
            cases.append({k: v for k, v in base.items() if k != f.wire})  # absent
            cases.append({**base, f.wire: ""})  # empty
            for bad in (BAD, ODD):
                if f.wire in bad:
                    cases.append({**base, f.wire: bad[f.wire]})
    cases.append({**JAVA, "tranStateTableOffset": str(2**63 - 1), "commitLogOffset": str(-2**63),
                  "commitOrRollback": "-2147483648", "fromTransactionCheck": "TRUE"})  # extremes
    cases.append({**JAVA, "commitOrRollback": "+12", "fromTransactionCheck": "1"})
    cases.append({**JAVA, "commitLogOffset": "bad", "producerGroup": None})  # type: ignore[dict-item]  # first wins
    cases.append({"commitLogOffset": "bad"})  # a missing required field before a bad one
    cases.append({**JAVA, "extra": "kept out", "bname": "broker-a"})  # fields the header has no use for
    return cases


@pytest.mark.parametrize("ext", _cases())
def test_written_parser_is_the_generic_one(ext: dict[str, str]) -> None:
    ext = {k: v for k, v in ext.items() if v is not None}
    assert _outcome(Header.from_ext, ext) == _outcome(_generic, ext)


def test_the_written_parser_reads_every_field_of_the_spec() -> None:
    """A field added to the dataclass but not to ``_parse_end_transaction`` would be left unset: caught here."""
    h = Header.from_ext({"producerGroup": "pg", "tranStateTableOffset": "1", "commitLogOffset": "2",
                         "commitOrRollback": "8"})
    assert all(hasattr(h, f.name) for f in dataclasses.fields(Header))
    assert not Header.ALIASES
    assert Header.from_ext(h.to_ext()) == h
    with pytest.raises(RemoteProtocolError, match="'commitOrRollback' is out of range"):
        Header.from_ext({**h.to_ext(), "commitOrRollback": str(2**31)})
