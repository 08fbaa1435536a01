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
from txmq.broker.replicas_manager import ReplicasManager, slave_link
from txmq.broker.slave_synchronize import SlaveSynchronize
from txmq.errors import ClientError
from txmq.launch import free_port
from txmq.message import MessageExt
from txmq.remoting.codes import RequestCode, ResponseCode
from txmq.remoting.command import RemotingCommand
from txmq.store import DefaultMessageStore, StoreConfig
from txmq.store.durability import Durability
from txmq.store.ha import HAClient, HAConfig, HAService
from txmq.store.results import PutMessageStatus


class _HA:
    """The SYNC wait of a master's HA service: each put's future, answered by the test."""

    def __init__(self) -> None:
        self.waiting: list[asyncio.Future[PutMessageStatus]] = []
        self.needed_slaves: frozenset[int] = frozenset()  # told the SyncStateSet

    def replicate(self, end: int) -> asyncio.Future[PutMessageStatus]:
        fut: asyncio.Future[PutMessageStatus] = asyncio.get_running_loop().create_future()
        self.waiting.append(fut)
        return fut


def _sync_master(tmp_path) -> tuple[ReplicasManager, SimpleNamespace, _HA]:
    cfg = BrokerConfig(broker_id=1, broker_role="SYNC_MASTER", enable_controller_mode=True,
                       controller_addr="127.0.0.1:1", store=StoreConfig(store_path_root_dir=str(tmp_path)))
    ha = _HA()
    broker = SimpleNamespace(config=cfg, ha_service=ha, store=SimpleNamespace(durability=Durability()))
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
                                   controller_addr="127.0.0.1:1", store=StoreConfig(store_path_root_dir=str(tmp_path)))
        self.addr, self.ha_addr = "127.0.0.1:1002", "127.0.0.1:2002"
        self.truncated: list[int] = []
        self.followed: list[str] = []
        self.asked: list[str] = []  # whom TXMQ_GET_EPOCH_TABLE went to
        self.store = SimpleNamespace(max_phy_offset=1000, truncate_replicated=self.truncated.append)
        self.ha_client = SimpleNamespace(shutdown=self._nothing, master_address="")
        self.role = SimpleNamespace(follow_master=self.follow_master)
        body = orjson.dumps(master_table)

        async def invoke(addr: str, cmd: RemotingCommand, timeout_s: float) -> RemotingCommand:
            self.asked.append(addr)
            return RemotingCommand.response_to(cmd, ResponseCode.SUCCESS, body=body)
        self.namesrv_client = SimpleNamespace(invoke=invoke)

    async def _nothing(self) -> None:
        return None

    def follow_master(self, addr: str, ha_addr: str) -> None:
        self.followed.append(addr)
        self.ha_client.master_address = ha_addr


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


_NAMED_1_AT_1 = {"master_id": 1, "epoch": 1, "master_addr": "127.0.0.1:1001", "master_ha_addr": "127.0.0.1:2001",
                 "sync_state_set": [1]}


@pytest.mark.parametrize("table, follows", [
    # the process at the master's address was elected again since (a restart) and started epoch 2 at 900
    ({"epochs": [[1, 0], [2, 900]], "maxOffset": 950, "epoch": 2, "isMaster": True}, True),
    # it stepped down (fenced) or restarted, and is not master at epoch 1 any more
    ({"epochs": [[1, 0]], "maxOffset": 900, "epoch": 1, "isMaster": False}, False),
], ids=["master-again-at-a-new-epoch", "no-longer-master"])
def test_a_replica_whose_ha_session_ended_checks_its_master_again_before_copying(tmp_path, table, follows):
    """A replica following master 1 at epoch 1 whose HA session ended, the controller still naming 1 at epoch 1
    (this replica has not heard of anything newer). Before it copies again it asks the master's epochs: a
    process master again at a newer epoch gets this replica's epoch-1 tail past that epoch's start cut first
    (else the stream would go on from 1000 and a later check would cut records it acknowledged); one that is
    not master is not copied from. While a session is open, nothing is asked."""

    async def main() -> None:
        broker = _Slave(tmp_path, table)
        rm = ReplicasManager(broker)  # type: ignore[arg-type]
        rm.epochs.replace([(1, 0)])
        rm.master_id, rm.epoch = 1, 1
        broker.ha_client.master_address = "127.0.0.1:2001"  # a session open
        await rm._apply(_NAMED_1_AT_1, time.monotonic())
        assert broker.asked == [] and broker.followed == []
        broker.ha_client.master_address = ""  # session_per_check: the session ended
        if follows:
            await rm._apply(_NAMED_1_AT_1, time.monotonic())
            assert broker.truncated == [900] and broker.followed == ["127.0.0.1:1001"]
            assert rm.epochs.entries == [(1, 0), (2, 900)]
        else:
            with pytest.raises(ClientError, match="not master"):
                await rm._apply(_NAMED_1_AT_1, time.monotonic())
            assert broker.truncated == [] and broker.followed == [] and broker.ha_client.master_address == ""
        assert broker.asked == ["127.0.0.1:1001"]

    asyncio.run(main())


def test_a_followers_ha_session_that_ends_leaves_it_without_a_master_until_checked(tmp_path):
    """Real stores, a real HA port: the master's HA service shuts down (it stepped down) and comes back (master
    again, maybe at another epoch). The follower's session ended, so it does not reconnect by itself (a plain
    HAClient would, within its 1 s retry) until it is given the address again."""
    port = free_port()

    def config(name: str) -> StoreConfig:
        return StoreConfig(store_path_root_dir=str(tmp_path / name), mapped_file_size_commit_log=64 * 1024,
                           mapped_file_size_consume_queue=20 * 64, max_hash_slot_num=64, max_index_num=128)

    def ha_config(broker_id: int) -> HAConfig:
        return HAConfig("C", "broker-a", broker_id, listen_port=port, master_address=f"127.0.0.1:{port}",
                        send_heartbeat_interval_ms=200, housekeeping_interval_ms=2000)

    async def until(pred) -> None:
        for _ in range(500):
            if pred():
                return
            await asyncio.sleep(0.02)
        raise AssertionError("timed out")

    async def main() -> None:
        async with DefaultMessageStore(config("m")) as master, DefaultMessageStore(config("s")) as slave:
            ha = HAService(master, ha_config(0))
            await ha.start()
            client = HAClient(slave, ha_config(2), session_per_check=True)
            client.start()
            try:
                assert (await master.put_message(MessageExt("T", b"x" * 100, queue_id=0))).ok
                await until(lambda: slave.max_phy_offset == master.max_phy_offset)
                await ha.shutdown()
                await until(lambda: not client.connected)
                assert client.master_address == ""
                ha = HAService(master, ha_config(0))
                await ha.start()
                copied = slave.max_phy_offset
                assert (await master.put_message(MessageExt("T", b"y" * 100, queue_id=0))).ok
                await asyncio.sleep(1.2)  # past the 1 s retry of a plain HAClient, counted from the session's end
                assert not client.connected and slave.max_phy_offset == copied
                client.master_address = f"127.0.0.1:{port}"  # the replicas manager checked the master
                await until(lambda: slave.max_phy_offset == master.max_phy_offset)
            finally:
                await client.shutdown()
                await ha.shutdown()

    asyncio.run(main())


@pytest.mark.parametrize("answers, said", [
    # the acting controller refused: its words, and the other controller is not asked
    ([(ResponseCode.SYSTEM_ERROR, "group broker-a: master 1 restarted; the election waits", None)],
     "controller 127.0.0.1:1 refused BROKER_HEARTBEAT: group broker-a: master 1 restarted; the election waits"),
    # neither acts (the second is not even a controller): what the last one said
    ([(ResponseCode.SYSTEM_ERROR, "not the leader controller", ""),
      (ResponseCode.REQUEST_CODE_NOT_SUPPORTED, "request code 904 is not supported", None)],
     "no controller acted on BROKER_HEARTBEAT: 127.0.0.1:2: request code 904 is not supported"),
], ids=["refused", "no-leader"])
def test_a_controllers_refusal_is_reported_as_what_it_said(tmp_path, answers, said):
    async def main() -> None:
        broker = _Slave(tmp_path, {})
        broker.config.controller_addr = "127.0.0.1:1;127.0.0.1:2"
        rm = ReplicasManager(broker)  # type: ignore[arg-type]
        queue = list(answers)

        async def invoke(addr: str, cmd: RemotingCommand, timeout_s: float) -> RemotingCommand:
            broker.asked.append(addr)
            code, remark, leader = queue.pop(0)
            ext = {} if leader is None else {"leaderAddr": leader}
            return RemotingCommand.response_to(cmd, code, remark=remark, ext_fields=ext)
        broker.namesrv_client = SimpleNamespace(invoke=invoke)
        with pytest.raises(ClientError) as err:
            await rm._heartbeat()
        assert str(err.value) == said and len(broker.asked) == len(answers)

    asyncio.run(main())


@pytest.mark.parametrize("link, acting, adopted", [
    ("127.0.0.1:1001", True, True),
    ("127.0.0.1:1001", False, False),  # fenced since the copy was fetched (another master acts, or will)
    ("127.0.0.1:1009", True, False),  # not the master this replica follows (any more)
], ids=["acting", "fenced", "another"])
def test_a_slave_adopts_copied_metadata_only_from_the_master_acting_at_its_epoch(tmp_path, link, acting, adopted):
    """SlaveSynchronize fetches topics, consumer offsets and delay offsets, then asks the master's epoch table:
    a master that no longer acts at the followed epoch has stale offsets once another master acts (they may
    even point past what the new master holds): the copy is not adopted."""

    async def main() -> None:
        broker = _Slave(tmp_path, {})
        rm = ReplicasManager(broker)  # type: ignore[arg-type]
        rm.master_link, rm.epoch = "127.0.0.1:1001", 1
        adopted_offsets: list[dict] = []
        broker.replicas_manager = rm

        async def replaced(topics: object) -> None:
            """The slave's topics are written off the loop, awaited."""

        broker.topic_config_manager = SimpleNamespace(replace_all=replaced)
        broker.consumer_offset_manager = SimpleNamespace(replace_all=adopted_offsets.append)
        broker.schedule_service = SimpleNamespace(replace_offsets=lambda offsets: None)
        broker.subscription_group_manager = SimpleNamespace(replace_all=lambda groups: None)
        bodies = {RequestCode.GET_ALL_TOPIC_CONFIG: {"topicConfigTable": {}},
                  RequestCode.GET_ALL_CONSUMER_OFFSET: {"offsetTable": {"T@g": {"0": 5}}},
                  RequestCode.GET_ALL_DELAY_OFFSET: {"offsetTable": {}},
                  RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG: {"subscriptionGroupTable": {}},
                  RequestCode.TXMQ_GET_EPOCH_TABLE: {"epochs": [[1, 0]], "maxOffset": 900, "epoch": 1,
                                                     "isMaster": acting}}

        async def invoke(addr: str, cmd: RemotingCommand, timeout_s: float) -> RemotingCommand:
            broker.asked.append(addr)
            return RemotingCommand.response_to(cmd, ResponseCode.SUCCESS, body=orjson.dumps(bodies[cmd.code]))
        broker.namesrv_client = SimpleNamespace(invoke=invoke)
        sync = SlaveSynchronize(broker)  # type: ignore[arg-type]
        sync.master_addr = link
        await sync.sync_all()
        assert adopted_offsets == ([{"T@g": {0: 5}}] if adopted else [])
        assert set(broker.asked) == {link}

    asyncio.run(main())


def test_the_slave_link_is_the_masters_broker_ip2_at_its_listen_port():
    assert slave_link("127.0.0.1:1001", "127.0.0.2:2001") == "127.0.0.2:1001"
    assert slave_link("10.0.0.1:10911", "") == "10.0.0.1:10911"

def _maintain_sync_state_set(tmp_path, conns: list, in_sync, set_needed, members: tuple[int, ...] = (1, 3),
                             confirm_offset: int | None = None) -> tuple[ReplicasManager, list[list[int]]]:
    """One pass of a master's SyncStateSet upkeep (``members``) over stand-in HA connections, the master's log
    ending at 1000: the manager (``rm.broker.store.max_phy_offset`` moves the end), and the sets it proposed."""
    cfg = BrokerConfig(broker_id=1, broker_role="SYNC_MASTER", enable_controller_mode=True,
                       controller_addr="127.0.0.1:1", store=StoreConfig(store_path_root_dir=str(tmp_path)))
    ha = SimpleNamespace(connections=conns, in_sync=in_sync, set_needed_slaves=set_needed,
                         config=SimpleNamespace(transfer_batch_size=64))
    broker = SimpleNamespace(config=cfg, ha_service=ha, store=SimpleNamespace(max_phy_offset=1000,
                                                                           confirm_offset=confirm_offset))
    rm = ReplicasManager(broker)  # type: ignore[arg-type]
    rm.sync_state_set = list(members)
    proposed: list[list[int]] = []

    async def call(code: int, body: dict) -> dict:
        proposed.append(body["syncStateSet"])
        return {"sync_state_set": body["syncStateSet"], "sync_state_set_epoch": 2}
    rm._call = call  # type: ignore[method-assign]
    asyncio.run(rm._maintain_sync_state_set())
    return rm, proposed


def test_a_master_alone_in_its_set_counts_a_close_slave_first_and_adds_it_once_it_holds_the_end_of_then(tmp_path):
    """Alone in its set, a master's bar is its own end, which moves on under load (a CI campaign waited 60 s for a
    slave that never caught it): a slave within haMaxGapNotInSync is first counted for SYNC puts (they wait for
    it from then on) and proposed once it holds the end the log had then, though the end has moved on."""
    now = time.monotonic()
    slave = SimpleNamespace(broker_id=2, ack_offset=950, last_report=now)
    needed: list[frozenset[int]] = []
    rm, proposed = _maintain_sync_state_set(tmp_path, [slave], lambda c: c.ack_offset >= 0, needed.append,
                                            members=(1,))
    assert proposed == [] and needed[-1] == frozenset({2})  # counted, not yet proposed
    rm.broker.store.max_phy_offset = 1200  # sends go on
    slave.ack_offset, slave.last_report = 1100, time.monotonic()  # past the end of then (1000), not the end now
    asyncio.run(rm._maintain_sync_state_set())
    assert proposed == [[1, 2]] and rm.sync_state_set == [1, 2] and needed[-1] == frozenset({2})


def test_a_master_alone_in_its_set_counts_a_slave_holding_the_end_of_the_last_pass_records_bigger_than_a_batch(
        tmp_path):
    """Records bigger than a transfer batch under steady sends: a slave that keeps pace is rarely within one batch
    of the end, but it holds the end the log had a pass (a heartbeat) ago; counted then, it joins at the next."""
    slave = SimpleNamespace(broker_id=2, ack_offset=800, last_report=time.monotonic())
    needed: list[frozenset[int]] = []
    rm, proposed = _maintain_sync_state_set(tmp_path, [slave], lambda c: c.ack_offset >= 0, needed.append,
                                            members=(1,))
    assert rm._joining == {} and proposed == []  # 200 bytes behind, the batch is 64: nothing to compare yet
    rm.broker.store.max_phy_offset, slave.ack_offset = 1200, 1000  # a 200-byte record behind, the last end held
    asyncio.run(rm._maintain_sync_state_set())
    assert rm._joining == {2: (1200, 1000)} and needed[-1] == frozenset({2}) and proposed == []
    rm.broker.store.max_phy_offset, slave.ack_offset = 1400, 1200
    asyncio.run(rm._maintain_sync_state_set())
    assert proposed == [[1, 2]]


def test_a_master_alone_in_its_set_does_not_count_a_slave_further_than_one_transfer_batch(tmp_path):
    """A slave still copying a backlog (here 65 bytes behind, the batch is 64) is not counted: SYNC puts would
    wait for it (a CI campaign counting slaves within haMaxGapNotInSync acknowledged only 2,621 sends)."""
    slave = SimpleNamespace(broker_id=2, ack_offset=935, last_report=time.monotonic())
    needed: list[frozenset[int]] = []
    rm, proposed = _maintain_sync_state_set(tmp_path, [slave], lambda c: c.ack_offset >= 0, needed.append,
                                            members=(1,))
    assert proposed == [] and needed == [] and rm._joining == {}
    slave.ack_offset = 936  # within one batch now
    asyncio.run(rm._maintain_sync_state_set())
    assert needed[-1] == frozenset({2}) and rm._joining == {2: (1000, 936)}


@pytest.mark.parametrize("ack, added", [(950, True), (900, True), (899, False)])
def test_a_slave_joins_the_sync_state_set_once_it_has_what_every_member_has_not_the_masters_end(tmp_path, ack,
                                                                                                added):
    """Under steady sends a slave's acknowledged offset never equals the master's end: it joins once it holds
    what every connected member holds (every acknowledged put is below that), else it never rejoined under load
    (a CI fault campaign waited 60 s for it)."""
    now = time.monotonic()
    conns = [SimpleNamespace(broker_id=3, ack_offset=900, last_report=now),
             SimpleNamespace(broker_id=2, ack_offset=ack, last_report=now)]
    needed: list[frozenset[int]] = []
    rm, proposed = _maintain_sync_state_set(tmp_path, conns, lambda c: True, needed.append)
    assert proposed == ([[1, 2, 3]] if added else [])
    if added:  # counted for SYNC puts from its proposal on
        assert needed[0] == frozenset({2, 3}) and rm.sync_state_set == [1, 2, 3]


def test_a_member_connected_but_not_reported_yet_lets_no_slave_join(tmp_path):
    """A member's new HA connection has no acknowledged offset (-1) until its first report: it says nothing of
    what that member holds, so a slave far behind must not join on it (the controller could then elect a replica
    without the acknowledged puts). The join waits for what the reported members hold, the master's end without."""
    now = time.monotonic()
    conns = [SimpleNamespace(broker_id=3, ack_offset=-1, last_report=now),
             SimpleNamespace(broker_id=2, ack_offset=0, last_report=now)]
    _, proposed = _maintain_sync_state_set(tmp_path, conns, lambda c: c.ack_offset >= 0, lambda ids: None)
    assert all(2 not in p for p in proposed), proposed


def test_a_member_reporting_less_than_the_confirm_offset_lost_records_and_is_removed_at_once(tmp_path):
    """Every member had acknowledged up to the confirm offset (900): member 3 back with a log ending at 500 (a
    wiped or cut disk, same id) lost acknowledged records; an election must not choose it, and its ack must not
    be the bar slave 2 joins by."""
    now = time.monotonic()
    lost = SimpleNamespace(broker_id=3, ack_offset=500, last_report=now)
    slave = SimpleNamespace(broker_id=2, ack_offset=600, last_report=now)  # far behind: no bar lets it in
    _, proposed = _maintain_sync_state_set(tmp_path, [lost, slave], lambda c: c.ack_offset >= 0, lambda ids: None,
                                           confirm_offset=900)
    assert proposed == [[1]]


def test_a_counted_slave_back_with_a_shorter_log_is_no_longer_counted(tmp_path):
    """A counted slave's acks only rise while its connection lasts; one that reports less than when it was
    counted came back (between two heartbeats) with a shorter log (a wiped or cut disk): it copies
    a backlog again, and SYNC puts must not wait for it meanwhile (they would time out until it holds that end)."""
    slave = SimpleNamespace(broker_id=2, ack_offset=950, last_report=time.monotonic())
    needed: list[frozenset[int]] = []
    conns = [slave]
    rm, proposed = _maintain_sync_state_set(tmp_path, conns, lambda c: c.ack_offset >= 0, needed.append,
                                            members=(1,))
    assert rm._joining == {2: (1000, 950)} and needed[-1] == frozenset({2})
    conns[0] = SimpleNamespace(broker_id=2, ack_offset=100, last_report=time.monotonic())  # reconnected, reported
    asyncio.run(rm._maintain_sync_state_set())
    assert proposed == [] and rm._joining == {} and needed[-1] == frozenset()


def test_a_gone_member_is_removed_by_a_proposal_of_its_own_and_a_caught_up_slave_joins_at_the_next_pass(tmp_path):
    """Shrinking and expanding are separate proposals, as RocketMQ's: one proposal carrying both, refused for its
    addition, kept the gone member 3 in the set, and every SYNC_MASTER put waited for it. The slave is counted for
    SYNC puts from the first pass on, as a proposed one is."""
    slave = SimpleNamespace(broker_id=2, ack_offset=1000, last_report=time.monotonic())  # caught up; 3 is gone
    needed: list[frozenset[int]] = []
    rm, proposed = _maintain_sync_state_set(tmp_path, [slave], lambda c: c.ack_offset >= 0, needed.append)
    assert proposed == [[1]] and rm.sync_state_set == [1] and needed[-1] == frozenset({2})  # counted already
    asyncio.run(rm._maintain_sync_state_set())
    assert proposed == [[1], [1, 2]] and rm.sync_state_set == [1, 2] and needed[-1] == frozenset({2})


def test_a_proposal_without_an_answer_keeps_the_slave_counted_until_the_controllers_next_word(tmp_path):
    """A proposal that timed out may still have been applied: the slave may be a member the controller can elect,
    so SYNC puts and the confirm offset keep waiting for it until a heartbeat's answer says whether it is one."""
    slave = SimpleNamespace(broker_id=2, ack_offset=1000, last_report=time.monotonic())  # at the end: proposed
    needed: list[frozenset[int]] = []
    rm, proposed = _maintain_sync_state_set(tmp_path, [slave], lambda c: c.ack_offset >= 0, needed.append,
                                            members=(1,))
    assert proposed == [[1, 2]]

    async def timed_out(code: int, body: dict) -> dict:
        proposed.append(body["syncStateSet"])
        raise ClientError("no controller acted on CONTROLLER_ALTER_SYNC_STATE_SET: timed out")
    rm._call = timed_out  # type: ignore[method-assign]
    rm.sync_state_set = [1]  # the controller's next answer: not applied
    rm._set_needed(rm.sync_state_set)
    with pytest.raises(ClientError):
        asyncio.run(rm._maintain_sync_state_set())
    assert proposed[-1] == [1, 2] and needed[-1] == frozenset({2})


def test_a_sync_put_during_a_promotion_is_not_acknowledged_before_the_ha_service_knows_the_set(tmp_path):
    """A master that stepped down (its lease ran out, no election) is named again at its epoch with its members:
    it takes the role, and its new HA service's SyncStateSet is set once ``change_to_master`` returns, after the
    name servers answered. A SYNC put in between (a client's route still names it) must not be answered by the
    count rules of HAConfig: SLAVE_NOT_AVAILABLE or one slave's ack would acknowledge it without member 2."""

    async def main() -> None:
        async with DefaultMessageStore(StoreConfig(store_path_root_dir=str(tmp_path / "store"))) as store:
            cfg = BrokerConfig(broker_id=1, broker_role="SYNC_MASTER", enable_controller_mode=True,
                               controller_addr="127.0.0.1:1", store=StoreConfig(store_path_root_dir=str(tmp_path)))
            registering, registered = asyncio.Event(), asyncio.Event()
            broker = SimpleNamespace(config=cfg, store=store, ha_service=None, addr="127.0.0.1:1001")

            async def change_to_master(role: str) -> None:
                cfg.broker_role, cfg.broker_id = role, 0
                broker.ha_service = HAService(store, HAConfig("C", "broker-a", 0))
                registering.set()
                await registered.wait()  # register_all: the name servers' answers
            broker.role = SimpleNamespace(change_to_master=change_to_master)
            rm = ReplicasManager(broker)  # type: ignore[arg-type]
            rm.epoch = 1
            store.replicate = rm.replicate
            state = {**_NAMED_1_AT_1, "sync_state_set": [1, 2], "sync_state_set_epoch": 3}
            promotion = asyncio.create_task(rm._apply(state, time.monotonic()))
            await registering.wait()
            put = await asyncio.wait_for(store.put_message(MessageExt("T", b"x" * 100, queue_id=0)), 1.0)
            assert put.status is PutMessageStatus.NOT_ACKNOWLEDGED, put.status
            registered.set()
            await promotion
            assert broker.ha_service.needed_slaves == frozenset({2})

    asyncio.run(main())


def test_a_step_down_that_fails_is_tried_again_and_the_heartbeats_go_on(tmp_path):
    """A master whose lease ran out steps down; if that fails once (a disk error while the role changes), the
    replicas manager's loop must live on — else its heartbeats stop for good and the failed step-down is never
    tried again — and step down at its next watch."""

    async def main() -> None:
        rm, broker, _ = _sync_master(tmp_path)
        broker.config.broker_heartbeat_interval = 50
        rm.lease_from = time.monotonic() - 3600  # the lease ran out long ago
        attempts: list[float] = []

        async def change_to_slave() -> None:
            attempts.append(time.monotonic())
            if len(attempts) == 1:
                raise OSError(5, "Input/output error")
            broker.config.broker_role = "SLAVE"

        broker.role = SimpleNamespace(change_to_slave=change_to_slave)
        heartbeats: list[float] = []

        async def heartbeat() -> None:
            heartbeats.append(time.monotonic())
            raise ClientError("no controller in this test")

        rm._heartbeat = heartbeat  # type: ignore[method-assign]
        rm.start()
        try:
            deadline = time.monotonic() + 10
            while (len(attempts) < 2 or len(heartbeats) < 4) and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
            assert len(attempts) == 2, attempts
            assert broker.config.is_slave
            assert len(heartbeats) >= 4, "the heartbeats stopped after the failed step-down"
        finally:
            await rm.shutdown()

    asyncio.run(main())


@pytest.mark.parametrize("failure", [ClientError("cannot connect to 127.0.0.1:1"), RuntimeError("cannot connect: bug")],
                         ids=["expected", "unexpected"])
def test_a_problem_after_a_heartbeat_answered_is_logged_once_for_its_run(tmp_path, caplog, failure):
    """A slave whose named master cannot be reached: each heartbeat is answered, then following fails the same way.
    One warning for the run, not one a heartbeat (the answered heartbeat is not the end of the problem); an
    unexpected error too, with its traceback once."""

    async def main() -> None:
        rm, broker, _ = _sync_master(tmp_path)
        broker.config.broker_heartbeat_interval = 20
        broker.config.broker_role = "SLAVE"
        steps: list[float] = []

        state = {"master_id": 2, "master_addr": "127.0.0.1:1", "master_ha_addr": "127.0.0.1:2", "epoch": 1}

        async def invoke(addr: str, cmd: RemotingCommand, timeout: float) -> RemotingCommand:  # the controller
            return RemotingCommand(code=ResponseCode.SUCCESS, flag=1, body=orjson.dumps(state))

        async def apply(state: dict, sent: float) -> None:
            steps.append(sent)
            raise failure

        broker.namesrv_client = SimpleNamespace(invoke=invoke)
        broker.addr, broker.ha_addr, broker.store.max_phy_offset = "127.0.0.1:3", "127.0.0.1:4", 0
        rm._apply = apply  # type: ignore[method-assign]
        rm.start()
        try:
            deadline = time.monotonic() + 10
            while len(steps) < 5 and time.monotonic() < deadline:
                await asyncio.sleep(0.02)
        finally:
            await rm.shutdown()
        assert len(steps) >= 5
        said = [r for r in caplog.records if "cannot connect" in r.getMessage()]
        assert len(said) == 1, [r.getMessage() for r in said]
        assert bool(said[0].exc_info) == isinstance(failure, RuntimeError)

    asyncio.run(main())
