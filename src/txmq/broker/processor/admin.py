"""Admin and offset requests (RocketMQ's ``AdminBrokerProcessor`` and ``ConsumerManageProcessor``), plus
txmq's own transaction admin (``txmq tx list|show|resume``) and stats."""

from __future__ import annotations

import itertools
import logging
import time
from typing import TYPE_CHECKING, Any, NamedTuple

import orjson

from txmq.acl.model import Action, Needs, cluster_get, cluster_update
from txmq.broker.processor.ops import runtime_info
from txmq.broker.processor.refused import refused
from txmq.broker.transaction.state import Outcome
from txmq.broker.visibility import INTERNAL_TOPICS, RecordAt, internal_refusal, read_record_at, record_needs, servable
from txmq.errors import InvalidMessageError
from txmq.message import MessageConst, MessageExt, decode_message, forget_topic
from txmq.remoting.admin_headers import (
    DeleteTopicRequestHeader,
    QueryConsumeQueueRequestHeader,
    TxDecideRequestHeader,
    TxListRequestHeader,
    TxRequestHeader,
    ViewMessageRequestHeader,
    half_offset_of,
)
from txmq.remoting.codec import DEFAULT_MAX_FRAME_SIZE
from txmq.remoting.codes import RequestCode, ResponseCode
from txmq.remoting.command import RemotingCommand
from txmq.remoting.registry import RequestSpec, header, no_header
from txmq.remoting.request_headers import (
    CreateTopicRequestHeader,
    QueryConsumerOffsetRequestHeader,
    QueryMessageRequestHeader,
    SearchOffsetRequestHeader,
    TopicQueueRequestHeader,
    UpdateConsumerOffsetRequestHeader,
)
from txmq.remoting.transport import Connection
from txmq.topic import (
    RMQ_SYS_TRANS_HALF_TOPIC,
    TopicConfig,
    check_group,
    check_queue_nums,
    check_topic,
    is_system_topic,
)

if TYPE_CHECKING:
    from txmq.broker.controller import BrokerController

log = logging.getLogger("txmq.broker")

# QUERY_CONSUME_QUEUE reads at most this many entries (20 bytes each) per request: RocketMQ reads as many as asked.
MAX_QUERY_CQ_COUNT = 1000
# QUERY_MESSAGE reads at most this many messages (RocketMQ's maxMsgsNumBatch), whatever maxNum asks, and answers
# those that fit one frame (its header aside): a key many large messages share must not make answers of gigabytes.
MAX_QUERY_MESSAGES = 64
MAX_QUERY_BODY_BYTES = DEFAULT_MAX_FRAME_SIZE - 64 * 1024
# TXMQ_TX_LIST reads at most this many halves of each state, whatever ``limit`` asks: each is a read of the log on
# the event loop, and a producer may pile up its own group's halves (a discarded one stays until retention).
MAX_TX_LIST = 1000
# Halves a transaction id is looked up among (the index's matches for the key): more than one is refused anyway.
MAX_HALVES_OF_ID = 32


def _ok(cmd: RemotingCommand, body: Any = None, ext: dict[str, str] | None = None) -> RemotingCommand:
    if body is None:
        raw = b""
    else:
        raw = body if isinstance(body, bytes) else orjson.dumps(body, option=orjson.OPT_NON_STR_KEYS)
    return RemotingCommand.response_to(cmd, ResponseCode.SUCCESS, ext_fields=ext, body=raw)


class TopicChange(NamedTuple):
    """UPDATE_AND_CREATE_TOPIC as read once: its header, and whether this broker has the topic already."""

    header: CreateTopicRequestHeader
    exists: bool


def create_topic_needs(change: TopicChange) -> Needs:
    """Create on the topic; Update when this broker has it already (its queues and permission changed are no
    creation: Create on a pattern must not let one team rewrite another's topics)."""
    return Needs().topic(change.header.topic, Action.UPDATE if change.exists else Action.CREATE)


def delete_topic_needs(h: DeleteTopicRequestHeader) -> Needs:
    """Delete on the topic."""
    return Needs().topic(h.topic, Action.DELETE)


def parse_query_offset(cmd: RemotingCommand) -> QueryConsumerOffsetRequestHeader:
    h = QueryConsumerOffsetRequestHeader.from_ext(cmd.ext_fields)
    check_group(h.consumer_group)
    check_topic(h.topic)
    return h


def parse_update_offset(cmd: RemotingCommand) -> UpdateConsumerOffsetRequestHeader:
    h = UpdateConsumerOffsetRequestHeader.from_ext(cmd.ext_fields)
    check_group(h.consumer_group)
    check_topic(h.topic)
    return h


def query_offset_needs(h: QueryConsumerOffsetRequestHeader) -> Needs:
    """Sub or Get on the topic and the consumer group."""
    return Needs().topic(h.topic, Action.SUB, Action.GET).group(h.consumer_group, Action.SUB, Action.GET)


def update_offset_needs(h: UpdateConsumerOffsetRequestHeader) -> Needs:
    """Sub or Update on the topic and the consumer group."""
    return Needs().topic(h.topic, Action.SUB, Action.UPDATE).group(h.consumer_group, Action.SUB, Action.UPDATE)


def _topic_read(topic: str, *any_of: Action) -> Needs:
    """``any_of`` on ``topic``; Get on the cluster for a topic internal to the broker: its entries are every
    producer's half messages or every delayed message, which no topic's permission covers."""
    return Needs().cluster(Action.GET) if topic in INTERNAL_TOPICS else Needs().topic(topic, *any_of)


def queue_read(h: TopicQueueRequestHeader | SearchOffsetRequestHeader) -> Needs:
    """Sub or Get on the topic (a consumer reads its queues' offsets and times); Get on the cluster for a topic
    internal to the broker (how many halves or delayed messages every other team stored, and when)."""
    return _topic_read(h.topic, Action.SUB, Action.GET)


def query_message_needs(h: QueryMessageRequestHeader) -> Needs:
    """Sub on the topic: the answer carries messages' bodies."""
    return Needs().topic(h.topic, Action.SUB)


def parse_query_cq(cmd: RemotingCommand) -> QueryConsumeQueueRequestHeader:
    h = QueryConsumeQueueRequestHeader.from_ext(cmd.ext_fields)
    check_topic(h.topic)
    if h.consumer_group is not None:
        check_group(h.consumer_group)
    return h


def query_cq_needs(h: QueryConsumeQueueRequestHeader) -> Needs:
    """Get on the topic (the answer holds its entries' commit-log offsets, sizes and tag hashes, no bodies), and on
    the consumer group when it names one (its subscription is answered too); RocketMQ's ACL asks the same. Get on
    the cluster for a topic internal to the broker: its entries are every producer's half messages or every
    delayed message, which no topic's permission covers."""
    needs = _topic_read(h.topic, Action.GET)
    return needs.group(h.consumer_group, Action.GET) if h.consumer_group is not None else needs


def viewed_needs(record: RecordAt) -> Needs:
    """Sub on the topic of the message at the offset (the record is read first; its bytes are the answer); Get on
    the cluster when there is none."""
    return record_needs(record, Needs())


def tx_read_needs(h: TxListRequestHeader | TxRequestHeader) -> Needs:
    """Pub on the producer group it names (then only that group's transactions are listed or shown); without one,
    Get on the cluster."""
    return Needs().group(h.group, Action.PUB) if h.group else Needs().cluster(Action.GET)


def tx_write_needs(h: TxRequestHeader | TxDecideRequestHeader) -> Needs:
    """Pub on the producer group it names (then only that group's transactions are found); without one, Update on
    the cluster."""
    return Needs().group(h.group, Action.PUB) if h.group else Needs().cluster(Action.UPDATE)


class AdminBrokerProcessor:
    def __init__(self, broker: BrokerController) -> None:
        self.broker = broker

    def requests(self) -> list[RequestSpec[Any]]:
        topic_queue = header(TopicQueueRequestHeader)
        return [
            RequestSpec(RequestCode.UPDATE_AND_CREATE_TOPIC, self._read_topic_change, create_topic_needs,
                        self._create_topic),
            RequestSpec(RequestCode.DELETE_TOPIC_IN_BROKER, header(DeleteTopicRequestHeader), delete_topic_needs,
                        self._delete_topic),
            RequestSpec(RequestCode.CLEAN_UNUSED_TOPIC, no_header, cluster_update, self._clean_unused_topic),
            RequestSpec(RequestCode.GET_ALL_TOPIC_CONFIG, no_header, cluster_get, self._all_topics),
            RequestSpec(RequestCode.QUERY_CONSUMER_OFFSET, parse_query_offset, query_offset_needs, self._query_offset),
            RequestSpec(RequestCode.UPDATE_CONSUMER_OFFSET, parse_update_offset, update_offset_needs,
                        self._update_offset),
            RequestSpec(RequestCode.GET_MAX_OFFSET, topic_queue, queue_read, self._max_offset),
            RequestSpec(RequestCode.GET_MIN_OFFSET, topic_queue, queue_read, self._min_offset),
            RequestSpec(RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, header(SearchOffsetRequestHeader), queue_read,
                        self._search_offset),
            RequestSpec(RequestCode.GET_EARLIEST_MSG_STORETIME, topic_queue, queue_read, self._earliest_time),
            RequestSpec(RequestCode.QUERY_CONSUME_QUEUE, parse_query_cq, query_cq_needs, self._query_consume_queue),
            RequestSpec(RequestCode.GET_ALL_CONSUMER_OFFSET, no_header, cluster_get, self._all_offsets),
            RequestSpec(RequestCode.GET_ALL_DELAY_OFFSET, no_header, cluster_get, self._all_delay_offsets),
            RequestSpec(RequestCode.GET_BROKER_RUNTIME_INFO, no_header, cluster_get, self._runtime_info),
            RequestSpec(RequestCode.GET_BROKER_HA_STATUS, no_header, cluster_get, self._ha_status),
            RequestSpec(RequestCode.QUERY_MESSAGE, header(QueryMessageRequestHeader), query_message_needs,
                        self._query_message),
            RequestSpec(RequestCode.VIEW_MESSAGE_BY_ID, self._read_viewed, viewed_needs, self._view_message),
            RequestSpec(RequestCode.TXMQ_STATS, no_header, cluster_get, self._stats),
            RequestSpec(RequestCode.TXMQ_TX_LIST, header(TxListRequestHeader), tx_read_needs, self._tx_list),
            RequestSpec(RequestCode.TXMQ_TX_SHOW, header(TxRequestHeader), tx_read_needs, self._tx_show),
            RequestSpec(RequestCode.TXMQ_TX_RESUME, header(TxRequestHeader), tx_write_needs, self._tx_resume),
            RequestSpec(RequestCode.TXMQ_TX_DECIDE, header(TxDecideRequestHeader), tx_write_needs, self._tx_decide),
        ]

    # --- topics -----------------------------------------------------------------------------------------

    def _read_topic_change(self, cmd: RemotingCommand) -> TopicChange:
        h = CreateTopicRequestHeader.from_ext(cmd.ext_fields)
        return TopicChange(h, self.broker.topic_config_manager.get(h.topic) is not None)

    async def _create_topic(self, conn: Connection, cmd: RemotingCommand, change: TopicChange) -> RemotingCommand:
        h = change.header
        check_topic(h.topic)
        if is_system_topic(h.topic):
            return RemotingCommand.response_to(cmd, ResponseCode.SYSTEM_ERROR,
                                               remark=f"topic {h.topic} is a system topic and cannot be changed")
        try:
            check_queue_nums(h.read_queue_nums, h.write_queue_nums)
        except InvalidMessageError as exc:
            return RemotingCommand.response_to(cmd, ResponseCode.SYSTEM_ERROR, remark=str(exc))
        busy = self.broker.topic_config_manager.journal.busy()
        if busy is not None:
            return RemotingCommand.response_to(cmd, ResponseCode.SYSTEM_BUSY, remark=busy)
        await self.broker.topic_config_manager.update(TopicConfig(h.topic, h.read_queue_nums, h.write_queue_nums,
                                                                  h.perm, h.topic_filter_type, h.topic_sys_flag,
                                                                  h.order))
        # Answered once the name servers know it (RocketMQ registers before answering too): a producer that asks
        # for the route right after must find it. Only this topic is sent, not all of them again.
        await self.broker.register_topic(h.topic)
        return _ok(cmd)

    async def _delete_topic(self, conn: Connection, cmd: RemotingCommand,
                            h: DeleteTopicRequestHeader) -> RemotingCommand:
        topic = h.topic
        check_topic(topic)
        if is_system_topic(topic):
            return RemotingCommand.response_to(cmd, ResponseCode.SYSTEM_ERROR, remark=f"{topic} is a system topic")
        broker = self.broker

        def removed() -> None:  # once the deletion is durable, even when a broker's stop cancelled this handler
            broker.store.delete_topic(topic)
            forget_topic(topic)
            broker.consumer_offset_manager.remove_topic(topic)
            broker.core.pop.forget_topic(topic)
            broker.schedule_register()

        if not await broker.topic_config_manager.delete(topic, removed):
            return RemotingCommand.response_to(cmd, ResponseCode.TOPIC_NOT_EXIST, remark=f"topic {topic} not exist")
        return _ok(cmd)

    def _clean_unused_topic(self, conn: Connection, cmd: RemotingCommand, _: None) -> RemotingCommand:
        """Answered in any role, as RocketMQ's (the operator asks); the body lists the topics dropped."""
        return _ok(cmd, {"topics": self.broker.clean_unused_topics()})

    def _all_topics(self, conn: Connection, cmd: RemotingCommand, _: None) -> RemotingCommand:
        return _ok(cmd, self.broker.topic_config_manager.serialize())

    # --- offsets ----------------------------------------------------------------------------------------

    def _query_offset(self, conn: Connection, cmd: RemotingCommand,
                      h: QueryConsumerOffsetRequestHeader) -> RemotingCommand:
        offset = self.broker.consumer_offset_manager.query(h.consumer_group, h.topic, h.queue_id)
        if offset < 0:
            # RocketMQ: a new group starts at 0 while the queue still holds its first message.
            if self.broker.store.get_min_offset_in_queue(h.topic, h.queue_id) <= 0:
                offset = 0
            else:
                return RemotingCommand.response_to(cmd, ResponseCode.QUERY_NOT_FOUND,
                                                   remark="Not found, the group has no committed offset here")
        return _ok(cmd, ext={"offset": str(offset)})

    def _update_offset(self, conn: Connection, cmd: RemotingCommand,
                       h: UpdateConsumerOffsetRequestHeader) -> RemotingCommand:
        missing = self.broker.core.pulls.queue_refusal(h.topic, h.queue_id)
        if missing is not None:
            return refused(cmd, missing)
        offsets = self.broker.consumer_offset_manager
        if not offsets.commit(h.consumer_group, h.topic, h.queue_id, h.commit_offset):
            return RemotingCommand.response_to(cmd, ResponseCode.SYSTEM_ERROR, remark=offsets.full_remark())
        return _ok(cmd)

    def _max_offset(self, conn: Connection, cmd: RemotingCommand, h: TopicQueueRequestHeader) -> RemotingCommand:
        return _ok(cmd, ext={"offset": str(self.broker.store.get_max_offset_in_queue(h.topic, h.queue_id,
                                                                                    confirmed=True))})

    def _min_offset(self, conn: Connection, cmd: RemotingCommand, h: TopicQueueRequestHeader) -> RemotingCommand:
        return _ok(cmd, ext={"offset": str(self.broker.store.get_min_offset_in_queue(h.topic, h.queue_id))})

    def _search_offset(self, conn: Connection, cmd: RemotingCommand, h: SearchOffsetRequestHeader) -> RemotingCommand:
        offset = self.broker.store.get_offset_in_queue_by_time(h.topic, h.queue_id, h.timestamp, confirmed=True)
        return _ok(cmd, ext={"offset": str(offset)})

    def _earliest_time(self, conn: Connection, cmd: RemotingCommand, h: TopicQueueRequestHeader) -> RemotingCommand:
        store = self.broker.store
        got = store.get_message(h.topic, h.queue_id, store.get_min_offset_in_queue(h.topic, h.queue_id), 1)
        ts = decode_message(got.messages[0])[0].store_timestamp if got.messages else -1
        return _ok(cmd, ext={"timestamp": str(ts)})

    def _query_consume_queue(self, conn: Connection, cmd: RemotingCommand,
                             h: QueryConsumeQueueRequestHeader) -> RemotingCommand:
        """mqadmin's ``queryCq``: the entries as the consume queue holds them (those still buffered in memory
        included), its min and max offsets, and with a group its subscription. Bounded by ``MAX_QUERY_CQ_COUNT``,
        and by the confirm offset as consumers are: RocketMQ's consume queue holds no entry past it yet."""
        def refuse(code: int, remark: str) -> RemotingCommand:
            return RemotingCommand.response_to(cmd, code, remark=remark)

        config = self.broker.topic_config_manager.get(h.topic)
        if config is None:
            return refuse(ResponseCode.TOPIC_NOT_EXIST, f"topic {h.topic} does not exist on this broker")
        queues = max(config.read_queue_nums, config.write_queue_nums)
        if not 0 <= h.queue_id < queues:
            return refuse(ResponseCode.SYSTEM_ERROR, f"queue {h.queue_id} of topic {h.topic} does not exist: its "
                          f"queue ids are 0 to {queues - 1}")
        if h.index < 0:
            return refuse(ResponseCode.SYSTEM_ERROR, f"index {h.index} is negative: an index is a queue offset")
        if not 0 < h.count <= MAX_QUERY_CQ_COUNT:
            return refuse(ResponseCode.SYSTEM_ERROR, f"count {h.count} is out of range: 1 to {MAX_QUERY_CQ_COUNT}")
        store = self.broker.store
        lo = store.get_min_offset_in_queue(h.topic, h.queue_id)
        hi = store.get_max_offset_in_queue(h.topic, h.queue_id, confirmed=True)
        body: dict[str, Any] = {"maxQueueIndex": hi, "minQueueIndex": lo}
        if h.consumer_group is not None:
            info = self.broker.consumer_manager.get(h.consumer_group)
            sub = info.subscriptions.get(h.topic) if info is not None else None
            if sub is None:
                body["filterData"] = f"{h.consumer_group}@{h.topic} is not online!"  # RocketMQ's words
            else:
                body["subscriptionData"] = sub.to_json()
        entries = [{"physicOffset": phy, "physicSize": size, "tagsCode": tags_code, "eval": False}
                   for phy, size, tags_code in store.get_queue_entries(h.topic, h.queue_id, h.index,
                                                                       min(h.count, hi - h.index))]
        body["queueData"] = entries
        remark = None
        if h.index >= hi:
            remark = f"index {h.index} is at or past the queue's end ({hi})"
        elif h.index < lo:
            remark = f"index {h.index} is below the queue's first entry ({lo}): retention deleted it"
        resp = _ok(cmd, body)
        resp.remark = remark
        return resp

    def _all_offsets(self, conn: Connection, cmd: RemotingCommand, _: None) -> RemotingCommand:
        return _ok(cmd, {"offsetTable": self.broker.consumer_offset_manager.table})

    def _all_delay_offsets(self, conn: Connection, cmd: RemotingCommand, _: None) -> RemotingCommand:
        return _ok(cmd, {"offsetTable": self.broker.schedule_service.offsets})

    # --- messages ---------------------------------------------------------------------------------------

    def _query_message(self, conn: Connection, cmd: RemotingCommand, h: QueryMessageRequestHeader) -> RemotingCommand:
        internal = internal_refusal(h.topic)
        if internal is not None:
            return RemotingCommand.response_to(cmd, ResponseCode.NO_PERMISSION, remark=internal)
        store = self.broker.store
        found = [m for m in store.query_message(h.topic, h.key, max(0, min(h.max_num, MAX_QUERY_MESSAGES)),
                                                h.begin_timestamp, h.end_timestamp) if servable(m)]
        if not found:
            return RemotingCommand.response_to(cmd, ResponseCode.QUERY_NOT_FOUND, remark="no message for this key")
        records: list[bytes] = []
        size = 0
        for m in found:
            record = store.read_record(m.commit_log_offset)
            size += len(record)
            if records and size > MAX_QUERY_BODY_BYTES:
                break  # the newest that fit a frame: the rest would make an answer no client reads
            records.append(record)
        body = b"".join(records)
        return _ok(cmd, body, {"indexLastUpdateTimestamp": str(int(time.time() * 1000)),
                               "indexLastUpdatePhyoffset": str(self.broker.store.max_phy_offset)})

    def _read_viewed(self, cmd: RemotingCommand) -> RecordAt:
        """VIEW_MESSAGE_BY_ID's request is the record its offset names: what it needs is Sub on that record's
        topic, so the record is read before it is authorized, and the bytes answered are the bytes authorized."""
        return read_record_at(self.broker.store, ViewMessageRequestHeader.from_ext(cmd.ext_fields).offset)

    def _view_message(self, conn: Connection, cmd: RemotingCommand, record: RecordAt) -> RemotingCommand:
        if record.msg is None:
            return RemotingCommand.response_to(cmd, ResponseCode.SYSTEM_ERROR,
                                               remark=f"no message at {record.offset}: {record.why}")
        if not servable(record.msg):
            return RemotingCommand.response_to(cmd, ResponseCode.NO_PERMISSION,
                                               remark="the record at this offset is not a visible message")
        return _ok(cmd, record.raw)

    # --- stats ------------------------------------------------------------------------------------------

    def _runtime_info(self, conn: Connection, cmd: RemotingCommand, _: None) -> RemotingCommand:
        return _ok(cmd, {"table": runtime_info(self.broker)})

    def _ha_status(self, conn: Connection, cmd: RemotingCommand, _: None) -> RemotingCommand:
        return _ok(cmd, self.broker.ha_status())

    def _stats(self, conn: Connection, cmd: RemotingCommand, _: None) -> RemotingCommand:
        return _ok(cmd, self.broker.stats())

    # --- transactions -----------------------------------------------------------------------------------

    def _find_half(self, cmd: RemotingCommand,
                   h: TxRequestHeader | TxDecideRequestHeader) -> tuple[int, MessageExt] | RemotingCommand:
        """The transaction the request names by ``id`` (with a ``group`` field, of that producer group only), or the
        answer that refuses it: none, or a transaction id (the UNIQ_KEY its producer chose) that several halves
        carry (a producer's retry of a half, another group's id), which only a half offset tells apart."""
        ident, group = h.id, h.group
        found: list[tuple[int, MessageExt]] = []
        half_offset = half_offset_of(ident)
        if half_offset is not None:
            half = self.broker.transaction_service.half_message(half_offset)
            found = [(half_offset, half)] if half is not None else []
        else:
            found = [(m.queue_offset, m) for m in self.broker.store.query_message(RMQ_SYS_TRANS_HALF_TOPIC, ident,
                                                                                   MAX_HALVES_OF_ID)
                     if m.properties.get(MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX) == ident]
        if group is not None:
            found = [(offset, m) for offset, m in found if m.properties.get(MessageConst.PRODUCER_GROUP) == group]
        if not found:
            return self._no_such_transaction(cmd, ident)
        if len(found) > 1:
            offsets = ", ".join(str(offset) for offset, _ in sorted(found, key=lambda f: f[0]))
            return RemotingCommand.response_to(cmd, ResponseCode.SYSTEM_ERROR, remark=(
                f"transaction id {ident} is carried by {len(found)} half messages (half offsets {offsets}): name "
                f"one by its half offset on broker {self.broker.config.broker_name}"))
        return found[0]

    def _no_such_transaction(self, cmd: RemotingCommand, ident: str) -> RemotingCommand:
        """The answer when no half is found; for a half offset retention deleted, it says so."""
        remark = "no such transaction"
        half_offset = half_offset_of(ident)
        if half_offset is not None and self.broker.transaction_service.half_gone(half_offset):
            remark = f"half message {ident} was deleted by retention (fileReservedTime)"
        return RemotingCommand.response_to(cmd, ResponseCode.QUERY_NOT_FOUND, remark=remark)

    def _describe(self, half_offset: int, half: MessageExt) -> dict[str, Any]:
        table = self.broker.transaction_service.table
        info = table.info(half_offset)
        return {
            "halfOffset": half_offset,
            "transactionId": half.properties.get(MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX, ""),
            "topic": half.properties.get(MessageConst.REAL_TOPIC, ""),
            "group": half.properties.get(MessageConst.PRODUCER_GROUP, ""),
            "state": table.outcome(half_offset).name,
            # by the store's elapsed-time account: a step of the wall clock does not age it
            "ageS": round(self.broker.store.clock.age_ms(half.commit_log_offset, half.store_timestamp) / 1000, 1),
            "checks": info.checks if info else None,
            "keys": half.keys,
            "tags": half.tags,
            "commitLogOffset": half.commit_log_offset,
        }

    def _tx_list(self, conn: Connection, cmd: RemotingCommand, h: TxListRequestHeader) -> RemotingCommand:
        limit, group = max(0, min(h.limit, MAX_TX_LIST)), h.group
        service = self.broker.transaction_service
        out: dict[str, list[dict[str, Any]]] = {"pending": [], "discarded": []}
        listed = (("pending", itertools.islice(service.table.pending, limit)),
                  ("discarded", itertools.islice(service.table.discarded, limit)))
        for name, offsets in listed:
            for half_offset in offsets:
                half = service.half_message(half_offset)
                if half is not None and (group is None or half.properties.get(MessageConst.PRODUCER_GROUP) == group):
                    entry = self._describe(half_offset, half)
                    if name == "discarded":
                        entry["checks"] = service.table.discarded.get(half_offset)
                    out[name].append(entry)
        totals = (len(service.table.pending), len(service.table.discarded)) if group is None else \
            (len(out["pending"]), len(out["discarded"]))  # one group's caller learns nothing of the others
        out["totals"] = [{"pending": totals[0], "discarded": totals[1]}]
        return _ok(cmd, out)

    def _tx_show(self, conn: Connection, cmd: RemotingCommand, h: TxRequestHeader) -> RemotingCommand:
        found = self._find_half(cmd, h)
        if isinstance(found, RemotingCommand):
            return found
        half_offset, half = found
        entry = self._describe(half_offset, half)
        entry["properties"] = half.user_properties
        entry["body"] = half.body.decode(errors="replace")
        entry["bornTimestamp"] = half.born_timestamp
        entry["storeTimestamp"] = half.store_timestamp
        if entry["state"] == Outcome.DISCARD.name:
            entry["checks"] = self.broker.transaction_service.table.discarded.get(half_offset)
        return _ok(cmd, entry)

    def _tx_resume(self, conn: Connection, cmd: RemotingCommand, h: TxRequestHeader):
        found = self._find_half(cmd, h)
        if isinstance(found, RemotingCommand):
            return found
        return self._resume(cmd, found[0])

    def _tx_decide(self, conn: Connection, cmd: RemotingCommand, h: TxDecideRequestHeader):
        found = self._find_half(cmd, h)
        if isinstance(found, RemotingCommand):
            return found
        outcome = {"COMMIT": Outcome.COMMIT, "ROLLBACK": Outcome.ROLLBACK}.get(h.outcome)
        if outcome is None:
            return RemotingCommand.response_to(cmd, ResponseCode.SYSTEM_ERROR, remark="outcome: COMMIT or ROLLBACK")
        return self._decide(cmd, *found, outcome)

    async def _decide(self, cmd: RemotingCommand, half_offset: int, half: MessageExt,
                      outcome: Outcome) -> RemotingCommand:
        """An operator's decision keeps the contract: the first decision wins, a repeat stores nothing."""
        group = half.properties.get(MessageConst.PRODUCER_GROUP, "")
        log.warning("operator decision: %s of transaction %s (group %s, half offset %d)", outcome.name,
                    half.properties.get(MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX, ""), group, half_offset)
        result = await self.broker.transaction_service.end_transaction(
            producer_group=group, half_offset=half_offset, commit_log_offset=half.commit_log_offset,
            outcome=outcome, source="operator")
        return RemotingCommand.response_to(cmd, result.code, remark=result.remark)

    async def _resume(self, cmd: RemotingCommand, half_offset: int) -> RemotingCommand:
        error = await self.broker.transaction_service.resume(half_offset)
        if error:
            return RemotingCommand.response_to(cmd, ResponseCode.SYSTEM_ERROR, remark=error)
        self.broker.check_service.wake()
        return _ok(cmd)
