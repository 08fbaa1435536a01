"""Broker configuration under RocketMQ's own ``broker.conf`` key names.

``load_broker_conf`` reads a Java properties file (``key=value``, ``#`` comments) whose camelCase keys map to
the snake_case fields below (``brokerName`` → ``broker_name``); command-line flags then override it.
"""

from __future__ import annotations

import copy
import ipaddress
import logging
import os
import re
import socket
from dataclasses import dataclass, field, fields
from functools import cached_property
from pathlib import Path
from typing import Any

from txmq.broker.transaction.service import DEFAULT_ORPHAN_FACTOR
from txmq.conf import parse_properties, update_fields
from txmq.remoting.server import ServerLimits
from txmq.remoting.tls import TlsServerConfig
from txmq.store.config import delete_hours

log = logging.getLogger("txmq.broker")

DEFAULT_DELAY_LEVELS = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"


# keys whose value is one of a few names (checked when the config is read, not when first used)
_CHOICES = {"flush_disk_type": ("ASYNC_FLUSH", "SYNC_FLUSH"), "broker_role": ("ASYNC_MASTER", "SYNC_MASTER", "SLAVE"),
            "metrics_exporter_type": ("DISABLE", "PROM")}


# The range of each numeric key (None: unbounded), checked when the config is read or updated, so a value the
# broker cannot run with is refused with the key's name instead of failing later (a zero interval is a busy loop,
# a zero queue count an unroutable topic). Attempts count the first one.
_RANGES: dict[str, tuple[float | None, float | None]] = {
    "listen_port": (0, 65535), "grpc_port": (None, 65535), "ha_listen_port": (0, 65535),
    "metrics_prom_exporter_port": (0, 65535),
    "grpc_client_producer_max_attempts": (1, None),
    "grpc_signature_window_seconds": (1, None), "grpc_max_sessions_per_account": (1, None),
    "flush_interval_commit_log": (1, None), "sync_flush_timeout": (1, None),
    "mapped_file_size_commit_log": (64 * 1024, None), "mapped_file_size_consume_queue": (20, None),
    "file_reserved_time": (0, None), "clean_resource_interval": (1, None), "max_message_size": (1, None),
    "max_hash_slot_num": (1, None), "max_index_num": (1, None),
    "disk_space_warning_level_ratio": (0, 100), "disk_space_clean_forcibly_ratio": (0, 100),
    "disk_max_used_space_ratio": (0, 100), "access_message_in_memory_max_ratio": (0, 100),
    "default_topic_queue_nums": (1, None), "short_polling_time_mills": (0, None),
    "register_name_server_period": (1000, None), "flush_consumer_offset_interval": (1, None),
    "consumer_offset_max_entries": (1, None), "client_channel_expired_ms": (1, None),
    "max_held_pulls_per_connection": (0, None), "max_held_pulls": (0, None),
    "transaction_time_out": (0, None), "transaction_check_max": (0, None), "transaction_check_interval": (1, None),
    "transaction_orphan_factor": (1, None), "transaction_snapshot_interval": (1, None),
    "ha_send_heartbeat_interval": (1, None), "ha_housekeeping_interval": (1, None),
    "ha_transfer_batch_size": (1, None), "ha_max_gap_not_in_sync": (0, None), "ha_max_connections": (1, None),
    "in_sync_replicas": (1, None), "min_in_sync_replicas": (1, None), "slave_synchronize_interval": (1, None),
    "broker_heartbeat_interval": (1, None), "controller_heart_beat_timeout_mills": (1, None),
    "broker_lease_mills": (1, None),
    # the remoting server's limits (ServerLimits)
    "server_channel_max_idle_time_seconds": (0, None), "server_frame_timeout_seconds": (0.1, None),
    "server_max_connections": (1, None), "server_buffered_bytes_max": (1, None),
}

# the keys whose camelCase is not the fields' (brokerIP1, not brokerIp1)
_IP_KEYS = {"broker_ip1": "brokerIP1", "broker_ip2": "brokerIP2"}


def _conf_key(name: str) -> str:
    """A field's broker.conf key (``flush_disk_type`` → ``flushDiskType``)."""
    head, *rest = name.split("_")
    return _IP_KEYS.get(name) or head + "".join(p.title() for p in rest)


class _Role:
    """``brokerRole``'s field: setting it drops what was worked out from it (``is_slave``), which is then a plain
    attribute of the instance (every send asks it) where a property ran ``upper()`` per request. A descriptor on this
    one field: other config writes pay nothing (a ``__setattr__`` would tax them all)."""

    def __init__(self, default: str) -> None:
        self.default = default

    def __get__(self, obj: BrokerConfig | None, owner: type | None = None) -> str:
        if obj is None:  # the class's: the dataclass's default
            return self.default
        return obj.__dict__.get("_broker_role", self.default)

    def __set__(self, obj: BrokerConfig, value: str) -> None:
        obj.__dict__["_broker_role"] = value
        obj.__dict__.pop("is_slave", None)


@dataclass
class BrokerConfig:
    broker_cluster_name: str = "DefaultCluster"
    broker_name: str = "broker-a"
    broker_id: int = 0
    broker_ip1: str = "127.0.0.1"
    broker_ip2: str = ""  # the address a master gives its slaves for HA (RocketMQ's brokerIP2); empty: brokerIP1
    listen_port: int = 10911
    grpc_port: int = 8081
    # RocketMQ proxy's key: the send attempts the gRPC edge's Settings tell RocketMQ 5 producers (1: no retries)
    grpc_client_producer_max_attempts: int = 3
    # txmq's own, with aclEnable: how far a signed gRPC request's x-mq-date-time may be from the broker's clock,
    # either way (older is refused as a replay), and the sessions (client ids) and Telemetry streams one account
    # may have open at once on the gRPC endpoint
    grpc_signature_window_seconds: int = 900
    grpc_max_sessions_per_account: int = 256
    namesrv_addr: str = ""  # "host:port;host:port"
    broker_role: str = _Role("ASYNC_MASTER")  # type: ignore[assignment]  # ASYNC_MASTER | SYNC_MASTER | SLAVE
    store_path_root_dir: str = field(default_factory=lambda: str(Path.home() / "store"))
    flush_disk_type: str = "ASYNC_FLUSH"  # ASYNC_FLUSH | SYNC_FLUSH
    flush_interval_commit_log: int = 500  # ms
    sync_flush_timeout: int = 5000  # ms
    mapped_file_size_commit_log: int = 1024 * 1024 * 1024
    mapped_file_size_consume_queue: int = 300_000 * 20
    file_reserved_time: float = 72  # hours, by the store's elapsed-time account (docs/storage.md, "Retention")
    delete_when: str = "04"  # the local hours retention deletes at ("04;16": several), unless the disk is full
    clean_resource_interval: int = 10_000  # ms between retention's looks at the hour and the disk
    max_message_size: int = 4 * 1024 * 1024
    max_hash_slot_num: int = 500_000  # slots per index file (RocketMQ's default is 5 M; see docs/storage.md)
    max_index_num: int = 2_000_000  # entries per index file (RocketMQ: 20 M)
    # Disk usage of the store's partition in percent (a value up to 1 is read as a fraction, as RocketMQ 4.x's
    # system properties give it): puts are refused above the warning level until usage is under the
    # clean-forcibly level; above the max-used level retention runs at once (docs/storage.md, "A full disk").
    disk_space_warning_level_ratio: float = 90
    disk_space_clean_forcibly_ratio: float = 85
    disk_max_used_space_ratio: float = 75
    auto_create_topic_enable: bool = True
    default_topic_queue_nums: int = 8
    message_delay_level: str = DEFAULT_DELAY_LEVELS
    long_polling_enable: bool = True
    short_polling_time_mills: int = 1000
    register_name_server_period: int = 30_000  # ms
    flush_consumer_offset_interval: int = 5000  # ms
    consumer_offset_max_entries: int = 50_000  # txmq's own: committed offsets kept (topic, group, queue)
    client_channel_expired_ms: int = 120_000
    # txmq's own: suspended pulls held at once, per connection and in all (beyond: SYSTEM_BUSY at once)
    max_held_pulls_per_connection: int = 4096
    max_held_pulls: int = 65536
    # the remoting server's limits (serverChannelMaxIdleTimeSeconds, serverMaxConnections, ...): see ServerLimits
    server_limits: ServerLimits = field(default_factory=ServerLimits)
    # metrics (RocketMQ 5's keys): PROM serves Prometheus's text format on host:port (host empty: brokerIP1)
    metrics_exporter_type: str = "DISABLE"  # DISABLE | PROM
    metrics_prom_exporter_host: str = ""
    metrics_prom_exporter_port: int = 5557
    # transactions (RocketMQ BrokerConfig names)
    reject_transaction_message: bool = False
    transaction_time_out: int = 6000  # ms before the first check-back
    transaction_check_max: int = 15
    transaction_check_interval: int = 30_000  # ms between check passes
    # txmq's own: a half with no check ever handed to a producer of its group is discarded after transactionTimeOut
    # times this (and no message's CHECK_IMMUNITY_TIME_IN_SECONDS delays its first check longer)
    transaction_orphan_factor: int = DEFAULT_ORPHAN_FACTOR
    # replication (RocketMQ MessageStoreConfig / BrokerConfig names; docs/ha.md)
    ha_listen_port: int = 0  # 0: listenPort + 1
    ha_master_address: str = ""  # a slave's master "host:haPort"; empty: learnt from the name server
    ha_send_heartbeat_interval: int = 5000  # ms
    ha_housekeeping_interval: int = 20_000  # ms
    ha_transfer_batch_size: int = 32 * 1024
    ha_max_gap_not_in_sync: int = 256 * 1024 * 1024
    ha_max_connections: int = 8  # txmq's: connections the HA port holds at once, handshakes included
    in_sync_replicas: int = 1
    min_in_sync_replicas: int = 1
    all_ack_in_sync_state_set: bool = False
    enable_auto_in_sync_replicas: bool = False
    slave_read_enable: bool = False
    access_message_in_memory_max_ratio: int = 40  # percent of RAM; a consumer further behind reads from a slave
    slave_synchronize_interval: int = 3000  # ms; txmq's: a slave copies its master's metadata this often
    # txmq's own: how often the transaction state table is snapshotted (restart replays only what follows)
    transaction_snapshot_interval: int = 10_000  # ms
    # access control (RocketMQ's aclEnable; RocketMQ reads the file's path from a JVM property, txmq from aclFile,
    # else $ROCKETMQ_HOME/conf/plain_acl.yml). accessKey/secretKey: the broker's own account, signing its
    # registrations at the name servers.
    acl_enable: bool = False
    acl_file: str = ""
    access_key: str = ""
    secret_key: str = ""
    # TLS under RocketMQ's names (tls.server.mode, tls.server.certPath, ...; dots read as underscores):
    # the server side of the remoting and gRPC ports, and tls.enable for the broker's own calls to name servers.
    tls_server_mode: str = "disabled"  # disabled | permissive | enforcing
    tls_server_cert_path: str = ""
    tls_server_key_path: str = ""
    tls_enable: bool = False
    tls_client_trust_cert_path: str = ""
    # Controller mode (RocketMQ 5's keys; docs/ha.md, "Automatic failover"): the role comes from the controller,
    # brokerId is this replica's id (> 0; the master registers with the name servers as 0), brokerRole says how
    # it answers sends when it is the master (SYNC_MASTER or ASYNC_MASTER).
    enable_controller_mode: bool = False
    controller_addr: str = ""  # "host:port;host:port"
    broker_heartbeat_interval: int = 1000  # ms between heartbeats to the controller
    controller_heart_beat_timeout_mills: int = 6000  # the controller elects after this long without heartbeats
    broker_lease_mills: int = 4000  # txmq: a master without a confirmed heartbeat this long stops acknowledging

    @property
    def broker_addr(self) -> str:
        return f"{self.broker_ip1}:{self.listen_port}"

    def tls_server(self) -> TlsServerConfig:
        return TlsServerConfig(self.tls_server_mode.lower(), self.tls_server_cert_path, self.tls_server_key_path)

    @cached_property
    def is_slave(self) -> bool:
        """Worked out once per ``broker_role`` (``_Role`` forgets it when the role is set)."""
        return self.broker_role.upper() == "SLAVE"

    def disk_percent(self, name: str) -> float:
        """A disk ratio field in percent, whether it was given as 90 or as 0.90."""
        value = float(getattr(self, name))
        return value * 100 if value <= 1 else value

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
        """Set fields, and the remoting server's limits, from camelCase or snake_case keys, converting strings
        to each field's type. All or nothing: the values are tried on a copy first, so a refused one (an
        UPDATE_BROKER_CONFIG answered with an error) leaves every field as it was."""
        trial = copy.copy(self)
        trial.server_limits = copy.copy(self.server_limits)
        trial._set(values)
        unknown = self._set(values)
        if unknown:
            log.warning("unknown broker config keys ignored: %s (docs/configuration.md lists the keys txmq reads)",
                        ", ".join(sorted(unknown)))

    def _set(self, values: dict[str, Any]) -> dict[str, Any]:
        """``update``'s step: set and check the fields; the keys that name none."""
        unknown = update_fields(self.server_limits, update_fields(self, values))
        for key, allowed in _CHOICES.items():
            value = getattr(self, key)
            if value.upper() not in allowed:
                raise ValueError(f"config {_conf_key(key)}: {value!r} is not one of {', '.join(allowed)}")
        check_ranges(self)
        check_ranges(self.server_limits)
        delete_hours(self.delete_when)
        return unknown


def check_ranges(config: BrokerConfig | ServerLimits) -> None:
    """Refuse a field of ``config`` outside its key's range (``_RANGES``), naming the broker.conf key: the
    broker's config, and the remoting limits of the broker and of the name server (``txmq namesrv -c``)."""
    for f in fields(config):
        least, most = _RANGES.get(f.name, (None, None))
        value = getattr(config, f.name)
        if (least is not None and value < least) or (most is not None and value > most):
            span = f"at least {least}" if most is None else f"at most {most}" if least is None \
                else f"between {least} and {most}"
            raise ValueError(f"config {_conf_key(f.name)}: {value} is out of range (it must be {span})")


def store_address(host: str, key: str = "brokerIP1") -> str:
    """The IPv4 address stored messages carry as their store host, from brokerIP1: the address itself, or what a
    host name resolves to (once, at start). A record and a message id hold the store host in RocketMQ's 4-byte
    IPv4 form, so an IPv6 address or a name with no IPv4 address is refused here, before the broker serves,
    instead of refusing every send."""
    try:
        return str(ipaddress.IPv4Address(host))
    except ValueError:
        pass
    try:
        ipaddress.IPv6Address(host.split("%", 1)[0])
    except ValueError:
        pass
    else:
        raise ValueError(f"{key} {host!r} is an IPv6 address: txmq stores a message's store host as an IPv4 "
                         "address (RocketMQ's 4-byte form); set it to an IPv4 address or a name with one")
    try:
        found = socket.getaddrinfo(host, None, socket.AF_INET, socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as exc:
        raise ValueError(f"{key} {host!r} is not an IPv4 address and does not resolve to one: {exc}") from None
    return str(found[0][4][0])


# Never in any answer, to anyone: the broker's own credentials (GET_BROKER_CONFIG once carried them, and with them
# any account could act as the cluster's admin).
SECRET_FIELDS = frozenset({"access_key", "secret_key"})


def config_properties(config: BrokerConfig) -> dict[str, str]:
    """The config as broker.conf keys and values (GET_BROKER_CONFIG's body), the remoting limits included, the
    broker's credentials left out (``SECRET_FIELDS``)."""
    out = {}
    for obj in (config, config.server_limits):
        for f in fields(obj):
            value = getattr(obj, f.name)
            if f.name != "server_limits" and f.name not in SECRET_FIELDS:
                out[_conf_key(f.name)] = str(value).lower() if isinstance(value, bool) else str(value)
    return out


def load_broker_conf(path: str | os.PathLike[str], config: BrokerConfig | None = None) -> BrokerConfig:
    config = config or BrokerConfig()
    config.update(dict(parse_properties(Path(path).read_text())))
    return config
