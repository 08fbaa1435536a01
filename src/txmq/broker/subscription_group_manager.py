"""Subscription groups (RocketMQ ``SubscriptionGroupManager``): per consumer group, whether it may consume,
its retry queues and maximum retries; kept in ``config/subscriptionGroup.json``. Groups that consumers bring
with them need no entry: one is made with the defaults when an operator first changes a group.

A change is appended to ``config/subscriptionGroup.json.changes`` (``ConfigJournal``, records shaped as the
topics' are) instead of rewriting every group: a rewrite cost time in proportion to the groups already there. It is
in the table at once and answered once durable, the event loop serving other connections meanwhile; undone when its
append fails."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from txmq.broker.config_journal import ConfigJournal, entries_of, undone_when_failed, when_durable
from txmq.conf import update_fields
from txmq.errors import InvalidMessageError
from txmq.topic import check_group

log = logging.getLogger("txmq.broker")


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
        """``InvalidMessageError`` for an illegal group name, ``ValueError`` for a field of the wrong type: what is
        refused here is never stored, and is dropped when a file holds it."""
        name = data.get("groupName")
        if not isinstance(name, str) or not name:
            raise ValueError("a subscription group needs a groupName")
        check_group(name)
        cfg = cls(name)
        update_fields(cfg, {k: v for k, v in data.items() if k != "groupName"})
        for f in fields(cfg):
            value = getattr(cfg, f.name)
            if type(value).__name__ != f.type:  # bool is no int here: JSON's true is not a count
                raise ValueError(f"{_camel(f.name)} must be {f.type}, not {value!r}")
        return cfg


def _camel(name: str) -> str:
    first, *rest = name.split("_")
    return first + "".join(part.title() for part in rest)


class SubscriptionGroupManager:
    def __init__(self, root: Path) -> None:
        self.path = root / "config" / "subscriptionGroup.json"
        self.journal = ConfigJournal(self.path)
        self.table: dict[str, SubscriptionGroupConfig] = {}
        saved, changes = self.journal.load()
        self._load(((saved or {}).get("subscriptionGroupTable") or {}).values(), self.path)
        for change in changes:
            self._replay(change)
        if self.journal.dirty:  # fold the journal in, dropping a torn tail, before appending to it
            self.journal.fold_at_open(self.serialize())

    def _replay(self, change: Any) -> None:
        """Apply one journal record; one whose CRC holds but whose shape is not a change of groups is skipped with
        a log line, as the topics' are."""
        parts = self.journal.table_change(change, "subscription groups")
        if parts is None:
            return
        self._load(parts[0], self.journal.journal_path)
        for group in parts[1]:
            self.table.pop(group, None)

    def _load(self, saved: Iterable[Any], where: Path) -> None:
        for data in saved:
            try:
                cfg = SubscriptionGroupConfig.from_json(data)
            except (AttributeError, TypeError, ValueError, InvalidMessageError) as exc:  # saved before it was
                # checked where it enters
                log.warning("subscription group dropped from %s: %.200r: %s", where, data, exc)
                continue
            self.table[cfg.group_name] = cfg

    def get(self, group: str) -> SubscriptionGroupConfig | None:
        return self.table.get(group)

    async def update(self, cfg: SubscriptionGroupConfig) -> None:
        """Done once the change is durable (after every change made before it); ``OSError`` when it could not be
        stored, and the table is then as it was."""
        before = entries_of(self.table, [cfg.group_name])
        self.table[cfg.group_name] = cfg
        await self._appended({"put": [cfg.to_json()]}, before)

    async def delete(self, group: str, then: Callable[[], None] | None = None) -> bool:
        """``update``'s deletion; False when there is no such group. ``then`` once it is durable
        (``when_durable``)."""
        if group not in self.table:
            return False
        before = entries_of(self.table, [group])
        del self.table[group]
        await self._appended({"delete": [group]}, before, then)
        return True

    def _appended(self, record: dict[str, Any], before: dict[str, Any],
                  then: Callable[[], None] | None = None) -> asyncio.Future[None]:
        """``record`` handed to the journal's writer: done once durable, the change undone when it failed."""
        durable = self.journal.append_soon(record, len(self.table), self.serialize)
        undone_when_failed(durable, self.table, before, self.journal)
        when_durable(durable, then)
        return asyncio.shield(durable)

    def serialize(self) -> dict[str, Any]:
        return {"subscriptionGroupTable": {name: cfg.to_json() for name, cfg in self.table.items()}}

    def persist(self) -> None:
        """The whole table as the snapshot, the journal emptied."""
        self.journal.compact(self.serialize())
