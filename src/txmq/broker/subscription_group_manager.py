"""Subscription groups (RocketMQ ``SubscriptionGroupManager``): per consumer group, whether it may consume,
its retry queues and maximum retries; kept in ``config/subscriptionGroup.json``. Groups that consumers bring
with them need no entry: one is made with the defaults when an operator first changes a group.

A change is appended to ``config/subscriptionGroup.json.changes`` (``ConfigJournal``, records shaped as the
topics' are) instead of rewriting every group: a rewrite cost time in proportion to the groups already there. It is
queued until its record is durable, the event loop serving other connections meanwhile, and only then in the table
(in the order the changes were made) and answered: every request is served the groups as stored, never a change
that its append may still fail, or a crash lose. One whose append fails is dropped, never served."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from txmq.broker.config_journal import ConfigJournal, when_durable
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


# A change of groups: per group its new config, or None for its deletion.
GroupChange = dict[str, SubscriptionGroupConfig | None]


class SubscriptionGroupManager:
    def __init__(self, root: Path) -> None:
        self.path = root / "config" / "subscriptionGroup.json"
        self.journal = ConfigJournal(self.path)
        self.table: dict[str, SubscriptionGroupConfig] = {}  # the groups as stored: what every request is served
        self.queued: deque[GroupChange] = deque()  # changes handed to the journal, not durable yet, in order
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
        """The group's config as stored."""
        return self.table.get(group)

    def named(self, group: str) -> bool:
        """Whether the group is stored or a change of it waits to be: what the ACL asks of a change of it. A
        creation waiting for the disk is the broker's group already: another change of it needs Update, not the
        Create that would let an account with Create alone overwrite the config an operator is creating."""
        return group in self.table or any(group in change for change in self.queued)

    async def update(self, cfg: SubscriptionGroupConfig) -> None:
        """Done once the change is durable (after every change made before it), and in the table from then on;
        ``OSError`` when it could not be stored, and the table never held it."""
        await self._change({cfg.group_name: cfg}, {"put": [cfg.to_json()]})

    async def delete(self, group: str, then: Callable[[], None] | None = None) -> bool:
        """``update``'s deletion; False when no such group is stored nor a change of it waits to be (``named``: a
        creation waiting for the disk is deleted after it, not refused). ``then`` once it is durable
        (``when_durable``)."""
        if not self.named(group):
            return False
        await self._change({group: None}, {"delete": [group]}, then)
        return True

    def replace_all(self, saved: Iterable[Any]) -> asyncio.Future[None] | None:
        """A slave takes its master's groups (SlaveSynchronize, RocketMQ's ``syncSubscriptionGroupConfig``): the
        groups become the master's, one the master lacks gone. Only the difference is a change (None: none), done
        once durable like an operator's; a document that does not parse is dropped, as when loading (without a
        line per copy: the master logged it when it was refused there)."""
        table: dict[str, SubscriptionGroupConfig] = {}
        for data in saved:
            with contextlib.suppress(AttributeError, TypeError, ValueError, InvalidMessageError):
                cfg = SubscriptionGroupConfig.from_json(data)
                table[cfg.group_name] = cfg
        current = self._with_queued()
        change: GroupChange = {name: cfg for name, cfg in table.items() if current.get(name) != cfg}
        change.update((name, None) for name in current if name not in table)
        if not change:
            return None
        return self._change(change, {"put": [cfg.to_json() for cfg in change.values() if cfg is not None],
                                     "delete": [name for name, cfg in change.items() if cfg is None]})

    def _change(self, change: GroupChange, record: dict[str, Any],
                then: Callable[[], None] | None = None) -> asyncio.Future[None]:
        """``change`` queued and its ``record`` handed to the journal's writer: done once durable, the change in
        the table by then (``_settled``)."""
        self.queued.append(change)  # before the append: a fold it makes writes this change too
        durable = self.journal.append_soon(record, len(self.table), self.serialize)
        durable.add_done_callback(self._settled)
        when_durable(durable, then)
        return asyncio.shield(durable)

    def _settled(self, durable: asyncio.Future[None]) -> None:
        """The oldest queued change's record durable, or failed: it goes into the table, or is dropped (no request
        was served it, nothing to undo). The journal's writer settles records in the order they were handed to it,
        so this is the change ``durable`` was for."""
        change = self.queued.popleft()
        if durable.cancelled():
            return
        if durable.exception() is not None:
            self.journal.undone()  # folds taken from here on hold it no more
            return
        _apply(self.table, change)

    def served(self) -> dict[str, Any]:
        """The groups as stored (GET_ALL_SUBSCRIPTIONGROUP_CONFIG's body)."""
        return _document(self.table)

    def serialize(self) -> dict[str, Any]:
        """The document a fold writes: the groups as stored and every queued change, as the journal holds them
        once written (a fold taken before a queued change failed is not written: ``ConfigJournal`` appends its
        record instead)."""
        return _document(self._with_queued())

    def _with_queued(self) -> dict[str, SubscriptionGroupConfig]:
        """The groups as stored with every queued change applied: what the journal holds once they are written."""
        table = dict(self.table)
        for change in self.queued:
            _apply(table, change)
        return table

    def persist(self) -> None:
        """The whole table as the snapshot, the journal emptied."""
        self.journal.compact(self.serialize())


def _document(table: dict[str, SubscriptionGroupConfig]) -> dict[str, Any]:
    return {"subscriptionGroupTable": {name: cfg.to_json() for name, cfg in table.items()}}


def _apply(table: dict[str, SubscriptionGroupConfig], change: GroupChange) -> None:
    for group, cfg in change.items():
        if cfg is None:
            table.pop(group, None)
        else:
            table[group] = cfg
