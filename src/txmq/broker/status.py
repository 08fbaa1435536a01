"""What a broker reports of itself: its replication (RocketMQ's ``HARuntimeInfo``, ``txmq ha status``) and
txmq's STATS (topics, consumer lag, transactions, the store, rates: ``txmq stats``)."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from txmq.broker.controller import BrokerController


def ha_status(broker: BrokerController) -> dict[str, Any]:
    """A master's slaves with their acknowledged offsets and lag, or a slave's view of its master."""
    c = broker.config
    out: dict[str, Any] = {"brokerName": c.broker_name, "brokerId": c.broker_id, "role": c.broker_role,
                           "addr": broker.addr, "haAddr": broker.ha_addr, "maxOffset": broker.store.max_phy_offset}
    if broker.ha_service is not None:
        slaves = [dataclasses.asdict(s) for s in broker.ha_service.status()]
        out["slaves"] = slaves
        out["inSyncSlaveNums"] = sum(1 for s in slaves if s["in_sync"])
    if broker.ha_client is not None:
        out["master"] = broker.ha_client.status()
    if broker.replicas_manager is not None:
        out["controller"] = broker.replicas_manager.status()
    return out


def broker_stats(broker: BrokerController) -> dict[str, Any]:
    store = broker.store
    topics = {}
    for name, cfg in sorted(broker.topic_config_manager.table.items()):
        queues = {q: {"min": store.get_min_offset_in_queue(name, q), "max": store.get_max_offset_in_queue(name, q)}
                  for q in range(cfg.write_queue_nums)}
        topics[name] = {"perm": cfg.perm, "queues": queues,
                        "messages": sum(v["max"] - v["min"] for v in queues.values())}
    groups = {}
    for key, offsets in broker.consumer_offset_manager.table.items():
        topic, group = key.split("@", 1)
        lag = sum(max(0, store.get_max_offset_in_queue(topic, q) - o) for q, o in offsets.items())
        groups[key] = {"topic": topic, "group": group, "lag": lag, "offsets": offsets}
    tx = broker.transaction_service
    m = tx.metrics
    return {
        "broker": {"name": broker.config.broker_name, "addr": broker.addr,
                   "flushDiskType": broker.config.store.flush_disk_type.value},
        "topics": topics,
        "consumerGroups": groups,
        "transactions": {
            "pendingPerTopic": dict(tx.table.pending_per_topic), "pending": len(tx.table),
            "discarded": len(tx.table.discarded), "commits": m.commits, "rollbacks": m.rollbacks,
            "checks": m.checks, "discards": m.discards, "duplicates": m.duplicates, "conflicts": m.conflicts,
            "resumes": m.resumes, "orphans": m.orphans, "commitLatencyMs": m.latency_percentiles(),
        },
        "store": store.runtime_info(),
        "rates": {"putTps": broker.stats_manager.window("BROKER_PUT_NUMS", "", 60)[1],
                  "getTps": broker.stats_manager.window("BROKER_GET_NUMS", "", 60)[1]},
        "remoting": {"connections": len(broker.server.connections), "bufferedBytes": broker.server.buffered_bytes,
                     "heldPulls": broker.core.pulls.hold_service.held},
    }
