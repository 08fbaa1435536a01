"""What a half message is: the half stored for a producer's message (its real topic and queue in its properties),
and the real messages a COMMIT of it stores (one, or one per message of a half that carries a batch).

Every transaction builds one half and one real message here, so both are built as the send path builds its
message (``inner_message``: positional fields, the properties dict taken as the message's own), not through
``MessageExt(...)``'s keywords and its copy of the properties; and the module is compiled (setup.py, half.pxd):
the fields are read as struct members."""

from __future__ import annotations

from txmq.message import MessageConst, MessageExt, MessageSysFlag, decode_batch, inner_message
from txmq.topic import RMQ_SYS_TRANS_HALF_TOPIC

HALF_BATCH = "TXMQ_HALF_BATCH"  # on a half message whose body is a batch: how many messages it carries
# properties of a half message that its real message does not carry
_HALF_ONLY = (MessageConst.REAL_TOPIC, MessageConst.REAL_QUEUE_ID, MessageConst.TRANSACTION_PREPARED)
# read per half and per commit: module constants, not class attribute reads
_REAL_TOPIC, _REAL_QUEUE_ID = MessageConst.REAL_TOPIC, MessageConst.REAL_QUEUE_ID
_PREPARED_QUEUE_OFFSET = MessageConst.TRANSACTION_PREPARED_QUEUE_OFFSET
_NOT_TYPE, _COMMIT_TYPE = MessageSysFlag.TRANSACTION_NOT_TYPE, MessageSysFlag.TRANSACTION_COMMIT_TYPE
_NOT_TRANSACTION_BITS = ~MessageSysFlag.TRANSACTION_MASK  # MessageSysFlag.reset_transaction_value, inline


def half_of(msg: MessageExt, half_batch: int) -> MessageExt:
    """The half to store for ``msg``. ``HALF_BATCH`` is the broker's word only: a sender's is dropped (a
    plain body read as a batch at COMMIT would fail the decision)."""
    props = dict(msg.properties)  # its own copy: the sender's message keeps its properties
    props.pop(HALF_BATCH, None)
    if half_batch:
        props[HALF_BATCH] = str(half_batch)
    props[_REAL_TOPIC] = msg.topic
    props[_REAL_QUEUE_ID] = str(msg.queue_id)
    return inner_message(RMQ_SYS_TRANS_HALF_TOPIC, msg.body, props, msg.flag, 0,
                         (msg.sys_flag & _NOT_TRANSACTION_BITS) | _NOT_TYPE, msg.born_timestamp, msg.born_host,
                         msg.store_host, msg.reconsume_times)


def real_messages(half: MessageExt, half_offset: int, commit_log_offset: int) -> list[MessageExt]:
    """What a COMMIT of ``half`` stores: its real message, or, for a batch half, one per message it carries."""
    props = half.properties
    topic = props[_REAL_TOPIC]
    queue_id = int(props.get(_REAL_QUEUE_ID, "0"))
    sys_flag = (half.sys_flag & _NOT_TRANSACTION_BITS) | _COMMIT_TYPE
    if HALF_BATCH not in props:
        inner = props.copy()  # its own copy: the half's stay as they are
        for name in _HALF_ONLY:
            inner.pop(name, None)
        inner[_PREPARED_QUEUE_OFFSET] = str(half_offset)
        real = inner_message(topic, half.body, inner, half.flag, queue_id, sys_flag, half.born_timestamp,
                             half.born_host, half.store_host, half.reconsume_times)
        real.prepared_transaction_offset = commit_log_offset
        return [real]
    link = {MessageConst.TRANSACTION_PREPARED_QUEUE_OFFSET: str(half_offset),
            MessageConst.TRANSACTION_ID: props.get(MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX, "")}
    return [MessageExt(topic, body, {**inner, **link}, flag=flag, queue_id=queue_id, sys_flag=sys_flag,
                       born_timestamp=half.born_timestamp, born_host=half.born_host, store_host=half.store_host,
                       prepared_transaction_offset=commit_log_offset)
            for flag, body, inner in decode_batch(half.body)]
