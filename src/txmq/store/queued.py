"""A record a request names by its commit-log offset is a message only when its own consume queue names it.

A producer can carry a whole record, valid in every field (magic, PHYSICALOFFSET equal to its place in the log, CRC
trailer, a topic and properties of its choosing), in the body of a plain message, and name that body's offset: the
log holds it there, but no consume queue does, since the store dispatched only the record around it. Every request
that reads a record by an offset a client names (END_TRANSACTION's half when it is no longer remembered,
CONSUMER_SEND_MSG_BACK, VIEW_MESSAGE_BY_ID) asks this check before it trusts the record's fields. Records read by
the broker's own offsets (a consume queue's entries, the index, the timer table, the dispatcher) need none.

Not compiled: it uses the store's own lookups, and it costs one consume-queue entry read, only for a record read
from the log."""

from __future__ import annotations

from typing import TYPE_CHECKING

from txmq.errors import StoreError

if TYPE_CHECKING:
    from txmq.message import MessageExt
    from txmq.store.message_store import DefaultMessageStore


def is_queue_entry(store: DefaultMessageStore, msg: MessageExt, commit_log_offset: int) -> bool:
    """Whether ``msg``, read at ``commit_log_offset``, is the entry its consume queue (its topic and queue id) holds
    at its queue offset."""
    entries = store.get_queue_entries(msg.topic, msg.queue_id, msg.queue_offset, 1)
    return bool(entries) and entries[0][0] == commit_log_offset


def not_queued(commit_log_offset: int) -> str:
    """Why the record at ``commit_log_offset`` is refused: the remark every such request answers."""
    return f"the record at commit-log offset {commit_log_offset} is not its consume queue's entry: no message"


def look_queued_message(store: DefaultMessageStore, commit_log_offset: int) -> MessageExt:
    """The message at ``commit_log_offset``, which its consume queue must name; raises ``StoreError`` when it does not,
    and as ``look_message_by_offset`` when there is no valid record there."""
    msg = store.look_message_by_offset(commit_log_offset)
    if not is_queue_entry(store, msg, commit_log_offset):
        raise StoreError(not_queued(commit_log_offset))
    return msg
