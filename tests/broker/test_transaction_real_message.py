"""The committed message as a consumer reads it back: every field a RocketMQ client reads (properties, keys, tags,
born host and time, flag, sysflag, reconsume times) as the producer sent it, with only the fields a COMMIT changes
changed (topic, queue, the transaction bits of the sysflag, the half-only properties, the link to the half). The
half and real messages are built for speed (half.py); these pin them to the plain construction, for odd inputs
too: a half remembered or read back from the log, no user properties, a big body, the compressed flag, unicode keys
and tags, a timer delivery property, a half that check-back has handled."""

from __future__ import annotations

import asyncio
import time

import pytest

from tests.broker.tx_helpers import end, open_service
from txmq.broker.transaction.half import HALF_BATCH
from txmq.broker.transaction.state import Outcome
from txmq.message import MessageConst, MessageExt, MessageSysFlag, decode_message
from txmq.remoting.codes import ResponseCode
from txmq.store import PutMessageStatus
from txmq.topic import RMQ_SYS_TRANS_HALF_TOPIC

_HALF_ONLY = (MessageConst.REAL_TOPIC, MessageConst.REAL_QUEUE_ID, MessageConst.TRANSACTION_PREPARED)
_FIELDS = ("topic", "queue_id", "body", "flag", "sys_flag", "born_timestamp", "born_host", "store_host",
           "reconsume_times", "prepared_transaction_offset", "properties", "transaction_id")


def plain_half(msg: MessageExt) -> MessageExt:
    """The half message for ``msg``, built field by field with ``MessageExt``'s keywords."""
    props = {k: v for k, v in msg.properties.items() if k != HALF_BATCH}
    props[MessageConst.REAL_TOPIC] = msg.topic
    props[MessageConst.REAL_QUEUE_ID] = str(msg.queue_id)
    return MessageExt(RMQ_SYS_TRANS_HALF_TOPIC, msg.body, props, flag=msg.flag, queue_id=0,
                      sys_flag=MessageSysFlag.reset_transaction_value(msg.sys_flag,
                                                                       MessageSysFlag.TRANSACTION_NOT_TYPE),
                      born_timestamp=msg.born_timestamp, born_host=msg.born_host, store_host=msg.store_host,
                      reconsume_times=msg.reconsume_times)


def plain_real(half: MessageExt, half_offset: int) -> MessageExt:
    """The real message a COMMIT of ``half`` stores, built field by field (RocketMQ's endMessageTransaction)."""
    props = {k: v for k, v in half.properties.items() if k not in _HALF_ONLY}
    props[MessageConst.TRANSACTION_PREPARED_QUEUE_OFFSET] = str(half_offset)
    return MessageExt(half.properties[MessageConst.REAL_TOPIC], half.body, props, flag=half.flag,
                      queue_id=int(half.properties[MessageConst.REAL_QUEUE_ID]),
                      sys_flag=MessageSysFlag.reset_transaction_value(half.sys_flag,
                                                                       MessageSysFlag.TRANSACTION_COMMIT_TYPE),
                      born_timestamp=half.born_timestamp, born_host=half.born_host, store_host=half.store_host,
                      reconsume_times=half.reconsume_times, prepared_transaction_offset=half.commit_log_offset)


def fields(m: MessageExt) -> dict[str, object]:
    return {name: getattr(m, name) for name in _FIELDS}


def sent(body: bytes, props: dict[str, str], **ext: object) -> MessageExt:
    """A transactional message of group "g" to topic "orders", queue 2, as the send processor hands it over."""
    return MessageExt("orders", body, {MessageConst.TRANSACTION_PREPARED: "true", MessageConst.PRODUCER_GROUP: "g",
                                       **props},
                      queue_id=2, born_timestamp=int(time.time() * 1000), born_host=("10.1.2.3", 50123),
                      store_host=("127.0.0.1", 10911), **ext)  # type: ignore[arg-type]


CASES = {
    "no user properties": sent(b"x", {}),
    "usual": sent(b"y" * 256, {MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX: "AC1100010000" + "0" * 20,
                               MessageConst.KEYS: "order-1 order-2", MessageConst.TAGS: "paid"}),
    "big body": sent(bytes(range(256)) * 2048, {MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX: "B" * 32}),
    "compressed, multi tags, flag, reconsumed": sent(
        b"\x78\x9c\x03\x00\x00\x00\x00\x01", {MessageConst.TAGS: "a||b"},
        sys_flag=MessageSysFlag.COMPRESSED | MessageSysFlag.MULTI_TAGS | MessageSysFlag.TRANSACTION_PREPARED_TYPE,
        flag=-7, reconsume_times=3),
    "unicode keys and tags": sent("zahlung ✓".encode(), {MessageConst.KEYS: "schlüssel 键 🔑",
                                                          MessageConst.TAGS: "étiquette", "ünïcode": "välue ✓"}),
    "timer delivery": sent(b"t", {"TIMER_DELIVER_MS": "4102444800000", MessageConst.TAGS: "later"}),
    "a sender's HALF_BATCH word": sent(b"h", {HALF_BATCH: "3"}),
}


@pytest.mark.parametrize("remembered", [True, False], ids=["remembered", "read back"])
@pytest.mark.parametrize("case", list(CASES))
def test_a_committed_message_reads_back_as_built_field_by_field(tmp_path, case, remembered):
    msg = CASES[case]

    async def go() -> None:
        store, service = await open_service(tmp_path)
        try:
            expected_half = plain_half(msg)
            r = await service.prepare_message(msg)
            assert r.status == PutMessageStatus.PUT_OK and r.append_result is not None
            half_offset, clo = r.append_result.logics_offset, r.append_result.wrote_offset
            stored_half = store.look_message_by_offset(clo)
            assert fields(stored_half) == fields(expected_half) | {"prepared_transaction_offset": 0}
            if not remembered:
                service._forget_recent_halves()  # the commit reads its half back from the log
            assert (await end(service, half_offset, clo, Outcome.COMMIT)).code == ResponseCode.SUCCESS
            got = store.get_message("orders", 2, 0, 10, 4 * 1024 * 1024)
            [real] = [decode_message(raw)[0] for raw in got.messages]
            assert fields(real) == fields(plain_real(stored_half, half_offset))
            assert real.properties.get(MessageConst.KEYS) == msg.properties.get(MessageConst.KEYS)
            assert real.properties.get(MessageConst.TAGS) == msg.properties.get(MessageConst.TAGS)
        finally:
            await store.shutdown()
    asyncio.run(go())


def test_a_committed_message_keeps_what_check_back_added_to_its_half(tmp_path):
    """A half that check-back has handled carries its check count (``TRANSACTION_CHECK_TIMES``, as the check pass
    sets it); its commit keeps it, as RocketMQ's commit of a half put back by a check does."""
    msg = CASES["usual"]

    async def go() -> None:
        store, service = await open_service(tmp_path)
        try:
            r = await service.prepare_message(msg)
            assert r.append_result is not None
            half_offset, clo = r.append_result.logics_offset, r.append_result.wrote_offset
            half = service._recent_halves[clo][0]
            half.properties[MessageConst.TRANSACTION_CHECK_TIMES] = "2"  # what the check pass writes on it
            assert (await end(service, half_offset, clo, Outcome.COMMIT)).code == ResponseCode.SUCCESS
            [raw] = store.get_message("orders", 2, 0, 10).messages
            real = decode_message(raw)[0]
            assert fields(real) == fields(plain_real(half, half_offset))
            assert real.properties[MessageConst.TRANSACTION_CHECK_TIMES] == "2"
        finally:
            await store.shutdown()
    asyncio.run(go())
