"""DispatchRequest: what the reput step hands to each CommitLogDispatcher after a record is appended; and the
dispatch steps every writer of the log shares (a put, a slave's replicated append, recovery): the index and the
dispatchers beyond consume queue and index."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING

from txmq.errors import CorruptRecordError
from txmq.message import HEAD_SIZE, MessageConst, MessageSysFlag, java_string_hash, string_to_properties
from txmq.store.record import HEADER, TRAILER_SIZE

if TYPE_CHECKING:
    from txmq.store.index import IndexService

log = logging.getLogger("txmq.store")


@dataclass(slots=True)
class DispatchRequest:
    """One stored record, as dispatchers see it (RocketMQ ``DispatchRequest``)."""

    topic: str
    queue_id: int
    commit_log_offset: int
    msg_size: int  # bytes of the stored record, trailer included (what a consume-queue entry holds)
    tags_code: int
    store_timestamp: int
    consume_queue_offset: int
    keys: str | None
    uniq_key: str | None
    sys_flag: int
    prepared_transaction_offset: int
    properties: dict[str, str]
    born_timestamp: int


@lru_cache(maxsize=4096)
def tags_code(tags: str | None) -> int:
    """RocketMQ ``tagsString2tagsCode``: Java's String.hashCode of TAGS, 0 without tags."""
    return java_string_hash(tags) if tags else 0


_PREPARED_BIT = MessageSysFlag.TRANSACTION_PREPARED_TYPE & MessageSysFlag.TRANSACTION_ROLLBACK_TYPE
# read by every record: module constants, not class attributes and a static method's call
_TRANSACTION_MASK = MessageSysFlag.TRANSACTION_MASK
_ROLLBACK = MessageSysFlag.TRANSACTION_ROLLBACK_TYPE
_KEY_SEPARATOR = MessageConst.KEY_SEPARATOR


def builds_consume_queue(sys_flag: int) -> bool:
    """Prepared and rollback records are stored and indexed, never consumable (RocketMQ
    CommitLogDispatcherBuildConsumeQueue). The bit 0x4 is set in exactly those two (0x4 and 0xC); every record
    asks this, so it is one test."""
    return not sys_flag & _PREPARED_BIT


def builds_index(sys_flag: int) -> bool:
    """Rollback records are not indexed (RocketMQ CommitLogDispatcherBuildIndex); everything else is."""
    return (sys_flag & _TRANSACTION_MASK) != _ROLLBACK  # MessageSysFlag.transaction_value


def keys_of(keys: str | None, uniq_key: str | None) -> list[str]:
    """Index keys of a record from its KEYS property (space separated) and its UNIQ_KEY."""
    out = keys.split(_KEY_SEPARATOR) if keys else []
    if uniq_key:
        out.append(uniq_key)
    return [k for k in out if k]


def build_index(index: IndexService, enabled: bool, topic: str, sys_flag: int, keys: str | None,
                uniq_key: str | None, offset: int, store_timestamp: int) -> None:
    """The record's keys into the index (RocketMQ CommitLogDispatcherBuildIndex), when ``enabled``
    (messageIndexEnable)."""
    if enabled and builds_index(sys_flag):
        index_keys = keys_of(keys, uniq_key)
        if index_keys:
            index.put(topic, index_keys, offset, store_timestamp)


def run_dispatchers(dispatchers: list[Callable[[DispatchRequest], None]], req: DispatchRequest,
                    counters: dict[str, int]) -> None:
    """The dispatchers beyond consume queue and index (the broker's): they see only stored records. One that fails
    is logged and counted (``dispatch_errors``); the others still run."""
    for fn in dispatchers:
        try:
            fn(req)
        except Exception:
            counters["dispatch_errors"] += 1
            log.exception("dispatcher %r failed on the record at %d", fn, req.commit_log_offset)


def request_from_record(rec: memoryview, offset: int) -> DispatchRequest:
    """Build the request from a stored record that passed ``check_record`` (a slave's replicated frame, recovery,
    rebuilds). Its CRC does not make it decodable: a broken or hostile master's record may hold a topic or
    properties that are not UTF-8, or lengths that do not fill it. Raises ``CorruptRecordError`` for those, so that
    decoding a record is also its last check (a slave decodes a frame's records before writing them)."""
    fields = HEADER.unpack_from(rec, 0)
    total, queue_id, queue_offset, sys_flag, born_ts = fields[0], fields[3], fields[5], fields[7], fields[8]
    store_ts, prepared, body_len = fields[10], fields[13], fields[14]
    p = HEAD_SIZE + body_len
    topic_end = p + 1 + rec[p]
    props_len = int.from_bytes(rec[topic_end : topic_end + 2], "big")
    if topic_end + 2 + props_len != total - TRAILER_SIZE:
        raise CorruptRecordError(f"record at {offset}: its topic and properties do not fill it")
    try:
        topic = bytes(rec[p + 1 : topic_end]).decode()
        props = string_to_properties(bytes(rec[topic_end + 2 : topic_end + 2 + props_len]).decode())
    except UnicodeDecodeError as exc:
        raise CorruptRecordError(f"record at {offset}: its topic or properties are not UTF-8 ({exc.reason})") \
            from None
    return DispatchRequest(
        topic=topic,
        queue_id=queue_id,
        commit_log_offset=offset,
        msg_size=total,
        tags_code=tags_code(props.get(MessageConst.TAGS)),
        store_timestamp=store_ts,
        consume_queue_offset=queue_offset,
        keys=props.get(MessageConst.KEYS),
        uniq_key=props.get(MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX),
        sys_flag=sys_flag,
        prepared_transaction_offset=prepared,
        properties=props,
        born_timestamp=born_ts,
    )
