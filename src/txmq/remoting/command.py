"""``RemotingCommand``: one request or response of RocketMQ's remoting protocol. No IO here."""

from __future__ import annotations

import itertools
from typing import TypeVar, overload

import cython

from txmq.remoting import headers
from txmq.remoting.codes import LanguageCode, ResponseCode, SerializeType

# Bits of the ``flag`` header field (RocketMQ ``RemotingCommand.RPC_TYPE`` / ``RPC_ONEWAY``).
FLAG_RESPONSE = 1 << 0
FLAG_ONEWAY = 1 << 1

# The ``version`` txmq writes. A Java broker leaves it 0 in responses unless configured; clients only log it.
DEFAULT_VERSION = 0

_INT32_MAX = 0x7FFFFFFF
_T = TypeVar("_T")
# Like RocketMQ's ``requestId`` counter: one per process, shared by every connection. Masked to stay a
# positive Java int, as the C++ client does.
_opaque_counter = itertools.count(1)


def next_opaque() -> int:
    return next(_opaque_counter) & _INT32_MAX


# One per request and response. Compiled (setup.py), an extension type (command.pxd): its fields are C struct members
# that compiled modules typing a command read and write without attribute lookups. ``cython.dataclasses`` keeps the
# dataclass's fields, eq and ``dataclasses.replace`` (the standard library's dataclass when interpreted); ``__slots__``
# is written out (the interpreted class's), so the fields carry no class defaults: ``__init__`` has them.
@cython.dataclasses.dataclass(eq=True, init=False)
@cython.freelist(64)  # one per request and response: freed ones are reused
@cython.cclass
class RemotingCommand:
    """A request or a response. ``ext_fields`` holds the custom header, all values strings."""

    __slots__ = ("body", "code", "ext_fields", "flag", "language", "opaque", "remark", "serialize_type", "version")

    code: int
    language: LanguageCode
    version: int
    opaque: int
    flag: int
    remark: str | None
    ext_fields: dict[str, str]
    body: bytes
    serialize_type: SerializeType

    def __init__(self, code: int, language: LanguageCode = LanguageCode.PYTHON, version: int = DEFAULT_VERSION,
                 opaque: int = 0, flag: int = 0, remark: str | None = None, ext_fields: dict[str, str] | None = None,
                 body: bytes = b"", serialize_type: SerializeType = SerializeType.JSON) -> None:
        self.code = code
        self.language = language
        self.version = version
        self.opaque = opaque
        self.flag = flag
        self.remark = remark
        self.ext_fields = {} if ext_fields is None else ext_fields
        self.body = body
        self.serialize_type = serialize_type

    @property
    def is_response(self) -> bool:
        return bool(self.flag & FLAG_RESPONSE)

    @property
    def is_oneway(self) -> bool:
        return bool(self.flag & FLAG_ONEWAY)

    @classmethod
    def request(
        cls,
        code: int,
        ext_fields: dict[str, str] | None = None,
        body: bytes = b"",
        oneway: bool = False,
        serialize_type: SerializeType = SerializeType.JSON,
    ) -> RemotingCommand:
        """A new request with the next opaque of this process."""
        return cls(
            code,
            opaque=next_opaque(),
            flag=FLAG_ONEWAY if oneway else 0,
            ext_fields=ext_fields if ext_fields is not None else {},
            body=body,
            serialize_type=serialize_type,
        )

    @classmethod
    def response_to(
        cls,
        request: RemotingCommand,
        code: int = ResponseCode.SUCCESS,
        remark: str | None = None,
        ext_fields: dict[str, str] | None = None,
        body: bytes = b"",
    ) -> RemotingCommand:
        """The response to ``request``: same opaque and serialization type, response flag set."""
        return cls(
            code,
            opaque=request.opaque,
            flag=FLAG_RESPONSE,
            remark=remark,
            ext_fields=ext_fields if ext_fields is not None else {},
            body=body,
            serialize_type=request.serialize_type,
        )

    # Typed ext-field access; each raises RemoteProtocolError naming the field when it is absent (and no
    # default is given) or malformed. See txmq.remoting.headers.
    @overload
    def ext_str(self, name: str) -> str: ...
    @overload
    def ext_str(self, name: str, default: _T) -> str | _T: ...
    def ext_str(self, name: str, default: object = headers.MISSING) -> object:
        return headers.get_str(self.ext_fields, name, default)

    @overload
    def ext_int(self, name: str) -> int: ...
    @overload
    def ext_int(self, name: str, default: _T) -> int | _T: ...
    def ext_int(self, name: str, default: object = headers.MISSING) -> object:
        return headers.get_int(self.ext_fields, name, default)

    @overload
    def ext_bool(self, name: str) -> bool: ...
    @overload
    def ext_bool(self, name: str, default: _T) -> bool | _T: ...
    def ext_bool(self, name: str, default: object = headers.MISSING) -> object:
        return headers.get_bool(self.ext_fields, name, default)

    def __repr__(self) -> str:
        kind = "response" if self.is_response else ("oneway" if self.is_oneway else "request")
        return (
            f"RemotingCommand({kind} code={self.code} opaque={self.opaque} remark={self.remark!r} "
            f"ext={self.ext_fields!r} body={len(self.body)}B {self.serialize_type.name})"
        )
