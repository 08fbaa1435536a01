"""What a half message is: the half stored for a producer's message (its real topic and queue in its properties),
and the real messages a COMMIT of it stores (one, or one per message of a half that carries a batch)."""

from __future__ import annotations

from txmq.message import MessageConst, MessageExt, MessageSysFlag, decode_batch
from txmq.topic import RMQ_SYS_TRANS_HALF_TOPIC

HALF_BATCH = "TXMQ_HALF_BATCH"  # on a half message whose body is a batch: how many messages it carries
# properties of a half message that its real message does not carry
_HALF_ONLY = (MessageConst.REAL_TOPIC, MessageConst.REAL_QUEUE_ID, MessageConst.TRANSACTION_PREPARED)
# read per half and per commit: module constants, not class attribute reads (about 15 ns each, interpreted)
_REAL_TOPIC, _REAL_QUEUE_ID = MessageConst.REAL_TOPIC, MessageConst.REAL_QUEUE_ID
_PREPARED_QUEUE_OFFSET = MessageConst.TRANSACTION_PREPARED_QUEUE_OFFSET
_NOT_TYPE, _COMMIT_TYPE = MessageSysFlag.TRANSACTION_NOT_TYPE, MessageSysFlag.TRANSACTION_COMMIT_TYPE
_reset_transaction_value = MessageSysFlag.reset_transaction_value


def half_of(msg: MessageExt, half_batch: int) -> MessageExt:
    """The half to store for ``msg``. ``HALF_BATCH`` is the broker's word only: a sender's is dropped (a
    plain body read as a batch at COMMIT would fail the decision)."""
    half = MessageExt(
        RMQ_SYS_TRANS_HALF_TOPIC, msg.body, msg.properties, flag=msg.flag, queue_id=0,
        sys_flag=_reset_transaction_value(msg.sys_flag, _NOT_TYPE),
        born_timestamp=msg.born_timestamp, born_host=msg.born_host, store_host=msg.store_host,
        reconsume_times=msg.reconsume_times,
    )
    props = half.properties  # its own copy: the sender's message keeps its properties
    props.pop(HALF_BATCH, None)
    if half_batch:
        props[HALF_BATCH] = str(half_batch)
    props[_REAL_TOPIC] = msg.topic
    props[_REAL_QUEUE_ID] = str(msg.queue_id)
    return half


def real_messages(half: MessageExt, half_offset: int, commit_log_offset: int) -> list[MessageExt]:
    """What a COMMIT of ``half`` stores: its real message, or, for a batch half, one per message it carries."""
    props = half.properties
    topic = props[_REAL_TOPIC]
    queue_id = int(props.get(_REAL_QUEUE_ID, "0"))
    sys_flag = _reset_transaction_value(half.sys_flag, _COMMIT_TYPE)
    if HALF_BATCH not in props:
        real = MessageExt(topic, half.body, props, flag=half.flag, queue_id=queue_id, sys_flag=sys_flag,
                          born_timestamp=half.born_timestamp, born_host=half.born_host,
                          store_host=half.store_host, reconsume_times=half.reconsume_times,
                          prepared_transaction_offset=commit_log_offset)
        inner = real.properties  # its own copy: the half's stay as they are
        for name in _HALF_ONLY:
            inner.pop(name, None)
        inner[_PREPARED_QUEUE_OFFSET] = str(half_offset)
        return [real]
    link = {MessageConst.TRANSACTION_PREPARED_QUEUE_OFFSET: str(half_offset),
            MessageConst.TRANSACTION_ID: props.get(MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX, "")}
    return [MessageExt(topic, body, {**inner, **link}, flag=flag, queue_id=queue_id, sys_flag=sys_flag,
                       born_timestamp=half.born_timestamp, born_host=half.born_host, store_host=half.store_host,
                       prepared_transaction_offset=commit_log_offset)
            for flag, body, inner in decode_batch(half.body)]
