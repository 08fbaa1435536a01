"""Broker configuration under RocketMQ's own ``broker.conf`` key names.

``load_broker_conf`` reads a Java properties file (``key=value``, ``#`` comments) whose camelCase keys map to
the snake_case fields below (``brokerName`` → ``broker_name``); command-line flags then override it.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

log = logging.getLogger("txmq.broker")

DEFAULT_DELAY_LEVELS = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"


@dataclass
class BrokerConfig:
    broker_cluster_name: str = "DefaultCluster"
    broker_name: str = "broker-a"
    broker_id: int = 0
    broker_ip1: str = "127.0.0.1"
    listen_port: int = 10911
    grpc_port: int = 8081
    namesrv_addr: str = ""  # "host:port;host:port"
    broker_role: str = "ASYNC_MASTER"  # ASYNC_MASTER | SYNC_MASTER | SLAVE
    store_path_root_dir: str = field(default_factory=lambda: str(Path.home() / "store"))
    flush_disk_type: str = "ASYNC_FLUSH"  # ASYNC_FLUSH | SYNC_FLUSH
    flush_interval_commit_log: int = 500  # ms
    sync_flush_timeout: int = 5000  # ms
    mapped_file_size_commit_log: int = 1024 * 1024 * 1024
    mapped_file_size_consume_queue: int = 300_000 * 20
    file_reserved_time: float = 72  # hours
    max_message_size: int = 4 * 1024 * 1024
    auto_create_topic_enable: bool = True
    default_topic_queue_nums: int = 8
    message_delay_level: str = DEFAULT_DELAY_LEVELS
    long_polling_enable: bool = True
    short_polling_time_mills: int = 1000
    register_name_server_period: int = 30_000  # ms
    flush_consumer_offset_interval: int = 5000  # ms
    client_channel_expired_ms: int = 120_000
    # transactions (RocketMQ BrokerConfig names)
    reject_transaction_message: bool = False
    transaction_time_out: int = 6000  # ms before the first check-back
    transaction_check_max: int = 15
    transaction_check_interval: int = 30_000  # ms between check passes
    # replication (RocketMQ MessageStoreConfig / BrokerConfig names; docs/ha.md)
    ha_listen_port: int = 0  # 0: listenPort + 1
    ha_master_address: str = ""  # a slave's master "host:haPort"; empty: learnt from the name server
    ha_send_heartbeat_interval: int = 5000  # ms
    ha_housekeeping_interval: int = 20_000  # ms
    ha_transfer_batch_size: int = 32 * 1024
    ha_max_gap_not_in_sync: int = 256 * 1024 * 1024
    in_sync_replicas: int = 1
    min_in_sync_replicas: int = 1
    all_ack_in_sync_state_set: bool = False
    enable_auto_in_sync_replicas: bool = False
    slave_read_enable: bool = False
    access_message_in_memory_max_ratio: int = 40  # percent of RAM; a consumer further behind reads from a slave
    slave_synchronize_interval: int = 3000  # ms; txmq's: a slave copies its master's metadata this often
    # txmq's own: how often the transaction state table is snapshotted (restart replays only what follows)
    transaction_snapshot_interval: int = 10_000  # ms

    @property
    def broker_addr(self) -> str:
        return f"{self.broker_ip1}:{self.listen_port}"

    @property
    def is_slave(self) -> bool:
        return self.broker_role.upper() == "SLAVE"

    @property
    def is_sync_master(self) -> bool:
        return self.broker_role.upper() == "SYNC_MASTER"

    def delay_levels_ms(self) -> list[int]:
        """``messageDelayLevel`` as milliseconds; level N is entry N-1."""
        units = {"s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
        out = []
        for item in self.message_delay_level.split():
            m = re.fullmatch(r"(\d+)([smhd])", item)
            if not m:
                raise ValueError(f"bad messageDelayLevel entry {item!r}")
            out.append(int(m.group(1)) * units[m.group(2)])
        return out

    def update(self, values: dict[str, Any]) -> None:
        """Set fields from camelCase or snake_case keys, converting strings to each field's type."""
        types = {f.name: f.type for f in dataclasses.fields(self)}
        for key, raw in values.items():
            name = _snake(key)
            if name not in types:
                log.warning("unknown broker config key ignored: %s", key)
                continue
            setattr(self, name, _convert(raw, str(types[name]), key))


def _snake(key: str) -> str:
    return re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", key).lower()


def _convert(raw: Any, type_name: str, key: str) -> Any:
    if not isinstance(raw, str):
        return raw
    try:
        if type_name == "bool":
            if raw.strip().lower() not in ("true", "false"):
                raise ValueError(raw)
            return raw.strip().lower() == "true"
        if type_name == "int":
            return int(raw.strip())
        if type_name == "float":
            return float(raw.strip())
    except ValueError as exc:
        raise ValueError(f"broker config {key}: {raw!r} is not a {type_name}") from exc
    return raw.strip()


def parse_properties(text: str) -> dict[str, str]:
    """Java properties, the subset broker.conf files use: ``key=value`` or ``key: value``, ``#``/``!`` comments."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line[0] in "#!":
            continue
        m = re.match(r"([^=:\s]+)\s*[=:]?\s*(.*)", line)
        if m:
            out[m.group(1)] = m.group(2)
    return out


def load_broker_conf(path: str | os.PathLike[str], config: BrokerConfig | None = None) -> BrokerConfig:
    config = config or BrokerConfig()
    config.update(dict(parse_properties(Path(path).read_text())))
    return config
