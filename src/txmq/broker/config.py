"""Broker configuration: every broker.conf key, each declared once with its default, its range or choices and
its line of documentation (``txmq.conf.key``).

The broker's own keys are fields here; the store's (``StoreConfig``), replication's (``HAConfig``) and the
remoting server's limits (``ServerLimits``) are declared in their own modules and embedded (``config.store``,
``config.ha``, ``config.server_limits``): one file, one key namespace, each key on exactly one object, as
RocketMQ reads broker.conf into its BrokerConfig, MessageStoreConfig and NettyServerConfig. ``update`` is the one
way values are read: broker.conf (``load_broker_conf``), the command-line flags and ``updateBrokerConfig``.
``python -m txmq.config_doc`` prints docs/configuration.md's tables from these declarations.
"""

from __future__ import annotations

import ipaddress
import logging
import os
import re
import socket
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

from txmq.conf import declared_keys, key, key_values, parse_properties, section, set_keys
from txmq.remoting.server import ServerLimits
from txmq.remoting.tls import MODES, TlsServerConfig
from txmq.store.config import StoreConfig
from txmq.store.ha.config import HAConfig
from txmq.topic import MAX_QUEUE_NUMS, RMQ_SYS_SCHEDULE_TOPIC, PermName

log = logging.getLogger("txmq.broker")

DEFAULT_DELAY_LEVELS = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"
DEFAULT_ORPHAN_FACTOR = 600  # transactionOrphanFactor: with transactionTimeOut 6 s, an hour
_DELAY_UNITS = {"s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


def delay_levels_ms(text: str) -> list[int]:
    """``messageDelayLevel`` as milliseconds; level N is entry N-1."""
    out = []
    for item in text.split():
        m = re.fullmatch(r"(\d+)([smhd])", item)
        if not m:
            raise ValueError(f"has a bad entry {item!r} (a number and s, m, h or d: 1s 5s 10s ...)")
        out.append(int(m.group(1)) * _DELAY_UNITS[m.group(2)])
    if not out:
        raise ValueError("names no level")
    if len(out) > MAX_QUEUE_NUMS:  # a queue of the schedule topic each: bounded as every topic's queues
        raise ValueError(f"names {len(out)} levels: at most {MAX_QUEUE_NUMS} (the queues of {RMQ_SYS_SCHEDULE_TOPIC})")
    return out


def _broker_permission(perm: int) -> int:
    """``brokerPermission``: PermName's read and write bits, one or both."""
    if perm not in (PermName.PERM_WRITE, PermName.PERM_READ, PermName.READ_WRITE):
        raise ValueError("is not 2 (write), 4 (read) or 6 (both)")
    return perm


def _delay_levels(text: str) -> str:
    delay_levels_ms(text)
    return text


class _Role:
    """``brokerRole``'s field: setting it drops what was worked out from it (``is_slave``), which is then a plain
    attribute of the instance (every send asks it) where a property ran ``upper()`` per request. A descriptor on this
    one field: other config writes pay nothing (a ``__setattr__`` would tax them all). Installed on the class after
    ``@dataclass`` has read the field's declaration."""

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
    broker_cluster_name: str = key("DefaultCluster", doc="the cluster the broker registers under")
    broker_name: str = key("broker-a", doc="the broker's name (routes, message queues)")
    broker_id: int = key(0, range=(0, None), doc="0 for a master; in controller mode this replica's id (> 0)")
    broker_ip1: str = key("127.0.0.1", name="brokerIP1",
                          doc="the address the broker listens on, registers, and stores as messages' store host "
                              "(IPv4, or a name resolved once at start; see below)")
    broker_ip2: str = key("", name="brokerIP2", shown="(brokerIP1)",
                          doc="the address a master gives its slaves for HA (`brokerIP2:haListenPort`); see "
                              "[replication](ha.md)")
    listen_port: int = key(10911, range=(0, 65535), doc="the remoting port (0: a free port)")
    grpc_port: int = key(8081, range=(None, 65535), rocketmq=False,
                         doc="the RocketMQ 5 gRPC port (0: a free one, below 0: off; the default being taken only "
                             "warns)")
    grpc_client_producer_max_attempts: int = key(3, range=(1, None),
                                                 doc="send attempts RocketMQ 5 producers are told to make, the "
                                                     "first included (RocketMQ proxy's key); 1: no retries, so a "
                                                     "send timed out on the client is never stored twice")
    topic_route_service_cache_refresh_seconds: int = key(
        20, unit="s", range=(0, None),
        doc="a master's gRPC routes carry the name servers' perm: a topic's answer is asked again on the first "
            "route query this long after it was fetched, that query answered from the one before meanwhile "
            "(RocketMQ proxy's key; a slave asks at every query), and at once after the broker registered a change "
            "of its own (its `brokerPermission`, a topic's perm); 0: asked at every route query")
    topic_route_service_cache_expired_seconds: int = key(
        300, unit="s", range=(1, None),
        doc="a topic's cached route answer not used this long is dropped (RocketMQ proxy's key)")
    topic_route_service_cache_max_num: int = key(
        20_000, range=(1, None),
        doc="topics whose route answer the gRPC endpoint keeps; beyond, the least recently fetched is dropped "
            "(RocketMQ proxy's key)")
    grpc_signature_window_seconds: int = key(900, unit="s", range=(1, None), rocketmq=False,
                                             doc="with `aclEnable`: a signed gRPC request whose `x-mq-date-time` "
                                                 "is further than this from the broker's clock, either way, is "
                                                 "refused (`UNAUTHORIZED`); see [gRPC](grpc.md)")
    grpc_max_sessions_per_account: int = key(256, range=(1, None), rocketmq=False,
                                             doc="with `aclEnable`: client ids, and Telemetry streams, one account "
                                                 "may have open at once on the gRPC endpoint (beyond: "
                                                 "`TOO_MANY_REQUESTS`)")
    max_invisible_time_mills: int = key(
        12 * 3600 * 1000, unit="ms", range=(1, None),
        doc="the longest invisible duration a gRPC receive or change of invisible duration may ask (beyond: "
            "`ILLEGAL_INVISIBLE_TIME`; RocketMQ proxy's key)")
    max_transaction_recovery_second: int = key(
        3600, unit="s", range=(1, None),
        doc="the longest `orphaned_transaction_recovery_duration` (the time before its first check-back) a gRPC "
            "transactional message may carry (beyond: `BAD_REQUEST`, nothing stored; RocketMQ proxy's key)")
    grpc_client_consumer_max_long_polling_timeout_millis: int = key(
        20_000, unit="ms", range=(0, None),
        doc="the longest a gRPC receive or pull waits for messages, whatever its `long_polling_timeout` asks, and the "
            "timeout consumers are told in their settings (RocketMQ proxy's key)")
    grpc_client_consumer_min_long_polling_timeout_millis: int = key(
        5_000, unit="ms", range=(0, None),
        doc="a gRPC receive or pull whose long polling would outlast its call's deadline waits until the deadline "
            "(less `longPollingReserveTimeInMillis`) when at least this much of it is left, else it is answered "
            "`ILLEGAL_POLLING_TIME` at once (RocketMQ proxy's key; unlike the proxy, a shorter "
            "`long_polling_timeout` is not raised to it)")
    long_polling_reserve_time_in_millis: int = key(
        500, unit="ms", range=(0, None),
        doc="how long before its call's deadline a gRPC receive or pull held to that deadline stops waiting, so "
            "that its answer reaches the client in time (RocketMQ proxy's key; the proxy's default is 100 ms)")
    namesrv_addr: str = key("", shown="(none)",
                            doc="the name servers, `host:port;host:port` (`txmq server` uses its own)")
    broker_role: str = key("ASYNC_MASTER", choices=("ASYNC_MASTER", "SYNC_MASTER", "SLAVE"),
                           doc="`SYNC_MASTER` answers a send once a slave has it; in controller mode, how the "
                               "master answers")
    broker_permission: int = key(6, range=(2, 6), runtime=True, check=_broker_permission,
                                 doc="what the broker serves: 6 reads and writes, 4 reads only (sends refused "
                                     "`NO_PERMISSION`; every topic registered without write, so producers send "
                                     "elsewhere), 2 writes only (pulls refused); a change is registered with the "
                                     "name servers at once; see [below](#broker-permission)")
    auto_create_topic_enable: bool = key(True, doc="a send to an unknown topic creates it")
    default_topic_queue_nums: int = key(8, range=(1, MAX_QUEUE_NUMS), doc="queues of an auto-created topic")
    message_delay_level: str = key(DEFAULT_DELAY_LEVELS, check=_delay_levels,
                                   doc="the delay levels (`txmq send --delay LEVEL`, retries)")
    long_polling_enable: bool = key(True, runtime=True, doc="hold pulls until a message arrives")
    short_polling_time_mills: int = key(1000, unit="ms", range=(0, None),
                                        doc="how long a pull that finds nothing is held when long polling is off (a "
                                            "message arriving answers it sooner)")
    register_name_server_period: int = key(30_000, unit="ms", range=(1000, None), runtime=True,
                                           doc="between registrations with the name servers (RocketMQ clamps it "
                                               "to 10-60 s); each sends every topic with the topic table's data "
                                               "version, and a name server reads a master's topics only when that "
                                               "version changed or the broker is new to it (see [below]"
                                               "(#registration-with-the-name-servers))")
    flush_consumer_offset_interval: int = key(5000, unit="ms", range=(1, None),
                                              doc="between writes of committed offsets")
    consumer_offset_max_entries: int = key(50_000, range=(1, None), rocketmq=False,
                                           doc="committed offsets kept (group, topic, queue); a new one beyond is "
                                               "refused. Also bounds the pull counters, the dead-letter counters and "
                                               "the transaction counters per producer group: a new one beyond is not "
                                               "counted")
    pop_state_max_entries: int = key(50_000, range=(1, None), rocketmq=False,
                                     doc="pop (gRPC receive) states kept (group, topic, queue); beyond, one with "
                                         "nothing in flight is dropped (re-read from its committed offset), then "
                                         "one whose deliveries are all overdue, else a receive that needs a new "
                                         "one is refused (`TOO_MANY_REQUESTS`)")
    client_channel_expired_ms: int = key(120_000, unit="ms", range=(1, None), rocketmq=False,
                                         doc="without a heartbeat before a client is dropped")
    max_held_pulls_per_connection: int = key(4096, range=(0, None), rocketmq=False,
                                             doc="held pulls of one connection (beyond: `SYSTEM_BUSY` at once)")
    max_held_pulls: int = key(65536, range=(0, None), rocketmq=False, doc="held pulls in all")
    enable_property_filter: bool = key(True, runtime=True,
                                       doc="serve SQL92 subscriptions, filtered at the broker by message "
                                           "properties; `false` refuses them (RocketMQ's default is `false`); "
                                           "see [filters](filters.md)")
    slave_read_enable: bool = key(False, doc="a slave serves pulls (consumers far behind, or the master gone)")
    slave_synchronize_interval: int = key(3000, unit="ms", range=(1, None), rocketmq=False,
                                          doc="between a slave's copies of its master's topics and offsets")
    # metrics (RocketMQ 5's keys)
    metrics_exporter_type: str = key("DISABLE", choices=("DISABLE", "PROM"),
                                     doc="`PROM`: serve Prometheus metrics ([below](#metrics))")
    metrics_prom_exporter_host: str = key("", shown="(brokerIP1)", doc="the address of the metrics endpoint")
    metrics_prom_exporter_port: int = key(5557, range=(0, 65535), doc="the port of the metrics endpoint")
    # transactions
    reject_transaction_message: bool = key(False, runtime=True, doc="refuse half (transactional) messages")
    recall_message_enable: bool = key(True, runtime=True,
                                      doc="RECALL_MESSAGE and gRPC `RecallMessage` cancel a scheduled timer message "
                                          "(RocketMQ's default: false)")
    transaction_time_out: int = key(6000, unit="ms", range=(0, None),
                                    doc="before a transaction's first check-back")
    transaction_check_max: int = key(15, range=(0, None), runtime=True,
                                     doc="check-backs before a transaction is discarded (counted up to 255: above "
                                         "255, checked for ever)")
    transaction_check_interval: int = key(30_000, unit="ms", range=(1, None), runtime=True,
                                          doc="between check passes")
    transaction_orphan_factor: int = key(DEFAULT_ORPHAN_FACTOR, range=(1, None), rocketmq=False,
                                         doc="a half still pending after `transactionTimeOut` × this, no producer "
                                             "of its group connected at its check, is discarded (checked before "
                                             "or not)")
    transaction_snapshot_interval: int = key(10_000, unit="ms", range=(1, None), rocketmq=False,
                                             doc="between snapshots of the transaction state table (a restart "
                                                 "replays only what follows)")
    # access control; accessKey/secretKey: the broker's own account, signing its registrations and HA handshakes
    acl_enable: bool = key(False, doc="check every request against the users and ACLs, and authenticate both ends "
                                      "of every HA connection; needs `accessKey`/`secretKey`; see "
                                      "[security](security.md)")
    acl_file: str = key("", shown="(none)", rocketmq=False,
                        doc="the path of `plain_acl.yml` (else `$ROCKETMQ_HOME/conf/plain_acl.yml`)")
    access_key: str = key("", shown="(none)", secret=True,
                          doc="the broker's own account (a Super user): to register with name servers that check "
                              "ACL and, as a slave, to authenticate to its master")
    secret_key: str = key("", shown="(none)", secret=True, doc="its secret")
    # TLS under RocketMQ's names (tls.server.mode, ...: dots read as underscores)
    tls_server_mode: str = key("disabled", choices=MODES,
                               doc="written `tls.server.mode`: TLS on the remoting, gRPC and HA ports")
    tls_server_cert_path: str = key("", shown="(none)",
                                    doc="written `tls.server.certPath`: the server certificate (PEM)")
    tls_server_key_path: str = key("", shown="(none)", doc="written `tls.server.keyPath`: its key (PEM)")
    tls_enable: bool = key(False, doc="written `tls.enable`: TLS for the broker's own calls to name servers, and a "
                                      "slave's to its master's HA port")
    tls_client_trust_cert_path: str = key("", shown="(none)",
                                          doc="written `tls.client.trustCertPath`: the CA bundle those calls trust")
    # controller mode (RocketMQ 5's keys; docs/ha.md, "Automatic failover")
    enable_controller_mode: bool = key(False, doc="the broker's role comes from the controller (automatic "
                                                  "failover; see [replication](ha.md))")
    controller_addr: str = key("", shown="(none)", doc="the controllers, `host:port;host:port`")
    broker_heartbeat_interval: int = key(1000, unit="ms", range=(1, None),
                                         doc="between heartbeats to the controller")
    controller_heart_beat_timeout_mills: int = key(6000, unit="ms", range=(1, None),
                                                   doc="without a master's heartbeat before the controller elects "
                                                       "another")
    broker_lease_mills: int = key(4000, unit="ms", range=(1, None), rocketmq=False,
                                  doc="a master acknowledges sends this long after the send time of its last "
                                      "heartbeat the controller confirmed")
    # the keys declared where they are used
    store: StoreConfig = section(StoreConfig, "Store")
    ha: HAConfig = section(HAConfig, "Replication")
    server_limits: ServerLimits = section(ServerLimits, "Remoting server (also `txmq namesrv -c`)")

    @property
    def broker_addr(self) -> str:
        return f"{self.broker_ip1}:{self.listen_port}"

    @property
    def namesrv_addrs(self) -> list[str]:
        """``namesrv_addr`` as the list of name servers it names (it may change at run time)."""
        return [a.strip() for a in self.namesrv_addr.split(";") if a.strip()]

    def tls_server(self) -> TlsServerConfig:
        return TlsServerConfig(self.tls_server_mode.lower(), self.tls_server_cert_path, self.tls_server_key_path)

    @cached_property
    def is_slave(self) -> bool:
        """Worked out once per ``broker_role`` (``_Role`` forgets it when the role is set)."""
        return self.broker_role.upper() == "SLAVE"

    @property
    def is_sync_master(self) -> bool:
        return self.broker_role.upper() == "SYNC_MASTER"

    def delay_levels_ms(self) -> list[int]:
        return delay_levels_ms(self.message_delay_level)

    def update(self, values: dict[str, Any]) -> None:
        """Set keys (camelCase or snake_case) from strings, each parsed and checked once. All or nothing: a refused
        value (an UPDATE_BROKER_CONFIG answered with an error, a bad broker.conf) leaves every key as it was."""
        unknown = set_keys(self, values)
        if unknown:
            log.warning("unknown broker config keys ignored: %s (docs/configuration.md lists the keys txmq reads)",
                        ", ".join(sorted(unknown)))


BrokerConfig.broker_role = _Role("ASYNC_MASTER")  # type: ignore[assignment]

# updateBrokerConfig may change these while the broker runs: each is read where it is used
RUNTIME_KEYS = tuple(k.name for k in declared_keys(BrokerConfig).values() if k.key.runtime)


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


def config_properties(config: BrokerConfig) -> dict[str, str]:
    """The config as broker.conf keys and values (GET_BROKER_CONFIG's body), the broker's credentials (keys
    declared ``secret``) left out: GET_BROKER_CONFIG once carried them, and with them any account could act as the
    cluster's admin."""
    return key_values(config)


def load_broker_conf(path: str | os.PathLike[str], config: BrokerConfig | None = None) -> BrokerConfig:
    config = config or BrokerConfig()
    config.update(dict(parse_properties(Path(path).read_text())))
    return config
