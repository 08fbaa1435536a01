"""Hostile gRPC calls for the live-server campaign: every MessagingService method, its request built by walking the
protobuf descriptor with edge values (int limits, out-of-range enums, unicode, huge strings, timestamps and
durations at 2^62 s), either from scratch or as a valid template with a few fields overwritten. Seeded."""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message as ProtoMessage

from txmq.grpc.protocol import definition_pb2 as pb
from txmq.grpc.protocol import service_pb2 as spb

SERVICE = spb.DESCRIPTOR.services_by_name["MessagingService"]
METHODS = [m.name for m in SERVICE.methods]

_INT_LIMITS = {FieldDescriptor.TYPE_INT32: (-(2**31), 2**31 - 1), FieldDescriptor.TYPE_SINT32: (-(2**31), 2**31 - 1),
               FieldDescriptor.TYPE_SFIXED32: (-(2**31), 2**31 - 1), FieldDescriptor.TYPE_UINT32: (0, 2**32 - 1),
               FieldDescriptor.TYPE_FIXED32: (0, 2**32 - 1), FieldDescriptor.TYPE_UINT64: (0, 2**64 - 1),
               FieldDescriptor.TYPE_FIXED64: (0, 2**64 - 1)}
_INT64 = (-(2**63), 2**63 - 1)
_EDGE = [0, 1, -1, 2, 3, 1000, 2**31 - 1, -(2**31), 2**32 - 1, 2**53, 2**62, 2**63 - 1, -(2**63), 315537897599]


@dataclass(frozen=True, slots=True)
class GrpcCall:
    method: str
    requests: list[ProtoMessage]  # one, or several for the Telemetry stream
    metadata: list[tuple[str, str]]


class GrpcFuzzer:
    def __init__(self, rng: random.Random, topics: list[str], groups: list[str], strings: list[str]) -> None:
        self.rng = rng
        self.topics, self.groups, self.strings = topics, groups, strings

    def call(self) -> GrpcCall:
        name = self.rng.choice(METHODS)
        method = SERVICE.methods_by_name[name]
        count = self.rng.randrange(1, 4) if method.client_streaming else 1
        requests = [self.request(method.input_type.name) for _ in range(count)]
        client_id = self.rng.choice(["fz-grpc-1", "fz-grpc-2", "", "x" * 300, "é"])
        metadata = [("x-mq-client-id", client_id)] if client_id.isascii() and self.rng.random() < 0.9 else []
        return GrpcCall(name, requests, metadata)

    def request(self, type_name: str) -> ProtoMessage:
        msg = getattr(spb, type_name)()
        template = _TEMPLATES.get(type_name)
        if template is not None and self.rng.random() < 0.6:
            msg.CopyFrom(template(self))
            self.fill(msg, 0.1)
        else:
            self.fill(msg, 0.5)
        return msg

    def fill(self, msg: ProtoMessage, p: float, depth: int = 0) -> None:
        """Set each field of ``msg`` with probability ``p``, recursively (bounded depth)."""
        for f in msg.DESCRIPTOR.fields:
            if self.rng.random() >= p:
                continue
            if f.type == FieldDescriptor.TYPE_MESSAGE:
                if depth >= 4:
                    continue
                if f.message_type.GetOptions().map_entry:
                    target = getattr(msg, f.name)
                    key_f, val_f = f.message_type.fields_by_name["key"], f.message_type.fields_by_name["value"]
                    for _ in range(self.rng.randrange(1, 4)):
                        target[self.scalar(key_f)] = self.scalar(val_f)
                elif f.is_repeated:
                    for _ in range(self.rng.randrange(0, 4)):
                        self.fill(getattr(msg, f.name).add(), p, depth + 1)
                else:
                    sub = getattr(msg, f.name)
                    sub.SetInParent()
                    self.fill(sub, p, depth + 1)
            elif f.is_repeated:
                getattr(msg, f.name).extend(self.scalar(f) for _ in range(self.rng.randrange(0, 4)))
            else:
                setattr(msg, f.name, self.scalar(f))

    def scalar(self, f: FieldDescriptor) -> Any:
        rng = self.rng
        if f.type == FieldDescriptor.TYPE_BOOL:
            return rng.random() < 0.5
        if f.type == FieldDescriptor.TYPE_STRING:
            pool = self.topics if "name" in f.name or "topic" in f.name else self.strings
            return rng.choice([rng.choice(pool), rng.choice(self.groups), rng.choice(self.strings)])
        if f.type == FieldDescriptor.TYPE_BYTES:
            return rng.randbytes(rng.choice([0, 1, 64, 5000]))
        if f.type in (FieldDescriptor.TYPE_FLOAT, FieldDescriptor.TYPE_DOUBLE):
            return rng.choice([0.0, -1.0, 1e308, float("nan"), float("inf")])
        if f.type == FieldDescriptor.TYPE_ENUM:
            values = [v.number for v in f.enum_type.values]
            return rng.choice([*values, 99, -1, 2**31 - 1])
        lo, hi = _INT_LIMITS.get(f.type, _INT64)
        return min(max(rng.choice([*_EDGE, rng.randrange(-1000, 1000)]), lo), hi)


def _resource(f: GrpcFuzzer, pool: list[str]) -> pb.Resource:
    return pb.Resource(name=f.rng.choice(pool))


def _send(f: GrpcFuzzer) -> ProtoMessage:
    msg = pb.Message(topic=_resource(f, f.topics), body=f.rng.randbytes(16), system_properties=pb.SystemProperties(
        message_id=f"{f.rng.getrandbits(128):032X}", body_encoding=pb.IDENTITY,
        message_type=f.rng.choice([pb.NORMAL, pb.FIFO, pb.DELAY, pb.TRANSACTION]), tag="TagA"))
    return spb.SendMessageRequest(messages=[msg])


def _receive(f: GrpcFuzzer) -> ProtoMessage:
    return spb.ReceiveMessageRequest(
        group=_resource(f, f.groups), message_queue=pb.MessageQueue(topic=_resource(f, f.topics), id=-1),
        filter_expression=pb.FilterExpression(type=pb.TAG, expression="*"), batch_size=8,
        invisible_duration={"seconds": 5}, long_polling_timeout={"nanos": 100_000_000})


def _route(f: GrpcFuzzer) -> ProtoMessage:
    return spb.QueryRouteRequest(topic=_resource(f, f.topics))


def _end(f: GrpcFuzzer) -> ProtoMessage:
    return spb.EndTransactionRequest(topic=_resource(f, f.topics), message_id=f.rng.choice(f.strings),
                                     transaction_id=f.rng.choice(f.strings), resolution=f.rng.choice([1, 2]))


def _heartbeat(f: GrpcFuzzer) -> ProtoMessage:
    return spb.HeartbeatRequest(group=_resource(f, f.groups), client_type=f.rng.choice([1, 2, 3, 4]))


_TEMPLATES = {"SendMessageRequest": _send, "ReceiveMessageRequest": _receive, "QueryRouteRequest": _route,
              "EndTransactionRequest": _end, "HeartbeatRequest": _heartbeat}
