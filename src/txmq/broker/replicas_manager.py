"""A broker in controller mode (RocketMQ 5's ``ReplicasManager``): heartbeats to the controller, takes the role
the controller gives, keeps the SyncStateSet as master, and fences itself when it cannot renew its place.

- **Role.** Every ``brokerHeartbeatInterval`` the broker sends BROKER_HEARTBEAT, with this process's
  ``bootId`` (a master that restarts is thus seen by the controller, which elects again); the answer is its
  group's state. Named master (its replica id, at an epoch): it becomes master (a new epoch starts in its epoch file at
  its log's end). Named slave of another: it fetches that master's epoch file, truncates its own log on disk
  where the two agree, and follows. Its HA client copies through one session per check
  (``session_per_check``): when the session ends (the master stepped down, died, was fenced or cut off), the
  replica checks the named master again before it copies another byte, so it never streams from a process
  that has since become master at another epoch without first truncating where their epochs agree.
- **Lease.** A master acknowledges puts (sends, halves, decisions) only while its last heartbeat the
  controller confirmed was *sent* less than ``brokerLeaseMills`` ago; the controller elects only after
  ``controllerHeartBeatTimeoutMills`` without a heartbeat *received*, which is later (or once the replica, stepped
  down, told it that it left: a failed fsync, below). Past its lease a master
  stops acknowledging and steps down to a slave without a master until the controller answers again.
- **A failed fsync.** A replica whose store lost its durability (``txmq.store.durability``) can acknowledge
  nothing until a restart: a master steps down at once, and the replica's last heartbeat (its timeout 0) tells the
  controller it left, which elects another member of the SyncStateSet at once, as when a process dies (after
  ``controllerHeartBeatTimeoutMills`` when no controller hears it). An answer naming it master after the failure
  (elected on an earlier report) is not applied.
  Restarted, it rejoins under a new ``bootId`` (its recovery rebuilt from the last good checkpoint).
- **SyncStateSet.** A caught-up slave (it has what every connected member has) is added, and counted for
  SYNC_MASTER puts from the moment it is proposed; a slave gone or behind is removed, and counted until the
  controller confirms the removal. A master alone in its set first counts a slave that keeps pace with its end,
  and adds it once it holds the end of that moment (the bar "its own end" moves with every send).
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

from txmq.acl.model import cluster_get
from txmq.cancel import cancel_and_wait
from txmq.errors import ClientError
from txmq.remoting.codes import RequestCode, ResponseCode
from txmq.remoting.command import RemotingCommand
from txmq.remoting.registry import RequestSpec, no_header
from txmq.remoting.transport import Connection
from txmq.store.ha.epoch import EpochFile, consistent_point
from txmq.store.results import PutMessageStatus

if TYPE_CHECKING:
    from txmq.broker.controller import BrokerController

log = logging.getLogger("txmq.broker")

SLAVE_BEHIND_S = 3.0  # a SyncStateSet slave that is behind and has not reported for this long is removed


def slave_link(master_addr: str, master_ha_addr: str) -> str:
    """Where a replica sends its master the requests of the master/slave link (the epoch table, SlaveSynchronize's
    metadata copy): the master's brokerIP2 (its HA address's host) at its listenPort, so the network path of
    replication carries them too, and a partition cuts them with it. Without a brokerIP2 that is brokerIP1."""
    host = master_ha_addr.rpartition(":")[0] or master_addr.rpartition(":")[0]
    return f"{host}:{master_addr.rpartition(':')[2]}"


class ReplicasManager:
    def __init__(self, broker: BrokerController) -> None:
        cfg = broker.config
        if cfg.broker_id <= 0:
            raise ValueError("controller mode needs brokerId > 0 (this replica's id; the master registers as 0)")
        if cfg.broker_lease_mills + cfg.broker_heartbeat_interval > cfg.controller_heart_beat_timeout_mills:
            raise ValueError("brokerLeaseMills + brokerHeartbeatInterval must not exceed "
                             "controllerHeartBeatTimeoutMills: a master would still acknowledge after an election")
        self.broker = broker
        self.replica_id = cfg.broker_id
        self.master_role = "SLAVE" if cfg.is_slave else cfg.broker_role.upper()
        if self.master_role == "SLAVE":
            self.master_role = "ASYNC_MASTER"
        cfg.broker_role = "SLAVE"  # until the controller says otherwise
        self.controllers = [a.strip() for a in cfg.controller_addr.split(";") if a.strip()]
        if not self.controllers:
            raise ValueError("enableControllerMode=true needs controllerAddr")
        self.epochs = EpochFile(Path(cfg.store.store_path_root_dir) / "epochFileCheckpoint")
        self.epoch = self.epochs.last_epoch  # the master epoch this replica is in
        self.boot_id = uuid.uuid4().hex  # this process: the controller never confirms a restarted master's epoch
        self.master_id = -1
        self.master_addr = ""
        self.master_link = ""  # slave_link of the master this replica follows
        self.sync_state_set: list[int] = []
        self.sync_state_set_epoch = 0
        self.lease_from = 0.0  # monotonic send time of the last heartbeat that confirmed this master
        self._pending_add: set[int] = set()  # slaves proposed for the SyncStateSet, not yet confirmed
        # slaves counted for SYNC puts before their proposal: id -> (the log's end then, the slave's ack then)
        self._joining: dict[int, tuple[int, int]] = {}
        self._last_end: int | None = None  # the log's end at the last SyncStateSet pass of this term
        self._leader = self.controllers[0]
        self._task: asyncio.Task[None] | None = None
        self._changing = asyncio.Lock()
        self._last_problem = ""
        self._withdrawn = False  # the store lost durability: only heartbeats saying it left (logged once)
        self._left = False  # a controller heard this withdrawn replica leave (logged once)
        self._leave_tried = -math.inf  # time.monotonic() of the last try to send it

    @property
    def is_master(self) -> bool:
        return not self.broker.config.is_slave

    def lease_valid(self) -> bool:
        return time.monotonic() - self.lease_from < self.broker.config.broker_lease_mills / 1000

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="replicas manager")

    async def shutdown(self) -> None:
        await cancel_and_wait(self._task)

    # --- the store's acknowledgement hook ------------------------------------------------------------------

    def replicate(self, end: int) -> asyncio.Future[PutMessageStatus]:
        """``store.replicate`` of a master in controller mode: SYNC_MASTER's wait for the SyncStateSet, then the
        lease; a put answered past the lease, or before this term's HA service knows the SyncStateSet, is
        NOT_ACKNOWLEDGED (in the log, never acknowledged: the client hears SERVICE_NOT_AVAILABLE, and a
        transaction's decision it carried stands)."""
        loop = asyncio.get_running_loop()
        out: asyncio.Future[PutMessageStatus] = loop.create_future()
        ha = self.broker.ha_service
        if not self.is_master or not self.lease_valid():
            out.set_result(PutMessageStatus.NOT_ACKNOWLEDGED)
            return out
        if ha is None or self.master_role != "SYNC_MASTER":
            out.set_result(PutMessageStatus.PUT_OK)
            return out
        # A promotion under way (change_to_master awaits the name servers): this term's HA service is not told the
        # SyncStateSet yet, and its count rules (HAConfig) would acknowledge a put without every member.
        if ha.needed_slaves is None:
            out.set_result(PutMessageStatus.NOT_ACKNOWLEDGED)
            return out

        def done(f: asyncio.Future[PutMessageStatus]) -> None:
            # Any answer past the lease or a step-down: SLAVE_NOT_AVAILABLE and FLUSH_SLAVE_TIMEOUT would tell a
            # client "stored on the master", whose log the new master's may cut back.
            status = f.result() if self.is_master and self.lease_valid() else PutMessageStatus.NOT_ACKNOWLEDGED
            if not out.done():
                out.set_result(status)

        ha.replicate(end).add_done_callback(done)
        return out

    # --- the heartbeat loop -------------------------------------------------------------------------------

    def _problem(self, text: str, *, traceback: bool = False) -> None:
        """One line for a run of the same problem (``traceback``: an unexpected error, with the exception being
        handled)."""
        if text != self._last_problem:
            self._last_problem = text
            log.log(logging.ERROR if traceback else logging.WARNING, "%s", text, exc_info=traceback)

    async def _run(self) -> None:
        interval = self.broker.config.broker_heartbeat_interval / 1000
        while True:
            sent = time.monotonic()
            try:
                await self._step(sent)
                self._last_problem = ""  # the next problem is logged again (one line per run of the same problem)
            except ClientError as exc:  # says whether a controller refused, or none answered
                self._problem(str(exc))
            except (OSError, ValueError, KeyError) as exc:
                self._problem(f"controller heartbeat failed: {exc}")
            except Exception as exc:  # one bad answer must not stop the heartbeats; its traceback once a run
                self._problem(f"replicas manager step failed: {type(exc).__name__}: {exc}", traceback=True)
            await self._fence_if_expired(sent + interval)
            await asyncio.sleep(max(0.0, interval - (time.monotonic() - sent)))

    async def _step(self, sent: float) -> None:
        """One heartbeat and what its answer says, unless this replica has withdrawn: also when its store lost
        durability while the answer was on its way, which may name it master (elected on the report it sent)."""
        if self._withdraw():
            await self._leave()
            return
        state = await self._heartbeat()
        if self._withdraw():
            await self._leave()
            return
        await self._apply(state, sent)
        if self.is_master:
            await self._maintain_sync_state_set()

    def _withdraw(self) -> bool:
        """Whether this replica has withdrawn from its group: once its store lost durability it must be neither
        master nor a candidate (``_leave`` tells the controller)."""
        durability = self.broker.store.durability
        if durability.lost and not self._withdrawn:
            self._withdrawn = True
            log.error("%s: this replica (id %d) leaves its group: its heartbeats tell the controller, which "
                      "elects an alive member of the SyncStateSet %s other than it, if there is one; restart the "
                      "broker to rejoin", durability.why, self.replica_id, self.sync_state_set)
        return self._withdrawn

    async def _leave(self) -> None:
        """A withdrawn replica's heartbeat: its timeout 0, so that the controller counts it gone at once
        (a master: an election now, as Kafka's controller moves leaders off a broker whose log directory
        failed) and never elects it, where silence alone would leave it a candidate, and its group without a
        master, for ``controllerHeartBeatTimeoutMills``. Sent once a heartbeat interval for as long as the replica
        runs, a master once it stepped down: a controller taking over keeps heartbeats in memory only, and hears it
        within one interval. Its answer is not applied. Failing, the silence does the same after the timeout."""
        now = time.monotonic()
        interval = self.broker.config.broker_heartbeat_interval / 1000
        if self.is_master or now - self._leave_tried < interval:
            return
        first = self._leave_tried == -math.inf
        self._leave_tried = now
        try:
            await self._heartbeat(timeout_ms=0)
        except (ClientError, OSError, ValueError) as exc:
            if first:  # one line for the tries
                log.warning("the controller did not hear this withdrawn replica leave (%s); tried again each "
                            "heartbeat interval, and without it the controller elects after "
                            "controllerHeartBeatTimeoutMills", exc)
            return
        if not self._left:
            self._left = True
            log.warning("the controller heard this replica (id %d) leave its group", self.replica_id)

    async def _fence_if_expired(self, until: float) -> None:
        """Watch the lease until the next heartbeat: past it, or once the store lost durability, a master steps
        down (stops acknowledging). A step-down that fails is tried again at the next look (every 0.1 s), logged
        once for the run of failures: the loop of heartbeats must not end with it."""
        failing = False
        while True:
            lost = self._withdraw()
            if self.is_master and (lost or not self.lease_valid()):
                if not failing:
                    log.warning("%s: stepping down, no more acknowledgements at epoch %d",
                                "the store lost durability" if lost else
                                f"master lease of {self.broker.config.broker_lease_mills} ms expired without the "
                                "controller's confirmation", self.epoch)
                try:
                    async with self._changing:
                        await self.broker.role.change_to_slave()
                        self.master_id, self.master_addr, self.master_link = -1, "", ""
                except Exception:
                    if not failing:
                        log.exception("stepping down failed; tried again until it succeeds")
                    failing = True
            if lost:  # once stepped down: the controller may elect at once
                await self._leave()
            left = until - time.monotonic()
            if left <= 0:
                return
            await asyncio.sleep(min(left, 0.1))

    async def _call(self, code: RequestCode, body: dict[str, Any]) -> dict[str, Any]:
        """A request to the acting controller: the last one that acted, else each in turn (a non-leader names
        the leader, in ``leaderAddr``). A SYSTEM_ERROR without it is the acting controller's refusal: raised as
        it said, not tried elsewhere."""
        client = self.broker.namesrv_client  # signed with the broker's accessKey/secretKey when ACL is on
        order = [self._leader] + [c for c in self.controllers if c != self._leader]
        last = ""
        for addr in order:
            try:
                resp = await client.invoke(addr, RemotingCommand.request(code, body=orjson.dumps(body)), 2.0)
            except (ClientError, OSError) as exc:
                last = f"{addr}: {exc}"
                continue
            if resp.code == ResponseCode.SUCCESS:
                self._leader = addr
                answer = orjson.loads(resp.body or b"{}")
                if not isinstance(answer, dict):
                    raise ValueError(f"controller {addr} answered {answer!r}")
                return answer
            if resp.code == ResponseCode.SYSTEM_ERROR and "leaderAddr" not in resp.ext_fields:
                self._leader = addr  # the acting controller refused: its word stands
                raise ClientError(f"controller {addr} refused {code.name}: {resp.remark}")
            leader = resp.ext_fields.get("leaderAddr", "")
            if leader and leader in self.controllers:
                self._leader = leader
            last = f"{addr}: {resp.remark or f'code {resp.code}'}"  # not the leader, or not a controller at all
        raise ClientError(f"no controller acted on {code.name}: {last}")

    async def _heartbeat(self, *, timeout_ms: int | None = None) -> dict[str, Any]:
        """BROKER_HEARTBEAT; ``timeout_ms``: how long the controller counts this replica alive after it (by
        default ``controllerHeartBeatTimeoutMills``; 0: gone at once)."""
        cfg = self.broker.config
        return await self._call(RequestCode.BROKER_HEARTBEAT, {
            "clusterName": cfg.broker_cluster_name, "brokerName": cfg.broker_name, "brokerId": self.replica_id,
            "brokerAddr": self.broker.addr, "haAddr": self.broker.ha_addr,
            "maxOffset": self.broker.store.max_phy_offset, "epoch": self.epoch,
            "heartbeatTimeoutMillis": cfg.controller_heart_beat_timeout_mills if timeout_ms is None else timeout_ms,
            "bootId": self.boot_id})

    async def _apply(self, state: dict[str, Any], sent: float) -> None:
        master_id, epoch = int(state.get("master_id", -1)), int(state.get("epoch", 0))
        self.sync_state_set = [int(x) for x in state.get("sync_state_set", [])]
        self.sync_state_set_epoch = int(state.get("sync_state_set_epoch", 0))
        async with self._changing:
            if master_id == self.replica_id and state.get("master_addr") == self.broker.addr:
                if not self.is_master or epoch != self.epoch:
                    await self._become_master(epoch)
                self.lease_from = sent
                self._set_needed(self.sync_state_set)
            elif master_id > 0:
                if self.is_master or master_id != self.master_id or epoch != self.epoch or not self._copying():
                    await self._follow(master_id, str(state["master_addr"]), str(state["master_ha_addr"]), epoch)
                elif epoch > self.epochs.last_epoch:  # the master has started its epoch since: copy its entries
                    table = await self._fetch_epochs(self.master_link)
                    self.epochs.replace([(int(e), int(o)) for e, o in table["epochs"]])
            elif self.is_master:
                await self.broker.role.change_to_slave()
            self.master_id = master_id

    def _copying(self) -> bool:
        """An HA session with the checked master is open or being opened (its end clears the address)."""
        ha_client = self.broker.ha_client
        return ha_client is not None and bool(ha_client.master_address)

    async def _become_master(self, epoch: int) -> None:
        store = self.broker.store
        if epoch > self.epochs.last_epoch:
            self.epochs.truncate_from(store.max_phy_offset)
            self.epochs.append(epoch, store.max_phy_offset)
        self.epoch = epoch
        self.master_addr = self.broker.addr
        self._pending_add.clear()
        self._joining.clear()
        self._last_end = None
        self.lease_from = time.monotonic()
        await self.broker.role.change_to_master(self.master_role)
        log.warning("this replica (id %d) is master of %s at epoch %d, log ends at %d", self.replica_id,
                    self.broker.config.broker_name, epoch, store.max_phy_offset)

    async def _follow(self, master_id: int, master_addr: str, master_ha_addr: str, epoch: int) -> None:
        """Become (or stay) a slave of ``master_addr``: truncate where this log and the master's agree, on disk,
        before a byte of the new master's stream is written."""
        broker = self.broker
        if self.is_master:
            await broker.role.change_to_slave()
        ha_client = broker.ha_client
        assert ha_client is not None
        await ha_client.shutdown()  # from the master it followed: it is replaced, or its session ended
        ha_client.master_address = ""
        link = slave_link(master_addr, master_ha_addr)
        table = await self._fetch_epochs(link)
        if not table.get("isMaster") and int(table.get("epoch", 0)) >= epoch:
            # Named at an epoch it is not master of: a restarted process the controller has not seen yet (or a
            # master that stepped down), whose log may lack the tail this one holds. Elected since, it has a
            # newer epoch to start; until then this log is kept as it is (the next heartbeat asks again).
            raise ClientError(f"{master_addr} is not master at epoch {epoch}: not following it yet")
        theirs = [(int(e), int(o)) for e, o in table["epochs"]]
        store = broker.store
        point = consistent_point(self.epochs.entries, store.max_phy_offset, theirs, int(table["maxOffset"]))
        if point < store.max_phy_offset:
            log.warning("rejoining %s at epoch %d: this log and the master's agree up to %d; truncating %d bytes",
                        master_addr, epoch, point, store.max_phy_offset - point)
            store.truncate_replicated(point)
        self.epochs.truncate_from(point)
        self.epochs.replace(theirs)
        if (epoch, master_id) != (self.epoch, self.master_id):  # not once per session to the same master
            log.info("following master %d at %s (HA %s), epoch %d, from offset %d", master_id, master_addr,
                     master_ha_addr, epoch, store.max_phy_offset)
        self.epoch, self.master_id, self.master_addr, self.master_link = epoch, master_id, master_addr, link
        broker.role.follow_master(link, master_ha_addr)

    async def master_acts(self, link: str) -> bool:
        """Whether ``link`` is the master this replica follows and still acts there at the followed epoch: a
        slave adopts metadata it copied only then (a fenced master's consumer offsets are stale once another
        master acts, and may point past what the new master holds)."""
        if link != self.master_link:
            return False
        table = await self._fetch_epochs(link)
        return bool(table.get("isMaster")) and int(table.get("epoch", -1)) == self.epoch

    async def _fetch_epochs(self, master_addr: str) -> dict[str, Any]:
        resp = await self.broker.namesrv_client.invoke(
            master_addr, RemotingCommand.request(RequestCode.TXMQ_GET_EPOCH_TABLE), 3.0)
        if resp.code != ResponseCode.SUCCESS:
            raise ClientError(f"master {master_addr} answered {resp.code} for its epochs: {resp.remark}")
        table = orjson.loads(resp.body)
        if not isinstance(table, dict) or "epochs" not in table:
            raise ValueError(f"master {master_addr} sent no epoch table")
        return table

    def requests(self) -> list[RequestSpec[Any]]:
        return [RequestSpec(RequestCode.TXMQ_GET_EPOCH_TABLE, no_header, cluster_get, self.process_get_epoch_table)]

    def process_get_epoch_table(self, conn: Connection, cmd: RemotingCommand, _: None) -> RemotingCommand:
        """TXMQ_GET_EPOCH_TABLE: this replica's epochs, log end, and whether it acts as master (within its lease):
        a replica reads its master's before each HA session."""
        body = {"epochs": self.epochs.entries, "maxOffset": self.broker.store.max_phy_offset,
                "epoch": self.epoch, "isMaster": self.is_master and self.lease_valid()}
        return RemotingCommand.response_to(cmd, ResponseCode.SUCCESS, body=orjson.dumps(body))

    # --- the SyncStateSet (master) ------------------------------------------------------------------------

    def _set_needed(self, members: list[int]) -> None:
        ha = self.broker.ha_service
        if ha is not None:
            ha.set_needed_slaves(frozenset(m for m in members if m != self.replica_id) | self._pending_add
                                 | self._joining.keys())

    async def _maintain_sync_state_set(self) -> None:
        ha = self.broker.ha_service
        if ha is None:
            return
        end = self.broker.store.max_phy_offset
        now = time.monotonic()
        conns = {c.broker_id: c for c in ha.connections}
        current = set(self.sync_state_set)
        # Caught up = holding what every connected member holds (RocketMQ compares with its confirmOffset): every
        # acknowledged put is below that, and a put above it waits for the new member from its proposal on. Its
        # end never equals a master's that keeps writing, so "equal to our end" left a slave out under load. A
        # member's connection that has not reported yet (-1) says nothing of what it holds: not counted.
        # A member that reports less than the confirm offset (what every member had acknowledged) lost records it
        # held: a wiped or cut disk under the same id. It is removed at once, and sets no bar for others.
        bound = self.broker.store.confirm_offset or 0
        lost = {i for i in current if i in conns and 0 <= conns[i].ack_offset < bound}
        confirmed = min((conns[i].ack_offset for i in current - lost if i in conns and conns[i].ack_offset >= 0),
                        default=end)

        def lagging(i: int) -> bool:
            return i not in conns or not ha.in_sync(conns[i]) or (
                conns[i].ack_offset < end and now - conns[i].last_report > SLAVE_BEHIND_S)

        if self._count_joining(conns, current, end, ha.config.transfer_batch_size, lagging):
            self._set_needed(sorted(current))
        caught_up = {i for i, c in conns.items() if i not in current
                     and (c.ack_offset >= confirmed or (i in self._joining and c.ack_offset >= self._joining[i][0]))}
        behind = {i for i in current - {self.replica_id} if lagging(i) or i in lost}
        # Shrinking and expanding are separate proposals (RocketMQ's maybeShrinkSyncStateSet and
        # maybeExpandInSyncStateSet): a refused addition must not keep a gone member in the set, where every
        # SYNC_MASTER put waits for it. Those caught up are counted now, as an addition is, and proposed next pass.
        adding = caught_up
        if behind:
            for i in caught_up:
                self._joining.setdefault(i, (conns[i].ack_offset, conns[i].ack_offset))
            adding = set()
        if not adding and not behind:
            return
        self._pending_add |= adding  # counted for SYNC_MASTER puts from now on
        self._set_needed(sorted(current))
        proposed = sorted((current | adding) - behind)
        try:
            state = await self._call(RequestCode.CONTROLLER_ALTER_SYNC_STATE_SET, {
                "brokerName": self.broker.config.broker_name, "masterId": self.replica_id,
                "masterEpoch": self.epoch, "syncStateSet": proposed, "syncStateSetEpoch": self.sync_state_set_epoch})
        finally:  # unanswered, it may have been applied: the HA service counts them until a heartbeat's answer
            self._pending_add -= adding
            for i in adding:
                self._joining.pop(i, None)
        self.sync_state_set = [int(x) for x in state.get("sync_state_set", [])]
        self.sync_state_set_epoch = int(state.get("sync_state_set_epoch", 0))
        self._set_needed(self.sync_state_set)

    def _count_joining(self, conns: dict[int, Any], current: set[int], end: int, batch: int,
                       lagging: Callable[[int], bool]) -> bool:
        """The first step of a join, for the bar a master alone in its set has (its own end, which never stays
        still under load): a slave that keeps pace (within one transfer batch of the end, or holding the end of the
        last pass, a heartbeat ago: records bigger than a batch) is counted (SYNC_MASTER puts wait for it, the
        confirm offset stays until it has it), and joins once it holds the log's end of that moment: every put
        acknowledged before was below that end. Not "within haMaxGapNotInSync": puts wait for a counted slave, and
        one still copying a backlog would stall them. Returns whether the counted slaves changed."""
        counted = set(self._joining)
        # A counted slave whose ack fell came back between two passes with a shorter log (one connection's acks
        # never fall): it copies a backlog again, and is counted again only once it keeps pace.
        for i in [i for i, (_, ack) in self._joining.items()
                  if i in current or lagging(i) or conns[i].ack_offset < ack]:
            del self._joining[i]
        for i in conns.keys() - current - self._joining.keys():
            ack = conns[i].ack_offset
            if not lagging(i) and (end - ack <= batch or (self._last_end is not None and ack >= self._last_end)):
                self._joining[i] = (end, ack)
        self._last_end = end
        return self._joining.keys() != counted

    def status(self) -> dict[str, Any]:
        """What ``txmq ha status`` shows of controller mode."""
        return {"replicaId": self.replica_id, "epoch": self.epoch, "epochs": self.epochs.entries,
                "masterId": self.master_id, "syncStateSet": self.sync_state_set,
                "syncStateSetEpoch": self.sync_state_set_epoch, "leaseValid": self.is_master and self.lease_valid(),
                "controller": self._leader, "withdrawn": self._withdrawn}
