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
import hashlib
import hmac
from dataclasses import dataclass

from txmq.remoting.command import RemotingCommand

ACCESS_KEY = "AccessKey"
SIGNATURE = "Signature"
SECURITY_TOKEN = "SecurityToken"
# Excluded from the signed content by RocketMQ's server side (PlainAccessResource.parse).
_UNSIGNED = (SIGNATURE, "_UNIQUE_KEY_QUERY")

GRPC_ALGORITHM = "MQv2-HMAC-SHA1"
GRPC_DATE_TIME = "x-mq-date-time"
GRPC_SESSION_TOKEN = "x-mq-session-token"


@dataclass(frozen=True, slots=True)
class SessionCredentials:
    """RocketMQ's ``SessionCredentials``: what a client signs with."""

    access_key: str
    secret_key: str
    security_token: str = ""


def request_content(ext_fields: dict[str, str], body: bytes) -> bytes:
    values = "".join([v for k, v in sorted(ext_fields.items()) if k not in _UNSIGNED])
    return values.encode() + body


def hmac_key(secret_key: str) -> hmac.HMAC:
    """The HMAC-SHA1 state after the key: made once per account, copied per request."""
    return hmac.new(secret_key.encode(), digestmod=hashlib.sha1)


def sign(key: hmac.HMAC, content: bytes) -> str:
    mac = key.copy()
    mac.update(content)
    return base64.b64encode(mac.digest()).decode()


def signature_matches(key: hmac.HMAC, cmd: RemotingCommand) -> bool:
    """Every signed request asks: the content goes into the MAC in two parts (no copy of the body), and the
    signature given is compared as the digest it encodes."""
    ext = cmd.ext_fields
    given = ext.get(SIGNATURE)
    if given is None:
        return False
    mac = key.copy()
    mac.update("".join([ext[k] for k in sorted(ext) if k not in _UNSIGNED]).encode())
    mac.update(cmd.body)
    try:
        return hmac.compare_digest(mac.digest(), base64.b64decode(given, validate=True))
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


def grpc_signature(key: hmac.HMAC, date_time: str) -> str:
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
