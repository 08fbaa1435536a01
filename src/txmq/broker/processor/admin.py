"""Admin and offset requests (RocketMQ's ``AdminBrokerProcessor`` and ``ConsumerManageProcessor``), plus
txmq's own transaction admin (``txmq tx list|show|resume``) and stats."""

from __future__ import annotations

import itertools
import logging
import time
from typing import TYPE_CHECKING, Any

import orjson

from txmq.broker.processor.ops import runtime_info
from txmq.broker.processor.pull import queue_refusal
from txmq.broker.transaction.state import Outcome
from txmq.broker.visibility import internal_refusal, servable
from txmq.errors import InvalidMessageError, RemoteProtocolError, StoreError
from txmq.message import MessageConst, MessageExt, decode_message
from txmq.remoting.codes import RequestCode, ResponseCode
from txmq.remoting.command import RemotingCommand
from txmq.remoting.request_headers import (
    CreateTopicRequestHeader,
    QueryConsumerOffsetRequestHeader,
    QueryMessageRequestHeader,
    SearchOffsetRequestHeader,
    TopicQueueRequestHeader,
    UpdateConsumerOffsetRequestHeader,
)
from txmq.remoting.transport import Connection
from txmq.topic import RMQ_SYS_TRANS_HALF_TOPIC, TopicConfig, check_group, check_topic, is_system_topic

if TYPE_CHECKING:
    from txmq.broker.controller import BrokerController

log = logging.getLogger("txmq.broker")


def _ok(cmd: RemotingCommand, body: Any = None, ext: dict[str, str] | None = None) -> RemotingCommand:
    if body is None:
        raw = b""
    else:
        raw = body if isinstance(body, bytes) else orjson.dumps(body, option=orjson.OPT_NON_STR_KEYS)
    return RemotingCommand.response_to(cmd, ResponseCode.SUCCESS, ext_fields=ext, body=raw)


class AdminBrokerProcessor:
    def __init__(self, broker: BrokerController) -> None:
        self.broker = broker
        self.handlers = {
            RequestCode.UPDATE_AND_CREATE_TOPIC: self._create_topic,
            RequestCode.DELETE_TOPIC_IN_BROKER: self._delete_topic,
            RequestCode.GET_ALL_TOPIC_CONFIG: self._all_topics,
            RequestCode.QUERY_CONSUMER_OFFSET: self._query_offset,
            RequestCode.UPDATE_CONSUMER_OFFSET: self._update_offset,
            RequestCode.GET_MAX_OFFSET: self._max_offset,
            RequestCode.GET_MIN_OFFSET: self._min_offset,
            RequestCode.SEARCH_OFFSET_BY_TIMESTAMP: self._search_offset,
            RequestCode.GET_EARLIEST_MSG_STORETIME: self._earliest_time,
            RequestCode.GET_ALL_CONSUMER_OFFSET: self._all_offsets,
            RequestCode.GET_ALL_DELAY_OFFSET: self._all_delay_offsets,
            RequestCode.GET_BROKER_RUNTIME_INFO: self._runtime_info,
            RequestCode.GET_BROKER_HA_STATUS: self._ha_status,
            RequestCode.QUERY_MESSAGE: self._query_message,
            RequestCode.VIEW_MESSAGE_BY_ID: self._view_message,
            RequestCode.TXMQ_STATS: self._stats,
            RequestCode.TXMQ_TX_LIST: self._tx_list,
            RequestCode.TXMQ_TX_SHOW: self._tx_show,
            RequestCode.TXMQ_TX_RESUME: self._tx_resume,
            RequestCode.TXMQ_TX_DECIDE: self._tx_decide,
        }

    def process(self, conn: Connection, cmd: RemotingCommand):
        handler = self.handlers.get(RequestCode(cmd.code))
        if handler is None:
            return RemotingCommand.response_to(cmd, ResponseCode.REQUEST_CODE_NOT_SUPPORTED)
        try:
            return handler(cmd)
        except (RemoteProtocolError, InvalidMessageError, ValueError, KeyError, orjson.JSONDecodeError) as exc:
            return RemotingCommand.response_to(cmd, ResponseCode.SYSTEM_ERROR, remark=f"bad request: {exc}")

    # --- topics -----------------------------------------------------------------------------------------

    async def _create_topic(self, cmd: RemotingCommand) -> RemotingCommand:
        h = CreateTopicRequestHeader.from_ext(cmd.ext_fields)
        check_topic(h.topic)
        if is_system_topic(h.topic):
            return RemotingCommand.response_to(cmd, ResponseCode.SYSTEM_ERROR,
                                               remark=f"topic {h.topic} is a system topic and cannot be changed")
        if not (0 < h.read_queue_nums <= 1024 and 0 < h.write_queue_nums <= 1024):
            return RemotingCommand.response_to(cmd, ResponseCode.SYSTEM_ERROR,
                                               remark="queue numbers must be between 1 and 1024")
        self.broker.topic_config_manager.update(TopicConfig(h.topic, h.read_queue_nums, h.write_queue_nums, h.perm,
                                                            h.topic_filter_type, h.topic_sys_flag, h.order))
        # Answered once the name servers know it (RocketMQ registers before answering too): a producer that asks
        # for the route right after must find it.
        await self.broker.register_all()
        return _ok(cmd)

    def _delete_topic(self, cmd: RemotingCommand) -> RemotingCommand:
        topic = cmd.ext_fields.get("topic", "")
        check_topic(topic)
        if is_system_topic(topic):
            return RemotingCommand.response_to(cmd, ResponseCode.SYSTEM_ERROR, remark=f"{topic} is a system topic")
        if not self.broker.topic_config_manager.delete(topic):
            return RemotingCommand.response_to(cmd, ResponseCode.TOPIC_NOT_EXIST, remark=f"topic {topic} not exist")
        self.broker.store.delete_topic(topic)
        self.broker.consumer_offset_manager.remove_topic(topic)
        self.broker.schedule_register()
        return _ok(cmd)

    def _all_topics(self, cmd: RemotingCommand) -> RemotingCommand:
        return _ok(cmd, self.broker.topic_config_manager.serialize())

    # --- offsets ----------------------------------------------------------------------------------------

    def _query_offset(self, cmd: RemotingCommand) -> RemotingCommand:
        h = QueryConsumerOffsetRequestHeader.from_ext(cmd.ext_fields)
        check_group(h.consumer_group)
        check_topic(h.topic)
        offset = self.broker.consumer_offset_manager.query(h.consumer_group, h.topic, h.queue_id)
        if offset < 0:
            # RocketMQ: a new group starts at 0 while the queue still holds its first message.
            if self.broker.store.get_min_offset_in_queue(h.topic, h.queue_id) <= 0:
                offset = 0
            else:
                return RemotingCommand.response_to(cmd, ResponseCode.QUERY_NOT_FOUND,
                                                   remark="Not found, the group has no committed offset here")
        return _ok(cmd, ext={"offset": str(offset)})

    def _update_offset(self, cmd: RemotingCommand) -> RemotingCommand:
        h = UpdateConsumerOffsetRequestHeader.from_ext(cmd.ext_fields)
        check_group(h.consumer_group)
        check_topic(h.topic)
        refused = queue_refusal(self.broker, cmd, h.topic, h.queue_id)
        if refused is not None:
            return refused
        offsets = self.broker.consumer_offset_manager
        if not offsets.commit(h.consumer_group, h.topic, h.queue_id, h.commit_offset):
            return RemotingCommand.response_to(cmd, ResponseCode.SYSTEM_ERROR, remark=offsets.full_remark())
        return _ok(cmd)

    def _max_offset(self, cmd: RemotingCommand) -> RemotingCommand:
        h = TopicQueueRequestHeader.from_ext(cmd.ext_fields)
        return _ok(cmd, ext={"offset": str(self.broker.store.get_max_offset_in_queue(h.topic, h.queue_id,
                                                                                    confirmed=True))})

    def _min_offset(self, cmd: RemotingCommand) -> RemotingCommand:
        h = TopicQueueRequestHeader.from_ext(cmd.ext_fields)
        return _ok(cmd, ext={"offset": str(self.broker.store.get_min_offset_in_queue(h.topic, h.queue_id))})

    def _search_offset(self, cmd: RemotingCommand) -> RemotingCommand:
        h = SearchOffsetRequestHeader.from_ext(cmd.ext_fields)
        offset = self.broker.store.get_offset_in_queue_by_time(h.topic, h.queue_id, h.timestamp, confirmed=True)
        return _ok(cmd, ext={"offset": str(offset)})

    def _earliest_time(self, cmd: RemotingCommand) -> RemotingCommand:
        h = TopicQueueRequestHeader.from_ext(cmd.ext_fields)
        store = self.broker.store
        got = store.get_message(h.topic, h.queue_id, store.get_min_offset_in_queue(h.topic, h.queue_id), 1)
        ts = decode_message(got.messages[0])[0].store_timestamp if got.messages else -1
        return _ok(cmd, ext={"timestamp": str(ts)})

    def _all_offsets(self, cmd: RemotingCommand) -> RemotingCommand:
        return _ok(cmd, {"offsetTable": self.broker.consumer_offset_manager.table})

    def _all_delay_offsets(self, cmd: RemotingCommand) -> RemotingCommand:
        return _ok(cmd, {"offsetTable": self.broker.schedule_service.offsets})

    # --- messages ---------------------------------------------------------------------------------------

    def _query_message(self, cmd: RemotingCommand) -> RemotingCommand:
        h = QueryMessageRequestHeader.from_ext(cmd.ext_fields)
        internal = internal_refusal(h.topic)
        if internal is not None:
            return RemotingCommand.response_to(cmd, ResponseCode.NO_PERMISSION, remark=internal)
        found = [m for m in self.broker.store.query_message(h.topic, h.key, h.max_num, h.begin_timestamp,
                                                            h.end_timestamp) if servable(m)]
        if not found:
            return RemotingCommand.response_to(cmd, ResponseCode.QUERY_NOT_FOUND, remark="no message for this key")
        body = b"".join(self.broker.store.read_record(m.commit_log_offset) for m in found)
        return _ok(cmd, body, {"indexLastUpdateTimestamp": str(int(time.time() * 1000)),
                               "indexLastUpdatePhyoffset": str(self.broker.store.max_phy_offset)})

    def _view_message(self, cmd: RemotingCommand) -> RemotingCommand:
        offset = int(cmd.ext_fields["offset"])
        try:
            raw = self.broker.store.read_record(offset)
        except StoreError as exc:
            return RemotingCommand.response_to(cmd, ResponseCode.SYSTEM_ERROR, remark=f"no message at {offset}: {exc}")
        if not servable(decode_message(raw)[0]):
            return RemotingCommand.response_to(cmd, ResponseCode.NO_PERMISSION,
                                               remark="the record at this offset is not a visible message")
        return _ok(cmd, raw)

    # --- stats ------------------------------------------------------------------------------------------

    def _runtime_info(self, cmd: RemotingCommand) -> RemotingCommand:
        return _ok(cmd, {"table": runtime_info(self.broker)})

    def _ha_status(self, cmd: RemotingCommand) -> RemotingCommand:
        return _ok(cmd, self.broker.ha_status())

    def _stats(self, cmd: RemotingCommand) -> RemotingCommand:
        return _ok(cmd, self.broker.stats())

    # --- transactions -----------------------------------------------------------------------------------

    def _find_half(self, cmd: RemotingCommand) -> tuple[int, MessageExt] | None:
        """The transaction the request names by ``id``; with a ``group`` field, only one of that producer group."""
        ident, group = cmd.ext_fields.get("id", ""), cmd.ext_fields.get("group")
        found: tuple[int, MessageExt] | None = None
        if ident.isdigit() and len(ident) < 20:
            half = self.broker.transaction_service.half_message(int(ident))
            found = (int(ident), half) if half is not None else None
        else:
            for m in self.broker.store.query_message(RMQ_SYS_TRANS_HALF_TOPIC, ident, 8):
                if m.properties.get(MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX) == ident:
                    found = m.queue_offset, m
                    break
        if found is not None and group is not None and found[1].properties.get(MessageConst.PRODUCER_GROUP) != group:
            return None
        return found

    def _no_such_transaction(self, cmd: RemotingCommand) -> RemotingCommand:
        """The answer when ``_find_half`` finds nothing; for a half offset retention deleted, it says so."""
        ident = cmd.ext_fields.get("id", "")
        remark = "no such transaction"
        if ident.isdigit() and len(ident) < 20 and self.broker.transaction_service.half_gone(int(ident)):
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

    def _tx_list(self, cmd: RemotingCommand) -> RemotingCommand:
        limit = int(cmd.ext_fields.get("limit", "100"))
        group = cmd.ext_fields.get("group")
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

    def _tx_show(self, cmd: RemotingCommand) -> RemotingCommand:
        found = self._find_half(cmd)
        if found is None:
            return self._no_such_transaction(cmd)
        half_offset, half = found
        entry = self._describe(half_offset, half)
        entry["properties"] = half.user_properties
        entry["body"] = half.body.decode(errors="replace")
        entry["bornTimestamp"] = half.born_timestamp
        entry["storeTimestamp"] = half.store_timestamp
        if entry["state"] == Outcome.DISCARD.name:
            entry["checks"] = self.broker.transaction_service.table.discarded.get(half_offset)
        return _ok(cmd, entry)

    def _tx_resume(self, cmd: RemotingCommand):
        found = self._find_half(cmd)
        if found is None:
            return self._no_such_transaction(cmd)
        return self._resume(cmd, found[0])

    def _tx_decide(self, cmd: RemotingCommand):
        found = self._find_half(cmd)
        if found is None:
            return self._no_such_transaction(cmd)
        outcome = {"COMMIT": Outcome.COMMIT, "ROLLBACK": Outcome.ROLLBACK}.get(cmd.ext_fields.get("outcome", ""))
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
