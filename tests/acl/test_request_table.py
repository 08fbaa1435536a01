"""The one table of request codes (txmq.remoting.registry): every code each server serves is declared once, with
how it is read and what it needs, and docs/security.md shows exactly that table."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from txmq.acl.model import Needs
from txmq.errors import InvalidMessageError, RemoteProtocolError
from txmq.permissions_doc import BEGIN, END, section, specs
from txmq.remoting.codes import RequestCode
from txmq.remoting.command import RemotingCommand
from txmq.remoting.registry import RequestSpec, RequestTable

SPECS = specs()
EVERY = [spec for port in SPECS.values() for spec in port]


def test_request_codes_are_distinct():
    """TXMQ_TX_DECIDE and TXMQ_GET_EPOCH_TABLE shared 9006: on a controller-mode broker ``txmq tx commit``
    printed "committed" while the transaction stayed pending. An enum alias would hide such a pair."""
    values = [member.value for member in RequestCode.__members__.values()]
    assert len(values) == len(set(values))


def test_every_served_code_declares_what_it_needs():
    assert {len(port) for port in SPECS.values()} and all(len(port) >= 6 for port in SPECS.values())
    for spec in EVERY:
        assert (spec.needs.__doc__ or "").strip(), f"request code {spec.code}: its needs say nothing"
        assert callable(spec.parse) and callable(spec.handler)


def test_a_code_cannot_be_declared_twice():
    table = RequestTable("a server")
    spec = RequestSpec(10, lambda cmd: None, lambda parsed: Needs(), lambda conn, cmd, parsed: None)
    table.add(spec)
    with pytest.raises(ValueError, match="declared twice"):
        table.add(spec)


def test_the_security_page_shows_the_table_that_runs():
    page = (Path(__file__).parents[2] / "docs" / "security.md").read_text()
    assert BEGIN in page and END in page
    shown = page[page.index(BEGIN):page.index(END) + len(END)]
    assert shown == section(), "docs/security.md is stale: python -m txmq.permissions_doc prints the section"


_json = st.recursive(st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.text(max_size=8),
                     lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
                         st.sampled_from(["producerDataSet", "consumerDataSet", "groupName", "subscriptionDataSet",
                                          "topic", "consumerGroup", "producerGroup", "entries", "clientId", "mqSet",
                                          "topicConfigSerializeWrapper", "queueId"]), inner, max_size=4),
                     max_leaves=12)
_BODY_CODES = sorted({s.code for s in EVERY if s.code not in (RequestCode.VIEW_MESSAGE_BY_ID,)})


@pytest.mark.slow
@settings(max_examples=400, deadline=None)
@given(index=st.integers(0, len(_BODY_CODES) - 1),
       ext=st.dictionaries(st.sampled_from(["topic", "b", "m", "batch", "consumerGroup", "producerGroup", "a",
                                            "queueId", "properties", "i", "id", "group"]),
                           st.sampled_from(["", "t", "TRUE", "1", "-1", "x" * 300, "TRAN_MSG\x01true\x02"]),
                           max_size=6),
       body=_json.map(lambda v: orjson.dumps(v)) | st.binary(max_size=64))
def test_reading_a_request_never_trips_on_a_peers_bytes(index, ext, body):
    """Whatever a peer sends, a request is read into what its handler takes, or refused as the peer's fault
    (RemoteProtocolError, InvalidMessageError): never a TypeError from deep inside, never a wrong Needs."""
    code = _BODY_CODES[index]
    for spec in (s for s in EVERY if s.code == code):
        try:
            parsed = spec.parse(RemotingCommand.request(code, dict(ext), body))
        except (RemoteProtocolError, InvalidMessageError):
            continue
        assert isinstance(spec.needs(parsed), Needs)
