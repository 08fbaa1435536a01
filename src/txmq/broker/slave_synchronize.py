"""A slave's copy of its master's metadata (RocketMQ ``SlaveSynchronize``): topic configs, consumer offsets,
delay offsets and subscription groups, fetched with RocketMQ's own requests (GET_ALL_TOPIC_CONFIG 21,
GET_ALL_CONSUMER_OFFSET 43, GET_ALL_DELAY_OFFSET 45, GET_ALL_SUBSCRIPTIONGROUP_CONFIG 201). RocketMQ does it every
10 s; these tables are small, so txmq does it every ``slaveSynchronizeInterval`` (3 s). The commit log itself
comes through the HA port (``txmq.store.ha``).

In controller mode the copy is adopted only if, once fetched, the master still acts at the epoch this replica
follows (``ReplicasManager.master_acts``): a fenced master's tables are stale once another master acts."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import orjson

from txmq.errors import ClientError
from txmq.failure_run import FailureRun
from txmq.remoting.codes import RequestCode, ResponseCode
from txmq.remoting.command import RemotingCommand
from txmq.topic import TopicConfig, out_of_bounds

if TYPE_CHECKING:
    from txmq.broker.controller import BrokerController

log = logging.getLogger("txmq.broker")


class SlaveSynchronize:
    def __init__(self, broker: BrokerController) -> None:
        self.broker = broker
        self.master_addr = ""  # the master's remoting address, as the name server names it
        self.synced_at = 0.0  # loop time of the last complete copy
        self._failures = FailureRun(log)
        self._skipped: dict[str, str] = {}  # the master's topics the last copy skipped (logged when they change)

    async def _fetch(self, addr: str, code: int) -> Any:
        resp = await self.broker.namesrv_client.invoke(addr, RemotingCommand.request(code), 5.0)
        if resp.code != ResponseCode.SUCCESS:
            raise ClientError(f"master answered {resp.code} to request {code}: {resp.remark}")
        return orjson.loads(resp.body)

    async def sync_all(self) -> None:
        addr = self.master_addr  # one master for the whole copy, whatever changes meanwhile
        if not addr:
            return
        replicas = self.broker.replicas_manager
        try:
            topics = await self._fetch(addr, RequestCode.GET_ALL_TOPIC_CONFIG)
            offsets = await self._fetch(addr, RequestCode.GET_ALL_CONSUMER_OFFSET)
            delays = await self._fetch(addr, RequestCode.GET_ALL_DELAY_OFFSET)
            groups = await self._fetch(addr, RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG)
            if replicas is not None and not await replicas.master_acts(addr):
                raise ClientError("it does not act as the master this replica follows (any more): copy not adopted")
            copy = _parsed(topics, offsets, delays, groups)
        except (ClientError, OSError, ValueError) as exc:  # orjson.JSONDecodeError is a ValueError
            self._failures.failed("slave synchronize from %s failed: %s", addr, exc)
            return
        try:
            await self._adopt(addr, copy)
        except OSError as exc:  # a full disk: one line for the run (the copy serves from memory; a restart reads
            # the last one stored, and its first copy adopts the master's again)
            self._failures.failed("slave synchronize from %s: the copy could not be stored: %s", addr, exc)
            return
        self._failures.worked("slave synchronize from %s works again", addr)

    async def _adopt(self, addr: str, copy: tuple[list[Any], dict[str, str], dict[str, dict[int, int]],
                                                  dict[int, int], list[Any]]) -> None:
        """The master's tables become this slave's; ``OSError`` when their write failed."""
        b = self.broker
        topic_configs, skipped, offset_table, delay_table, group_docs = copy
        if skipped and skipped != self._skipped:
            log.warning("%d topic%s of %s skipped: %.500s", len(skipped), "" if len(skipped) == 1 else "s", addr,
                        "; ".join(f"{name:.100}: {why}" for name, why in skipped.items()))
        self._skipped = skipped
        b.consumer_offset_manager.replace_all(offset_table)
        b.schedule_service.replace_offsets(delay_table)
        groups_stored = b.subscription_group_manager.replace_all(group_docs)
        # Last: the topics are in the table before the first await, with the offsets, in the same step of the loop
        # (no change of role in between); only their write is waited for, and the groups'.
        try:
            await b.topic_config_manager.replace_all(topic_configs)
        finally:  # the groups' write is waited for (and its failure seen) whatever the topics' did
            if groups_stored is not None:
                await groups_stored


def _parsed(topics: Any, offsets: Any, delays: Any, groups: Any) -> tuple[
        list[Any], dict[str, str], dict[str, dict[int, int]], dict[int, int], list[Any]]:
    """The master's replies as the slave adopts them: its topics' documents (each checked by ``replace_all``), the
    topics skipped for their queue numbers (``_bounded``), its consumer offsets, its delay offsets and its
    subscription groups' documents (each checked by ``replace_all``). ``ValueError`` for a reply of another shape:
    nothing is adopted then, rather than the tables before the one that does not parse."""
    try:
        return (*_bounded((topics.get("topicConfigTable") or {}).values()),
                {k: {int(q): int(o) for q, o in v.items()} for k, v in (offsets.get("offsetTable") or {}).items()},
                {int(k): int(v) for k, v in (delays.get("offsetTable") or {}).items()},
                list((groups.get("subscriptionGroupTable") or {}).values()))
    except (AttributeError, TypeError) as exc:
        raise ValueError(f"a reply of another shape ({exc})") from exc


def _bounded(docs: Iterable[Any]) -> tuple[list[Any], dict[str, str]]:
    """The master's topic documents but those whose queue numbers the broker's own updateTopic refuses
    (``check_queue_nums``: a peer's numbers would size the slave's loops over queues, its registration and its
    clients' routes), and those skipped (name -> why). A document that does not parse is ``replace_all``'s to drop."""
    parsed = [(doc, _parsed_topic(doc)) for doc in docs]
    skipped = out_of_bounds(cfg for _, cfg in parsed if cfg is not None)
    return [doc for doc, cfg in parsed if cfg is None or cfg.topic_name not in skipped], skipped


def _parsed_topic(doc: Any) -> TopicConfig | None:
    try:
        return TopicConfig.from_json(doc)
    except (AttributeError, KeyError, TypeError, ValueError):
        return None
