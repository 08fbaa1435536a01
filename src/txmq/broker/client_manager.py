"""Who is connected: producer groups (for check-back) and consumer groups (for rebalancing).

RocketMQ's ``ProducerManager`` and ``ConsumerManager``: clients announce themselves by heartbeat (code 34);
a connection that closes or stays silent past ``expired_ms`` is removed, and the members of a consumer group
are told (code 40) so that they rebalance at once instead of at their next periodic rebalance.
"""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from txmq.remoting.transport import Connection

log = logging.getLogger("txmq.broker")


@dataclass(slots=True)
class ClientChannelInfo:
    conn: Connection
    client_id: str
    language: str
    version: int
    last_update: float = field(default_factory=time.monotonic)


@dataclass(slots=True)
class SubscriptionData:
    topic: str
    sub_string: str = "*"
    tags_set: list[str] = field(default_factory=list)
    code_set: list[int] = field(default_factory=list)
    sub_version: int = 0
    expression_type: str = "TAG"

    def to_json(self) -> dict[str, object]:
        return {"topic": self.topic, "subString": self.sub_string, "tagsSet": self.tags_set,
                "codeSet": self.code_set, "subVersion": self.sub_version, "expressionType": self.expression_type,
                "classFilterMode": False}


@dataclass(slots=True)
class ConsumerGroupInfo:
    group: str
    consume_type: str = "CONSUME_PASSIVELY"
    message_model: str = "CLUSTERING"
    consume_from_where: str = "CONSUME_FROM_LAST_OFFSET"
    subscriptions: dict[str, SubscriptionData] = field(default_factory=dict)
    channels: dict[int, ClientChannelInfo] = field(default_factory=dict)

    def client_ids(self) -> list[str]:
        return sorted({c.client_id for c in self.channels.values()})


def joined(kind: str, info: ClientChannelInfo, groups: list[str]) -> None:
    """One line for the groups one heartbeat joined (a heartbeat may name many: not a line each)."""
    if groups:
        log.info("%s %s from %s joined %d group%s: %s", kind, info.client_id, info.conn.remote_address, len(groups),
                 "" if len(groups) == 1 else "s", _names(groups))


def _left(kind: str, conn: Connection, groups: list[str]) -> None:
    if groups:
        log.info("%s %s left %d group%s: %s", kind, conn.remote_address, len(groups), "" if len(groups) == 1 else "s",
                 _names(groups))


def _names(groups: list[str]) -> str:
    shown = ", ".join(groups[:10])
    return shown + (f" (+{len(groups) - 10} more)" if len(groups) > 10 else "")


class ProducerManager:
    def __init__(self) -> None:
        self.groups: dict[str, dict[int, ClientChannelInfo]] = {}
        self._of_conn: dict[int, set[str]] = {}  # the groups each connection is registered in
        self._rr = itertools.count()

    def register(self, group: str, info: ClientChannelInfo) -> bool:
        """True when the connection joins ``group`` now (the caller logs the joins of a heartbeat together)."""
        chans = self.groups.setdefault(group, {})
        known = chans.get(id(info.conn))
        if known is None:
            chans[id(info.conn)] = info
            self._of_conn.setdefault(id(info.conn), set()).add(group)
            return True
        known.last_update = info.last_update
        return False

    def unregister(self, group: str, conn: Connection, *, quiet: bool = False) -> bool:
        chans = self.groups.get(group)
        if not chans or chans.pop(id(conn), None) is None:
            return False
        if not quiet:
            _left("producer", conn, [group])
        if not chans:
            del self.groups[group]
        mine = self._of_conn.get(id(conn))
        if mine is not None:
            mine.discard(group)
            if not mine:
                del self._of_conn[id(conn)]
        return True

    def available_channel(self, group: str) -> Connection | None:
        """A live connection of ``group`` that reads what it is sent, round robin so that check-back load spreads over
        the group. One whose peer does not read (its transport over its high-water mark) is passed over: a check-back
        carries its half's body, and each pass's written to it would pile up in this process; the check is tried
        again at the next pass."""
        chans = [conn for conn in self._live(group) if not conn.write_paused]
        if not chans:
            return None
        return chans[next(self._rr) % len(chans)]

    def held_up(self, group: str) -> bool:
        """A live connection of ``group`` is over its high-water mark: the checks before are still on their way to a
        producer that reads them (a pass's checks of large halves put it there for a moment). One that never reads
        goes too: its requests are not read meanwhile (``Connection.pause_writing``), its heartbeats with them, and
        it leaves the group after ``clientChannelExpiredMs``."""
        return any(conn.write_paused for conn in self._live(group))

    def _live(self, group: str) -> list[Connection]:
        """The open connections registered in ``group``."""
        return [c.conn for c in self.groups.get(group, {}).values() if not c.conn.closed]

    def remove_connection(self, conn: Connection) -> None:
        """Every registration of ``conn`` (its groups, not every group: many connections close), one line."""
        groups = sorted(self._of_conn.get(id(conn), ()))
        _left("producer", conn, [g for g in groups if self.unregister(g, conn, quiet=True)])

    def scan_expired(self, expired_s: float) -> None:
        now = time.monotonic()
        for group, chans in list(self.groups.items()):
            for info in list(chans.values()):
                if now - info.last_update > expired_s:
                    log.warning("producer %s of group %s expired", info.client_id, group)
                    self.unregister(group, info.conn, quiet=True)


class ConsumerManager:
    def __init__(self, on_ids_changed: Callable[[ConsumerGroupInfo], None]) -> None:
        self.groups: dict[str, ConsumerGroupInfo] = {}
        self._of_conn: dict[int, set[str]] = {}  # the groups each connection is registered in
        self._on_ids_changed = on_ids_changed

    def register(self, info: ConsumerGroupInfo, channel: ClientChannelInfo) -> bool:
        """True when the connection joins the group now (the caller logs the joins of a heartbeat together)."""
        group = self.groups.get(info.group)
        if group is None:
            group = self.groups[info.group] = ConsumerGroupInfo(info.group)
        group.consume_type = info.consume_type
        group.message_model = info.message_model
        group.consume_from_where = info.consume_from_where
        group.subscriptions = info.subscriptions
        known = group.channels.get(id(channel.conn))
        if known is None:
            group.channels[id(channel.conn)] = channel
            self._of_conn.setdefault(id(channel.conn), set()).add(info.group)
            self._on_ids_changed(group)
            return True
        known.last_update = channel.last_update
        return False

    def unregister(self, group_name: str, conn: Connection, *, quiet: bool = False) -> bool:
        group = self.groups.get(group_name)
        if group is None or group.channels.pop(id(conn), None) is None:
            return False
        if not quiet:
            _left("consumer", conn, [group_name])
        if group.channels:
            self._on_ids_changed(group)
        else:
            del self.groups[group_name]
        mine = self._of_conn.get(id(conn))
        if mine is not None:
            mine.discard(group_name)
            if not mine:
                del self._of_conn[id(conn)]
        return True

    def get(self, group: str) -> ConsumerGroupInfo | None:
        return self.groups.get(group)

    def remove_connection(self, conn: Connection) -> None:
        """Every registration of ``conn`` (its groups, not every group), one line."""
        groups = sorted(self._of_conn.get(id(conn), ()))
        _left("consumer", conn, [g for g in groups if self.unregister(g, conn, quiet=True)])

    def scan_expired(self, expired_s: float) -> None:
        now = time.monotonic()
        for name, group in list(self.groups.items()):
            for info in list(group.channels.values()):
                if now - info.last_update > expired_s:
                    log.warning("consumer %s of group %s expired", info.client_id, name)
                    self.unregister(name, info.conn, quiet=True)
