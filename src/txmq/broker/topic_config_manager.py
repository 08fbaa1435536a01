"""Topic configs of one broker, persisted in ``config/topics.json`` (RocketMQ ``TopicConfigManager``).

A creation, update or deletion is appended to ``config/topics.json.changes`` (``ConfigJournal``) rather than
rewriting the whole table: rewriting made each creation cost time in proportion to the topics already there, and
creating N topics cost N squared. Every change is appended without holding the event loop, and its topics are in
``pending`` until it is durable: an operator's change (``update``, ``delete``) is answered then, and what answers a
request about a topic (a send to it) waits for ``durable(topic)`` — for a topic a client's request creates too (a
send's, a heartbeat's retry topic, a dead-letter topic)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from txmq.broker.config_journal import ConfigJournal, when_durable
from txmq.data_version import DataVersion, data_version_of, next_version, version_json
from txmq.errors import InvalidMessageError
from txmq.topic import (
    AUTO_CREATE_TOPIC_KEY_TOPIC,
    RMQ_SYS_SCHEDULE_TOPIC,
    RMQ_SYS_TRANS_CHECK_MAX_TIME_TOPIC,
    RMQ_SYS_TRANS_HALF_TOPIC,
    RMQ_SYS_TRANS_OP_HALF_TOPIC,
    RMQ_SYS_WHEEL_TIMER_TOPIC,
    PermName,
    TopicConfig,
    check_topic,
)

log = logging.getLogger("txmq.broker")

_ABSENT = object()  # a topic the table did not hold


class TopicConfigManager:
    def __init__(self, root: Path, *, auto_create: bool, default_queue_nums: int, delay_levels: int) -> None:
        self.path = root / "config" / "topics.json"
        self.journal = ConfigJournal(self.path)
        self.table: dict[str, TopicConfig] = {}
        # RocketMQ's DataVersion, which the name servers compare to skip a registration whose topics did not change:
        # a new one at every start (the table loaded may differ from what any name server saw) and every change.
        self.data_version: DataVersion = (0, 0)
        # The broker tells its name servers: of the topics created or changed, or (None) of a deletion.
        self.on_change: Callable[[list[str] | None], None] | None = None
        self.pending: dict[str, asyncio.Future[None]] = {}  # topics created whose record is not durable yet
        # Per topic with changes not settled yet: [its entry as stored (the last change of it that did not fail),
        # how many of its changes are not settled]; replaced with the table (``replace_all``).
        self.unsettled: dict[str, list[Any]] = {}
        self.copy_unstored = False  # a slave's copy of its master's table is served, its write failed: the next writes
        saved, changes = self.journal.load()
        if saved:
            self._load_configs((saved.get("topicConfigTable") or {}).values())
            self._saw_version(saved)
        for change in changes:
            self._replay(change)
            self._saw_version(change)
        system = [
            TopicConfig(RMQ_SYS_TRANS_HALF_TOPIC, 1, 1),
            TopicConfig(RMQ_SYS_TRANS_OP_HALF_TOPIC, 1, 1),
            TopicConfig(RMQ_SYS_TRANS_CHECK_MAX_TIME_TOPIC, 1, 1, PermName.PERM_READ),
            TopicConfig(RMQ_SYS_SCHEDULE_TOPIC, delay_levels, delay_levels),
            TopicConfig(RMQ_SYS_WHEEL_TIMER_TOPIC, 1, 1),
        ]
        if auto_create:
            system.append(TopicConfig(AUTO_CREATE_TOPIC_KEY_TOPIC, default_queue_nums, default_queue_nums,
                                      PermName.READ_WRITE | PermName.PERM_INHERIT))
        else:
            self.table.pop(AUTO_CREATE_TOPIC_KEY_TOPIC, None)
        for cfg in system:
            self.table.setdefault(cfg.topic_name, cfg)
        self.next_version()
        if self.journal.dirty:  # fold the journal in, dropping a torn tail, before appending to it
            self.journal.fold_at_open(self.serialize())

    def _saw_version(self, doc: Any) -> None:
        """Start after the version ``doc`` (the snapshot or a journal record) was saved with, if it is later."""
        version = data_version_of(doc.get("dataVersion") if isinstance(doc, dict) else None)
        if version is not None:
            self.data_version = max(self.data_version, version)

    def next_version(self) -> None:
        """A new data version (RocketMQ's ``getDataVersion().nextVersion()``): at start, at each change, and when
        what the broker registers of its topics changes otherwise (its permission), so that the name servers read
        its next registration in full."""
        self.data_version = next_version(self.data_version)

    def _replay(self, change: Any) -> None:
        """Apply one journal record. A record whose CRC holds but whose shape this version does not know is skipped
        with a log line: refusing to start, or dropping the records after it, would cost the valid topics."""
        parts = self.journal.table_change(change, "topics")
        if parts is None:
            return
        puts, deletes = parts
        self._load_configs(puts)
        for topic in deletes:
            self.table.pop(topic, None)

    def _load_configs(self, saved: Iterable[Any]) -> None:
        self.table.update(_legal(saved, str(self.path)))

    def get(self, topic: str) -> TopicConfig | None:
        return self.table.get(topic)

    async def update(self, cfg: TopicConfig) -> None:
        """An operator's change, done once it is durable (after every change made before it); ``OSError`` when it
        could not be stored, and the table is then as it was."""
        await asyncio.shield(self._put(cfg))

    async def delete(self, topic: str, then: Callable[[], None] | None = None) -> bool:
        """``update``'s deletion; False when there is no such topic. ``then`` once it is durable (``when_durable``)."""
        if topic not in self.table:
            return False
        durable = self._changed([], topic)
        when_durable(durable, then)
        log.info("topic deleted: %s", topic)
        await asyncio.shield(durable)
        return True

    def _put(self, cfg: TopicConfig) -> asyncio.Future[None]:
        """Every topic is created here: ``InvalidMessageError`` for an illegal name, which would also name a
        directory of the store. Done once it is durable."""
        check_topic(cfg.topic_name)
        old = self.table.get(cfg.topic_name)
        durable = self._changed([cfg])
        log.info("topic %s %s: read=%d write=%d perm=%s", "updated" if old else "created", cfg.topic_name,
                 cfg.read_queue_nums, cfg.write_queue_nums, PermName.to_string(cfg.perm))
        return durable

    def create_in_send(self, topic: str, default_topic: str, queue_nums: int, sys_flag: int = 0) -> TopicConfig | None:
        """Auto-create ``topic`` from ``default_topic`` (TBW102) when that one allows inheritance."""
        if topic in self.table:
            return self.table[topic]
        cfg = self.inherited(topic, default_topic, queue_nums, sys_flag)
        if cfg is not None:
            self._put(cfg)
        return cfg

    def inherited(self, topic: str, default_topic: str, queue_nums: int, sys_flag: int = 0) -> TopicConfig | None:
        """The config a send would create ``topic`` with (``create_in_send``), not stored; None when
        ``default_topic`` allows no inheritance."""
        base = self.table.get(default_topic)
        if base is None or not base.perm & PermName.PERM_INHERIT:
            return None
        nums = max(1, min(queue_nums, base.write_queue_nums))
        return TopicConfig(topic, nums, nums, base.perm & ~PermName.PERM_INHERIT, topic_sys_flag=sys_flag)

    def create_if_absent(self, topic: str, queue_nums: int, perm: int = PermName.READ_WRITE) -> TopicConfig:
        """For topics the broker owns itself: retry and dead-letter topics."""
        cfg = self.table.get(topic)
        if cfg is None:
            cfg = TopicConfig(topic, queue_nums, queue_nums, perm)
            self._put(cfg)
        return cfg

    def create_all_absent(self, topics: list[str], queue_nums: int) -> list[str]:
        """``create_if_absent`` for many (the retry topics of the groups one heartbeat names), stored with one write
        and one line: one at a time, each rewrote the whole table, so a heartbeat naming thousands of new groups
        held the broker for a minute. The topics it created."""
        created = sorted({t for t in topics if t not in self.table})
        for topic in created:
            check_topic(topic)
        if not created:
            return created
        self._changed([TopicConfig(topic, queue_nums, queue_nums, PermName.READ_WRITE) for topic in created])
        log.info("%d topic%s created: %s%s", len(created), "" if len(created) == 1 else "s", ", ".join(created[:10]),
                 f" (+{len(created) - 10} more)" if len(created) > 10 else "")
        return created

    async def replace_all(self, saved: Iterable[Any]) -> None:
        """A slave takes its master's topics (their JSON documents) as they are (SlaveSynchronize): the table
        becomes the master's, a topic the master lacks (a system topic too) gone, as RocketMQ's slave does.
        Persisted when they changed, done once that is durable. One that does not parse or names no legal topic is
        dropped, as when loading."""
        table = _legal(saved, "the master")
        if table == self.table and not self.copy_unstored:
            return
        if table != self.table:
            self.table = table
            self.next_version()
            self.unsettled = {}  # a change still unsettled undoes itself in the table it was made in
        self.copy_unstored = True
        await asyncio.shield(self.journal.replace_soon(self.serialize()))
        self.copy_unstored = False

    def _changed(self, puts: list[TopicConfig], deleted: str | None = None) -> asyncio.Future[None]:
        """``puts`` created or changed, or the topic ``deleted``: in the table now, and in ``pending`` until the
        journal's writer made the record durable (the future returned), then told to the broker; undone, with a
        log line, when the append failed (the future's ``OSError``)."""
        names = [cfg.topic_name for cfg in puts] if deleted is None else [deleted]
        record = {"put": [cfg.to_json() for cfg in puts]} if deleted is None else {"delete": [deleted]}
        before = {name: self.table.get(name, _ABSENT) for name in names}
        self._apply(puts, deleted)
        durable = self.journal.append_soon(dict(record, dataVersion=version_json(self.data_version)), len(self.table),
                                           self.serialize)
        self._undone_when_failed(durable, before)
        settled: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.pending.update((name, settled) for name in names)
        durable.add_done_callback(lambda done: self._settled(done, names, settled))
        return settled

    def _undone_when_failed(self, durable: asyncio.Future[None], before: dict[str, Any]) -> None:
        """Put the entries a change made back as they are stored when its append (``durable``) fails, before
        whoever waits for it runs: a change answered as failed must be neither served nor stored by a later fold of
        the whole table. An entry a later change made again is left to that one; what it is put back to is the
        entry as the last change of it that did not fail left it (``unsettled``), not as ``before`` this change:
        that may be an earlier change that failed too."""
        table = self.table  # the one the change was made in, which a slave's ``replace_all`` replaces
        unsettled = self.unsettled
        after = {name: table.get(name, _ABSENT) for name in before}
        for name, entry in before.items():
            unsettled.setdefault(name, [entry, 0])[1] += 1

        def settled(done: asyncio.Future[None]) -> None:
            failed = not done.cancelled() and done.exception() is not None
            for name, made in after.items():
                stored = unsettled[name]
                if not failed:
                    stored[0] = made
                elif table.get(name, _ABSENT) is made:
                    if stored[0] is _ABSENT:
                        table.pop(name, None)
                    else:
                        table[name] = stored[0]
                stored[1] -= 1
                if not stored[1]:
                    del unsettled[name]
            if failed:
                self.journal.undone()

        durable.add_done_callback(settled)

    def _apply(self, puts: list[TopicConfig], deleted: str | None) -> None:
        self.table.update((cfg.topic_name, cfg) for cfg in puts)
        if deleted is not None:
            self.table.pop(deleted)
        self.next_version()

    def _settled(self, durable: asyncio.Future[None], names: list[str], settled: asyncio.Future[None]) -> None:
        """The change's record durable or failed (undone by then): its topics out of ``pending``, and only then
        ``settled`` done, so that whoever awaited it finds them settled."""
        for name in names:
            if self.pending.get(name) is settled:
                del self.pending[name]
        failed = durable.exception()
        if failed is not None:
            self.next_version()  # undone: the table differs from the one a registration may have sent meanwhile
            log.error("topic%s %s not stored: %s", "" if len(names) == 1 else "s", ", ".join(names[:10]), failed)
            settled.set_exception(failed)
            settled.exception()  # logged above: not again as never retrieved when no request waits for it
            return
        if self.on_change is not None:
            self.on_change(names)
        settled.set_result(None)

    async def durable(self, topic: str) -> None:
        """Once the last change of ``topic`` is durable and settled (out of ``pending``); ``OSError`` when it
        failed and left no such topic (a creation, undone). A failed change of a topic that stays (an update, a
        deletion) is undone to the topic as stored: what waited for it (a send) goes on with that. What is awaited
        is done only once settled: a caller that retries while the topic is pending never finds a done change still
        there (it would retry without yielding)."""
        change = self.pending.get(topic)
        if change is not None:
            try:
                await asyncio.shield(change)
            except OSError:
                if topic not in self.table:
                    raise

    def persist(self) -> None:
        """The whole table as the snapshot, the journal emptied."""
        self.journal.compact(self.serialize())

    def serialize(self) -> dict[str, object]:
        return {"topicConfigTable": {n: c.to_json() for n, c in self.table.items()},
                "dataVersion": version_json(self.data_version)}


def _legal(saved: Iterable[Any], source: str) -> dict[str, TopicConfig]:
    """The topic configs among the JSON documents ``saved`` that parse and name a legal topic, by name; the others
    dropped with one log line. Every name in the table is checked (a send looks a topic up before, and instead of,
    checking its name; a name also names a directory of the store): one saved before names were checked where they
    enter, or a master's, may be illegal."""
    table: dict[str, TopicConfig] = {}
    dropped: list[str] = []
    for doc in saved:
        try:
            cfg = TopicConfig.from_json(doc)
            check_topic(cfg.topic_name)
        except (KeyError, TypeError, ValueError, InvalidMessageError) as exc:
            dropped.append(f"{doc!r:.100}: {exc}")
            continue
        table[cfg.topic_name] = cfg
    if dropped:
        log.warning("%d topic config%s from %s dropped: %.500s", len(dropped), "" if len(dropped) == 1 else "s",
                    source, "; ".join(dropped))
    return table
