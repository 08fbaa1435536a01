"""The controller's decisions (RocketMQ's ``ReplicasInfoManager`` with its ``DefaultElectPolicy``), over a
``DCS``: a group's master, master epoch and SyncStateSet, changed only by compare-and-swap in the DCS while
this controller holds the leadership. Brokers' heartbeats are kept in memory, as RocketMQ does: a controller
that takes over gives every broker a whole heartbeat timeout before it may elect.

A master is gone when its heartbeats stop, or when they come from another process than the one elected (each
broker process sends its own ``bootId``): a master restarted within the heartbeat timeout may have lost its
log's tail (ASYNC_FLUSH and a machine crash) while its slaves hold it, so it is elected again only if no alive
SyncStateSet member has more, and always at a new epoch."""

from __future__ import annotations

import logging
import time
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from txmq.controller.dcs import DCS

log = logging.getLogger("txmq.controller")

NO_MASTER = -1


@dataclass
class GroupState:
    """One broker group as stored in the DCS (RocketMQ's BrokerReplicaInfo + SyncStateInfo)."""

    cluster_name: str
    broker_name: str
    master_id: int = NO_MASTER
    master_addr: str = ""
    master_ha_addr: str = ""
    epoch: int = 0  # the master epoch: +1 at each election
    sync_state_set: list[int] = field(default_factory=list)
    sync_state_set_epoch: int = 0  # +1 at each change of the set
    replicas: dict[str, dict[str, str]] = field(default_factory=dict)  # replica id -> {addr, haAddr}
    master_boot_id: str = ""  # the bootId of the master's process when elected: another one is a restart

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> GroupState:
        names = cls.__dataclass_fields__
        return cls(**{k: v for k, v in raw.items() if k in names})


@dataclass
class Heartbeat:
    at: float  # time.monotonic() of the last one received (or of a takeover, which gives a whole timeout)
    timeout_s: float  # the broker's controllerHeartBeatTimeoutMills
    max_offset: int
    epoch: int
    boot_id: str = ""  # the broker process's id ("": unknown)
    reported: float = 0.0  # time.monotonic() of the last heartbeat this controller received (0: none yet)


class ControllerError(Exception):
    """A request the controller refuses (stale epoch, not the master, lost leadership)."""


class ReplicasInfoManager:
    """Group states (cached from the DCS) and heartbeats; every change is a CAS in the DCS."""

    def __init__(self, dcs: DCS, me: str) -> None:
        self.dcs = dcs
        self.me = me  # this controller's leader-key value (its address)
        self.groups: dict[str, tuple[GroupState, int]] = {}
        self.heartbeats: dict[tuple[str, int], Heartbeat] = {}
        # group -> since when candidates' max offsets count: the heartbeat that showed the master restarted
        # (reports sent before it may predate the old process's death)
        self.reports_since: dict[str, float] = {}

    def load(self) -> None:
        """On taking over: the DCS is the truth; every known replica gets a whole timeout from now."""
        self.groups = {k: (GroupState.from_json(s), v) for k, (s, v) in self.dcs.load_groups().items()}
        now = time.monotonic()
        for name, (state, _) in self.groups.items():
            for rid in state.replicas:
                old = self.heartbeats.get((name, int(rid)))
                self.heartbeats[(name, int(rid))] = replace(old, at=now) if old else Heartbeat(now, 10.0, 0, 0)

    def _save(self, state: GroupState, why: str) -> GroupState:
        _, version = self.groups.get(state.broker_name, (None, 0))
        new_version = self.dcs.save_group(state.broker_name, state.to_json(), version, self.me)
        if new_version is None:
            self.load()  # another controller acted, or the state moved: start over from the DCS
            raise ControllerError(f"group {state.broker_name}: the DCS changed under this controller ({why})")
        self.groups[state.broker_name] = (state, new_version)
        return state

    def state(self, broker_name: str) -> GroupState | None:
        entry = self.groups.get(broker_name)
        return entry[0] if entry else None

    def alive(self, broker_name: str, rid: int) -> bool:
        hb = self.heartbeats.get((broker_name, rid))
        return hb is not None and time.monotonic() - hb.at < hb.timeout_s

    def restarted(self, state: GroupState) -> bool:
        """The master's heartbeats come from another process than the one elected."""
        hb = self.heartbeats.get((state.broker_name, state.master_id))
        return hb is not None and bool(hb.boot_id and state.master_boot_id) and hb.boot_id != state.master_boot_id

    def _master_gone(self, state: GroupState) -> bool:
        return state.master_id == NO_MASTER or not self.alive(state.broker_name, state.master_id) \
            or self.restarted(state)

    # --- requests -------------------------------------------------------------------------------------

    def heartbeat(self, cluster: str, broker_name: str, rid: int, addr: str, ha_addr: str, max_offset: int,
                  epoch: int, timeout_s: float, boot_id: str = "") -> GroupState:
        """BROKER_HEARTBEAT (and CONTROLLER_REGISTER_BROKER): record the replica; a group without a master (or
        whose master restarted, or left with a ``timeout_s`` of 0) gets one when this replica may be it. Answers the
        group's state; while a restarted master waits for that election every replica is answered an error (its
        report counts): the restarted process is never confirmed at its old epoch, nor named to a replica that
        would follow it."""
        if rid <= 0:
            raise ControllerError(f"replica id {rid}: controller mode needs brokerId > 0 (the master registers as 0)")
        now = time.monotonic()
        prev = self.heartbeats.get((broker_name, rid))
        self.heartbeats[(broker_name, rid)] = Heartbeat(now, timeout_s, max_offset, epoch, boot_id, now)
        if timeout_s <= 0 and (prev is None or prev.timeout_s > 0):
            log.warning("group %s: replica %d left (a heartbeat whose timeout is 0: its store lost durability); no "
                        "candidate until it heartbeats again", broker_name, rid)
        state = self.state(broker_name) or GroupState(cluster, broker_name)
        known = state.replicas.get(str(rid))
        if known != {"addr": addr, "haAddr": ha_addr}:
            state.replicas[str(rid)] = {"addr": addr, "haAddr": ha_addr}
            if state.master_id == rid:
                state.master_addr, state.master_ha_addr = addr, ha_addr
            state = self._save(state, f"replica {rid} at {addr}")
            log.info("group %s: replica %d registered at %s (HA %s)", broker_name, rid, addr, ha_addr)
        if state.master_id == rid and boot_id and not state.master_boot_id:  # a group from before boot ids
            state.master_boot_id = boot_id
            state = self._save(state, f"master {rid}'s process")
        elif self.restarted(state) and state.master_id == rid and (prev is None or prev.boot_id != boot_id):
            self.reports_since[broker_name] = now
            log.warning("group %s: master %d restarted (a new process, log ends at %d) within the heartbeat "
                        "timeout: electing again at a new epoch", broker_name, rid, max_offset)
        if self._master_gone(state):
            self.elect(broker_name)
            state = self.state(broker_name) or state
        if self.restarted(state):  # no replica follows it meanwhile (a follower truncates to its master's log)
            raise ControllerError(f"group {broker_name}: master {state.master_id} restarted; the election waits "
                                  "for the SyncStateSet's next heartbeats")
        return state

    def alter_sync_state_set(self, broker_name: str, master_id: int, master_epoch: int, new_set: list[int],
                             set_epoch: int) -> GroupState:
        """CONTROLLER_ALTER_SYNC_STATE_SET from the master: only the current master at the current epochs, and
        only to a set that holds it and known replicas."""
        state = self.state(broker_name)
        if state is None or state.master_id != master_id or state.epoch != master_epoch:
            raise ControllerError(f"group {broker_name}: {master_id} at epoch {master_epoch} is not the master")
        if state.sync_state_set_epoch != set_epoch:
            raise ControllerError(f"group {broker_name}: SyncStateSet epoch {set_epoch} is stale "
                                  f"(now {state.sync_state_set_epoch})")
        members = sorted(set(new_set))
        if master_id not in members or any(str(m) not in state.replicas for m in members):
            raise ControllerError(f"group {broker_name}: SyncStateSet {members} must hold the master and known "
                                  "replicas only")
        if members != state.sync_state_set:
            old = state.sync_state_set
            state.sync_state_set = members
            state.sync_state_set_epoch += 1
            self._save(state, "SyncStateSet")
            log.info("group %s: SyncStateSet %s -> %s (epoch %d)", broker_name, old, members,
                     state.sync_state_set_epoch)
        return state

    def elect(self, broker_name: str) -> GroupState | None:
        """CONTROLLER_ELECT_MASTER, when the master is gone: the alive member of the SyncStateSet with the
        longest log (RocketMQ's DefaultElectPolicy: highest epoch, then max offset; ties: the old master, then
        the lowest id) becomes master at epoch + 1, alone in the new SyncStateSet — a restarted master too, at
        a new epoch that starts at its log's end. Every candidate's max offset must come from a heartbeat this
        controller received (after the master's restart, if it restarted): until then, no election. A new
        group's first replica is its first master. With no candidate the group stays without a master (a
        replica outside the set may lack acknowledged writes)."""
        state = self.state(broker_name)
        if state is None:
            return None
        if not self._master_gone(state):
            return state
        pool = state.sync_state_set if state.epoch > 0 else [int(r) for r in state.replicas]
        candidates = [rid for rid in pool if self.alive(broker_name, rid)]
        since = self.reports_since.get(broker_name, 0.0)
        if any(not 0 < self.heartbeats[(broker_name, rid)].reported >= since for rid in candidates):
            return state  # a candidate's log end is not known yet (a takeover, or a restart): its next heartbeat
        if not candidates:
            if state.master_id != NO_MASTER:
                log.warning("group %s: master %d is gone and no replica of SyncStateSet %s is alive: no master",
                            broker_name, state.master_id, state.sync_state_set)
                state.master_id, state.master_addr, state.master_ha_addr = NO_MASTER, "", ""
                self._save(state, "no master")
            return None
        old = state.master_id

        def rank(rid: int) -> tuple[int, int, bool, int]:
            hb = self.heartbeats[(broker_name, rid)]
            return hb.epoch, hb.max_offset, rid == old, -rid

        best = max(candidates, key=rank)
        state.master_id = best
        state.master_addr = state.replicas[str(best)]["addr"]
        state.master_ha_addr = state.replicas[str(best)]["haAddr"]
        state.master_boot_id = self.heartbeats[(broker_name, best)].boot_id
        state.epoch += 1
        state.sync_state_set = [best]
        state.sync_state_set_epoch += 1
        self._save(state, f"elect {best}")
        self.reports_since.pop(broker_name, None)
        log.warning("group %s: replica %d at %s elected master, epoch %d, log ends at %d (previous master %s; "
                    "candidates' log ends %s)", broker_name, best, state.master_addr, state.epoch,
                    self.heartbeats[(broker_name, best)].max_offset, old if old != NO_MASTER else "none",
                    {rid: self.heartbeats[(broker_name, rid)].max_offset for rid in candidates})
        return state

    def scan_not_active(self) -> list[str]:
        """RocketMQ's scanNotActiveBroker: groups whose master's heartbeats stopped get an election."""
        elected = []
        for name in list(self.groups):
            state = self.state(name)
            if state is not None and self._master_gone(state):
                before = state.epoch
                new = self.elect(name)
                if new is not None and new.epoch != before:
                    elected.append(name)
        return elected
