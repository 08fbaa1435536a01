"""Commit-log replication between the members of a broker group (RocketMQ's HAService).

The master's ``HAService`` accepts slaves on ``haListenPort`` and streams its commit log to each from the
offset the slave reports (one ``HAConnection`` per slave); a slave's ``HAClient`` writes the bytes as they are,
so both logs are byte-identical, and dispatches its own consume queues and index from them. Under
SYNC_MASTER a put waits until enough slaves acknowledged it (``GroupTransferService``). With aclEnable both ends
authenticate first (``auth``). This package speaks bytes and offsets only; see docs/ha.md.
"""

from txmq.store.ha.auth import HAAuth
from txmq.store.ha.client import HAClient
from txmq.store.ha.config import HAConfig
from txmq.store.ha.port import HAPort
from txmq.store.ha.service import HAConnection, HAService

__all__ = ["HAAuth", "HAClient", "HAConfig", "HAConnection", "HAPort", "HAService"]
