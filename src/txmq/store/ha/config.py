"""Replication settings: RocketMQ's HA keys of ``MessageStoreConfig``, each declared once (``txmq.conf.key``),
beside who this member is, which the broker fills in when it builds its HA parts."""

from __future__ import annotations

import ssl
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from txmq.conf import key
from txmq.remoting.tls import TlsServerConfig

if TYPE_CHECKING:
    from txmq.store.ha.auth import HAAuth


@dataclass
class HAConfig:
    """Who this member is (checked by the handshake) and how it replicates. The broker's config embeds one whose
    keys broker.conf sets; the broker gives each HA part a copy with the member's identity filled in."""

    cluster_name: str = ""
    broker_name: str = ""
    broker_id: int = 0
    listen_host: str = "127.0.0.1"
    listen_port: int = key(0, name="haListenPort", range=(0, 65535),
                           doc="the port slaves replicate from (0: `listenPort` + 1); see [replication](ha.md)")
    master_address: str = key("", name="haMasterAddress", shown="(none)",
                              doc="a slave's master `host:haPort`; empty: learnt from the name server")
    send_heartbeat_interval_ms: int = key(5000, name="haSendHeartbeatInterval", unit="ms", range=(1, None),
                                          doc="between a slave's offset reports when nothing arrives, and the "
                                              "master's keep-alives")
    housekeeping_interval_ms: int = key(20_000, name="haHousekeepingInterval", unit="ms", range=(1, None),
                                        doc="of silence after which an HA connection is dropped")
    transfer_batch_size: int = key(32 * 1024, name="haTransferBatchSize", unit="bytes", range=(1, None),
                                   doc="of log per replication transfer")
    max_gap_not_in_sync: int = key(256 * 1024 * 1024, name="haMaxGapNotInSync", unit="bytes", range=(0, None),
                                   doc="a slave further behind than this is not in sync")
    sync_timeout_ms: int = 5000  # syncFlushTimeout (a store key): SYNC_MASTER answers FLUSH_SLAVE_TIMEOUT after this
    in_sync_replicas: int = key(1, range=(1, None),
                                doc="replicas (the master included) a `SYNC_MASTER` send waits for; 1 or 2: one "
                                    "slave")
    min_in_sync_replicas: int = key(1, range=(1, None),
                                    doc="with `enableAutoInSyncReplicas`: the fewest replicas a `SYNC_MASTER` send "
                                        "may wait for")
    all_ack_in_sync_state_set: bool = key(False, doc="a `SYNC_MASTER` send waits for every in-sync slave")
    enable_auto_in_sync_replicas: bool = key(False, doc="lower the replicas waited for to those in sync, down to "
                                                        "`minInSyncReplicas`")
    max_connections: int = key(8, name="haMaxConnections", range=(1, None), rocketmq=False,
                               doc="connections the HA port holds at once, handshakes included")
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
