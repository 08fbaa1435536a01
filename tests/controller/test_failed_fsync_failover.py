"""A master whose disk fails an fsync, in controller mode: real etcd, a real controller and two replicas
(SYNC_MASTER, SYNC_FLUSH) over real sockets, the replicas in this process so that one store's commit-log fsync
can be made to fail (EIO, as ``test_durability_lost``). The master steps down at once and its heartbeats tell
the controller it left: the controller elects the slave of its SyncStateSet at once, which takes sends and holds
every send the old master acknowledged; the old master, restarted, rejoins as a slave of the new one and copies its
log."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import time
from collections.abc import AsyncIterator, Callable, Coroutine
from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.broker.test_journal_off_loop import _send
from tests.store.test_store_fsync_failure import fail_once
from txmq.broker.config import BrokerConfig
from txmq.broker.controller import BrokerController
from txmq.conf import set_keys
from txmq.controller.dcs import EtcdDCS
from txmq.controller.etcd_launch import EtcdProcess
from txmq.controller.replicas_info import NO_MASTER, GroupState
from txmq.controller.server import ControllerManager
from txmq.launch import free_port
from txmq.message import decode_message
from txmq.remoting.codes import RequestCode, ResponseCode
from txmq.remoting.command import RemotingCommand
from txmq.remoting.transport import RemotingClient
from txmq.topic import TopicConfig

pytestmark = pytest.mark.slow

TOPIC = "Failover"
TIMEOUT_MS = 2000  # controllerHeartBeatTimeoutMills: the old master's silence after which the slave is elected
LONG_TIMEOUT_MS = 60_000  # one no election may wait for


def _config(root: Path, rid: int, controller: str, timeout_ms: int = TIMEOUT_MS) -> BrokerConfig:
    config = BrokerConfig(listen_port=free_port(), grpc_port=-1)
    set_keys(config, {
        "brokerName": "broker-f", "brokerId": rid, "brokerRole": "SYNC_MASTER", "flushDiskType": "SYNC_FLUSH",
        "enableControllerMode": "true", "controllerAddr": controller, "haListenPort": free_port(),
        "brokerHeartbeatInterval": 300, "brokerLeaseMills": 1000, "controllerHeartBeatTimeoutMills": timeout_ms,
        "haSendHeartbeatInterval": 300, "storePathRootDir": str(root / f"replica-{rid}")})
    return config


async def _until(predicate: Callable[[], bool], timeout: float) -> bool:
    end = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > end:
            return False
        await asyncio.sleep(0.05)
    return True


def _commit_log(broker: BrokerController) -> str:
    """The directory of ``broker``'s commit log, as ``fail_once`` names it."""
    return os.path.realpath(Path(broker.config.store.store_path_root_dir) / "commitlog").lstrip(os.sep)


def _bodies(broker: BrokerController) -> list[bytes]:
    got = broker.store.get_message(TOPIC, 0, 0, 1000, 1 << 30)
    return [decode_message(w)[0].body for w in got.messages]


@contextlib.asynccontextmanager
async def _group(tmp_path: Path, etcd: EtcdProcess, timeout_ms: int = TIMEOUT_MS
                 ) -> AsyncIterator[tuple[ControllerManager, dict[int, BrokerController]]]:
    """A controller and two replicas (ids 1 and 2) holding TOPIC, once one is master with both in its SyncStateSet;
    every broker in the dict (one replaced by a test too) is shut down after."""
    controller = ControllerManager(EtcdDCS(etcd.endpoint), port=free_port(), scan_interval_s=0.2)
    await controller.start()
    brokers = {rid: BrokerController(_config(tmp_path, rid, controller.addr, timeout_ms)) for rid in (1, 2)}
    try:
        for broker in brokers.values():
            await broker.start()
            await broker.topic_config_manager.update(TopicConfig(TOPIC, 1, 1))

        def in_sync() -> bool:
            return any(b.replicas_manager.is_master and b.replicas_manager.sync_state_set == [1, 2]
                       for b in brokers.values())

        assert await _until(in_sync, 30), "no master with both replicas in its SyncStateSet"
        yield controller, brokers
    finally:
        for broker in brokers.values():
            await broker.shutdown()
        await controller.close()


def _with_etcd(tmp_path: Path, test: Callable[[EtcdProcess], Coroutine[Any, Any, None]]) -> None:
    etcd = EtcdProcess(tmp_path / "etcd", tmp_path / "etcd.log").start()
    try:
        asyncio.run(test(etcd))
    finally:
        etcd.stop()


def test_a_master_whose_fsync_failed_gives_way_to_its_in_sync_slave_and_rejoins_after_a_restart(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    async def go(etcd: EtcdProcess) -> None:
        async with _group(tmp_path, etcd, LONG_TIMEOUT_MS) as (controller, brokers), RemotingClient() as client:
            old = next(rid for rid, b in brokers.items() if b.replicas_manager.is_master)
            new = 3 - old
            epoch = brokers[old].replicas_manager.epoch
            acknowledged = []
            for i in range(5):
                reply = await client.invoke(brokers[old].addr, _send(TOPIC, body=b"m%d" % i), 10)
                assert reply.code == ResponseCode.SUCCESS, reply.remark
                acknowledged.append(b"m%d" % i)
            failed = fail_once(monkeypatch, _commit_log(brokers[old]))
            reply = await client.invoke(brokers[old].addr, _send(TOPIC, body=b"during"), 10)
            assert failed and reply.code != ResponseCode.SUCCESS, (failed, reply.code, reply.remark)
            assert brokers[old].store.durability.lost
            # The latched master stops acknowledging at once, and its heartbeats tell the controller it
            # left: the slave is elected without waiting for the heartbeat timeout (a minute here).
            assert await _until(lambda: not brokers[old].replicas_manager.is_master, 2)
            assert await _until(lambda: brokers[new].replicas_manager.is_master, LONG_TIMEOUT_MS / 1000 / 4), \
                "the slave was not elected before the old master's heartbeat timeout"
            assert brokers[new].replicas_manager.epoch == epoch + 1
            state = controller.manager.state("broker-f")
            assert (state.master_id, state.sync_state_set) == (new, [new])
            assert not controller.manager.alive("broker-f", old)
            reply = await client.invoke(brokers[new].addr, _send(TOPIC, body=b"after"), 10)
            assert reply.code == ResponseCode.SUCCESS, reply.remark
            kept = _bodies(brokers[new])
            assert kept[: len(acknowledged)] == acknowledged and kept[-1] == b"after", kept
            assert not brokers[old].replicas_manager.is_master  # withdrawn: never master again until restarted
            status = await client.invoke(brokers[old].addr, RemotingCommand.request(RequestCode.GET_BROKER_HA_STATUS),
                                         10)
            assert orjson.loads(status.body)["controller"]["withdrawn"] is True  # what `txmq ha status` shows

            await brokers[old].shutdown()
            monkeypatch.undo()
            rejoined = brokers[old] = BrokerController(_config(tmp_path, old, controller.addr, LONG_TIMEOUT_MS))
            await rejoined.start()
            assert await _until(lambda: rejoined.replicas_manager.master_id == new
                                and rejoined.store.max_phy_offset == brokers[new].store.max_phy_offset, 30), \
                (rejoined.replicas_manager.master_id, rejoined.store.max_phy_offset,
                 brokers[new].store.max_phy_offset)
            assert not rejoined.replicas_manager.is_master and not rejoined.store.durability.lost
            assert _bodies(rejoined)[-1] == b"after"

    _with_etcd(tmp_path, go)


def test_a_controller_taking_over_hears_the_withdrawn_replica_leave_within_a_heartbeat_interval(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Heartbeats live in the controller's memory: one taking over gives every replica a whole heartbeat timeout.
    The withdrawn replica goes on telling that it left, each heartbeat interval, so the next controller knows it
    gone within one interval, not after the timeout (a minute here) during which it would count it alive."""

    async def go(etcd: EtcdProcess) -> None:
        async with _group(tmp_path, etcd, LONG_TIMEOUT_MS) as (controller, brokers), RemotingClient() as client:
            old = next(rid for rid, b in brokers.items() if b.replicas_manager.is_master)
            failed = fail_once(monkeypatch, _commit_log(brokers[old]))
            reply = await client.invoke(brokers[old].addr, _send(TOPIC, body=b"during"), 10)
            assert failed and reply.code != ResponseCode.SUCCESS, (failed, reply.code, reply.remark)
            assert await _until(lambda: brokers[3 - old].replicas_manager.is_master, 15)
            port = controller.server.port
            await controller.close()
            taker = ControllerManager(EtcdDCS(etcd.endpoint), port=port, scan_interval_s=0.2)
            await taker.start()
            try:
                assert await _until(lambda: taker.manager is not None, 10), "the controller did not take over"

                def heard_leave() -> bool:
                    assert taker.manager is not None
                    hb = taker.manager.heartbeats.get(("broker-f", old))
                    return hb is not None and hb.reported > 0 and hb.timeout_s == 0

                assert await _until(heard_leave, 3), taker.manager.heartbeats.get(("broker-f", old))
                assert not taker.manager.alive("broker-f", old)
            finally:
                await taker.close()

    _with_etcd(tmp_path, go)


def test_a_slave_whose_fsync_fails_while_the_controller_names_it_master_never_acts_as_master(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The master stops; the controller elects the slave, whose store loses durability as that answer is on its
    way (between its heartbeat's send and the answer's arrival). The answer must not make it master: it starts no
    epoch, takes no role, and the controller, hearing no more heartbeats, leaves the group without a master (the
    set holds only it) until the replica is restarted."""

    async def go(etcd: EtcdProcess) -> None:
        async with _group(tmp_path, etcd) as (controller, brokers):
            manager = controller.manager
            assert manager is not None
            old = next(rid for rid, b in brokers.items() if b.replicas_manager.is_master)
            slave = brokers[3 - old]
            epochs = list(slave.replicas_manager.epochs.entries)
            heartbeat = manager.heartbeat

            def fail_as_elected(*args: Any) -> GroupState:
                state = heartbeat(*args)
                if state.master_id == slave.replicas_manager.replica_id and not slave.store.durability.lost:
                    slave.store.durability.lose(_commit_log(slave), OSError(errno.EIO, os.strerror(errno.EIO)))
                return state

            monkeypatch.setattr(manager, "heartbeat", fail_as_elected)
            await brokers[old].shutdown()
            assert await _until(lambda: slave.store.durability.lost, TIMEOUT_MS / 1000 + 10), \
                "the slave was not elected"
            assert await _until(lambda: manager.state("broker-f").master_id == NO_MASTER, TIMEOUT_MS / 1000 + 10)
            assert slave.replicas_manager.epochs.entries == epochs
            assert not slave.replicas_manager.is_master and slave.config.broker_id == slave.replicas_manager.replica_id

    _with_etcd(tmp_path, go)


def test_a_slave_whose_fsync_failed_leaves_the_sync_state_set_and_sync_sends_go_on_without_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A SyncStateSet slave's store loses durability: its copy of the next record fails, its HA session ends, and
    the master removes it from the set, so SYNC_MASTER sends are acknowledged again (not FLUSH_SLAVE_TIMEOUT for as
    long as it stays). The slave sends the controller no more heartbeats and is never elected: the master gone, the
    group has no master."""

    async def go(etcd: EtcdProcess) -> None:
        async with _group(tmp_path, etcd) as (controller, brokers), RemotingClient() as client:
            manager = controller.manager
            assert manager is not None
            master = next(rid for rid, b in brokers.items() if b.replicas_manager.is_master)
            slave = brokers[3 - master]
            failed = fail_once(monkeypatch, _commit_log(slave))
            for i in range(5):
                reply = await client.invoke(brokers[master].addr, _send(TOPIC, body=b"m%d" % i), 10)
                assert reply.code == ResponseCode.SUCCESS, (i, reply.code, reply.remark)
                assert await _until(lambda: bool(failed), 5), "the slave's commit log was not flushed"
            assert slave.store.durability.lost
            assert manager.state("broker-f").sync_state_set == [master]
            assert not slave.replicas_manager.is_master
            await brokers[master].shutdown()
            assert await _until(lambda: manager.state("broker-f").master_id == NO_MASTER, TIMEOUT_MS / 1000 + 10)
            assert not slave.replicas_manager.is_master
            assert not manager.alive("broker-f", slave.replicas_manager.replica_id)  # it sends no heartbeats

    _with_etcd(tmp_path, go)
