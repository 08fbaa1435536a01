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
"""

from __future__ import annotations

from txmq.message import MessageExt
from txmq.store.dispatcher import builds_consume_queue
from txmq.topic import (
    RMQ_SYS_SCHEDULE_TOPIC,
    RMQ_SYS_TRANS_CHECK_MAX_TIME_TOPIC,
    RMQ_SYS_TRANS_HALF_TOPIC,
    RMQ_SYS_TRANS_OP_HALF_TOPIC,
)

INTERNAL_TOPICS = frozenset({RMQ_SYS_TRANS_HALF_TOPIC, RMQ_SYS_TRANS_OP_HALF_TOPIC, RMQ_SYS_SCHEDULE_TOPIC,
                             RMQ_SYS_TRANS_CHECK_MAX_TIME_TOPIC})


def internal_refusal(topic: str) -> str | None:
    """Why no client may read ``topic``, or None when it may."""
    if topic in INTERNAL_TOPICS:
        return f"topic {topic} is internal to the broker: no client may read it"
    return None


def servable(msg: MessageExt) -> bool:
    """May this stored record be served to a client?"""
    return msg.topic not in INTERNAL_TOPICS and builds_consume_queue(msg.sys_flag)
