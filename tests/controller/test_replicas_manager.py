"""The acknowledgement rule of a master in controller mode (``ReplicasManager.replicate``), as a unit: the broker
and its HA service are stand-ins whose answers are the HA service's (``HAService.shutdown`` answers every waiting
SYNC put SLAVE_NOT_AVAILABLE when the master steps down)."""

from __future__ import annotations

import asyncio
import time
from types import SimpleNamespace

import orjson
import pytest

from txmq.broker.config import BrokerConfig
from txmq.controller.replicas_manager import ReplicasManager
from txmq.errors import ClientError
from txmq.remoting.codes import ResponseCode
from txmq.remoting.command import RemotingCommand
from txmq.store.results import PutMessageStatus


class _HA:
    """The SYNC wait of a master's HA service: each put's future, answered by the test."""

    def __init__(self) -> None:
        self.waiting: list[asyncio.Future[PutMessageStatus]] = []

    def replicate(self, end: int) -> asyncio.Future[PutMessageStatus]:
        fut: asyncio.Future[PutMessageStatus] = asyncio.get_running_loop().create_future()
        self.waiting.append(fut)
        return fut


def _sync_master(tmp_path) -> tuple[ReplicasManager, SimpleNamespace, _HA]:
    cfg = BrokerConfig(broker_id=1, broker_role="SYNC_MASTER", enable_controller_mode=True,
                       controller_addr="127.0.0.1:1", store_path_root_dir=str(tmp_path))
    ha = _HA()
    broker = SimpleNamespace(config=cfg, ha_service=ha)
    rm = ReplicasManager(broker)  # type: ignore[arg-type]
    cfg.broker_role = "SYNC_MASTER"  # what change_to_master sets once the controller names it
    rm.lease_from = time.monotonic()
    return rm, broker, ha


@pytest.mark.parametrize("answer", [PutMessageStatus.SLAVE_NOT_AVAILABLE, PutMessageStatus.FLUSH_SLAVE_TIMEOUT])
def test_a_sync_put_answered_after_the_master_stepped_down_is_not_acknowledged(tmp_path, answer):
    """SLAVE_NOT_AVAILABLE and FLUSH_SLAVE_TIMEOUT tell a RocketMQ client "stored on the master" (it gets a send
    result, and by default no retry); a master that stepped down will cut its log back to the new master's, so
    a put still waiting for its SyncStateSet then was never acknowledged: NOT_ACKNOWLEDGED (SERVICE_NOT_AVAILABLE)."""

    async def main() -> None:
        rm, broker, ha = _sync_master(tmp_path)
        put = rm.replicate(100)
        assert not put.done()
        broker.config.broker_role = "SLAVE"  # change_to_slave: the lease ran out, or another was elected
        ha.waiting[0].set_result(answer)  # HAService.shutdown's answer to its waiters
        await asyncio.sleep(0)
        assert put.result() is PutMessageStatus.NOT_ACKNOWLEDGED

    asyncio.run(main())


def test_a_sync_put_answered_within_the_lease_keeps_its_status(tmp_path):
    async def main() -> None:
        rm, _, ha = _sync_master(tmp_path)
        puts = [rm.replicate(100), rm.replicate(200)]
        ha.waiting[0].set_result(PutMessageStatus.PUT_OK)
        ha.waiting[1].set_result(PutMessageStatus.FLUSH_SLAVE_TIMEOUT)
        await asyncio.sleep(0)
        assert [p.result() for p in puts] == [PutMessageStatus.PUT_OK, PutMessageStatus.FLUSH_SLAVE_TIMEOUT]

    asyncio.run(main())


class _Slave:
    """A replica's broker as ``ReplicasManager._follow`` uses it: its log end, its truncations, the named
    master's TXMQ_GET_EPOCH_TABLE answer."""

    def __init__(self, tmp_path, master_table: dict) -> None:
        self.config = BrokerConfig(broker_id=2, broker_role="SLAVE", enable_controller_mode=True,
                                   controller_addr="127.0.0.1:1", store_path_root_dir=str(tmp_path))
        self.truncated: list[int] = []
        self.followed: list[str] = []
        self.store = SimpleNamespace(max_phy_offset=1000, truncate_replicated=self.truncated.append)
        self.ha_client = SimpleNamespace(shutdown=self._nothing)
        body = orjson.dumps(master_table)

        async def invoke(addr: str, cmd: RemotingCommand, timeout_s: float) -> RemotingCommand:
            return RemotingCommand.response_to(cmd, ResponseCode.SUCCESS, body=body)
        self.namesrv_client = SimpleNamespace(invoke=invoke)

    async def _nothing(self) -> None:
        return None

    def follow_master(self, addr: str, ha_addr: str) -> None:
        self.followed.append(addr)


@pytest.mark.parametrize("state_epoch, table, follows", [
    (1, {"epochs": [[1, 0]], "maxOffset": 900, "epoch": 1, "isMaster": False}, False),  # restarted, not elected
    (2, {"epochs": [[1, 0]], "maxOffset": 900, "epoch": 1, "isMaster": False}, True),  # elected, not started yet
    (1, {"epochs": [[1, 0]], "maxOffset": 900, "epoch": 1, "isMaster": True}, True),  # acting at its epoch
], ids=["not-master-at-the-named-epoch", "elected-at-a-newer-epoch", "master"])
def test_a_replica_follows_and_truncates_only_to_a_master_that_acts_or_was_elected_since(tmp_path, state_epoch,
                                                                                         table, follows):
    """A master process the controller still names at its epoch but that is not master there (restarted before
    the controller saw it, or stepped down) may have lost the tail this replica holds: following it would
    truncate that tail. Named at a newer epoch, it was elected with the longest log: follow it."""

    async def main() -> None:
        broker = _Slave(tmp_path, table)
        rm = ReplicasManager(broker)  # type: ignore[arg-type]
        rm.epochs.replace([(1, 0)])
        if follows:
            await rm._follow(1, "127.0.0.1:1001", "127.0.0.1:2001", state_epoch)
            assert broker.truncated == [900] and broker.followed == ["127.0.0.1:1001"]
        else:
            with pytest.raises(ClientError, match="not master"):
                await rm._follow(1, "127.0.0.1:1001", "127.0.0.1:2001", state_epoch)
            assert broker.truncated == [] and broker.followed == []
            assert rm.epochs.entries == [(1, 0)]

    asyncio.run(main())


@pytest.mark.parametrize("ack, added", [(950, True), (900, True), (899, False)])
def test_a_slave_joins_the_sync_state_set_once_it_has_what_every_member_has_not_the_masters_end(tmp_path, ack,
                                                                                                added):
    """Under steady sends a slave's acknowledged offset never equals the master's end: it joins once it holds
    what every connected member holds (every acknowledged put is below that), else it never rejoined under load
    (a CI fault campaign waited 60 s for it)."""
    cfg = BrokerConfig(broker_id=1, broker_role="SYNC_MASTER", enable_controller_mode=True,
                       controller_addr="127.0.0.1:1", store_path_root_dir=str(tmp_path))
    now = time.monotonic()
    conns = [SimpleNamespace(broker_id=3, ack_offset=900, last_report=now),
             SimpleNamespace(broker_id=2, ack_offset=ack, last_report=now)]
    needed: list[frozenset[int]] = []
    ha = SimpleNamespace(connections=conns, in_sync=lambda c: True, set_needed_slaves=needed.append)
    broker = SimpleNamespace(config=cfg, ha_service=ha, store=SimpleNamespace(max_phy_offset=1000))
    rm = ReplicasManager(broker)  # type: ignore[arg-type]
    rm.sync_state_set = [1, 3]
    proposed: list[list[int]] = []

    async def call(code: int, body: dict) -> dict:
        proposed.append(body["syncStateSet"])
        return {"sync_state_set": body["syncStateSet"], "sync_state_set_epoch": 2}
    rm._call = call  # type: ignore[method-assign]
    asyncio.run(rm._maintain_sync_state_set())
    assert proposed == ([[1, 2, 3]] if added else [])
    if added:  # counted for SYNC puts from its proposal on
        assert needed[0] == frozenset({2, 3}) and rm.sync_state_set == [1, 2, 3]
