"""A broker whose brokerIP1 is a host name: the gRPC route names its endpoint so that the official clients can
reach it (a name under the IPv4 scheme is a target gRPC refuses: 'ipv4:localhost:PORT' is not a valid URI)."""

from __future__ import annotations

import grpc

from txmq.client.admin import Admin
from txmq.grpc.protocol import definition_pb2 as pb
from txmq.grpc.protocol import service_pb2 as spb
from txmq.grpc.protocol.service_pb2_grpc import MessagingServiceStub


def test_a_broker_named_by_host_name_serves_the_official_client(rmq5_py_named):
    send, server = rmq5_py_named
    admin = Admin(server.namesrv).start()
    try:
        admin.create_topic("named_host_t", 4)
    finally:
        admin.shutdown()
    channel = grpc.insecure_channel(server.grpc)
    try:
        r = MessagingServiceStub(channel).QueryRoute(spb.QueryRouteRequest(topic=pb.Resource(name="named_host_t")),
                                                     metadata=[("x-mq-client-id", "named-host")], timeout=10)
    finally:
        channel.close()
    assert r.status.code == pb.Code.OK
    endpoints = r.message_queues[0].broker.endpoints
    assert (endpoints.scheme, endpoints.addresses[0].host) == (pb.DOMAIN_NAME, "localhost")
    sent = send(cmd="send", topic="named_host_t", count=2, body="named")
    assert len(sent) == 2
