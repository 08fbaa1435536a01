"""EtcdDCS against a real etcd: one leader at a time, the lease expiring hands the leadership over, and group
writes are compare-and-swap guarded by the leadership."""

from __future__ import annotations

import time

import pytest

from txmq.controller.dcs import EtcdDCS
from txmq.controller.etcd_launch import EtcdProcess


@pytest.fixture
def etcd(tmp_path):
    p = EtcdProcess(tmp_path / "etcd", tmp_path / "etcd.log").start()
    try:
        yield p
    finally:
        p.stop()


def test_leadership_and_guarded_writes(etcd):
    a, b = EtcdDCS(etcd.endpoint), EtcdDCS(f"http://127.0.0.1:1,{etcd.endpoint}")  # b: first endpoint is dead
    assert a.hold_leadership("ctl-a", 2)
    assert not b.hold_leadership("ctl-b", 2)
    assert b.leader() == "ctl-a"
    v1 = a.save_group("g", {"epoch": 1}, 0, "ctl-a")
    assert v1
    assert a.save_group("g", {"epoch": 2}, 0, "ctl-a") is None  # stale version
    assert b.save_group("g", {"epoch": 9}, v1, "ctl-b") is None  # not the leader
    assert b.load_groups() == {"g": ({"epoch": 1}, v1)}
    assert a.hold_leadership("ctl-a", 2)  # renewed
    deadline = time.monotonic() + 10
    while not b.hold_leadership("ctl-b", 2):  # a stops renewing: its lease runs out
        assert time.monotonic() < deadline
        time.sleep(0.3)
    assert b.leader() == "ctl-b"
    assert a.save_group("g", {"epoch": 3}, v1, "ctl-a") is None
    assert b.save_group("g", {"epoch": 3}, v1, "ctl-b")
    b.release_leadership()
    assert a.leader() is None
