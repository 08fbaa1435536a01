"""One broker: the store, the managers, the processors by request code, and the periodic services
(RocketMQ's ``BrokerController``)."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import socket
from collections.abc import Awaitable, Callable, Coroutine
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

from txmq.acl.config import AclConfigError
from txmq.acl.processor import AuthProcessor
from txmq.acl.setup import admin_secret, broker_rpc_hook, broker_validator
from txmq.broker.client_manager import ConsumerGroupInfo, ConsumerManager, ProducerManager
from txmq.broker.config import BrokerConfig, store_address
from txmq.broker.consumer_offset_manager import ConsumerOffsetManager
from txmq.broker.core.services import BrokerCore
from txmq.broker.processor.admin import AdminBrokerProcessor
from txmq.broker.processor.client_manage import ClientManageProcessor
from txmq.broker.processor.end_transaction import EndTransactionProcessor, RemotingCheckSender
from txmq.broker.processor.ops import OpsProcessor
from txmq.broker.processor.pull import PullMessageProcessor
from txmq.broker.processor.send import SendMessageProcessor
from txmq.broker.schedule import ScheduleMessageService
from txmq.broker.slave_synchronize import SlaveSynchronize
from txmq.broker.stats import SAMPLE_S, BrokerStats
from txmq.broker.subscription_group_manager import SubscriptionGroupManager
from txmq.broker.topic_config_manager import TopicConfigManager
from txmq.broker.transaction.check_service import TransactionalMessageCheckService
from txmq.broker.transaction.service import TransactionalMessageService
from txmq.controller.replicas_manager import ReplicasManager
from txmq.errors import ClientError
from txmq.remoting.codes import RequestCode, ResponseCode
from txmq.remoting.command import RemotingCommand
from txmq.remoting.registry import Processor, RequestDispatcher, RequestTable
from txmq.remoting.server import RemotingServer
from txmq.remoting.tls import client_context
from txmq.remoting.transport import RemotingClient
from txmq.store import DefaultMessageStore
from txmq.store.ha import HAAuth, HAClient, HAConfig, HAPort, HAService

if TYPE_CHECKING:
    from txmq.grpc.server import GrpcEndpoint
    from txmq.metrics import PromExporter
    from txmq.metrics.rpc import RpcLatency

log = logging.getLogger("txmq.broker")


def _check_role(config: BrokerConfig) -> None:
    """RocketMQ's BrokerStartup rules: a master is broker id 0, a slave has an id above 0; and txmq's: a slave under
    aclEnable has the credentials its master authenticates it by (docs/ha.md, "Authentication")."""
    role = config.broker_role.upper()
    if role not in ("ASYNC_MASTER", "SYNC_MASTER", "SLAVE"):
        raise ValueError(f"brokerRole {config.broker_role!r}: expected ASYNC_MASTER, SYNC_MASTER or SLAVE")
    if role == "SLAVE" and config.broker_id <= 0:
        raise ValueError(f"brokerRole SLAVE needs brokerId > 0 (got {config.broker_id})")
    if role == "SLAVE" and config.acl_enable and not (config.access_key and config.secret_key):
        raise ValueError("aclEnable=true: a slave needs accessKey and secretKey (an admin account of its master's "
                         "ACL file) to replicate")
    if role != "SLAVE":
        config.broker_id = 0


def pick_free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


class BrokerController:
    def __init__(self, config: BrokerConfig) -> None:
        store_ip = store_address(config.broker_ip1)  # refused at start, not at every send
        if config.listen_port == 0:
            config.listen_port = pick_free_port(config.broker_ip1)
        self.config = config
        # Controller mode: the controller gives the role; until then a slave without a master.
        self.replicas_manager = ReplicasManager(self) if config.enable_controller_mode else None
        _check_role(config)
        self.root = Path(config.store.store_path_root_dir)
        self.store_host = (store_ip, config.listen_port)
        config.store.store_host = self.store_host
        self.store = DefaultMessageStore(config.store)  # the same object: a key changed at run time reaches it
        self.ha_service: HAService | None = None
        self.ha_client: HAClient | None = None
        self._ha_port: HAPort | None = None  # controller mode: bound at start, kept in every role
        ha_config = self._ha_config()
        self.slave_synchronize: SlaveSynchronize | None = None
        if config.is_slave:
            self.ha_client = self._new_ha_client(ha_config)
            self.slave_synchronize = SlaveSynchronize(self)
        else:
            self.ha_service = HAService(self.store, ha_config)
            if config.is_sync_master:
                self.store.replicate = self.ha_service.replicate
        if self.replicas_manager is not None:
            self.store.replicate = self.replicas_manager.replicate
            # Consumers read only what every SyncStateSet member has (docs/ha.md, "The confirm offset"): nothing
            # until a master's HA stream, or this replica's own SyncStateSet as master, says how far that is.
            self.store.set_confirm_offset(0)
        levels = config.delay_levels_ms()
        self.topic_config_manager = TopicConfigManager(self.root, auto_create=config.auto_create_topic_enable,
                                                       default_queue_nums=config.default_topic_queue_nums,
                                                       delay_levels=len(levels))
        self.topic_config_manager.on_change = self.schedule_register
        self.consumer_offset_manager = ConsumerOffsetManager(self.root, config.consumer_offset_max_entries)
        self.subscription_group_manager = SubscriptionGroupManager(self.root)
        self.stats_manager = BrokerStats(config.consumer_offset_max_entries)
        self.producer_manager = ProducerManager()
        self.consumer_manager = ConsumerManager(self._notify_consumer_ids_changed)
        self.schedule_service = ScheduleMessageService(self.store, levels, self.root)
        self.transaction_service = TransactionalMessageService(
            self.store, transaction_timeout_ms=config.transaction_time_out,
            orphan_factor=config.transaction_orphan_factor, metrics_max_groups=config.consumer_offset_max_entries,
            file_reserved_time_h=config.store.file_reserved_time_hours,
            snapshot_path=self.root / "config" / "transactionState.snapshot")
        self.check_service = TransactionalMessageCheckService(
            self.transaction_service, check_max=config.transaction_check_max,
            check_interval_ms=config.transaction_check_interval)
        self.check_service.senders.append(RemotingCheckSender(self))

        # The rules of sends, pulls, pops, retries and dead letters, which every protocol's adapters use.
        self.core = BrokerCore(config, self.store, self.topic_config_manager, self.subscription_group_manager,
                               self.consumer_offset_manager, self.consumer_manager, self.stats_manager,
                               self.transaction_service, self.schedule_service, self.store_host)
        # Every request code the broker serves, declared once by its processor with how it is read and what it
        # needs (txmq.remoting.registry): the ACL authorizes the parsed request its handler then runs.
        self.request_table = RequestTable("txmq's broker")
        processors: list[Processor] = [SendMessageProcessor(self), PullMessageProcessor(self),
                                        ClientManageProcessor(self), AdminBrokerProcessor(self),
                                        EndTransactionProcessor(self), OpsProcessor(self)]
        if self.replicas_manager is not None:
            processors.append(self.replicas_manager)
        for processor in processors:
            self.request_table.register(processor)

        self.acl = broker_validator(config)
        self.request_table.register(AuthProcessor(self.acl.store if self.acl is not None else None, "broker"))
        self.dispatcher = RequestDispatcher(self.request_table, self.acl)
        self.server = RemotingServer(self.dispatcher, host=config.broker_ip1, port=config.listen_port,
                                     tls=config.tls_server(), limits=config.server_limits)
        self.namesrv_client = RemotingClient(rpc_hook=broker_rpc_hook(config), ssl_context=client_context(
            config.tls_client_trust_cert_path) if config.tls_enable else None)
        self._tasks: list[asyncio.Task[None]] = []
        self._role_tasks: list[asyncio.Task[None]] = []  # a slave's metadata copy, or a master's check-backs
        self._register_now = asyncio.Event()
        self._registered: dict[str, bool] = {}
        self.grpc: GrpcEndpoint | None = None  # the RocketMQ 5 endpoint, started with the broker
        self.metrics: PromExporter | None = None  # metricsExporterType=PROM
        self.rpc_latency: RpcLatency | None = None  # timed requests, with metrics only
        self.started = False

    @property
    def addr(self) -> str:
        return self.config.broker_addr

    def _ha_config(self) -> HAConfig:
        """A copy of the replication keys (``config.ha``) with this member's identity and connections filled in:
        each HA part keeps its own, as the identity changes with the role in controller mode."""
        c = self.config
        self._ha_port_set = c.ha.listen_port != 0
        if c.ha.listen_port == 0:
            c.ha.listen_port = c.listen_port + 1
        return dataclasses.replace(
            c.ha, cluster_name=c.broker_cluster_name, broker_name=c.broker_name, broker_id=c.broker_id,
            listen_host=c.broker_ip1, sync_timeout_ms=c.store.sync_flush_timeout_ms, tls=c.tls_server(),
            tls_client=client_context(c.tls_client_trust_cert_path) if c.tls_enable else None,
            auth=HAAuth(c.access_key, c.secret_key, lambda ak: admin_secret(self.acl, ak)) if c.acl_enable else None)

    def _new_ha_client(self, ha_config: HAConfig) -> HAClient:
        """In controller mode a session per check of the named master (the replicas manager checks it)."""
        return HAClient(self.store, ha_config, session_per_check=self.replicas_manager is not None)

    @property
    def ha_addr(self) -> str:
        """Where slaves reach this broker's HA port: brokerIP2 (RocketMQ's HA address), else brokerIP1."""
        return f"{self.config.broker_ip2 or self.config.broker_ip1}:{self.config.ha.listen_port}"

    # --- lifecycle ------------------------------------------------------------------------------------

    async def start(self) -> None:
        await self.store.start()
        self.transaction_service.recover()
        if self.replicas_manager is not None:  # the role may change: follow only while a slave
            self.store.add_dispatcher(self._follow_transactions)
            self.store.add_truncate_listener(self.transaction_service.rebuild)
        elif self.config.is_slave:  # from here on, replicated records keep the transaction table current
            self.store.add_dispatcher(self.transaction_service.follow)
            self.store.add_truncate_listener(self.transaction_service.rebuild)
        if self.config.metrics_exporter_type.upper() == "PROM":
            from txmq.metrics.rpc import RpcLatency

            self.rpc_latency = RpcLatency()
            # only requests that passed the ACL and have a declaration are timed: no series for made-up codes
            self.dispatcher.execute = self.rpc_latency.wrap(self.dispatcher.execute)
        await self.server.start()
        await self._start_grpc()
        if self.replicas_manager is not None:
            await self._bind_ha_port()
        if self.ha_service is not None:
            await self._start_ha_service(self.ha_service)
        await self._start_metrics()
        self.started = True
        if self.ha_client is not None:
            self.ha_client.start()
        self._start_role_tasks()
        self._spawn(self._every(self.config.flush_consumer_offset_interval / 1000, self._persist), "persist")
        self._spawn(self._every(10.0, self._scan_clients), "client scan")
        self.stats_manager.sample()
        self._spawn(self._every(SAMPLE_S, self.stats_manager.sample), "stats sampling")
        self._spawn(self._every(self.config.transaction_snapshot_interval / 1000, self._snapshot_transactions),
                    "transaction snapshot")
        if self.config.namesrv_addr:
            await self.register_all(at_start=True)
            self._spawn(self._register_loop(), "namesrv registration")
        if self.replicas_manager is not None:
            self.replicas_manager.start()
        log.info("broker %s id %d listening on %s (%s, %s, HA %s, store %s, %s)", self.config.broker_name,
                 self.config.broker_id, self.addr, self.config.broker_role, self.config.store.flush_disk_type.value,
                 self.ha_addr, self.root, f"ACL on: {self.acl.store.describe()}" if self.acl else
                 "ACL off: any client reaching this address may do anything; aclEnable=true requires accounts")

    async def _start_grpc(self) -> None:
        """Serve ``apache.rocketmq.v2.MessagingService`` on ``grpc_port`` (0: a free port, < 0: off). The default
        port being taken (several brokers on one machine) leaves this broker without gRPC, with a warning."""
        port = self.config.grpc_port
        if port < 0:
            return
        from txmq.grpc.server import GrpcEndpoint

        endpoint = GrpcEndpoint(self, self.config.broker_ip1, port)
        try:
            await endpoint.start()
        except OSError as exc:
            if port != BrokerConfig.grpc_port:
                raise
            log.warning("gRPC endpoint not started: %s (set grpcPort to serve it)", exc)
            return
        self.grpc = endpoint

    async def _start_ha_service(self, ha: HAService) -> None:
        """Listen for slaves. The default HA port (listenPort + 1) being taken leaves an ASYNC_MASTER without
        slaves, with a warning; a SYNC_MASTER, or a port that was set, fails the start."""
        try:
            await ha.start()
        except OSError as exc:
            if self._ha_port_set or self.config.is_sync_master:
                raise
            log.warning("HA service not started: %s (set haListenPort to accept slaves)", exc)
            self.ha_service = None

    async def _bind_ha_port(self) -> None:
        """Controller mode: bind the HA port once, for the process's life (RocketMQ's HA service also listens in
        every role). Bound only on becoming master, the port could be taken meanwhile by any process's
        connection or listener (a CI campaign's proxy got it: the elected master could not serve its slaves).
        While this replica is not master a connection is closed at once; its slave tries again."""
        async def accept(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            if self.ha_service is not None:
                await self.ha_service.accept(reader, writer)

        self._ha_port = HAPort(accept, self._ha_config())
        await self._ha_port.start()
        log.info("HA port %s:%d bound (serves slaves while this replica is master)", self.config.broker_ip1,
                 self.config.ha.listen_port)

    async def _start_metrics(self) -> None:
        kind = self.config.metrics_exporter_type.upper()
        if kind == "DISABLE":
            return
        if kind != "PROM":
            raise ValueError(f"metricsExporterType={kind}: txmq exports DISABLE or PROM")
        from txmq.metrics import BrokerCollector, PromExporter

        self.metrics = PromExporter(BrokerCollector(self), self.config.metrics_prom_exporter_host
                                    or self.config.broker_ip1, self.config.metrics_prom_exporter_port)
        await self.metrics.start()

    def _spawn(self, coro: Coroutine[Any, Any, None], name: str) -> None:
        self._tasks.append(asyncio.create_task(coro, name=name))

    def _start_role_tasks(self) -> None:
        self.store.replica = self.config.is_slave
        if self.config.is_slave:  # a slave writes nothing of its own: no check-backs, no delayed deliveries
            if self.slave_synchronize is not None:
                coro = self._every(self.config.slave_synchronize_interval / 1000, self.slave_synchronize.sync_all)
                self._role_tasks.append(asyncio.create_task(coro, name="slave synchronize"))
        else:
            self._role_tasks += [asyncio.create_task(self.check_service.run(), name="transaction check"),
                                 asyncio.create_task(self.schedule_service.run(), name="schedule")]

    async def _stop_role_tasks(self) -> None:
        for task in self._role_tasks:
            task.cancel()
        for task in self._role_tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._role_tasks.clear()

    def _follow_transactions(self, req: Any) -> None:
        if self.config.is_slave:
            self.transaction_service.follow(req)

    # --- role changes (controller mode, driven by the ReplicasManager) ---------------------------------------

    async def change_to_master(self, role: str) -> None:
        """A slave made master: stop copying, accept slaves, take over the check-backs from the followed
        transaction table, and register with the name servers as broker id 0 (every client's routes move)."""
        await self._stop_role_tasks()
        if self.ha_client is not None:
            await self.ha_client.shutdown()
            self.ha_client = None
        self.config.broker_role, self.config.broker_id = role, 0
        self.store.replica = False
        if self.ha_service is None:  # served from the HA port bound at start (_bind_ha_port)
            self.ha_service = HAService(self.store, self._ha_config())
        self.transaction_service.take_over()
        self._start_role_tasks()
        self.check_service.wake()
        await self.register_all()

    async def change_to_slave(self) -> None:
        """A master steps down (its lease ran out, or another was elected): no more acknowledgements — waiting
        SYNC_MASTER puts are answered NOT_ACKNOWLEDGED (``ReplicasManager.replicate``) — no check-backs, no HA
        service (its port stays bound, closing connections); a slave without a master until ``follow_master``."""
        assert self.replicas_manager is not None
        self.config.broker_role, self.config.broker_id = "SLAVE", self.replicas_manager.replica_id
        self.store.replica = True
        await self._stop_role_tasks()
        if self.ha_service is not None:
            await self.ha_service.shutdown()
            self.ha_service = None
        if self.ha_client is None:
            self.ha_client = self._new_ha_client(self._ha_config())
        self.ha_client.master_address = ""
        if self.slave_synchronize is None:
            self.slave_synchronize = SlaveSynchronize(self)
        self.slave_synchronize.master_addr = ""  # copies nothing until follow_master
        self._start_role_tasks()
        if self.config.namesrv_addr:
            await self.register_all()

    def follow_master(self, master_link: str, master_ha_addr: str) -> None:
        """Copy the master's log (this log already truncated where the two agree) from ``master_ha_addr``, and
        its metadata from ``master_link`` (``replicas_manager.slave_link``)."""
        assert self.ha_client is not None and self.slave_synchronize is not None
        self.config.ha.master_address = master_ha_addr  # the name server's answers must not override it
        self.ha_client.master_address = master_ha_addr
        self.ha_client.start()
        self.slave_synchronize.master_addr = master_link
        self._spawn(self.slave_synchronize.sync_all(), "slave synchronize now")

    async def shutdown(self) -> None:
        if self.replicas_manager is not None:
            await self.replicas_manager.shutdown()
        await self._stop_role_tasks()
        if self.config.namesrv_addr:
            await self._unregister_all()
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks.clear()
        if self.ha_client is not None:
            await self.ha_client.shutdown()
        if self._ha_port is not None:
            self._ha_port.close()
        if self.ha_service is not None:
            await self.ha_service.shutdown()
        if self.grpc is not None:
            await self.grpc.stop()
            self.grpc = None
        if self.metrics is not None:
            await self.metrics.close()
            self.metrics = None
        await self.server.close()
        await self.namesrv_client.close()
        for save in (self._persist, self.transaction_service.snapshot):
            try:
                save()
            except OSError:  # a full disk: what was last saved stands (offsets replay, the log is the truth)
                log.exception("saving state at shutdown failed")
        await self.store.shutdown()
        if self.acl is not None:
            self.acl.store.close()
        self.started = False
        log.info("broker %s stopped", self.config.broker_name)

    async def _every(self, period_s: float, fn: Callable[[], Awaitable[None] | None]) -> None:
        while True:
            await asyncio.sleep(period_s)
            try:
                pending = fn()
                if pending is not None:
                    await pending
            except Exception:
                log.exception("periodic %s failed", getattr(fn, "__name__", fn))

    def _snapshot_transactions(self) -> None:
        if not self.check_service.in_pass:
            self.transaction_service.snapshot()

    def _persist(self) -> None:
        self.consumer_offset_manager.persist()
        self.schedule_service.persist()

    def _scan_clients(self) -> None:
        expired = self.config.client_channel_expired_ms / 1000
        self.producer_manager.scan_expired(expired)
        self.consumer_manager.scan_expired(expired)
        if self.grpc is not None:
            self.grpc.scan_expired(expired)

    # --- requests -------------------------------------------------------------------------------------

    def _notify_consumer_ids_changed(self, group: ConsumerGroupInfo) -> None:
        for info in group.channels.values():
            if not info.conn.closed:
                info.conn.send(RemotingCommand.request(RequestCode.NOTIFY_CONSUMER_IDS_CHANGED,
                                                       {"consumerGroup": group.group}, oneway=True))

    # --- name servers ---------------------------------------------------------------------------------

    def schedule_register(self) -> None:
        """Tell the name servers about a topic change now rather than at the next period."""
        self._register_now.set()

    async def _register_loop(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._register_now.wait(), self.config.register_name_server_period / 1000)
            self._register_now.clear()
            await self.register_all()

    def _namesrv_addrs(self) -> list[str]:
        return [a.strip() for a in self.config.namesrv_addr.split(";") if a.strip()]

    async def register_all(self, at_start: bool = False) -> None:
        """Register with every name server. ``at_start``: a name server refusing the broker's credentials
        (NO_PERMISSION) stops the start with ``AclConfigError``, rather than a broker serving unrouted; one that
        cannot be reached is tried again by the registration loop."""
        body = orjson.dumps({"topicConfigSerializeWrapper": self.topic_config_manager.serialize(),
                             "filterServerList": []})
        ext = {"brokerAddr": self.addr, "brokerName": self.config.broker_name,
               "clusterName": self.config.broker_cluster_name, "brokerId": str(self.config.broker_id),
               "haServerAddr": self.ha_addr, "compressed": "false"}
        for addr in self._namesrv_addrs():
            try:
                resp = await self.namesrv_client.invoke(addr, RemotingCommand.request(RequestCode.REGISTER_BROKER,
                                                                                    ext, body=body), 3.0)
                ok = resp.code == ResponseCode.SUCCESS
                if at_start and resp.code == ResponseCode.NO_PERMISSION:
                    raise AclConfigError(
                        f"namesrv {addr} refused the registration ({resp.remark}): set accessKey/secretKey in "
                        f"broker.conf to an account that name server accepts for REGISTER_BROKER (admin: true in "
                        f"its plain_acl.yml, or a Super user)" if self.config.access_key else
                        f"namesrv {addr} refused the registration ({resp.remark}): it has ACL on, and this broker "
                        f"signs with no account: set accessKey/secretKey in broker.conf")
                if not ok and self._registered.get(addr, True):  # e.g. NO_PERMISSION: accessKey/secretKey
                    log.warning("namesrv %s refused the registration: code %d %s", addr, resp.code, resp.remark)
                if ok and self.ha_client is not None and self.slave_synchronize is not None \
                        and self.replicas_manager is None:  # in controller mode the controller names the master
                    self._learn_master(resp.ext_fields)
            except (ClientError, OSError) as exc:
                ok = False
                if self._registered.get(addr, True):
                    log.warning("register to namesrv %s failed: %s", addr, exc)
            if ok and not self._registered.get(addr):
                log.info("registered to namesrv %s", addr)
            self._registered[addr] = ok

    def _learn_master(self, answer: dict[str, str]) -> None:
        """RocketMQ: the name server answers a slave with its master's address and HA address."""
        assert self.ha_client is not None and self.slave_synchronize is not None
        master = answer.get("masterAddr", "")
        if master and master != self.slave_synchronize.master_addr:
            self.slave_synchronize.master_addr = master
            self._spawn(self.slave_synchronize.sync_all(), "slave synchronize now")
        if not self.config.ha.master_address:
            self.ha_client.set_master_address(answer.get("haServerAddr", ""))

    async def _unregister_all(self) -> None:
        ext = {"brokerAddr": self.addr, "brokerName": self.config.broker_name,
               "clusterName": self.config.broker_cluster_name, "brokerId": str(self.config.broker_id)}
        for addr in self._namesrv_addrs():
            with contextlib.suppress(ClientError, OSError):
                await self.namesrv_client.invoke(addr, RemotingCommand.request(RequestCode.UNREGISTER_BROKER, ext), 3.0)

    # --- stats ----------------------------------------------------------------------------------------

    def ha_status(self) -> dict[str, Any]:
        """RocketMQ's HARuntimeInfo: a master's slaves with their acknowledged offsets and lag, or a slave's
        view of its master (``txmq ha status``)."""
        c = self.config
        out: dict[str, Any] = {"brokerName": c.broker_name, "brokerId": c.broker_id, "role": c.broker_role,
                               "addr": self.addr, "haAddr": self.ha_addr, "maxOffset": self.store.max_phy_offset}
        if self.ha_service is not None:
            slaves = [dataclasses.asdict(s) for s in self.ha_service.status()]
            out["slaves"] = slaves
            out["inSyncSlaveNums"] = sum(1 for s in slaves if s["in_sync"])
        if self.ha_client is not None:
            out["master"] = self.ha_client.status()
        if self.replicas_manager is not None:
            out["controller"] = self.replicas_manager.status()
        return out

    def stats(self) -> dict[str, Any]:
        store = self.store
        topics = {}
        for name, cfg in sorted(self.topic_config_manager.table.items()):
            queues = {q: {"min": store.get_min_offset_in_queue(name, q), "max": store.get_max_offset_in_queue(name, q)}
                      for q in range(cfg.write_queue_nums)}
            topics[name] = {"perm": cfg.perm, "queues": queues,
                            "messages": sum(v["max"] - v["min"] for v in queues.values())}
        groups = {}
        for key, offsets in self.consumer_offset_manager.table.items():
            topic, group = key.split("@", 1)
            lag = sum(max(0, store.get_max_offset_in_queue(topic, q) - o) for q, o in offsets.items())
            groups[key] = {"topic": topic, "group": group, "lag": lag, "offsets": offsets}
        tx = self.transaction_service
        m = tx.metrics
        return {
            "broker": {"name": self.config.broker_name, "addr": self.addr,
                       "flushDiskType": self.config.store.flush_disk_type.value},
            "topics": topics,
            "consumerGroups": groups,
            "transactions": {
                "pendingPerTopic": dict(tx.table.pending_per_topic), "pending": len(tx.table),
                "discarded": len(tx.table.discarded), "commits": m.commits, "rollbacks": m.rollbacks,
                "checks": m.checks, "discards": m.discards, "duplicates": m.duplicates, "conflicts": m.conflicts,
                "resumes": m.resumes, "orphans": m.orphans, "commitLatencyMs": m.latency_percentiles(),
            },
            "store": store.runtime_info(),
            "rates": {"putTps": self.stats_manager.window("BROKER_PUT_NUMS", "", 60)[1],
                      "getTps": self.stats_manager.window("BROKER_GET_NUMS", "", 60)[1]},
            "remoting": {"connections": len(self.server.connections), "bufferedBytes": self.server.buffered_bytes,
                         "heldPulls": self.core.pulls.hold_service.held},
        }
