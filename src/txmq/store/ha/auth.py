"""Who may replicate (docs/ha.md, "Authentication"). With aclEnable, both ends of an HA connection prove that they
hold the secretKey of the slave's account, which must be an admin account in the master's ACL file, before a
byte of the log or of either member's state crosses: the slave first (a stranger on the HA port gets a nonce and
nothing else), then the master (a slave follows no master that cannot). Each proof is an HMAC-SHA256 over both
sides' fresh nonces, the prover's role and the group's identity (cluster, broker name, the slave's id and
account): a recorded proof fits no other connection, a master's proof is no slave's, and a member of another
group proves nothing here."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import secrets
import struct
from collections.abc import Callable
from dataclasses import dataclass, field

from txmq.store.ha.config import HAConfig
from txmq.store.ha.protocol import (
    NONCE_SIZE,
    PROOF_SIZE,
    VERSION,
    Challenge,
    HandshakeError,
    Open,
    Welcome,
    older_master,
    read_challenge,
    refusal,
)

SLAVE, MASTER = b"slave", b"master"
_LABEL = b"txmq-ha-3"
_LEN = struct.Struct(">H")


@dataclass(frozen=True)
class HAAuth:
    """A member's credentials for replication: as a slave, its own account (broker.conf ``accessKey`` and
    ``secretKey``); as a master, ``admin_secret``, which gives the secretKey of an admin account of its ACL file
    (as that file is now) and None for any other account."""

    access_key: str
    secret_key: str = field(repr=False)
    admin_secret: Callable[[str], str | None] = field(repr=False)


def new_nonce() -> bytes:
    return secrets.token_bytes(NONCE_SIZE)


def proof(secret: str, role: bytes, slave_nonce: bytes, master_nonce: bytes, config: HAConfig, slave_id: int,
          access_key: str) -> bytes:
    """HMAC-SHA256(secret, each field length-prefixed): the label, ``role``, both nonces, cluster, broker name,
    the slave's id and account."""
    fields = (_LABEL, role, slave_nonce, master_nonce, config.cluster_name.encode(), config.broker_name.encode(),
              str(slave_id).encode(), access_key.encode())
    return hmac.new(secret.encode(), b"".join(_LEN.pack(len(f)) + f for f in fields), hashlib.sha256).digest()


class Refused(Exception):
    """The peer did not authenticate; ``reason`` is for this member's log only, never for the peer."""


async def authenticate_slave(config: HAConfig, opened: Open, reader: asyncio.StreamReader,
                             writer: asyncio.StreamWriter) -> None:
    """The master's side, after the slave's OPEN: challenge it and check its proof, then prove this master. Raises
    ``Refused`` (the connection is then closed without another byte)."""
    nonce = new_nonce()
    auth = config.auth
    if auth is None:
        writer.write(Challenge(False, nonce).encode())
        return
    if not opened.access_key:
        writer.write(refusal("this master authenticates its slaves (aclEnable): set accessKey and secretKey of an "
                             "admin account"))
        raise Refused("no accessKey (a slave without aclEnable, or a stranger)")
    writer.write(Challenge(True, nonce).encode())
    given = await reader.readexactly(PROOF_SIZE)
    secret = auth.admin_secret(opened.access_key)
    if secret is None:
        raise Refused("authentication failed: the account is not an admin account of this broker's ACL file")
    if not hmac.compare_digest(given, proof(secret, SLAVE, opened.nonce, nonce, config, opened.broker_id,
                                            opened.access_key)):
        raise Refused("authentication failed: wrong proof (another secretKey, or a member of another group)")
    writer.write(proof(secret, MASTER, opened.nonce, nonce, config, opened.broker_id, opened.access_key))


async def authenticate_master(config: HAConfig, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                              version: int = VERSION) -> None:
    """The slave's side: open speaking ``version``, prove this slave when the master asks, and check the master's
    proof. Raises ``HandshakeError`` saying why this slave does not follow it (``OlderMaster``: the master speaks
    an older version this slave speaks too)."""
    auth = config.auth
    nonce = new_nonce()
    writer.write(Open(config.broker_id, nonce, auth.access_key if auth is not None else "", version).encode())
    answer = await read_challenge(reader)
    if isinstance(answer, Welcome):
        raise older_master(answer.remark) or HandshakeError(f"the master refused this slave: {answer.remark}")
    if auth is None:
        if answer.authenticate:
            raise HandshakeError("the master authenticates its slaves (aclEnable there): set aclEnable, accessKey "
                                 "and secretKey of an admin account here")
        return
    if not answer.authenticate:
        raise HandshakeError("the master does not authenticate (aclEnable=false there): not following it")
    writer.write(proof(auth.secret_key, SLAVE, nonce, answer.nonce, config, config.broker_id, auth.access_key))
    try:
        given = await reader.readexactly(PROOF_SIZE)
    except asyncio.IncompleteReadError:
        raise HandshakeError(f"the master refused this slave's proof: accessKey {auth.access_key} is not an admin "
                             "account there, or its secretKey differs") from None
    if not hmac.compare_digest(given, proof(auth.secret_key, MASTER, nonce, answer.nonce, config, config.broker_id,
                                            auth.access_key)):
        raise HandshakeError(f"the master did not prove it holds the secretKey of {auth.access_key} for "
                             f"{config.cluster_name}/{config.broker_name}: not following it")
