"""What the broker may serve to a client: the one check behind every request that names stored records, by
topic (pulls, gRPC receive and pull), by commit-log offset or message id (view by id, consumer send-back),
or by key (query). Contract: a half message is never visible to any consumer, by any protocol or request.

Not servable:

* the records of the broker's internal topics: half messages (``RMQ_SYS_TRANS_HALF_TOPIC``), op records
  (``RMQ_SYS_TRANS_OP_HALF_TOPIC``), delayed messages not yet due (``SCHEDULE_TOPIC_XXXX``) and discarded
  halves (``TRANS_CHECK_MAX_TIME_TOPIC``, which keeps the half's body; ``txmq tx list|show|resume`` are the way
  to them);
* a record whose sys flag says prepared or rolled back, wherever it is stored: the store keeps such records out
  of every consume queue, and serving one by offset or key would be a way around that.
* a record named by its commit-log offset that its own consume queue does not name (``txmq.store.queued``): a
  whole record a producer carried in a message body, with a topic and properties of its choosing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

from txmq.acl.model import Action, Needs
from txmq.errors import RemoteProtocolError, StoreError
from txmq.message import MessageExt, decode_message
from txmq.store.dispatcher import builds_consume_queue
from txmq.store.queued import is_queue_entry, not_queued
from txmq.topic import (
    RMQ_SYS_SCHEDULE_TOPIC,
    RMQ_SYS_TRANS_CHECK_MAX_TIME_TOPIC,
    RMQ_SYS_TRANS_HALF_TOPIC,
    RMQ_SYS_TRANS_OP_HALF_TOPIC,
    RMQ_SYS_WHEEL_TIMER_TOPIC,
)

if TYPE_CHECKING:
    from txmq.store import DefaultMessageStore

INTERNAL_TOPICS = frozenset({RMQ_SYS_TRANS_HALF_TOPIC, RMQ_SYS_TRANS_OP_HALF_TOPIC, RMQ_SYS_SCHEDULE_TOPIC,
                             RMQ_SYS_TRANS_CHECK_MAX_TIME_TOPIC, RMQ_SYS_WHEEL_TIMER_TOPIC})


def internal_refusal(topic: str) -> str | None:
    """Why no client may read ``topic``, or None when it may."""
    if topic in INTERNAL_TOPICS:
        return f"topic {topic} is internal to the broker: no client may read it"
    return None


def servable(msg: MessageExt) -> bool:
    """May this stored record be served to a client?"""
    return msg.topic not in INTERNAL_TOPICS and builds_consume_queue(msg.sys_flag)


class RecordAt(NamedTuple):
    """The record a request names by its commit-log offset (VIEW_MESSAGE_BY_ID, CONSUMER_SEND_MSG_BACK), read once
    by the request's parse: what the request needs is Sub on that record's topic, and the handler serves or copies
    the record that was authorized. ``msg`` is None when there is no record there (``why``)."""

    offset: int
    raw: bytes
    msg: MessageExt | None
    why: str = ""


def read_record_at(store: DefaultMessageStore, offset: int) -> RecordAt:
    """The record at ``offset``; none when its consume queue does not name it (a record forged in a message body).
    A record whose sys flag keeps it out of every queue is kept: ``servable`` refuses it for what it is."""
    try:
        raw = store.read_record(offset)
        msg = decode_message(raw)[0]
    except (StoreError, RemoteProtocolError) as exc:
        return RecordAt(offset, b"", None, str(exc))
    if builds_consume_queue(msg.sys_flag) and not is_queue_entry(store, msg, offset):
        return RecordAt(offset, b"", None, not_queued(offset))
    return RecordAt(offset, raw, msg)


def record_needs(record: RecordAt, needs: Needs) -> Needs:
    """``needs`` and Sub on the record's topic (a retry topic's: Sub on its group). With no record at the offset,
    Get on the cluster: only whole-server readers learn which offsets hold records, or where the log begins and
    ends."""
    return needs.topic(record.msg.topic, Action.SUB) if record.msg is not None else needs.cluster(Action.GET)
