"""The broker's role: what runs in one role only, and the changes of role (RocketMQ's
``changeSpecialServiceStatus`` and the changes its ``ReplicasManager`` drives in controller mode).

A master accepts slaves, checks back transactions and delivers delayed messages. A slave writes nothing of its own:
it copies its master's log (``HAClient``) and metadata (``SlaveSynchronize``), and its transaction table follows
the replicated half and op records. Without controller mode the role is fixed by broker.conf, and a slave learns
its master from the name servers' answers; in it, the controller names the master (``replicas_manager.py``)."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from txmq.broker.slave_synchronize import SlaveSynchronize
from txmq.broker.tasks import BackgroundTasks
from txmq.store.ha import HAService

if TYPE_CHECKING:
    from txmq.broker.controller import BrokerController

log = logging.getLogger("txmq.broker")


class RoleManager:
    def __init__(self, broker: BrokerController) -> None:
        self.broker = broker
        self._tasks = BackgroundTasks()  # a slave's metadata copy, or a master's check-backs and delayed deliveries

    def start_tasks(self) -> None:
        b = self.broker
        b.store.replica = b.config.is_slave
        # timers are indexed in every role (a slave's from the replicated log), delivered by a master only
        self._tasks.spawn(b.timer_service.run(deliver=not b.config.is_slave), "timer")
        if b.config.is_slave:  # a slave writes nothing of its own: no check-backs, no delayed deliveries
            if b.slave_synchronize is not None:
                self._tasks.every(b.config.slave_synchronize_interval / 1000, b.slave_synchronize.sync_all,
                                  "slave synchronize")
        else:
            self._tasks.spawn(b.check_service.run(), "transaction check")
            self._tasks.spawn(b.schedule_service.run(), "schedule")

    async def stop_tasks(self) -> None:
        await self._tasks.stop()

    def follow_transactions(self, req: Any) -> None:
        """The store's dispatcher in controller mode: the transaction table follows the log only while a slave."""
        if self.broker.config.is_slave:
            self.broker.transaction_service.follow(req)

    async def change_to_master(self, role: str) -> None:
        """A slave made master: stop copying, accept slaves, take over the check-backs from the followed
        transaction table, and register with the name servers as broker id 0 (every client's routes move)."""
        b = self.broker
        await self.stop_tasks()
        if b.ha_client is not None:
            await b.ha_client.shutdown()
            b.ha_client = None
        b.config.broker_role, b.config.broker_id = role, 0
        b.store.replica = False
        if b.ha_service is None:  # served from the HA port bound at start (BrokerController._bind_ha_port)
            b.ha_service = HAService(b.store, b.ha_config())
        b.transaction_service.take_over()
        self.start_tasks()
        b.check_service.wake()
        await b.register_all()

    async def change_to_slave(self) -> None:
        """A master steps down (its lease ran out, or another was elected): no more acknowledgements — waiting
        SYNC_MASTER puts are answered NOT_ACKNOWLEDGED (``ReplicasManager.replicate``) — no check-backs, no HA
        service (its port stays bound, closing connections); a slave without a master until ``follow_master``."""
        b = self.broker
        assert b.replicas_manager is not None
        b.config.broker_role, b.config.broker_id = "SLAVE", b.replicas_manager.replica_id
        b.store.replica = True
        await self.stop_tasks()
        if b.ha_service is not None:
            await b.ha_service.shutdown()
            b.ha_service = None
        if b.ha_client is None:
            b.ha_client = b.new_ha_client(b.ha_config())
        b.ha_client.master_address = ""
        if b.slave_synchronize is None:
            b.slave_synchronize = SlaveSynchronize(b)
        b.slave_synchronize.master_addr = ""  # copies nothing until follow_master
        self.start_tasks()
        if b.config.namesrv_addr:
            await b.register_all()

    def follow_master(self, master_link: str, master_ha_addr: str) -> None:
        """Copy the master's log (this log already truncated where the two agree) from ``master_ha_addr``, and
        its metadata from ``master_link`` (``replicas_manager.slave_link``)."""
        b = self.broker
        assert b.ha_client is not None and b.slave_synchronize is not None
        b.config.ha.master_address = master_ha_addr  # the name server's answers must not override it
        b.ha_client.master_address = master_ha_addr
        b.ha_client.start()
        b.slave_synchronize.master_addr = master_link
        b.tasks.spawn(b.slave_synchronize.sync_all(), "slave synchronize now")

    def learn_master(self, answer: dict[str, str]) -> None:
        """RocketMQ: the name server answers a slave with its master's address and HA address (outside controller
        mode: in it, the controller names the master)."""
        b = self.broker
        if b.ha_client is None or b.slave_synchronize is None or b.replicas_manager is not None:
            return
        master = answer.get("masterAddr", "")
        if master and master != b.slave_synchronize.master_addr:
            b.slave_synchronize.master_addr = master
            b.tasks.spawn(b.slave_synchronize.sync_all(), "slave synchronize now")
        if not b.config.ha.master_address:
            b.ha_client.set_master_address(answer.get("haServerAddr", ""))

