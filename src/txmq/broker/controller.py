"""One broker (RocketMQ's ``BrokerController``): builds its parts (the store, the managers, the processors by
request code, replication, the endpoints), wires them together, and starts and stops them in order. What the parts
do is theirs: the role and its changes (``role.py``), registration with the name servers (``registration.py``),
controller mode (``replicas_manager.py``), the reports (``status.py``). What the broker serves, reads and writes, is
its permission (``permission``): ``brokerPermission``, without write once the store lost durability."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

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
from txmq.broker.processor.recall import RecallMessageProcessor
from txmq.broker.processor.send import SendMessageProcessor
from txmq.broker.registration import NamesrvRegistration
from txmq.broker.replicas_manager import ReplicasManager
from txmq.broker.role import RoleManager
from txmq.broker.schedule import ScheduleMessageService
from txmq.broker.slave_synchronize import SlaveSynchronize
from txmq.broker.stats import SAMPLE_S, BrokerStats
from txmq.broker.status import broker_stats, ha_status
from txmq.broker.subscription_group_manager import SubscriptionGroupManager
from txmq.broker.tasks import BackgroundTasks
from txmq.broker.timer import TimerMessageStore
from txmq.broker.topic_config_manager import TopicConfigManager
from txmq.broker.transaction.check_service import TransactionalMessageCheckService
from txmq.broker.transaction.service import TransactionalMessageService
from txmq.ports import pick_free_port
from txmq.remoting.codes import RequestCode
from txmq.remoting.command import RemotingCommand
from txmq.remoting.registry import Processor, RequestDispatcher, RequestTable
from txmq.remoting.server import RemotingServer
from txmq.remoting.tls import client_context
from txmq.remoting.transport import RemotingClient, write_batch
from txmq.store import DefaultMessageStore
from txmq.store.ha import HAAuth, HAClient, HAConfig, HAPort, HAService
from txmq.topic import PermName

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
        self.store.answer_batch = write_batch  # a group's answers to one connection leave together, at once
        self.ha_service: HAService | None = None
        self.ha_client: HAClient | None = None
        self._ha_port: HAPort | None = None  # controller mode: bound at start, kept in every role
        self._ha_port_set = config.ha.listen_port != 0  # else listenPort + 1, which may be taken (_start_ha_service)
        ha_config = self.ha_config()
        self.slave_synchronize: SlaveSynchronize | None = None
        self.role = RoleManager(self)
        if config.is_slave:
            self.ha_client = self.new_ha_client(ha_config)
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
        self.timer_service = TimerMessageStore(self.store, config.store, self.root)
        self.transaction_service = TransactionalMessageService(
            self.store, transaction_timeout_ms=config.transaction_time_out,
            orphan_factor=config.transaction_orphan_factor, metrics_max_groups=config.consumer_offset_max_entries,
            file_reserved_time_h=config.store.file_reserved_time_hours,
            snapshot_path=self.root / "config" / "transactionState.snapshot")
        self.transaction_service.divert_timer = self.timer_service.divert_committed
        self.check_service = TransactionalMessageCheckService(
            self.transaction_service, check_max=config.transaction_check_max,
            check_interval_ms=config.transaction_check_interval)
        self.check_service.senders.append(RemotingCheckSender(self))

        # The rules of sends, pulls, pops, retries and dead letters, which every protocol's adapters use.
        self.core = BrokerCore(config, self.store, self.topic_config_manager, self.subscription_group_manager,
                               self.consumer_offset_manager, self.consumer_manager, self.stats_manager,
                               self.transaction_service, self.schedule_service, self.timer_service,
                               self.store_host)
        # Every request code the broker serves, declared once by its processor with how it is read and what it
        # needs (txmq.remoting.registry): the ACL authorizes the parsed request its handler then runs.
        self.request_table = RequestTable("txmq's broker")
        processors: list[Processor] = [SendMessageProcessor(self), PullMessageProcessor(self),
                                        ClientManageProcessor(self), AdminBrokerProcessor(self),
                                        EndTransactionProcessor(self), OpsProcessor(self),
                                        RecallMessageProcessor(self)]
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
        self.registration = NamesrvRegistration(config, self.namesrv_client, self.topic_config_manager.serialize,
                                                lambda: self.ha_addr, self.role.learn_master,
                                                self.topic_config_manager.get, lambda: self.core.permission,
                                                self._registered)
        self.core.set_permission(self.permission())
        self.tasks = BackgroundTasks()  # the broker's own, stopped at shutdown (a role's stop with the role)
        self.grpc: GrpcEndpoint | None = None  # the RocketMQ 5 endpoint, started with the broker
        self.metrics: PromExporter | None = None  # metricsExporterType=PROM
        self.rpc_latency: RpcLatency | None = None  # timed requests, with metrics only
        self.started = False

    @property
    def addr(self) -> str:
        return self.config.broker_addr

    @property
    def ha_addr(self) -> str:
        """Where slaves reach this broker's HA port: brokerIP2 (RocketMQ's HA address), else brokerIP1."""
        return f"{self.config.broker_ip2 or self.config.broker_ip1}:{self.config.ha.listen_port}"

    def ha_config(self) -> HAConfig:
        """A copy of the replication keys (``config.ha``) with this member's identity and connections filled in:
        each HA part keeps its own, as the identity changes with the role in controller mode."""
        c = self.config
        if c.ha.listen_port == 0:
            c.ha.listen_port = c.listen_port + 1
        return dataclasses.replace(
            c.ha, cluster_name=c.broker_cluster_name, broker_name=c.broker_name, broker_id=c.broker_id,
            listen_host=c.broker_ip1, sync_timeout_ms=c.store.sync_flush_timeout_ms, tls=c.tls_server(),
            tls_client=client_context(c.tls_client_trust_cert_path) if c.tls_enable else None,
            auth=HAAuth(c.access_key, c.secret_key, lambda ak: admin_secret(self.acl, ak)) if c.acl_enable else None)

    def new_ha_client(self, ha_config: HAConfig) -> HAClient:
        """In controller mode a session per check of the named master (the replicas manager checks it)."""
        return HAClient(self.store, ha_config, session_per_check=self.replicas_manager is not None)

    # --- what processors ask of the broker (the work is registration.py's and status.py's) --------------

    def schedule_register(self, topics: list[str] | None = None) -> None:
        self.registration.schedule(topics)

    async def register_all(self) -> None:
        await self.registration.register_all()

    async def register_topic(self, topic: str) -> None:
        await self.registration.register_topic(topic)

    def _registered(self, topics: list[str] | None) -> None:
        """A change of this broker's own topics or permission reached the name servers: the gRPC routes' cached
        answers from before it (a drained 4 when write came back) are asked again at the next route query."""
        if self.grpc is not None and self.grpc.service is not None:
            self.grpc.service.group_route.forget(topics)

    def permission(self) -> int:
        """The permission the broker serves and registers (RocketMQ's ``brokerPermission``): the configured one,
        without write once the store lost durability (a restart clears it; the configured value stays)."""
        permission = self.config.broker_permission
        if self.store.durability.lost:
            permission &= ~PermName.PERM_WRITE
        return permission

    def apply_permission(self) -> None:
        """Serve ``permission`` when it changed, and register it with the name servers at once, under a new topic
        table version (RocketMQ's ``updateBrokerConfig`` of ``brokerPermission``) so that they read it: producers
        route away from a broker that stopped writing at their next route poll, instead of being refused here."""
        permission = self.permission()
        if permission == self.core.permission:
            return
        self.core.set_permission(permission)
        level = logging.INFO if permission == PermName.READ_WRITE else logging.WARNING
        log.log(level, "broker %s now serves permission %s (brokerPermission %d%s); registering it with the name "
                "servers", self.config.broker_name, PermName.to_string(permission), self.config.broker_permission,
                f"; {self.store.durability.why}: no writes until a restart" if self.store.durability.lost else "")
        self.topic_config_manager.next_version()
        self.schedule_register()

    def _durability_lost(self, loop: asyncio.AbstractEventLoop) -> None:
        """From the thread whose fsync failed: the broker stops writing, on its loop."""
        with contextlib.suppress(RuntimeError):  # the loop closed: the broker stopped meanwhile
            loop.call_soon_threadsafe(self.apply_permission)

    def clean_unused_topics(self) -> list[str]:
        """Drop the consume queues of the topics the topic table does not hold (``clean_unused_topic``): a deleted
        topic's, left by a stop before its deletion dropped them or refilled by a delayed, timer or transactional
        message delivered to it since. Only when an operator asks (CLEAN_UNUSED_TOPIC), as RocketMQ: a table can
        lag the cluster's (a slave's copy of its master's, and that copy on a slave made master by hand), and a
        clean by that table would drop the queues of a topic whose messages are real."""
        dropped = self.store.clean_unused_topic(self.topic_config_manager.table.keys())
        log.info("consume queues of %d topic%s no topic config holds dropped (CLEAN_UNUSED_TOPIC)%s", len(dropped),
                 "" if len(dropped) == 1 else "s", f": {', '.join(dropped[:10])}" if dropped else "")
        return dropped

    def ha_status(self) -> dict[str, Any]:
        return ha_status(self)

    def stats(self) -> dict[str, Any]:
        return broker_stats(self)

    # --- start and stop -------------------------------------------------------------------------------

    async def start(self) -> None:
        self.store.durability.listeners.append(functools.partial(self._durability_lost, asyncio.get_running_loop()))
        await self.store.start()
        self.transaction_service.recover()
        if self.replicas_manager is not None:  # the role may change: follow only while a slave
            self.store.add_dispatcher(self.role.follow_transactions)
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
        self.role.start_tasks()
        self.tasks.every(self.config.flush_consumer_offset_interval / 1000, self._persist, "persist")
        self.tasks.every(10.0, self._scan_clients, "client scan")
        self.stats_manager.sample()
        self.tasks.every(SAMPLE_S, self.stats_manager.sample, "stats sampling")
        self.tasks.every(self.config.transaction_snapshot_interval / 1000, self._snapshot_transactions,
                         "transaction snapshot")
        self.apply_permission()  # durability lost while the store started
        if self.config.namesrv_addr:
            await self.registration.register_all(at_start=True)
            self.tasks.spawn(self.registration.run(), "namesrv registration")
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

        self._ha_port = HAPort(accept, self.ha_config())
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

    async def shutdown(self) -> None:
        if self.replicas_manager is not None:
            await self.replicas_manager.shutdown()
        await self.role.stop_tasks()
        if self.config.namesrv_addr:
            await self.registration.unregister_all()
        await self.tasks.stop()
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
        for journal in (self.topic_config_manager.journal, self.subscription_group_manager.journal):
            # What clients created is written before the store closes; a deletion's queues and offsets go with it
            # (once durable, on this loop) before the offsets are saved.
            await asyncio.to_thread(journal.close)
        for save in (self._persist, self.transaction_service.snapshot):
            try:
                save()
            except OSError:  # a full disk: what was last saved stands (offsets replay, the log is the truth)
                log.exception("saving state at shutdown failed")
        self.timer_service.close()
        await self.store.shutdown()
        if self.acl is not None:
            self.acl.store.close()
        self.started = False
        log.info("broker %s stopped", self.config.broker_name)

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
