"""A master's SyncStateSet grows by the confirm offset (RocketMQ's maybeExpandInSyncStateSet), as a unit: the
broker, its store and its HA service are stand-ins; the controller's answer takes the proposal."""

from __future__ import annotations

import asyncio
import time
from types import SimpleNamespace
from typing import Any

import pytest

from txmq.broker.config import BrokerConfig
from txmq.controller.replicas_manager import ReplicasManager


@pytest.mark.parametrize(("ack", "joins"), [(850, True), (800, True), (799, False)])
def test_a_slave_joins_the_sync_state_set_once_it_holds_the_confirm_offset_not_the_logs_end(tmp_path, ack, joins):
    cfg = BrokerConfig(broker_id=1, broker_role="SYNC_MASTER", enable_controller_mode=True,
                       controller_addr="127.0.0.1:1", store_path_root_dir=str(tmp_path))
    now = time.monotonic()
    conns = [SimpleNamespace(broker_id=2, ack_offset=800, last_report=now),  # in the set: the confirm offset is its
             SimpleNamespace(broker_id=3, ack_offset=ack, last_report=now)]
    needed: list[frozenset[int]] = []
    ha = SimpleNamespace(connections=conns, in_sync=lambda c: True, set_needed_slaves=needed.append)
    store = SimpleNamespace(max_phy_offset=1000, confirm_offset=800)  # puts past 800 wait for slave 2
    rm = ReplicasManager(SimpleNamespace(config=cfg, ha_service=ha, store=store))  # type: ignore[arg-type]
    rm.sync_state_set = [1, 2]
    proposals: list[list[int]] = []

    async def controller(code: int, body: dict[str, Any]) -> dict[str, Any]:
        proposals.append(body["syncStateSet"])
        assert frozenset({2, 3}) in needed  # counted for SYNC puts from the proposal on
        return {"sync_state_set": body["syncStateSet"], "sync_state_set_epoch": 1}

    rm._call = controller  # type: ignore[method-assign]
    asyncio.run(rm._maintain_sync_state_set())
    assert proposals == ([[1, 2, 3]] if joins else [])
