"""The controller's decisions over an in-memory DCS: who is master, the epoch, the SyncStateSet, elections only
from the SyncStateSet, and every change refused to a controller that lost the leadership."""

from __future__ import annotations

import pytest

from txmq.controller import replicas_info
from txmq.controller.dcs import MemoryDCS
from txmq.controller.replicas_info import NO_MASTER, ControllerError, ReplicasInfoManager


class _Clock:
    """The manager's monotonic clock, moved by the test: a heartbeat's timeout passes when the test says so, never
    earlier because a loaded machine stalled the test between two calls."""

    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> _Clock:
    c = _Clock()
    monkeypatch.setattr(replicas_info, "time", c)
    return c


def _manager(dcs: MemoryDCS | None = None, me: str = "c1") -> ReplicasInfoManager:
    dcs = dcs or MemoryDCS()
    assert dcs.hold_leadership(me, 30)
    m = ReplicasInfoManager(dcs, me)
    m.load()
    return m


def _beat(m: ReplicasInfoManager, rid: int, offset: int = 0, timeout_s: float = 10.0, boot: str = ""):
    return m.heartbeat("c", "g", rid, f"127.0.0.1:{1000 + rid}", f"127.0.0.1:{2000 + rid}", offset, 0, timeout_s,
                       boot or f"boot-{rid}")


def _group_of_three(m: ReplicasInfoManager, offsets: tuple[int, int, int]) -> None:
    """Replicas 1 (master), 2 and 3, all in the SyncStateSet, at these log ends."""
    for rid, offset in zip((1, 2, 3), offsets, strict=True):
        _beat(m, rid, offset)
    m.alter_sync_state_set("g", 1, 1, [1, 2, 3], 1)


def test_the_first_replica_of_a_new_group_is_master_at_epoch_1_and_the_others_follow():
    m = _manager()
    s = _beat(m, 1)
    assert (s.master_id, s.epoch, s.sync_state_set, s.master_addr) == (1, 1, [1], "127.0.0.1:1001")
    s = _beat(m, 2)
    assert (s.master_id, s.epoch) == (1, 1)
    assert sorted(s.replicas) == ["1", "2"]


def test_sync_state_set_changes_only_from_the_master_at_its_epochs():
    m = _manager()
    _beat(m, 1)
    _beat(m, 2)
    _beat(m, 3)
    s = m.alter_sync_state_set("g", 1, 1, [1, 2, 3], 1)
    assert (s.sync_state_set, s.sync_state_set_epoch) == ([1, 2, 3], 2)
    with pytest.raises(ControllerError, match="stale"):
        m.alter_sync_state_set("g", 1, 1, [1, 2], 1)
    with pytest.raises(ControllerError, match="not the master"):
        m.alter_sync_state_set("g", 2, 1, [2], 2)
    with pytest.raises(ControllerError, match="must hold the master"):
        m.alter_sync_state_set("g", 1, 1, [2, 3], 2)
    with pytest.raises(ControllerError, match="must hold the master"):
        m.alter_sync_state_set("g", 1, 1, [1, 9], 2)


def test_a_dead_master_is_replaced_by_the_alive_sync_state_set_member_with_the_longest_log(clock: _Clock):
    m = _manager()
    _beat(m, 1, timeout_s=0.2)
    for rid, offset in ((2, 500), (3, 700), (4, 900)):
        _beat(m, rid, offset)
    m.alter_sync_state_set("g", 1, 1, [1, 2, 3], 1)  # 4 is not in sync: never a candidate
    assert m.scan_not_active() == []
    clock.now += 0.3
    assert m.scan_not_active() == ["g"]
    s = m.state("g")
    assert s is not None
    assert (s.master_id, s.epoch, s.sync_state_set, s.master_addr) == (3, 2, [3], "127.0.0.1:1003")
    # The DCS holds the same: a controller taking over starts from it.
    other = ReplicasInfoManager(m.dcs, "c1")
    other.load()
    assert other.state("g") == s


def test_no_alive_member_of_the_sync_state_set_leaves_the_group_without_a_master_until_one_returns(clock: _Clock):
    m = _manager()
    _beat(m, 1, timeout_s=0.2)
    _beat(m, 2, timeout_s=0.2)
    m.alter_sync_state_set("g", 1, 1, [1, 2], 1)
    _beat(m, 3)  # alive, but not in the SyncStateSet: it may lack acknowledged writes
    clock.now += 0.3
    m.scan_not_active()
    s = m.state("g")
    assert s is not None and s.master_id == NO_MASTER and s.epoch == 1
    s = _beat(m, 2, offset=100)  # a SyncStateSet member is back
    assert (s.master_id, s.epoch) == (2, 2)


def test_a_replica_that_leaves_with_a_timeout_of_0_is_gone_at_once_and_never_a_candidate(clock: _Clock):
    """A withdrawn replica's last heartbeat (its store lost durability) has a timeout of 0: a master leaving gets an
    election in that heartbeat's handling, no time passing; a slave that left is no candidate afterwards, though
    its log is the longest and its last heartbeat is younger than the usual timeout."""
    m = _manager()
    _group_of_three(m, (900, 800, 700))
    s = _beat(m, 1, offset=900, timeout_s=0)
    assert (s.master_id, s.epoch, s.sync_state_set) == (2, 2, [2])
    assert not m.alive("g", 1)
    s = m.alter_sync_state_set("g", 2, 2, [2, 3], s.sync_state_set_epoch)
    _beat(m, 3, offset=999, timeout_s=0)
    _beat(m, 2, offset=950, timeout_s=0.2)  # then the master dies
    clock.now += 0.3
    assert m.scan_not_active() == []
    s = m.state("g")
    assert s is not None and s.master_id == NO_MASTER


def test_a_controller_that_lost_the_leadership_changes_nothing():
    dcs = MemoryDCS()
    m = _manager(dcs, "c1")
    _beat(m, 1)
    dcs.release_leadership()
    assert dcs.hold_leadership("c2", 30)
    with pytest.raises(ControllerError, match="changed under"):
        _beat(m, 2)
    s = m.state("g")
    assert s is not None and sorted(s.replicas) == ["1"]


def test_a_restarted_master_loses_to_a_sync_state_set_member_holding_the_tail_it_lost():
    """ASYNC_FLUSH and a machine crash: the master comes back within the heartbeat timeout with a shorter log
    than its slaves, which hold acknowledged writes. Its new process is not confirmed at its old epoch; once
    every alive member has reported since, the longest log wins at a new epoch."""
    m = _manager()
    _group_of_three(m, (1000, 1000, 1000))
    assert _beat(m, 1, 1000).epoch == 1  # the same process: nothing happens
    with pytest.raises(ControllerError, match="restarted"):
        _beat(m, 1, 900, boot="boot-1-again")
    s = m.state("g")
    assert s is not None and (s.master_id, s.epoch) == (1, 1)  # 2's and 3's offsets may predate the crash
    assert m.scan_not_active() == []
    with pytest.raises(ControllerError, match="restarted"):
        _beat(m, 2, 1000)  # 3 has not reported since: no election yet, and no master to follow
    with pytest.raises(ControllerError, match="restarted"):
        _beat(m, 1, 900, boot="boot-1-again")
    s = _beat(m, 3, 1000)
    assert (s.master_id, s.epoch, s.sync_state_set, s.master_boot_id) == (2, 2, [2], "boot-2")  # tie: lower id
    s = _beat(m, 1, 900, boot="boot-1-again")
    assert (s.master_id, s.epoch) == (2, 2)  # the restarted replica is answered: follow 2


def test_a_restarted_master_with_the_longest_log_is_master_again_at_a_new_epoch():
    m = _manager()
    _group_of_three(m, (1000, 1000, 800))
    with pytest.raises(ControllerError, match="restarted"):
        _beat(m, 1, 1000, boot="boot-1-again")
    with pytest.raises(ControllerError, match="restarted"):
        _beat(m, 2, 1000)
    assert m.scan_not_active() == []  # 3 has not reported since the restart
    assert _beat(m, 3, 800).epoch == 2  # the last report: the election
    s = _beat(m, 1, 1000, boot="boot-1-again")
    # 2 has as much: the old master is preferred, but at epoch 2, so 2 and 3 truncate to where epoch 2 starts.
    assert (s.master_id, s.epoch, s.sync_state_set, s.master_boot_id) == (1, 2, [1], "boot-1-again")
    assert _beat(m, 1, 1000, boot="boot-1-again").epoch == 2  # its own process from now on


def test_a_controller_taking_over_elects_only_on_log_ends_it_was_told():
    """The new controller knows the group from the DCS but no replica's log end: a master restarting then is
    elected against the others' next reports, not against zeros."""
    dcs = MemoryDCS()
    m = _manager(dcs)
    _group_of_three(m, (1000, 1000, 1000))
    dcs.release_leadership()
    other = _manager(dcs, "c2")
    with pytest.raises(ControllerError, match="restarted"):
        _beat(other, 1, 900, boot="boot-1-again")
    with pytest.raises(ControllerError, match="restarted"):
        _beat(other, 3, 1000)
    assert other.scan_not_active() == []  # 2 is alive for the takeover's grace, its log end unknown
    s = _beat(other, 2, 1000)
    assert (s.master_id, s.epoch) == (2, 2)


def test_a_group_stored_before_boot_ids_adopts_its_masters_process_then_sees_its_restart():
    dcs = MemoryDCS()
    m = _manager(dcs)
    _group_of_three(m, (1000, 1000, 1000))
    state = m.state("g")
    assert state is not None
    state.master_boot_id = ""  # as written by a controller that knew no boot ids
    m._save(state, "old format")
    assert _beat(m, 1, 1000).master_boot_id == "boot-1"
    with pytest.raises(ControllerError, match="restarted"):
        _beat(m, 1, 1000, boot="boot-1-again")


def test_while_a_restarted_master_waits_for_the_election_no_replica_is_told_to_follow_it():
    """A replica that (re)starts then would follow the state's master: fetch the restarted process's epochs and
    log end and truncate its own log to them, cutting the acknowledged tail the election is waiting to find."""
    m = _manager()
    _group_of_three(m, (1000, 1000, 1000))
    with pytest.raises(ControllerError, match="restarted"):
        _beat(m, 1, 900, boot="boot-1-again")
    with pytest.raises(ControllerError, match="restarted"):
        _beat(m, 2, 1000, boot="boot-2-again")  # its report counts, but it hears no master to follow
    s = m.state("g")
    assert s is not None and (s.master_id, s.epoch) == (1, 1)
    s = _beat(m, 3, 1000, boot="boot-3-again")  # the last report: the election, then an answer
    assert (s.master_id, s.epoch) == (2, 2)
    assert _beat(m, 2, 1000, boot="boot-2-again").master_id == 2
