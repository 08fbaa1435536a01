"""A broker's permission end to end (real processes over TCP): ``updateBrokerConfig brokerPermission 4`` on one
broker of two makes producers send to the other, a send aimed at it is refused; ``wipeWritePerm`` and
``addWritePerm`` take write off a broker's routes at the name servers and give it back, on the gRPC routes
too."""

from __future__ import annotations

import re
import time

import grpc
import pytest

from tests.e2e.helpers import silent_servers, wait_until
from tests.e2e.test_admin import admin, ok
from txmq import Admin, BrokerError, Message, MessageQueue, Producer
from txmq.admin.client import MQAdminExt
from txmq.errors import ClientError
from txmq.grpc.protocol import definition_pb2 as pb
from txmq.grpc.protocol import service_pb2 as spb
from txmq.grpc.protocol.service_pb2_grpc import MessagingServiceStub
from txmq.ports import free_port
from txmq.remoting.codes import ResponseCode


def route_perms(namesrv: str, topic: str) -> dict[str, int]:
    with MQAdminExt(namesrv) as mq_admin:
        return {qd["brokerName"]: qd["perm"] for qd in mq_admin.route(topic)["queueDatas"]}


def wait_perms(namesrv: str, topic: str, perms: dict[str, int], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while (found := route_perms(namesrv, topic)) != perms:
        assert time.monotonic() < deadline, found
        time.sleep(0.05)


def test_a_read_only_broker_gets_no_sends_and_refuses_one_aimed_at_it(cluster):
    cluster.start_broker("broker-a", {"grpcPort": -1})
    cluster.start_broker("broker-b", {"grpcPort": -1})
    with Admin(cluster.namesrv_addr) as topics:
        topics.create_topic("perm_t", queue_nums=2)
    cluster.wait_route("perm_t", brokers=2)
    wait_perms(cluster.namesrv_addr, "perm_t", {"broker-a": 6, "broker-b": 6})

    ok(cluster, "updateBrokerConfig", "-b", "broker-a", "-k", "brokerPermission", "-v", "4")
    wait_perms(cluster.namesrv_addr, "perm_t", {"broker-a": 4, "broker-b": 6}, timeout=5)  # not a 30 s period
    assert re.search(r"brokerPermission\s+: 4$", ok(cluster, "brokerStatus", "-b", "broker-a"), re.M)
    with Producer("perm_p", cluster.namesrv_addr, retry_times=0) as producer:
        sent = [producer.send(Message("perm_t", f"m{i}".encode())) for i in range(8)]
        assert {r.message_queue.broker_name for r in sent} == {"broker-b"}
        with pytest.raises(BrokerError, match=r"the broker\[127\.0\.0\.1\] sending message is forbidden") as refused:
            producer.send(Message("perm_t", b"aimed"), queue=MessageQueue("perm_t", "broker-a", 0))
        assert refused.value.code == ResponseCode.NO_PERMISSION

    ok(cluster, "updateBrokerConfig", "-b", "broker-a", "-k", "brokerPermission", "-v", "6")
    wait_perms(cluster.namesrv_addr, "perm_t", {"broker-a": 6, "broker-b": 6}, timeout=5)
    with Producer("perm_p2", cluster.namesrv_addr, retry_times=0) as producer:
        sent = [producer.send(Message("perm_t", f"n{i}".encode())) for i in range(8)]
        assert {r.message_queue.broker_name for r in sent} == {"broker-a", "broker-b"}


def test_wipe_and_add_write_perm_through_mqadmin(cluster):
    cluster.start_broker("broker-a", {"grpcPort": -1})
    with Admin(cluster.namesrv_addr) as topics:
        topics.create_topic("wipe_t", queue_nums=1)
    cluster.wait_route("wipe_t")
    ns = cluster.namesrv_addr

    out = ok(cluster, "wipeWritePerm", "-b", "broker-a")
    found = re.fullmatch(rf"wipe write perm of broker\[broker-a\] in name server\[{re.escape(ns)}\] OK, (\d+)\n", out)
    assert found and int(found.group(1)) >= 1, out
    assert route_perms(ns, "wipe_t") == {"broker-a": 4}
    with (Producer("wipe_p", ns, retry_times=0) as producer,
          pytest.raises(ClientError, match="no route for topic wipe_t")):
        producer.send(Message("wipe_t", b"x"))

    out = ok(cluster, "addWritePerm", "-b", "broker-a", "-n", ns)  # mqadmin's flags, -n after the command
    assert out == f"add write perm of broker[broker-a] in name server[{ns}] OK, {found.group(1)}\n", out
    assert route_perms(ns, "wipe_t") == {"broker-a": 6}
    code, out = admin(cluster, "wipeWritePerm")
    assert code != 0 and "-b" in out, out


def grpc_route(grpc_port: int, topic: str, timeout: float = 5.0) -> spb.QueryRouteResponse:
    """The broker's gRPC answer to QueryRoute for ``topic``, as a RocketMQ 5 client asks it."""
    with grpc.insecure_channel(f"127.0.0.1:{grpc_port}") as channel:
        return MessagingServiceStub(channel).QueryRoute(spb.QueryRouteRequest(topic=pb.Resource(name=topic)),
                                                        metadata=[("x-mq-client-id", "route-probe")], timeout=timeout)


def test_a_wipe_takes_write_off_the_brokers_own_grpc_routes_too(cluster):
    """A RocketMQ 5 client asks the broker's gRPC endpoint for routes, not the name server: a wipe made at the name
    server (an operator draining the broker) must reach those routes as RocketMQ's proxy's, whose routes come
    from the name server, else the gRPC producers go on sending to a broker being drained."""
    grpc_port = free_port()
    cluster.start_broker("broker-a", {"grpcPort": grpc_port, "topicRouteServiceCacheRefreshSeconds": 0})
    with Admin(cluster.namesrv_addr) as topics:
        topics.create_topic("wipe_grpc_t", queue_nums=2)
    cluster.wait_route("wipe_grpc_t")

    def permissions() -> set[int]:
        return _permissions(grpc_port, "wipe_grpc_t")

    assert permissions() == {pb.READ_WRITE}
    ok(cluster, "wipeWritePerm", "-b", "broker-a")
    assert permissions() == {pb.READ}
    ok(cluster, "addWritePerm", "-b", "broker-a", "-n", cluster.namesrv_addr)
    assert permissions() == {pb.READ_WRITE}


def _permissions(grpc_port: int, topic: str) -> set[int]:
    r = grpc_route(grpc_port, topic)
    assert r.status.code == pb.Code.OK, r.status
    return {q.permission for q in r.message_queues}


def test_grpc_routes_are_cached_and_refreshed_from_the_name_servers(cluster):
    """As RocketMQ's proxy: a route query is answered from the name servers' last answer, which the first query
    past ``topicRouteServiceCacheRefreshSeconds`` asks again in the background; with every name server gone, the
    routes stay as they last were (not the broker's own perm, undoing an operator's wipe)."""
    grpc_port = free_port()
    namesrv = cluster.procs[0]
    cluster.start_broker("broker-a", {"grpcPort": grpc_port, "topicRouteServiceCacheRefreshSeconds": 1})
    with Admin(cluster.namesrv_addr) as topics:
        topics.create_topic("cached_grpc_t", queue_nums=1)
    cluster.wait_route("cached_grpc_t")
    assert _permissions(grpc_port, "cached_grpc_t") == {pb.READ_WRITE}
    ok(cluster, "wipeWritePerm", "-b", "broker-a")
    # the query after the wipe is answered from the cache, however long the wipe took; it starts the refresh
    assert _permissions(grpc_port, "cached_grpc_t") == {pb.READ_WRITE}
    assert wait_until(lambda: _permissions(grpc_port, "cached_grpc_t") == {pb.READ}, 15)
    namesrv.stop()
    time.sleep(1.5)  # past the refresh interval: the next query asks again, and no name server answers
    assert _permissions(grpc_port, "cached_grpc_t") == {pb.READ}
    assert _permissions(grpc_port, "cached_grpc_t") == {pb.READ}


@pytest.mark.parametrize("change", [
    ("updateBrokerConfig", "-b", "broker-a", "-k", "brokerPermission", "-v"),
    ("updateTopic", "-b", "broker-a", "-t", "own_perm_grpc_t", "-p"),
], ids=["brokerPermission", "topic perm"])
def test_write_the_broker_gives_back_reaches_its_cached_grpc_routes_once_registered(cluster, change):
    """A master's cached route answers carry the perm the broker itself registered: once it registers a change of
    its own (its ``brokerPermission``, a topic's perm, back to 6 after a drain long enough for the cache to hold the
    drained 4), the gRPC routes give write back with the name servers', not a refresh later (remoting producers
    send again at once)."""
    grpc_port = free_port()
    cluster.start_broker("broker-a", {"grpcPort": grpc_port})  # the default refresh, 20 s
    with Admin(cluster.namesrv_addr) as topics:
        topics.create_topic("own_perm_grpc_t", queue_nums=1)
    cluster.wait_route("own_perm_grpc_t")
    ok(cluster, *change, "4")
    wait_perms(cluster.namesrv_addr, "own_perm_grpc_t", {"broker-a": 4}, timeout=5)
    assert _permissions(grpc_port, "own_perm_grpc_t") == {pb.READ}  # the name servers' 4, cached
    ok(cluster, *change, "6")
    # within a few seconds (the broker drops its cached answers once its registration is answered), not the 20 s
    # the drained answer would otherwise be served for
    assert wait_until(lambda: _permissions(grpc_port, "own_perm_grpc_t") == {pb.READ_WRITE}, 5)


@pytest.mark.parametrize(("role", "topic", "permission"), [
    ({}, "silent_ns_t", pb.READ_WRITE),
    ({"brokerRole": "SLAVE", "brokerId": 1}, "TBW102", pb.READ),  # a slave plans no topic: one it has
], ids=["master", "slave"])
def test_a_grpc_route_does_not_wait_on_name_servers_that_do_not_answer(cluster, role, topic, permission):
    """Name servers that accept connections and never answer (a hung process, a half-open path) hold a gRPC route
    at most one ``TIMEOUT_S`` in all, not one per name server: with three of them the official clients' 3 s route
    timeout would pass. A master's own perm stands; a slave that learns of no master serves reads itself."""
    with silent_servers(3) as silent:
        grpc_port = free_port()
        cluster.start_broker("broker-a", {"grpcPort": grpc_port, "namesrvAddr": ";".join(silent), **role})
        r = grpc_route(grpc_port, topic, timeout=2.5)
        assert r.status.code == pb.Code.OK, r.status
        assert {q.permission for q in r.message_queues} == {permission}


def test_a_wipe_reaches_the_grpc_routes_past_a_silent_name_server_listed_first(cluster):
    """The perm comes from the first name server that answers, not the first one listed: a hung name server ahead
    of the one an operator wiped must neither keep write on the gRPC routes (the remoting clients, whose name
    server answers, already send elsewhere) nor hold each route query its whole timeout."""
    with silent_servers(1) as silent:
        grpc_port = free_port()
        cluster.start_broker("broker-a", {"grpcPort": grpc_port, "namesrvAddr": f"{silent[0]};{cluster.namesrv_addr}"})
        with Admin(cluster.namesrv_addr) as topics:
            topics.create_topic("wipe_silent_t", queue_nums=1)
        cluster.wait_route("wipe_silent_t")
        ok(cluster, "wipeWritePerm", "-b", "broker-a")
        began = time.monotonic()
        r = grpc_route(grpc_port, "wipe_silent_t")
        took = time.monotonic() - began
        assert r.status.code == pb.Code.OK, r.status
        assert {q.permission for q in r.message_queues} == {pb.READ}
        assert took < 0.5, took


def test_wipe_write_perm_goes_on_past_a_name_server_that_does_not_answer(cluster):
    """Each name server is asked in turn, as mqadmin does: one that cannot be reached is reported Failed and the
    others are still wiped (a drain is when a name server may be down); the exit code says one failed."""
    cluster.start_broker("broker-a", {"grpcPort": -1})
    with Admin(cluster.namesrv_addr) as topics:
        topics.create_topic("wipe_down_t", queue_nums=1)
    cluster.wait_route("wipe_down_t")
    ns, down = cluster.namesrv_addr, f"127.0.0.1:{free_port()}"

    code, out = admin(cluster, "wipeWritePerm", "-b", "broker-a", "-n", f"{down};{ns}")
    assert code == 1, out
    assert out.startswith(f"wipe write perm of broker[broker-a] in name server[{down}] Failed: "), out
    assert re.search(rf"^wipe write perm of broker\[broker-a\] in name server\[{re.escape(ns)}\] OK, \d+$", out,
                     re.M), out
    assert route_perms(ns, "wipe_down_t") == {"broker-a": 4}
