"""Signatures as RocketMQ's clients make them.

Remoting (``AclClientRPCHook``, ``AclUtils.combineRequestContent``, ``AclSigner``): the values of the request's
ext fields sorted by name (``AccessKey`` and ``SecurityToken`` included, ``Signature`` excluded), concatenated,
then the body; ``Signature`` = base64(HMAC-SHA1(secretKey, that)).

gRPC (RocketMQ 5 clients): header ``authorization: MQv2-HMAC-SHA1 Credential=<AK>, SignedHeaders=x-mq-date-time,
Signature=<hex HMAC-SHA1(secretKey, x-mq-date-time)>``.
"""

from __future__ import annotations

import base64
import binascii
import hmac
from dataclasses import dataclass
from typing import Protocol

import cython

from txmq.remoting.command import RemotingCommand

try:  # CPython's OpenSSL HMAC, whose copy, update and digest are C calls (the hmac module wraps each in Python)
    from _hashlib import hmac_new as _new_mac
except ImportError:  # pragma: no cover - an interpreter without OpenSSL's: the hmac module's, the same state wrapped
    _new_mac = hmac.new  # type: ignore[assignment]

ACCESS_KEY = "AccessKey"
SIGNATURE = "Signature"
SECURITY_TOKEN = "SecurityToken"
# Signature and _UNIQUE_KEY_QUERY are left out of the signed content, as RocketMQ's server side leaves them out
# (PlainAccessResource.parse): _signed_order.

GRPC_ALGORITHM = "MQv2-HMAC-SHA1"
GRPC_DATE_TIME = "x-mq-date-time"
GRPC_SESSION_TOKEN = "x-mq-session-token"


@dataclass(frozen=True, slots=True)
class SessionCredentials:
    """RocketMQ's ``SessionCredentials``: what a client signs with."""

    access_key: str
    secret_key: str
    security_token: str = ""


class Mac(Protocol):
    """An HMAC state: ``hmac.HMAC`` or the OpenSSL object it wraps."""

    def copy(self) -> Mac: ...

    def update(self, msg: bytes) -> None: ...

    def digest(self) -> bytes: ...

    def hexdigest(self) -> str: ...


def request_content(ext_fields: dict[str, str], body: bytes) -> bytes:
    return _fields_content(ext_fields) + body


@cython.cfunc
def _fields_content(ext: dict[str, str]) -> bytes:
    """The signed ext field values, in the order of their names."""
    return "".join([ext[k] for k in _signed_order(tuple(ext))]).encode()


# The signed names in order, for each list of names seen: a client sends the same fields in the same order request
# after request, and finding that order again costs less than sorting. Bounded: at most MAX_ORDERS lists (emptied
# when full) of at most MAX_ORDER_CHARS characters of names each, so names a peer makes up cost it a sort each,
# never memory.
_ORDERS: dict[tuple[str, ...], tuple[str, ...]] = {}
MAX_ORDERS = 256
MAX_ORDER_CHARS = 2048  # RocketMQ's requests have a few dozen short fields


@cython.cfunc
def _signed_order(names: tuple[str, ...]) -> tuple[str, ...]:
    order = _ORDERS.get(names)
    if order is None:
        order = tuple(sorted([k for k in names if k != SIGNATURE and k != "_UNIQUE_KEY_QUERY"]))
        if sum(map(len, names)) <= MAX_ORDER_CHARS:
            if len(_ORDERS) >= MAX_ORDERS:
                _ORDERS.clear()
            _ORDERS[names] = order
    return order


def hmac_key(secret_key: str) -> Mac:
    """The HMAC-SHA1 state after the key: made once per account, copied per request."""
    return _new_mac(secret_key.encode(), digestmod="sha1")


def sign(key: Mac, content: bytes) -> str:
    mac = key.copy()
    mac.update(content)
    return base64.b64encode(mac.digest()).decode()


def signature_matches(key: Mac, cmd: RemotingCommand) -> bool:
    """Every signed request asks: the content goes into the MAC in two parts (no copy of the body), and the
    signature given is compared as the digest it encodes (strict base64: nothing skipped, padding exact)."""
    ext = cmd.ext_fields
    given = ext.get(SIGNATURE)
    if given is None:
        return False
    mac = key.copy()
    mac.update(_fields_content(ext))
    mac.update(cmd.body)
    try:
        return hmac.compare_digest(mac.digest(), binascii.a2b_base64(given, strict_mode=True))
    except (binascii.Error, ValueError):  # not base64, or not ASCII
        return False


class AclClientRPCHook:
    """Signs every request a txmq client sends (install with ``RemotingClient(rpc_hook=...)``)."""

    def __init__(self, credentials: SessionCredentials) -> None:
        self.credentials = credentials
        self._key = hmac_key(credentials.secret_key)

    def __call__(self, cmd: RemotingCommand) -> None:
        ext = cmd.ext_fields
        ext.pop(SIGNATURE, None)
        ext[ACCESS_KEY] = self.credentials.access_key
        if self.credentials.security_token:
            ext[SECURITY_TOKEN] = self.credentials.security_token
        ext[SIGNATURE] = sign(self._key, request_content(ext, cmd.body))


def grpc_signature(key: Mac, date_time: str) -> str:
    mac = key.copy()
    mac.update(date_time.encode())
    return mac.hexdigest().upper()


def grpc_authorization(credentials: SessionCredentials, date_time: str) -> str:
    sig = grpc_signature(hmac_key(credentials.secret_key), date_time)
    return f"{GRPC_ALGORITHM} Credential={credentials.access_key}, SignedHeaders={GRPC_DATE_TIME}, Signature={sig}"


def parse_grpc_authorization(value: str) -> tuple[str, str] | None:
    """(access key, signature) of an ``authorization`` header, or None when it is not MQv2-HMAC-SHA1. The Java
    client's Credential may carry ``AK/region/service``: the access key is its first part."""
    algorithm, _, rest = value.strip().partition(" ")
    if algorithm != GRPC_ALGORITHM:
        return None
    parts = {}
    for item in rest.split(","):
        key, sep, val = item.strip().partition("=")
        if sep:
            parts[key] = val.strip()
    credential, signature = parts.get("Credential"), parts.get("Signature")
    if not credential or not signature:
        return None
    return credential.split("/", 1)[0], signature
