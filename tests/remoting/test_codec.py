"""The frame codec, fed bytes (no sockets)."""

from __future__ import annotations

import struct

import orjson
import pytest

from txmq.errors import LocalProtocolError, RemoteProtocolError
from txmq.remoting.codec import (
    DEFAULT_MAX_FRAME_SIZE,
    FrameDecoder,
    encode_command,
    encode_json_header,
    encode_response,
    encode_send_response,
)
from txmq.remoting.codes import LanguageCode, RequestCode, ResponseCode, SerializeType
from txmq.remoting.command import FLAG_ONEWAY, FLAG_RESPONSE, RemotingCommand
from txmq.remoting.request_headers import SendMessageResponseHeader

JSON = SerializeType.JSON
ROCKETMQ = SerializeType.ROCKETMQ


def frame(header: bytes, body: bytes = b"", serialize_type: int = 0, length: int | None = None) -> bytes:
    if length is None:
        length = 4 + len(header) + len(body)
    return struct.pack(">II", length, (serialize_type << 24) | len(header)) + header + body


def decode_all(data: bytes, max_frame_size: int = DEFAULT_MAX_FRAME_SIZE) -> list[RemotingCommand]:
    dec = FrameDecoder(max_frame_size)
    dec.receive_data(data)
    out = []
    while (cmd := dec.next_command()) is not None:
        out.append(cmd)
    assert dec.buffered == 0
    return out


def sample(serialize_type: SerializeType = JSON, body: bytes = b"hello") -> RemotingCommand:
    return RemotingCommand.request(
        RequestCode.SEND_MESSAGE,
        {"producerGroup": "pg", "topic": "orders", "queueId": "3", "properties": "KEYS\x01k1\x02"},
        body,
        serialize_type=serialize_type,
    )


@pytest.mark.parametrize("serialize_type", [JSON, ROCKETMQ])
def test_round_trip(serialize_type: SerializeType) -> None:
    cmd = sample(serialize_type)
    cmd.remark = "hé"
    (back,) = decode_all(encode_command(cmd))
    assert back == cmd
    assert back.serialize_type is serialize_type


@pytest.mark.parametrize("serialize_type", [JSON, ROCKETMQ])
def test_round_trip_empty(serialize_type: SerializeType) -> None:
    cmd = RemotingCommand(RequestCode.HEART_BEAT, opaque=7, serialize_type=serialize_type)
    (back,) = decode_all(encode_command(cmd))
    assert back == cmd


def test_one_byte_at_a_time() -> None:
    cmds = [sample(JSON), sample(ROCKETMQ, b""), sample(JSON, b"x" * 1000)]
    data = b"".join(encode_command(c) for c in cmds)
    dec = FrameDecoder()
    got = []
    for i in range(len(data)):
        dec.receive_data(data[i : i + 1])
        while (cmd := dec.next_command()) is not None:
            got.append(cmd)
    assert got == cmds


def test_several_frames_and_trailing_partial() -> None:
    cmds = [sample(JSON, bytes([i]) * i) for i in range(10)]
    data = b"".join(encode_command(c) for c in cmds)
    extra = encode_command(sample(ROCKETMQ))
    dec = FrameDecoder()
    dec.receive_data(data + extra[:11])
    got = []
    while (cmd := dec.next_command()) is not None:
        got.append(cmd)
    assert got == cmds
    assert dec.buffered == 11
    assert dec.next_command() is None
    dec.receive_data(extra[11:])
    last = dec.next_command()
    assert last is not None and last.serialize_type is ROCKETMQ and last.body == b"hello"
    assert dec.buffered == 0


def test_trailing_partial_completes() -> None:
    a, b = sample(JSON), sample(ROCKETMQ)
    data = encode_command(a) + encode_command(b)
    dec = FrameDecoder()
    dec.receive_data(data[:-3])
    assert dec.next_command() == a
    assert dec.next_command() is None
    dec.receive_data(data[-3:])
    assert dec.next_command() == b
    assert dec.next_command() is None
    assert dec.buffered == 0


def test_response_flag_opaque_and_stringified_ext() -> None:
    req = sample(JSON)
    resp = RemotingCommand.response_to(
        req,
        ResponseCode.SUCCESS,
        ext_fields={"queueId": 3, "queueOffset": 12345678901, "ok": True, "msgId": "AB"},  # type: ignore[dict-item]
    )
    assert resp.is_response and not resp.is_oneway
    assert resp.opaque == req.opaque
    data = encode_command(resp)
    header = orjson.loads(data[8 : 8 + struct.unpack(">I", data[4:8])[0]])
    assert header["flag"] & FLAG_RESPONSE
    assert header["opaque"] == req.opaque
    assert header["extFields"] == {"queueId": "3", "queueOffset": "12345678901", "ok": "true", "msgId": "AB"}
    assert all(isinstance(v, str) for v in header["extFields"].values())
    assert header["language"] == "PYTHON"


def test_response_keeps_request_serialization() -> None:
    req = sample(ROCKETMQ)
    resp = RemotingCommand.response_to(req, ResponseCode.SYSTEM_ERROR, "boom")
    assert resp.serialize_type is ROCKETMQ
    data = encode_command(resp)
    assert data[4] == 1
    (back,) = decode_all(data)
    assert back.is_response and back.remark == "boom" and back.code == ResponseCode.SYSTEM_ERROR


def test_oneway_flag_and_opaque_counter() -> None:
    a = RemotingCommand.request(RequestCode.HEART_BEAT, oneway=True)
    b = RemotingCommand.request(RequestCode.HEART_BEAT)
    assert a.is_oneway and a.flag == FLAG_ONEWAY and not a.is_response
    assert not b.is_oneway
    assert b.opaque != a.opaque


def test_cpp_client_header_is_read() -> None:
    # What librocketmq writes: jsoncpp FastWriter output (trailing newline), language "CPP", ext strings.
    header = (
        b'{"code":34,"extFields":{"AccessKey":"","ONSChannelKey":"","Signature":""},'
        b'"flag":0,"language":"CPP","opaque":5,"remark":"","version":401}\n'
    )
    (cmd,) = decode_all(frame(header, b"{}"))
    assert cmd.code == 34 and cmd.language is LanguageCode.CPP and cmd.version == 401
    assert cmd.opaque == 5 and cmd.remark == "" and cmd.body == b"{}"
    assert cmd.ext_fields == {"AccessKey": "", "ONSChannelKey": "", "Signature": ""}


def test_java_header_extras_are_ignored_and_numbers_in_ext_taken_as_strings() -> None:
    header = orjson.dumps(
        {"code": 10, "language": "JAVA", "version": 1, "opaque": 1, "flag": 2,
         "serializeTypeCurrentRPC": "JSON", "extFields": {"queueId": 1, "batch": False, "x": None, "f": 1.5}}
    )  # fmt: skip
    (cmd,) = decode_all(frame(header))
    assert cmd.is_oneway
    assert cmd.ext_fields == {"queueId": "1", "batch": "false", "f": "1.5"}


def test_unknown_language_maps_to_other() -> None:
    (cmd,) = decode_all(frame(b'{"code":1,"language":"COBOL"}'))
    assert cmd.language is LanguageCode.OTHER


def test_ext_helpers() -> None:
    cmd = RemotingCommand(10, ext_fields={"a": "12", "b": "true", "c": "0", "d": "x", "e": "", "n": "-5"})
    assert cmd.ext_int("a") == 12 and cmd.ext_int("n") == -5
    assert cmd.ext_bool("b") is True and cmd.ext_bool("c") is False
    assert cmd.ext_str("d") == "x"
    assert cmd.ext_int("e", 4) == 4 and cmd.ext_int("missing", None) is None
    with pytest.raises(RemoteProtocolError, match="'missing'"):
        cmd.ext_int("missing")
    with pytest.raises(RemoteProtocolError, match="'d' is not an integer"):
        cmd.ext_int("d")
    big = RemotingCommand(15, ext_fields={"max": str(2**63 - 1), "min": str(-(2**63)), "over": str(2**63),
                                          "under": str(-(2**63) - 1)})
    assert (big.ext_int("max"), big.ext_int("min")) == (2**63 - 1, -(2**63))
    for name in ("over", "under"):  # a Java long holds neither; stored, one broke every JSON write of its table
        with pytest.raises(RemoteProtocolError, match=f"'{name}' is out of range for a 64-bit integer"):
            big.ext_int(name)
    with pytest.raises(RemoteProtocolError, match="'d' is not a boolean"):
        cmd.ext_bool("d")
    with pytest.raises(RemoteProtocolError, match="'zz'"):
        cmd.ext_str("zz")


# --- malformed input ---------------------------------------------------------------------------------


def _binary_header(
    remark_len: int = 0, ext: bytes = b"", ext_len: int | None = None, remark: bytes = b""
) -> bytes:
    if ext_len is None:
        ext_len = len(ext)
    return (
        struct.pack(">hbhii", 10, 3, 0, 1, 0)
        + struct.pack(">i", remark_len)
        + remark
        + struct.pack(">i", ext_len)
        + ext
    )


MALFORMED = {
    "length below 4": struct.pack(">I", 3) + b"\0\0\0",
    "length over max": struct.pack(">I", DEFAULT_MAX_FRAME_SIZE + 1),
    "length negative as a Java int": struct.pack(">I", 0x80000000),
    "header length over frame": frame(b"{}", length=5),
    "unknown serialization type": frame(b"{}", serialize_type=2),
    "serialization type 0xff": frame(b"{}", serialize_type=0xFF),
    "not JSON": frame(b"{code:1}"),
    "not UTF-8": frame(b'{"code":1,"remark":"\xff"}'),
    "empty header": frame(b""),
    "JSON array": frame(b"[1,2]"),
    "JSON string": frame(b'"x"'),
    "code missing": frame(b'{"opaque":1}'),
    "code a string": frame(b'{"code":"10"}'),
    "code a bool": frame(b'{"code":true}'),
    "code a float": frame(b'{"code":1.0}'),
    "code over int32": frame(b'{"code":2147483648}'),
    "opaque a string": frame(b'{"code":1,"opaque":"1"}'),
    "flag a list": frame(b'{"code":1,"flag":[]}'),
    "remark a number": frame(b'{"code":1,"remark":5}'),
    "language an object": frame(b'{"code":1,"language":{}}'),
    "extFields a list": frame(b'{"code":1,"extFields":[]}'),
    "extFields value an object": frame(b'{"code":1,"extFields":{"a":{}}}'),
    "binary too short": frame(b"\0" * 20, serialize_type=1),
    "binary remark truncated": frame(_binary_header(remark_len=10), serialize_type=1),
    "binary remark negative": frame(_binary_header(remark_len=-1), serialize_type=1),
    "binary ext truncated": frame(_binary_header(ext_len=5), serialize_type=1),
    "binary ext negative": frame(_binary_header(ext_len=-2), serialize_type=1),
    "binary ext key truncated": frame(_binary_header(ext=b"\x00\x05ab"), serialize_type=1),
    "binary ext key length cut": frame(_binary_header(ext=b"\x00"), serialize_type=1),
    "binary ext value truncated": frame(_binary_header(ext=b"\x00\x01a\x00\x00\x00\x09xy"), serialize_type=1),
    "binary ext value length cut": frame(_binary_header(ext=b"\x00\x01a\x00\x00"), serialize_type=1),
    "binary ext key negative": frame(_binary_header(ext=b"\xff\xff\x00\x00\x00\x00"), serialize_type=1),
    "binary remark not UTF-8": frame(_binary_header(remark_len=1, remark=b"\xff"), serialize_type=1),
}


@pytest.mark.parametrize("name", sorted(MALFORMED))
def test_malformed_raises_remote_protocol_error(name: str) -> None:
    dec = FrameDecoder()
    dec.receive_data(MALFORMED[name] + b"\0" * 8)
    with pytest.raises(RemoteProtocolError):
        dec.next_command()
    # the decoder is dead afterwards
    with pytest.raises(RemoteProtocolError):
        dec.next_command()
    with pytest.raises(RemoteProtocolError):
        dec.receive_data(encode_command(sample()))


def test_max_frame_checked_before_the_body_arrives() -> None:
    dec = FrameDecoder(max_frame_size=1024)
    dec.receive_data(struct.pack(">I", 1025))
    with pytest.raises(RemoteProtocolError, match="frame length 1025"):
        dec.next_command()


def test_frame_at_max_is_accepted() -> None:
    cmd = sample(JSON, b"")
    header_len = len(encode_json_header(cmd))
    cmd.body = b"z" * (1024 - 4 - header_len)
    data = encode_command(cmd)
    assert len(data) == 1028
    assert decode_all(data, max_frame_size=1024) == [cmd]
    cmd.body += b"z"
    with pytest.raises(LocalProtocolError):
        encode_command(cmd, max_frame_size=1024)


def test_frames_before_an_error_are_returned() -> None:
    good = sample()
    dec = FrameDecoder()
    dec.receive_data(encode_command(good) + MALFORMED["not JSON"])
    assert dec.next_command() == good
    with pytest.raises(RemoteProtocolError):
        dec.next_command()


# --- local errors ------------------------------------------------------------------------------------


def test_encode_refuses_what_does_not_fit() -> None:
    with pytest.raises(LocalProtocolError):
        encode_command(RemotingCommand(70000, serialize_type=ROCKETMQ))  # code is 2 bytes in binary
    with pytest.raises(LocalProtocolError):
        encode_command(RemotingCommand(10, ext_fields={"a": object()}))  # type: ignore[dict-item]
    with pytest.raises(LocalProtocolError):
        encode_command(RemotingCommand(10, serialize_type=7))  # type: ignore[arg-type]


def test_decoder_rejects_silly_limit() -> None:
    with pytest.raises(ValueError):
        FrameDecoder(4)


@pytest.mark.parametrize("request_cmd, code, ext", [
    (RemotingCommand(RequestCode.SEND_MESSAGE, LanguageCode.JAVA, 399, 7), ResponseCode.SUCCESS,
     {"msgId": "7F0000010000297F0000000000000000", "queueId": "3", "queueOffset": "12", "MSG_REGION": "DefaultRegion"}),
    (RemotingCommand(RequestCode.SEND_MESSAGE, opaque=2**31 - 1), ResponseCode.FLUSH_DISK_TIMEOUT,
     {"msgId": "é\"\\\n\u2028", "transactionId": "ü"}),
    (RemotingCommand(RequestCode.SEND_MESSAGE, opaque=-5), ResponseCode.SUCCESS, {}),
    (RemotingCommand(RequestCode.SEND_MESSAGE, opaque=9), ResponseCode.SUCCESS, {"queueId": 3}),  # not a string
    (RemotingCommand(RequestCode.SEND_MESSAGE, opaque=9, serialize_type=SerializeType.ROCKETMQ),
     ResponseCode.SUCCESS, {"msgId": "AB"}),
])
def test_encode_response_writes_the_frame_encode_command_writes(request_cmd, code, ext) -> None:
    """The send path's template answer is the generic encoder's frame, byte for byte."""
    expected = encode_command(RemotingCommand.response_to(request_cmd, code, ext_fields=dict(ext)))
    answer = encode_response(request_cmd, code, ext)
    assert answer.frame == expected and answer.code == code
    dec = FrameDecoder()
    dec.receive_data(expected)
    back = dec.next_command()
    assert back is not None and back.is_response and back.opaque == request_cmd.opaque and back.code == code


# Requests as each client writes a send: the Java client's (bench/raw_frames.py), the C++ client's (SEND_MESSAGE,
# CPP), txmq's (SEND_MESSAGE_V2, PYTHON), and a ROCKETMQ-serialized one; opaques at the int32 edges.
SEND_REQUESTS = [
    RemotingCommand(RequestCode.SEND_MESSAGE, LanguageCode.JAVA, 399, 7),
    RemotingCommand(RequestCode.SEND_MESSAGE, LanguageCode.CPP, 0, 2**31 - 1),
    RemotingCommand(RequestCode.SEND_MESSAGE_V2, LanguageCode.PYTHON, 0, -(2**31)),
    RemotingCommand(RequestCode.SEND_MESSAGE_V2, LanguageCode.PYTHON, 0, 0, serialize_type=ROCKETMQ),
]
# The codes a stored send is answered with (send.py's _PUT_STATUS_TO_CODE for stored statuses).
SEND_CODES = [ResponseCode.SUCCESS, ResponseCode.FLUSH_DISK_TIMEOUT, ResponseCode.FLUSH_SLAVE_TIMEOUT,
              ResponseCode.SLAVE_NOT_AVAILABLE, ResponseCode.SERVICE_NOT_AVAILABLE]
# A half's transaction id is its client's UNIQ_KEY, any string: none, the clients' hex, and JSON's escapes.
TRANSACTION_IDS = [None, "7F000001A1B2C3D4E5F60000000000FF", "", "é\"\\\n\u2028\x00\x1f</>😀"]


def test_encode_send_response_writes_the_generic_frame_for_every_send_answer() -> None:
    """A single send's straight-written answer is, byte for byte, the send response header's ext fields plus
    MSG_REGION and TRACE_ON through the generic encoder, for every request, code and field combination."""
    checked = 0
    for request in SEND_REQUESTS:
        for code in SEND_CODES:
            for transaction_id in TRANSACTION_IDS:
                for msg_id, queue_id, queue_offset in [("7F0000010000297F0000000000000000", 0, 0),
                                                       ("C0A80001000027110000000123456789", 3, 2**63 - 1),
                                                       ("é\"", 2**31 - 1, 12)]:
                    ext = SendMessageResponseHeader(msg_id, queue_id, queue_offset, transaction_id).to_ext()
                    ext |= {"MSG_REGION": "DefaultRegion", "TRACE_ON": "true"}
                    expected = encode_command(RemotingCommand.response_to(request, code, ext_fields=ext))
                    answer = encode_send_response(request, code, msg_id, queue_id, queue_offset, transaction_id)
                    assert (answer.frame, answer.code) == (expected, code), (request, code, transaction_id, msg_id)
                    (back,) = decode_all(answer.frame)
                    assert back.ext_fields == ext and back.opaque == request.opaque and back.is_response
                    checked += 1
    assert checked == len(SEND_REQUESTS) * len(SEND_CODES) * len(TRANSACTION_IDS) * 3
