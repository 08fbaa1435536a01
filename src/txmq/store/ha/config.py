"""Replication settings, named after RocketMQ's ``MessageStoreConfig`` fields (broker.conf keys in docs/ha.md)."""

from __future__ import annotations

import ssl
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from txmq.remoting.tls import TlsServerConfig

if TYPE_CHECKING:
    from txmq.store.ha.auth import HAAuth


@dataclass
class HAConfig:
    """Who this member is (checked by the handshake) and how it replicates."""

    cluster_name: str
    broker_name: str
    broker_id: int
    listen_host: str = "127.0.0.1"
    listen_port: int = 10912  # haListenPort (the broker's default: listenPort + 1)
    master_address: str = ""  # haMasterAddress: a slave's master "host:haPort"; otherwise from the name server
    send_heartbeat_interval_ms: int = 5000  # haSendHeartbeatInterval: slave reports and master keep-alives
    housekeeping_interval_ms: int = 20_000  # haHousekeepingInterval: a silent peer is dropped after this
    transfer_batch_size: int = 32 * 1024  # haTransferBatchSize: bytes per transfer frame
    max_gap_not_in_sync: int = 256 * 1024 * 1024  # haMaxGapNotInSync: a slave further behind is not in sync
    sync_timeout_ms: int = 5000  # syncFlushTimeout: SYNC_MASTER answers FLUSH_SLAVE_TIMEOUT after this
    in_sync_replicas: int = 1  # replicas (master included) a SYNC_MASTER put needs; 1 or 2 mean one slave
    min_in_sync_replicas: int = 1  # with enable_auto_in_sync_replicas: the fewest it may degrade to
    all_ack_in_sync_state_set: bool = False  # every in-sync slave must acknowledge
    enable_auto_in_sync_replicas: bool = False  # degrade to the slaves in sync, down to min_in_sync_replicas
    max_connections: int = 8  # haMaxConnections: connections the HA port holds at once, handshakes included
    tls: TlsServerConfig = field(default_factory=TlsServerConfig)  # tls.server.mode on the HA port
    tls_client: ssl.SSLContext | None = None  # tls.enable: how a slave connects to its master
    auth: HAAuth | None = None  # aclEnable: peers prove they hold an admin account's secretKey (auth.py)

    def slave_acks_needed(self, in_sync_slaves: int) -> int:
        """Slaves that must have a SYNC_MASTER put before it is answered PUT_OK; more than ``in_sync_slaves``
        means SLAVE_NOT_AVAILABLE, 0 means the master alone suffices."""
        needed = max(1, self.in_sync_replicas - 1)
        if self.all_ack_in_sync_state_set:
            needed = max(needed, in_sync_slaves)
        if self.enable_auto_in_sync_replicas and in_sync_slaves < needed:
            needed = max(self.min_in_sync_replicas - 1, in_sync_slaves)
        return needed
