"""Fuzz: any bytes either parse into commands or raise RemoteProtocolError, nothing else."""

from __future__ import annotations

import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from txmq.errors import RemoteProtocolError
from txmq.remoting.codec import FrameDecoder, encode_command
from txmq.remoting.codes import LanguageCode, SerializeType
from txmq.remoting.command import RemotingCommand

MAX = 4096


def _feed(chunks: list[bytes]) -> None:
    dec = FrameDecoder(MAX)
    try:
        for chunk in chunks:
            dec.receive_data(chunk)
            while (cmd := dec.next_command()) is not None:
                assert isinstance(cmd, RemotingCommand)
                assert all(isinstance(k, str) and isinstance(v, str) for k, v in cmd.ext_fields.items())
                # whatever decodes can be encoded back
                encode_command(cmd)
    except RemoteProtocolError:
        pass


def _framed(serialize_type: int, header: bytes, body: bytes) -> bytes:
    return (
        struct.pack(">II", 4 + len(header) + len(body), (serialize_type << 24) | len(header)) + header + body
    )


raw = st.binary(max_size=300)
# Frames with a plausible length prefix, so fuzzing reaches the header parsers.
framed = st.builds(_framed, st.sampled_from([0, 1, 2]), st.binary(max_size=200), st.binary(max_size=50))
json_like = st.builds(
    lambda h, b: _framed(0, h.encode(), b),
    st.text(alphabet='{}[]":,0123456789-.truefalsnull codeopaqueflagremarkextFieldslanguage', max_size=120),
    st.binary(max_size=10),
)
commands = st.builds(
    RemotingCommand,
    code=st.integers(-(2**15), 2**15 - 1),
    language=st.sampled_from(list(LanguageCode)),
    version=st.integers(-(2**15), 2**15 - 1),
    opaque=st.integers(-(2**31), 2**31 - 1),
    flag=st.integers(-(2**31), 2**31 - 1),
    remark=st.one_of(st.none(), st.text(min_size=1, max_size=20)),
    ext_fields=st.dictionaries(st.text(max_size=10), st.text(max_size=10), max_size=4),
    body=st.binary(max_size=40),
    serialize_type=st.sampled_from(list(SerializeType)),
)


@pytest.mark.slow
@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.one_of(raw, framed, json_like), min_size=1, max_size=4))
def test_any_bytes_parse_or_raise_remote_protocol_error(chunks: list[bytes]) -> None:
    _feed(chunks)


@pytest.mark.slow
@settings(max_examples=500, deadline=None)
@given(st.lists(commands, min_size=1, max_size=3), st.integers(1, 50), st.data())
def test_encoded_commands_survive_any_split_and_corruption(
    cmds: list[RemotingCommand], step: int, data: st.DataObject
) -> None:
    stream = b"".join(encode_command(c) for c in cmds)
    dec = FrameDecoder(1 << 20)
    got = []
    for i in range(0, len(stream), step):
        dec.receive_data(stream[i : i + step])
        while (cmd := dec.next_command()) is not None:
            got.append(cmd)
    assert len(got) == len(cmds)
    for a, b in zip(got, cmds, strict=True):
        assert (a.code, a.language, a.version, a.opaque, a.flag) == (
            b.code,
            b.language,
            b.version,
            b.opaque,
            b.flag,
        )
        assert a.ext_fields == b.ext_fields and a.body == b.body and a.serialize_type == b.serialize_type
        assert (a.remark or None) == (b.remark or None)
    # flip one byte anywhere: still parse-or-RemoteProtocolError
    pos = data.draw(st.integers(0, len(stream) - 1))
    corrupted = bytearray(stream)
    corrupted[pos] ^= data.draw(st.integers(1, 255))
    _feed([bytes(corrupted)])
