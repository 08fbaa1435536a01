"""Hostile remoting inputs for the live-server campaign, from a seeded ``random.Random``: one seed, one sequence.

Two generators share the value pools below:

* ``frame``: whole frames gone wrong (random bytes, a valid frame with its header JSON, length prefix,
  serialization byte or body mutated, truncated, binary ROCKETMQ headers of random bytes);
* ``request``: well-framed requests of every code in ``RequestCode`` (and a few unknown ones), their
  extFields from a valid template with a few fields mutated, or random fields with edge values.

Each ``Input`` also says how many answers a correct server owes (what txmq's own decoder makes of the bytes)
and whether it must close the connection (the decoder raises), so the runner never waits on a silent server
longer than it must. Names never contain the probe topic, the half messages' group or the half marker.
"""

from __future__ import annotations

import json
import random
import struct
from collections.abc import Callable
from dataclasses import dataclass, field

from txmq.errors import RemoteProtocolError
from txmq.message import Message, MessageConst, encode_batch, properties_to_string
from txmq.remoting.codec import FrameDecoder, encode_command
from txmq.remoting.codes import RequestCode, SerializeType
from txmq.remoting.command import FLAG_ONEWAY, RemotingCommand
from txmq.remoting.request_headers import SendMessageRequestHeader
from txmq.topic import SYSTEM_TOPICS

HALF_MARKER = b"TXMQ-FUZZ-HALF-MARKER"  # every half body starts with it; no input ever carries it

EDGE_INTS = [0, 1, -1, 2, 3, 4, 7, 8, 12, 255, 256, 1023, 1024, 1025, 65535, 65536, 2**31 - 1, -(2**31), 2**31,
             2**32, 2**53 + 1, 2**62, 2**63 - 1, -(2**63), 2**63, 2**64, 10**30]
EDGE_STRINGS = ["", " ", "0", "-0", "+1", "1e9", "1.5", "0x10", "1_000", "NaN", "inf", "true", "false", "null",
                "{}", "[]", "abc", "é中文🙂", "\u0000", "\x01\x02", "\ud7ff", "a" * 300, "%", "%RETRY%", "%DLQ%",
                "*", "||", "TagA || TagB", "k\x01v\x02", "UNIQ_KEY\x01\x02", " a b "]
UNKNOWN_CODES = [0, -1, 1, 9, 99, 9000, 9100, 9999, 32767, -32768]
PROP_KEYS = [MessageConst.TRANSACTION_PREPARED, MessageConst.PRODUCER_GROUP, MessageConst.DELAY_TIME_LEVEL,
             MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX, MessageConst.KEYS, MessageConst.TAGS,
             MessageConst.REAL_TOPIC, MessageConst.REAL_QUEUE_ID, MessageConst.WAIT_STORE_MSG_OK,
             MessageConst.RETRY_TOPIC, "TXMQ_HALF_BATCH", "TXMQ_OP", "__STARTDELIVERTIME", "user"]


@dataclass(frozen=True, slots=True)
class Input:
    kind: str  # what the figures count it as
    data: bytes
    answers: int  # responses a correct server owes before the connection is closed
    must_close: bool  # the bytes break the protocol: the server must close the connection
    code: int | None = None  # the request code of a well-framed request


def expectation(data: bytes) -> tuple[int, bool]:
    """(answers owed, must close) for ``data``, by txmq's own decoder (16 MiB frames, as the servers)."""
    dec = FrameDecoder()
    answers = 0
    try:
        dec.receive_data(data)
        while (cmd := dec.next_command()) is not None:
            answers += 0 if cmd.flag & (FLAG_ONEWAY | 1) else 1
    except RemoteProtocolError:
        return answers, True
    return answers, False


@dataclass(slots=True)
class Pools:
    """Names the generators may use. The campaign adds what it knows (half pointers) per family."""

    topics: list[str] = field(default_factory=lambda: ["fz_t0", "fz_t1", "fz_new", "%RETRY%fz_g0", "%DLQ%fz_g0",
                                                       *sorted(SYSTEM_TOPICS)])
    groups: list[str] = field(default_factory=lambda: ["fz_g0", "fz_g1", "CID_fz", "%RETRY%fz", "TOOLS_CONSUMER"])
    ints: list[int] = field(default_factory=lambda: list(EDGE_INTS))
    strings: list[str] = field(default_factory=lambda: list(EDGE_STRINGS))


class RemotingFuzzer:
    def __init__(self, rng: random.Random, pools: Pools, codes: list[int] | None = None,
                 mutate_bodies: bool = True) -> None:
        self.rng = rng
        self.pools = pools
        self.mutate_bodies = mutate_bodies
        self.codes = codes if codes is not None else [int(c) for c in RequestCode] + UNKNOWN_CODES
        self._opaque = rng.randrange(1, 1 << 20)

    # --- values ---------------------------------------------------------------------------------------

    def int_value(self) -> int:
        r = self.rng.random()
        if r < 0.6:
            return self.rng.choice(self.pools.ints)
        return self.rng.randrange(-(2**40), 2**40) if r < 0.8 else self.rng.randrange(0, 64)

    def text(self) -> str:
        n = self.rng.choice([1, 3, 8, 40])
        return "".join(chr(self.rng.choice([self.rng.randrange(32, 127), self.rng.randrange(0x80, 0x3000)]))
                       for _ in range(n))

    def value(self) -> str:
        """An extFields value: edge strings, edge numbers as text, names, random text, sometimes huge."""
        r = self.rng.random()
        if r < 0.3:
            return str(self.int_value())
        if r < 0.5:
            return self.rng.choice(self.pools.strings)
        if r < 0.65:
            return self.rng.choice(self.pools.topics)
        if r < 0.75:
            return self.rng.choice(self.pools.groups)
        if r < 0.97:
            return self.text()
        return "x" * self.rng.choice([4096, 70_000])

    def json_value(self, depth: int = 0) -> object:
        r = self.rng.random()
        if depth < 3 and r < 0.25:
            return {self.rng.choice(_JSON_KEYS): self.json_value(depth + 1) for _ in range(self.rng.randrange(4))}
        if depth < 3 and r < 0.4:
            return [self.json_value(depth + 1) for _ in range(self.rng.randrange(4))]
        return self.rng.choice([None, True, False, 1.5, self.int_value(), self.value()])

    def properties(self) -> str:
        props = {self.rng.choice(PROP_KEYS): self.value() for _ in range(self.rng.randrange(4))}
        if self.rng.random() < 0.2:
            return self.value()
        return properties_to_string(props)

    # --- bodies ---------------------------------------------------------------------------------------

    def batch_body(self) -> bytes:
        msgs = []
        for _ in range(self.rng.randrange(1, 5)):
            m = Message(self.rng.choice(self.pools.topics), self.rng.randbytes(self.rng.randrange(0, 64)),
                        flag=self.rng.choice([0, 1, -1, 2**31 - 1]))
            m.properties.update({self.rng.choice(PROP_KEYS): self.value()[:200] for _ in range(self.rng.randrange(3))})
            msgs.append(m)
        return self.mutate_bytes(encode_batch(msgs)) if self.rng.random() < 0.4 else encode_batch(msgs)

    def body(self, code: int) -> bytes:
        template = _JSON_BODIES.get(code)
        r = self.rng.random()
        if template is not None and not self.mutate_bodies:
            return json.dumps(template(self), ensure_ascii=False).encode()
        if template is not None and r < 0.6:
            return json.dumps(self.mutate_json(template(self)), ensure_ascii=False).encode()
        if code in (RequestCode.SEND_BATCH_MESSAGE, RequestCode.SEND_MESSAGE) and r < 0.7:
            return self.batch_body()
        if r < 0.8:
            return json.dumps(self.json_value(), ensure_ascii=False).encode()
        return self.rng.randbytes(self.rng.choice([0, 1, 16, 300]))

    def mutate_bytes(self, data: bytes) -> bytes:
        b = bytearray(data)
        for _ in range(self.rng.randrange(1, 4)):
            op = self.rng.randrange(4)
            pos = self.rng.randrange(len(b) + 1)
            if op == 0 and b:
                b[min(pos, len(b) - 1)] ^= self.rng.randrange(1, 256)
            elif op == 1:
                del b[pos:pos + self.rng.randrange(1, 9)]
            elif op == 2:
                b[pos:pos] = self.rng.randbytes(self.rng.randrange(1, 9))
            else:
                b[pos:pos + 4] = struct.pack(">i", self.rng.choice(self.pools.ints) & 0x7FFFFFFF)
        return bytes(b)

    def mutate_json(self, obj: object) -> object:
        """Change one value somewhere in ``obj`` (a dict or list tree) to another type or an edge value."""
        if isinstance(obj, dict) and obj and self.rng.random() < 0.8:
            key = self.rng.choice(list(obj))
            out = dict(obj)
            if self.rng.random() < 0.2:
                del out[key]
            else:
                out[key] = self.mutate_json(obj[key])
            return out
        if isinstance(obj, list) and obj and self.rng.random() < 0.8:
            i = self.rng.randrange(len(obj))
            return [*obj[:i], self.mutate_json(obj[i]), *obj[i + 1:]]
        return self.json_value(1)

    # --- requests -------------------------------------------------------------------------------------

    def ext_fields(self, code: int) -> dict[str, str]:
        template = _EXT_TEMPLATES.get(code)
        if template is not None and self.rng.random() < 0.7:
            ext = template(self)
            for _ in range(self.rng.randrange(1, 4)):
                ext[self.rng.choice([*ext, *_FIELD_NAMES])] = self.value()
            if ext and self.rng.random() < 0.2:
                del ext[self.rng.choice(list(ext))]
            return ext
        return {self.rng.choice(_FIELD_NAMES): self.value() for _ in range(self.rng.randrange(0, 10))}

    def command(self, code: int | None = None) -> RemotingCommand:
        code = self.rng.choice(self.codes) if code is None else code
        self._opaque += 1
        return RemotingCommand(
            code, opaque=self._opaque, flag=FLAG_ONEWAY if self.rng.random() < 0.05 else 0,
            remark=self.rng.choice([None, None, "", self.text()]), ext_fields=self.ext_fields(code),
            body=self.body(code) if self.rng.random() < 0.6 else b"",
            serialize_type=SerializeType.ROCKETMQ if self.rng.random() < 0.15 else SerializeType.JSON)

    def request(self) -> Input:
        cmd = self.command()
        try:
            data = encode_command(cmd)
        except Exception:  # a value the binary header cannot carry (a 70 KB value over 2 bytes, say): send JSON
            cmd.serialize_type = SerializeType.JSON
            data = encode_command(cmd)
        return make_input(f"request-{'json' if cmd.serialize_type == SerializeType.JSON else 'binary'}", data,
                          cmd.code)

    # --- broken frames --------------------------------------------------------------------------------

    def frame(self) -> Input:
        kind, make = self.rng.choice(self._frame_kinds())
        return make_input(kind, make())

    def _frame_kinds(self) -> list[tuple[str, Callable[[], bytes]]]:
        return [("random-bytes", self._random_bytes), ("mutated-header", self._mutated_header),
                ("header-text", self._header_text), ("bad-length", self._bad_length),
                ("truncated", self._truncated), ("bad-serialization", self._bad_serialization),
                ("header-length", self._header_length), ("mutated-body", self._mutated_body),
                ("binary-header", self._binary_header), ("pipelined", self._pipelined)]

    def _valid(self) -> bytes:
        cmd = self.command()
        cmd.serialize_type = SerializeType.JSON
        return encode_command(cmd)

    def _split(self, frame: bytes) -> tuple[dict[str, object], bytes]:
        header_len = struct.unpack_from(">I", frame, 4)[0] & 0xFFFFFF
        return json.loads(frame[8:8 + header_len]), frame[8 + header_len:]

    @staticmethod
    def _join(header: bytes, body: bytes, serialize_type: int = 0) -> bytes:
        return struct.pack(">II", 4 + len(header) + len(body), (serialize_type << 24) | len(header)) + header + body

    def _random_bytes(self) -> bytes:
        return self.rng.choice([self.rng.randbytes(self.rng.randrange(1, 200)), b"GET / HTTP/1.1\r\n\r\n",
                                b"\x16\x03\x01\x00\xa5\x01\x00\x00\xa1\x03\x03" + self.rng.randbytes(40),
                                b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", b"\x00" * self.rng.randrange(1, 12)])

    def _mutated_header(self) -> bytes:
        header, body = self._split(self._valid())
        mutated = self.mutate_json(header)
        if isinstance(mutated, dict) and self.rng.random() < 0.3:
            mutated[self.rng.choice(["extFields", "code", "flag", "opaque"])] = self.json_value(1)
        return self._join(json.dumps(mutated, ensure_ascii=False).encode(), body)

    def _header_text(self) -> bytes:
        header_len = struct.unpack_from(">I", frame := self._valid(), 4)[0] & 0xFFFFFF
        return self._join(self.mutate_bytes(frame[8:8 + header_len]), frame[8 + header_len:])

    def _bad_length(self) -> bytes:
        frame = self._valid()
        length = self.rng.choice([0, 1, 3, len(frame) - 5, len(frame) + 20, 16 * 2**20 + 1, 2**31, 2**32 - 1,
                                  self.rng.randrange(2**32)])
        return struct.pack(">I", length) + frame[4:]

    def _truncated(self) -> bytes:
        frame = self._valid()
        return frame[:self.rng.randrange(1, len(frame))]

    def _bad_serialization(self) -> bytes:
        frame = bytearray(self._valid())
        frame[4] = self.rng.randrange(2, 256)
        return bytes(frame)

    def _header_length(self) -> bytes:
        frame = bytearray(self._valid())
        frame[5:8] = self.rng.choice([0, len(frame), 0xFFFFFF, self.rng.randrange(1 << 24)]).to_bytes(3, "big")
        return bytes(frame)

    def _mutated_body(self) -> bytes:
        header, body = self._split(self._valid())
        return self._join(json.dumps(header).encode(), self.mutate_bytes(body or self.batch_body()))

    def _binary_header(self) -> bytes:
        return self._join(self.rng.randbytes(self.rng.randrange(0, 80)), b"", 1)

    def _pipelined(self) -> bytes:
        frames = [self._valid() for _ in range(self.rng.randrange(2, 5))]
        if self.rng.random() < 0.5:
            frames.append(self.rng.randbytes(self.rng.randrange(1, 30)))
        return b"".join(frames)


def make_input(kind: str, data: bytes, code: int | None = None) -> Input:
    assert HALF_MARKER not in data
    answers, must_close = expectation(data)
    return Input(kind, data, answers, must_close, code)


# --- templates: valid requests of the codes txmq serves, for mutation ---------------------------------


def _send(f: RemotingFuzzer) -> dict[str, str]:
    return {"producerGroup": f.rng.choice(f.pools.groups), "topic": f.rng.choice(f.pools.topics),
            "defaultTopic": "TBW102", "defaultTopicQueueNums": "4", "queueId": str(f.rng.randrange(-1, 5)),
            "sysFlag": f.rng.choice(["0", "4", "8", "12", "1"]), "bornTimestamp": "1700000000000", "flag": "0",
            "properties": f.properties(), "reconsumeTimes": "0", "unitMode": "false",
            "batch": f.rng.choice(["false", "true"])}


def _send_v2(f: RemotingFuzzer) -> dict[str, str]:
    return {SendMessageRequestHeader.V2_LETTERS.get(k, k): v for k, v in _send(f).items()}


def _pull(f: RemotingFuzzer) -> dict[str, str]:
    return {"consumerGroup": f.rng.choice(f.pools.groups), "topic": f.rng.choice(f.pools.topics),
            "queueId": str(f.rng.randrange(-1, 5)), "queueOffset": str(f.rng.choice([0, 1, 5, -1, 2**40])),
            "maxMsgNums": str(f.rng.choice([1, 32, 0, -1, 100000])), "sysFlag": str(f.rng.choice([0, 1, 4, 5])),
            "commitOffset": "0", "suspendTimeoutMillis": str(f.rng.choice([0, 100, 200])),
            "subscription": f.rng.choice(["*", "TagA", "TagA || TagB", "", "||"]), "subVersion": "0"}


def _topic_queue(f: RemotingFuzzer) -> dict[str, str]:
    return {"topic": f.rng.choice(f.pools.topics), "queueId": str(f.rng.randrange(-1, 5)),
            "consumerGroup": f.rng.choice(f.pools.groups), "commitOffset": str(f.int_value()),
            "timestamp": str(f.int_value())}


def _end_tx(f: RemotingFuzzer) -> dict[str, str]:
    return {"producerGroup": f.rng.choice(f.pools.groups), "tranStateTableOffset": str(f.int_value()),
            "commitLogOffset": str(f.int_value()), "commitOrRollback": f.rng.choice(["0", "8", "12", "4", "-1"]),
            "fromTransactionCheck": f.rng.choice(["true", "false", "1"]), "msgId": f.value(),
            "transactionId": f.value()}


def _send_back(f: RemotingFuzzer) -> dict[str, str]:
    return {"group": f.rng.choice(f.pools.groups), "offset": str(f.int_value()),
            "delayLevel": str(f.rng.choice([0, 1, 3, 18, 19, -1])), "originMsgId": f.value(),
            "originTopic": f.rng.choice(f.pools.topics), "maxReconsumeTimes": str(f.rng.choice([0, 1, 16, -1]))}


def _create_topic(f: RemotingFuzzer) -> dict[str, str]:
    return {"topic": f.rng.choice(f.pools.topics), "defaultTopic": "TBW102",
            "readQueueNums": str(f.rng.choice([1, 4, 0, 1024, 1025])), "writeQueueNums": "4", "perm": "6",
            "topicFilterType": "SINGLE_TAG", "topicSysFlag": "0", "order": "false"}


def _query(f: RemotingFuzzer) -> dict[str, str]:
    return {"topic": f.rng.choice(f.pools.topics), "key": f.value(), "maxNum": str(f.rng.choice([1, 32, 0, -1])),
            "beginTimestamp": "0", "endTimestamp": str(2**63 - 1)}


def _register(f: RemotingFuzzer) -> dict[str, str]:
    return {"clusterName": "fz-cluster", "brokerAddr": "127.0.0.1:1", "brokerName": "fz-broker",
            "brokerId": str(f.rng.choice([0, 1, -1])), "haServerAddr": "", "topic": f.rng.choice(f.pools.topics)}


def _client(f: RemotingFuzzer) -> dict[str, str]:
    return {"clientID": f.value(), "producerGroup": f.rng.choice(f.pools.groups),
            "consumerGroup": f.rng.choice(f.pools.groups), "id": f.value(), "limit": str(f.int_value())}


_EXT_TEMPLATES: dict[int, Callable[[RemotingFuzzer], dict[str, str]]] = {
    RequestCode.SEND_MESSAGE: _send, RequestCode.SEND_MESSAGE_V2: _send_v2, RequestCode.SEND_BATCH_MESSAGE: _send_v2,
    RequestCode.PULL_MESSAGE: _pull, RequestCode.QUERY_MESSAGE: _query, RequestCode.QUERY_CONSUMER_OFFSET: _topic_queue,
    RequestCode.UPDATE_CONSUMER_OFFSET: _topic_queue, RequestCode.UPDATE_AND_CREATE_TOPIC: _create_topic,
    RequestCode.DELETE_TOPIC_IN_BROKER: _create_topic, RequestCode.SEARCH_OFFSET_BY_TIMESTAMP: _topic_queue,
    RequestCode.GET_MAX_OFFSET: _topic_queue, RequestCode.GET_MIN_OFFSET: _topic_queue,
    RequestCode.GET_EARLIEST_MSG_STORETIME: _topic_queue, RequestCode.VIEW_MESSAGE_BY_ID: _send_back,
    RequestCode.CONSUMER_SEND_MSG_BACK: _send_back, RequestCode.END_TRANSACTION: _end_tx,
    RequestCode.UNREGISTER_CLIENT: _client, RequestCode.GET_CONSUMER_LIST_BY_GROUP: _client,
    RequestCode.TXMQ_TX_LIST: _client, RequestCode.TXMQ_TX_SHOW: _client, RequestCode.TXMQ_TX_RESUME: _client,
    RequestCode.GET_ROUTEINFO_BY_TOPIC: _create_topic, RequestCode.REGISTER_BROKER: _register,
    RequestCode.UNREGISTER_BROKER: _register, RequestCode.DELETE_TOPIC_IN_NAMESRV: _create_topic,
}
_FIELD_NAMES = sorted({k for t in _EXT_TEMPLATES.values() for k in t(RemotingFuzzer(random.Random(0), Pools()))}
                      | {"offset", "group", "delayLevel", "key", "id", "limit", "clientId", "a", "b", "m"})


def _heartbeat(f: RemotingFuzzer) -> object:
    return {"clientID": f.value(), "producerDataSet": [{"groupName": f.rng.choice(f.pools.groups)}],
            "consumerDataSet": [{"groupName": f.rng.choice(f.pools.groups), "consumeType": 1, "messageModel": 1,
                                 "consumeFromWhere": 0, "subscriptionDataSet": [
                                     {"topic": f.rng.choice(f.pools.topics), "subString": "*", "subVersion": 0}]}]}


def _lock(f: RemotingFuzzer) -> object:
    return {"consumerGroup": f.rng.choice(f.pools.groups), "clientId": f.value(), "mqSet": [
        {"topic": f.rng.choice(f.pools.topics), "brokerName": "broker-a", "queueId": f.rng.randrange(-1, 5)}]}


def _end_batch(f: RemotingFuzzer) -> object:
    return {"producerGroup": f.rng.choice(f.pools.groups), "entries": [
        {"tranStateTableOffset": f.int_value(), "commitLogOffset": f.int_value(),
         "commitOrRollback": f.rng.choice([0, 8, 12, 4])} for _ in range(f.rng.randrange(0, 4))]}


def _register_body(f: RemotingFuzzer) -> object:
    topic = f.rng.choice(f.pools.topics)
    return {"topicConfigSerializeWrapper": {"topicConfigTable": {topic: {
        "topicName": topic, "readQueueNums": 4, "writeQueueNums": 4, "perm": 6}}, "dataVersion": {}}}


_JSON_KEYS = ["clientID", "groupName", "topic", "entries", "producerGroup", "mqSet", "queueId", "perm", "x"]
_JSON_BODIES: dict[int, Callable[[RemotingFuzzer], object]] = {
    RequestCode.HEART_BEAT: _heartbeat, RequestCode.LOCK_BATCH_MQ: _lock, RequestCode.UNLOCK_BATCH_MQ: _lock,
    RequestCode.TXMQ_END_TRANSACTION_BATCH: _end_batch, RequestCode.REGISTER_BROKER: _register_body,
}
