"""RocketMQ remoting frames: bytes in, commands out, and commands to bytes. Pure: no sockets, no clock.

A frame, all integers big-endian (RocketMQ ``RemotingCommand.encode`` / ``NettyDecoder``)::

    size  field
    4     LENGTH         length of everything after this field (header-length field + header + body)
    4     HEADER_FIELD   high byte: serialization type (0 JSON, 1 ROCKETMQ); low 3 bytes: header length
    h     HEADER         the command's header, in that serialization
    n     BODY           the rest of the frame (n = LENGTH - 4 - h)

JSON header: ``{"code", "language", "version", "opaque", "flag", "remark", "extFields"}``; ``language`` is
a name ("JAVA", "CPP", ...), ``extFields`` a string-to-string object. Unknown keys are ignored.

ROCKETMQ binary header (``RocketMQSerializable``)::

    2   code (signed)       1  language code       2  version        4  opaque       4  flag
    4   remark length r     r  remark, UTF-8
    4   ext length e        e  entries: 2 key length k, k key (UTF-8), 4 value length v, v value (UTF-8)

``LENGTH`` above ``max_frame_size`` (RocketMQ's ``frameMaxLength``, 16 MiB by default) is refused as soon as
the 4 bytes arrive, before any body is buffered.
"""

from __future__ import annotations

import struct
from typing import Any, NoReturn

import cython
import orjson

from txmq.errors import LocalProtocolError, RemoteProtocolError
from txmq.remoting.codes import LanguageCode, SerializeType, language_from_code, language_from_name
from txmq.remoting.command import DEFAULT_VERSION, FLAG_RESPONSE, RemotingCommand
from txmq.remoting.request_headers import SendMessageResponseHeader

DEFAULT_MAX_FRAME_SIZE = 16 * 1024 * 1024
MAX_HEADER_SIZE = 0xFFFFFF

_I32 = struct.Struct(">i")
_I16 = struct.Struct(">h")
_PREFIX = struct.Struct(">II")  # LENGTH, HEADER_FIELD
_BIN_FIXED = struct.Struct(">hbhii")  # code, language, version, opaque, flag
_BIN_MIN = _BIN_FIXED.size + 4 + 4
_INT32_MAX = (1 << 31) - 1

_JSON = SerializeType.JSON
_ROCKETMQ = SerializeType.ROCKETMQ
_LANGUAGE_NAMES = {int(lang): lang.name for lang in LanguageCode}
# encode_json_header's output for a response (``response_to``: txmq's language, version, the response flag) up to
# its ext fields; code and opaque filled in per answer.
_RESPONSE_HEAD = (f'{{"code":%d,"language":"{LanguageCode.PYTHON.name}","version":{DEFAULT_VERSION},"opaque":%d,'
                  f'"flag":{FLAG_RESPONSE},"extFields":').encode()
# A single send's ext beyond its SendMessageResponseHeader: the region and trace fields RocketMQ's broker adds.
SEND_RESPONSE_EXTRA = {"MSG_REGION": "DefaultRegion", "TRACE_ON": "true"}
# encode_send_response's header as str pieces around what it fills in (code, opaque, msgId, queueId, queueOffset and
# the transactionId entry or nothing): _RESPONSE_HEAD's, then the header's fields as to_ext writes them (msgId,
# queueId, queueOffset, then transactionId when there is one), then SEND_RESPONSE_EXTRA.
_SEND_CODE, _SEND_OPAQUE, _SEND_MSG_ID = _RESPONSE_HEAD.decode().split("%d")
_SEND_MSG_ID += '{"msgId":"'
_SEND_EXTRA = "," + orjson.dumps(SEND_RESPONSE_EXTRA)[1:].decode() + "}"


@cython.cclass
class FrameDecoder:
    """Splits a byte stream into ``RemotingCommand`` objects, in the manner of h11.

    Feed bytes with ``receive_data``; call ``next_command`` until it returns ``None`` (more bytes needed).
    A ``RemoteProtocolError`` from either leaves the decoder dead: every later call raises again, and the
    connection should be closed, as RocketMQ's Netty decoder does. Compiled, an extension type (codec.pxd): every
    request passes ``next_command``, whose buffer and position are C struct members and whose frame prefix is read
    byte by byte from the buffer in C, not through ``struct``.
    """

    __slots__ = ("_buf", "_error", "_pos", "max_frame_size")

    def __init__(self, max_frame_size: int = DEFAULT_MAX_FRAME_SIZE) -> None:
        if max_frame_size < 8:
            raise ValueError("max_frame_size must be at least 8")
        self.max_frame_size = max_frame_size
        self._buf = bytearray()
        self._pos = 0
        self._error: str | None = None

    @property
    def buffered(self) -> int:
        """Bytes received and not yet returned as commands."""
        return len(self._buf) - self._pos

    def receive_data(self, data: bytes | bytearray | memoryview) -> None:
        if self._error is not None:
            raise RemoteProtocolError(f"decoder already failed: {self._error}")
        if self._pos:
            del self._buf[: self._pos]
            self._pos = 0
        self._buf += data

    @cython.locals(cmd=RemotingCommand, buf=bytearray, pos=cython.Py_ssize_t, avail=cython.Py_ssize_t,
                   length=cython.Py_ssize_t, serialize_type=cython.int, header_len=cython.Py_ssize_t,
                   start=cython.Py_ssize_t, end=cython.Py_ssize_t)
    def next_command(self) -> RemotingCommand | None:
        """The next whole command, or ``None`` when more bytes are needed."""
        if self._error is not None:
            raise RemoteProtocolError(f"decoder already failed: {self._error}")
        buf = self._buf
        pos = self._pos
        avail = len(buf) - pos
        if avail < 4:
            return None
        # big-endian u32; its high byte widened first: compiled, a byte is a C int, and 0x80 << 24 overflows it
        length = ((cython.cast(cython.Py_ssize_t, buf[pos]) << 24) | (buf[pos + 1] << 16) | (buf[pos + 2] << 8)
                  | buf[pos + 3])
        if length < 4 or length > self.max_frame_size:
            self._fail(f"frame length {length} outside 4..{self.max_frame_size}")
        if avail < 4 + length:
            return None
        serialize_type = buf[pos + 4]  # HEADER_FIELD: its high byte, then the header's length in 3 bytes
        header_len = (buf[pos + 5] << 16) | (buf[pos + 6] << 8) | buf[pos + 7]
        if header_len > length - 4:
            self._fail(f"header length {header_len} exceeds frame length {length}")
        start = pos + 8
        end = pos + 4 + length
        header = buf[start : start + header_len]  # parsed here and dropped: no second copy as bytes
        body = bytes(buf[start + header_len : end])
        self._pos = end
        try:
            if serialize_type == 0:
                cmd = decode_json_header(header)
            elif serialize_type == 1:
                cmd = decode_rocketmq_header(header)
            else:
                raise RemoteProtocolError(f"unknown serialization type {serialize_type}")
        except RemoteProtocolError as exc:
            self._fail(str(exc))
        cmd.body = body
        return cmd

    def _fail(self, reason: str) -> NoReturn:
        self._error = reason
        self._buf = bytearray()
        self._pos = 0
        raise RemoteProtocolError(reason)


@cython.locals(cmd=RemotingCommand)
def _new_command(code: int, language: LanguageCode, version: int, opaque: int, flag: int, remark: str | None,
                 ext: dict[str, str], serialize_type: SerializeType) -> RemotingCommand:
    """A decoded command, its body empty until the frame's is set. Compiled (codec.pxd), a C function storing the
    fields as struct members, without ``RemotingCommand.__init__``'s call and its arguments' parsing per request."""
    cmd = RemotingCommand.__new__(RemotingCommand)
    cmd.code = code
    cmd.language = language
    cmd.version = version
    cmd.opaque = opaque
    cmd.flag = flag
    cmd.remark = remark
    cmd.ext_fields = ext
    cmd.body = b""
    cmd.serialize_type = serialize_type
    return cmd


# --- JSON header -----------------------------------------------------------------------------------


def _is_int32(value: object) -> bool:
    """A JSON number that is a Java ``int``. Compiled, a C function comparing with C constants (no module global
    read per field of every request)."""
    return type(value) is int and -0x80000000 <= value <= 0x7FFFFFFF


def _json_int(obj: dict[str, Any], name: str, default: int) -> int:
    value = obj.get(name)
    if value is None:
        return default
    if not _is_int32(value):
        raise RemoteProtocolError(f"header field {name!r} is not a 32-bit integer: {str(value)[:40]!r}")
    return value


def _ext_from_json(ext: dict[str, Any]) -> dict[str, str]:
    """Ext values are strings; numbers and booleans are taken as Java's fastjson would, nulls dropped."""
    out: dict[str, str] = {}
    for key, value in ext.items():
        kind = type(value)
        if kind is str:
            out[key] = value
        elif value is None:
            continue
        elif kind is bool:
            out[key] = "true" if value else "false"
        elif kind is int or kind is float:
            out[key] = str(value)
        else:
            raise RemoteProtocolError(f"extFields value of {key[:40]!r} is a {kind.__name__}, not a string")
    return out


@cython.locals(obj=dict, ext=dict)
def decode_json_header(header: bytes | bytearray) -> RemotingCommand:
    """A command (body empty) from a JSON header. Compiled, the parsed object and its ext fields are typed dicts:
    each field read is a C dict lookup, not a ``get`` method call (seven per request)."""
    try:
        loaded = orjson.loads(header)
    except orjson.JSONDecodeError as exc:
        raise RemoteProtocolError(f"header is not valid JSON: {exc}") from None
    if type(loaded) is not dict:
        raise RemoteProtocolError(f"header is a JSON {type(loaded).__name__}, not an object")
    obj = loaded
    code = obj.get("code")
    if not _is_int32(code):
        raise RemoteProtocolError(f"header field 'code' missing or not a 32-bit integer: {str(code)[:40]!r}")
    language_value = obj.get("language")
    if type(language_value) is str:
        language = language_from_name(language_value)
    elif language_value is None:
        language = LanguageCode.OTHER
    elif type(language_value) is int:
        language = language_from_code(language_value)
    else:
        raise RemoteProtocolError("header field 'language' is neither a name nor a number")
    remark = obj.get("remark")
    if remark is not None and type(remark) is not str:
        raise RemoteProtocolError("header field 'remark' is not a string")
    ext_value = obj.get("extFields")
    if ext_value is None:
        ext = {}
    elif type(ext_value) is not dict:
        raise RemoteProtocolError("header field 'extFields' is not an object")
    else:
        ext = ext_value
        for value in ext.values():
            if type(value) is not str:
                ext = _ext_from_json(ext)
                break
    return _new_command(code, language, _json_int(obj, "version", 0), _json_int(obj, "opaque", 0),
                        _json_int(obj, "flag", 0), remark, ext, _JSON)


def _ext_value(value: object) -> str:
    """Ext values go out as strings whatever they were built from: the C++ client reads numbers as 0."""
    if type(value) is str:
        return value
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, int):
        return str(int(value))
    if isinstance(value, (float, str)):
        return str(value)
    raise LocalProtocolError(f"ext field value {value!r} is not a string, number or boolean")


def _ext_to_send(ext: dict[str, str]) -> dict[str, str]:
    for key, value in ext.items():
        if type(value) is not str or type(key) is not str:
            break
    else:
        return ext
    out: dict[str, str] = {}
    for key, value in ext.items():
        if type(key) is not str:
            raise LocalProtocolError(f"ext field name {key!r} is not a string")
        if value is not None:
            out[key] = _ext_value(value)
    return out


@cython.locals(cmd=RemotingCommand)
def encode_json_header(cmd: RemotingCommand) -> bytes:
    obj: dict[str, Any] = {
        "code": int(cmd.code),
        "language": _LANGUAGE_NAMES.get(cmd.language, "OTHER"),
        "version": int(cmd.version),
        "opaque": int(cmd.opaque),
        "flag": int(cmd.flag),
    }
    if cmd.remark is not None:
        obj["remark"] = cmd.remark
    if cmd.ext_fields:
        obj["extFields"] = _ext_to_send(cmd.ext_fields)
    try:
        return orjson.dumps(obj)
    except TypeError as exc:
        raise LocalProtocolError(f"cannot encode header as JSON: {exc}") from None


# --- ROCKETMQ binary header ------------------------------------------------------------------------


def decode_rocketmq_header(header: bytes | bytearray) -> RemotingCommand:
    """A command (body empty) from a ROCKETMQ binary header."""
    n = len(header)
    if n < _BIN_MIN:
        raise RemoteProtocolError(f"binary header truncated: {n} bytes, at least {_BIN_MIN} needed")
    code, language, version, opaque, flag = _BIN_FIXED.unpack_from(header, 0)
    p = _BIN_FIXED.size
    (remark_len,) = _I32.unpack_from(header, p)
    p += 4
    if remark_len < 0 or p + remark_len + 4 > n:
        raise RemoteProtocolError(f"binary header truncated: remark length {remark_len} in {n} bytes")
    try:
        remark = header[p : p + remark_len].decode() if remark_len else None
        p += remark_len
        (ext_len,) = _I32.unpack_from(header, p)
        p += 4
        end = p + ext_len
        if ext_len < 0 or end > n:
            raise RemoteProtocolError(f"binary header truncated: extFields length {ext_len} in {n} bytes")
        ext: dict[str, str] = {}
        while p < end:
            if p + 2 > end:
                raise RemoteProtocolError("binary header truncated in an extFields key length")
            (key_len,) = _I16.unpack_from(header, p)
            p += 2
            if key_len < 0 or p + key_len + 4 > end:
                raise RemoteProtocolError("binary header truncated in an extFields key")
            key = header[p : p + key_len].decode()
            p += key_len
            (value_len,) = _I32.unpack_from(header, p)
            p += 4
            if value_len < 0 or p + value_len > end:
                raise RemoteProtocolError(f"binary header truncated in the value of {key[:40]!r}")
            ext[key] = header[p : p + value_len].decode()
            p += value_len
    except UnicodeDecodeError as exc:
        raise RemoteProtocolError(f"binary header holds invalid UTF-8: {exc.reason}") from None
    return _new_command(code, language_from_code(language), version, opaque, flag, remark, ext, _ROCKETMQ)


@cython.locals(cmd=RemotingCommand)
def encode_rocketmq_header(cmd: RemotingCommand) -> bytes:
    remark = cmd.remark.encode() if cmd.remark else b""
    parts: list[bytes] = []
    try:
        for key, value in _ext_to_send(cmd.ext_fields).items():
            key_bytes = key.encode()
            value_bytes = value.encode()
            parts += (_I16.pack(len(key_bytes)), key_bytes, _I32.pack(len(value_bytes)), value_bytes)
        ext = b"".join(parts)
        return b"".join(
            (
                _BIN_FIXED.pack(cmd.code, cmd.language, cmd.version, cmd.opaque, cmd.flag),
                _I32.pack(len(remark)),
                remark,
                _I32.pack(len(ext)),
                ext,
            )
        )
    except struct.error as exc:
        raise LocalProtocolError(f"command does not fit the ROCKETMQ binary header: {exc}") from None


# --- frames ----------------------------------------------------------------------------------------


@cython.freelist(64)  # one per send's answer: freed ones are reused
@cython.cclass
class EncodedResponse:
    """A response already written as its whole frame (``encode_response``), with its code for those who count
    answers by code (metrics). Compiled, an extension type (codec.pxd): one per send's answer."""

    __slots__ = ("code", "frame")

    def __init__(self, code: int, frame: bytes) -> None:
        self.code = code
        self.frame = frame


@cython.locals(request=RemotingCommand)
def encode_response(request: RemotingCommand, code: int, ext_fields: dict[str, str]) -> EncodedResponse:
    """The frame of ``RemotingCommand.response_to(request, code, ext_fields=ext_fields)``, byte for byte as
    ``encode_command`` writes it, without building the command: every send is answered so. A JSON header is a
    template filled in; a ROCKETMQ header, no ext fields or a value that is not a string go the generic way."""
    if request.serialize_type is _JSON and ext_fields and _all_str(ext_fields):
        header = _RESPONSE_HEAD % (code, request.opaque) + orjson.dumps(ext_fields) + b"}"
        return EncodedResponse(code, _PREFIX.pack(4 + len(header), len(header)) + header)
    return EncodedResponse(code, encode_command(RemotingCommand.response_to(request, code, ext_fields=ext_fields)))


@cython.locals(request=RemotingCommand)
def encode_send_response(request: RemotingCommand, code: int, msg_id: str, queue_id: int, queue_offset: int,
                         transaction_id: str | None) -> EncodedResponse:
    """The answer to a single stored send, byte for byte ``encode_response(request, code, ext)`` with ``ext`` the
    ``SendMessageResponseHeader``'s ``to_ext()`` and ``SEND_RESPONSE_EXTRA``, written straight into the frame: no
    header object, ext dict or loop over it per send. A JSON request whose ids need no JSON escape (the hex ids
    every client writes) gets one f-string (compiled, one join of its pieces with the numbers written in C) encoded
    once; a ROCKETMQ one, an id to escape, or a value of another type goes the generic way."""
    if (request.serialize_type is _JSON and type(msg_id) is str and type(queue_id) is int
            and type(queue_offset) is int and _plain(msg_id)
            and (transaction_id is None or (type(transaction_id) is str and _plain(transaction_id)))):
        tail = "" if transaction_id is None else f',"transactionId":"{transaction_id}"'
        header = (f'{_SEND_CODE}{int(code)}{_SEND_OPAQUE}{request.opaque}{_SEND_MSG_ID}{msg_id}'
                  f'","queueId":"{queue_id}","queueOffset":"{queue_offset}"{tail}{_SEND_EXTRA}').encode()
        return EncodedResponse(code, _PREFIX.pack(4 + len(header), len(header)) + header)
    ext = SendMessageResponseHeader(msg_id, queue_id, queue_offset, transaction_id).to_ext()
    ext.update(SEND_RESPONSE_EXTRA)
    return encode_response(request, code, ext)


@cython.locals(ch=cython.Py_UCS4)
def _plain(text: str) -> bool:
    """Printable ASCII without a quote or backslash: a JSON string's content as written, no escape needed (the C
    loop of a compiled build)."""
    for ch in text:  # noqa: SIM110 (a generator object per call when compiled, as for _all_str)
        if ch < " " or ch > "~" or ch == '"' or ch == "\\":
            return False
    return True


def _all_str(ext_fields: dict[str, str]) -> bool:
    """Every key and value a plain ``str`` (what the template's ``orjson.dumps`` writes as ``encode_command`` does).
    A loop, not ``all()`` of a generator: compiled, that is a generator object per answer."""
    for key, value in ext_fields.items():  # noqa: SIM110 (see the docstring)
        if type(key) is not str or type(value) is not str:
            return False
    return True


@cython.locals(cmd=RemotingCommand)
def encode_command(cmd: RemotingCommand, max_frame_size: int | None = None) -> bytes:
    """One whole frame for ``cmd``, its header in ``cmd.serialize_type``.

    Raises ``LocalProtocolError`` when the command cannot be written: a value that does not fit its
    field, a header over 16 MiB, or a frame over ``max_frame_size`` (when given) or 2 GiB.
    """
    serialize_type = cmd.serialize_type
    if serialize_type == 0:
        header = encode_json_header(cmd)
    elif serialize_type == 1:
        header = encode_rocketmq_header(cmd)
    else:
        raise LocalProtocolError(f"unknown serialization type {serialize_type!r}")
    header_len = len(header)
    if header_len > MAX_HEADER_SIZE:
        raise LocalProtocolError(f"header of {header_len} bytes exceeds {MAX_HEADER_SIZE}")
    length = 4 + header_len + len(cmd.body)
    limit = _INT32_MAX if max_frame_size is None else min(max_frame_size, _INT32_MAX)
    if length > limit:
        raise LocalProtocolError(f"frame of {length} bytes exceeds the maximum {limit}")
    return b"".join((_PREFIX.pack(length, (int(serialize_type) << 24) | header_len), header, cmd.body))
