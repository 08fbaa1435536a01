"""Subscription groups (RocketMQ ``SubscriptionGroupManager``): per consumer group, whether it may consume,
its retry queues and maximum retries; kept in ``config/subscriptionGroup.json``. Groups that consumers bring
with them need no entry: one is made with the defaults when an operator first changes a group."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from txmq.broker.persist import read_json, write_json_atomic
from txmq.conf import update_fields


@dataclass
class SubscriptionGroupConfig:
    group_name: str
    consume_enable: bool = True
    consume_from_min_enable: bool = True
    consume_broadcast_enable: bool = True
    retry_queue_nums: int = 1
    retry_max_times: int = 16
    broker_id: int = 0
    which_broker_when_consume_slowly: int = 1
    notify_consumer_ids_changed_enable: bool = True

    def to_json(self) -> dict[str, Any]:
        """RocketMQ's field names (camelCase)."""
        return {_camel(k): v for k, v in asdict(self).items()}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> SubscriptionGroupConfig:
        name = data.get("groupName")
        if not isinstance(name, str) or not name:
            raise ValueError("a subscription group needs a groupName")
        cfg = cls(name)
        update_fields(cfg, {k: v for k, v in data.items() if k != "groupName"})
        return cfg


def _camel(name: str) -> str:
    first, *rest = name.split("_")
    return first + "".join(part.title() for part in rest)


class SubscriptionGroupManager:
    def __init__(self, root: Path) -> None:
        self.path = root / "config" / "subscriptionGroup.json"
        self.table: dict[str, SubscriptionGroupConfig] = {}
        saved = read_json(self.path) or {}
        for data in (saved.get("subscriptionGroupTable") or {}).values():
            cfg = SubscriptionGroupConfig.from_json(data)
            self.table[cfg.group_name] = cfg

    def get(self, group: str) -> SubscriptionGroupConfig | None:
        return self.table.get(group)

    def update(self, cfg: SubscriptionGroupConfig) -> None:
        self.table[cfg.group_name] = cfg
        self.persist()

    def delete(self, group: str) -> bool:
        if self.table.pop(group, None) is None:
            return False
        self.persist()
        return True

    def serialize(self) -> dict[str, Any]:
        return {"subscriptionGroupTable": {name: cfg.to_json() for name, cfg in self.table.items()}}

    def persist(self) -> None:
        write_json_atomic(self.path, self.serialize())
