"""A RocketMQ 5 consumer already running when its group's master is SIGKILLed keeps consuming from the slave:
every member's gRPC endpoint answers routes from the name server's view (the master's endpoint while it is
listed, the slave's, readable only, once it is gone, the master's again when it is back), so the official client
moves at its next route refresh."""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
from pathlib import Path

import grpc

from tests.e2e.ha_group import Group, ha_status
from tests.e2e.helpers import wait_until
from txmq import Admin, Message, Producer, SendResult, SendStatus
from txmq.grpc.protocol import definition_pb2 as pb
from txmq.grpc.protocol import service_pb2 as spb
from txmq.grpc.protocol.service_pb2_grpc import MessagingServiceStub
from txmq.launch import free_port

ROOT = Path(__file__).resolve().parents[2]
TOPIC = "ha-grpc"
FIRST_REFRESH_S = 10  # the Python client refreshes routes 10 s after its start, then every 30 s
FAILOVER_BOUND_S = 60  # one refresh period, the backlog's drain, slack for a loaded machine
DRIVER = [str(ROOT / ".venv-rmq5/bin/python"), str(ROOT / "tests/grpc/drivers/rmq5_py.py")]


def _query_route(endpoint: str, topic: str) -> spb.QueryRouteResponse:
    with grpc.insecure_channel(endpoint) as channel:
        return MessagingServiceStub(channel).QueryRoute(spb.QueryRouteRequest(topic=pb.Resource(name=topic)),
                                                        metadata=[("x-mq-client-id", "route-probe")], timeout=5)


def _route(endpoint: str) -> set[tuple[str, int]]:
    """(endpoint, permission) of each queue the member at ``endpoint`` answers QueryRoute with (none: an error)."""
    resp = _query_route(endpoint, TOPIC)
    if resp.status.code != pb.OK:  # e.g. a slave that has not copied the topic yet: TOPIC_NOT_FOUND
        return set()
    return {(f"{a.host}:{a.port}", q.permission) for q in resp.message_queues for a in q.broker.endpoints.addresses}


class Sender(threading.Thread):
    """Sends until the master is gone; ``acked`` holds what was answered SEND_OK (SYNC_MASTER + SYNC_FLUSH)."""

    def __init__(self, namesrv: str) -> None:
        super().__init__(daemon=True)
        self.namesrv = namesrv
        self.acked: list[SendResult] = []
        self.stop = threading.Event()

    def run(self) -> None:
        with Producer("p-ha-grpc", self.namesrv, retry_times=0) as producer:
            i = 0
            while not self.stop.is_set():
                try:
                    r = producer.send(Message(TOPIC, f"g{i}".encode()))
                except Exception:  # the master died under this send: not acknowledged
                    return
                if r.status == SendStatus.SEND_OK:
                    self.acked.append(r)
                i += 1
                time.sleep(0.01)  # faster than the consumer, without a backlog that takes long to drain


def test_running_rmq5_simple_consumer_moves_to_the_slave_when_the_master_is_killed(cluster, tmp_path):
    """The official Python SimpleConsumer (docs/ha.md: why not its PushConsumer, nor the Node.js client)."""
    grpc_port = {0: free_port(), 1: free_port()}
    endpoint = {i: f"127.0.0.1:{p}" for i, p in grpc_port.items()}
    group = Group(cluster, conf={"slaveReadEnable": "true"})
    master = group.member(0, "SYNC_MASTER", {"brokerRole": "SYNC_MASTER", "flushDiskType": "SYNC_FLUSH",
                                             "grpcPort": grpc_port[0]}).start()
    group.member(1, "SLAVE", {"grpcPort": grpc_port[1]}).start()
    assert wait_until(lambda: len(ha_status(group.addr(0))["slaves"]) == 1, 15)
    with Admin(cluster.namesrv_addr) as admin:
        admin.create_topic(TOPIC, queue_nums=2)
    cluster.wait_route(TOPIC)
    # Both members route clients to the master while the name server lists it.
    assert wait_until(lambda: _route(endpoint[1]) == {(endpoint[0], pb.READ_WRITE)}, 15), _route(endpoint[1])
    assert _route(endpoint[0]) == {(endpoint[0], pb.READ_WRITE)}
    # autoCreateTopicEnable is on, but a slave writes nothing of its own: no topic of its own making.
    assert _query_route(endpoint[1], "ha-grpc-unknown").status.code == pb.TOPIC_NOT_FOUND

    args = {"cmd": "simple", "endpoint": f"{endpoint[0]};{endpoint[1]}", "topic": TOPIC, "group": "rmq5-ha-grpc",
            "failover": True, "expect": 10**6, "wait": 150, "invisible": 20, "batch": 8,
            "pace": 0.02}  # 50 messages/s: slower than the producer, a backlog builds up
    err = (tmp_path / "driver.err").open("w")
    driver = subprocess.Popen([*DRIVER, json.dumps(args)], stdout=subprocess.PIPE, stderr=err, text=True,
                              env=dict(os.environ, HOME=str(tmp_path)))
    started = time.time()
    events: list[dict] = []
    reader = threading.Thread(target=lambda: events.extend(json.loads(line) for line in driver.stdout  # type: ignore[union-attr]
                                                           if line.startswith("{")), daemon=True)
    reader.start()
    sender = Sender(cluster.namesrv_addr)
    try:
        sender.start()

        def received() -> set[str]:
            return {e["id"] for e in list(events) if e["event"] == "received"}

        # Mid-stream: the consumer is reading what the producer keeps sending, behind it by at least 50, and has
        # run past the client's first route refresh (10 s after its start): the move waits for a periodic one (30 s).
        assert wait_until(lambda: time.time() - started > FIRST_REFRESH_S + 2 and len(received()) >= 100
                          and len(sender.acked) >= len(received()) + 50, 40), \
            (len(received()), len(sender.acked))
        master.kill()  # SIGKILL
        killed = time.time()
        sender.stop.set()
        sender.join(15)
        expected = {r.msg_id for r in sender.acked}
        left = expected - received()
        assert len(left) >= 30, len(left)  # what only the slave can deliver now
        # The slave routes clients to itself, readable only, once the name server dropped the master.
        assert wait_until(lambda: _route(endpoint[1]) == {(endpoint[1], pb.READ)}, 10), _route(endpoint[1])
        assert wait_until(lambda: received() >= expected, FAILOVER_BOUND_S, step=0.5), \
            f"{len(expected - received())} of {len(expected)} acknowledged messages never received"
        first_s = min(e["t"] for e in events if e["event"] == "received" and e["id"] in left) - killed
        all_s = time.time() - killed
        master.start()  # back on its store and ports: routes name it again
        assert wait_until(lambda: _route(endpoint[1]) == {(endpoint[0], pb.READ_WRITE)}, 15), _route(endpoint[1])
    finally:
        sender.stop.set()
        driver.kill()
        driver.wait(10)
        reader.join(5)
        driver.stdout.close()  # type: ignore[union-attr]
        err.close()
    ids = [e["id"] for e in events if e["event"] == "received"]
    # At least once: what the dead master had delivered but not yet committed (its in-flight receipt handles died
    # with it, and the slave's offsets are a SlaveSynchronize copy) is delivered again by the slave.
    duplicates = len(ids) - len(set(ids))
    print(f"{len(left)} acknowledged messages left at the kill: the first received {first_s:.1f} s after it, all "
          f"{all_s:.1f} s after it; {duplicates} duplicate deliveries of {len(set(ids))}")
    assert set(ids) >= expected


def test_a_slave_routes_clients_to_the_grpc_port_its_master_restarted_on(cluster):
    """A master restarted on the same remoting address with another ``grpcPort``: its slave, which routes RocketMQ 5
    clients to the master's gRPC endpoint, asks the master for it again (every
    ``topicRouteServiceCacheRefreshSeconds``) instead of naming the old port for good."""
    grpc_port = {0: free_port(), 1: free_port()}
    slave_endpoint = f"127.0.0.1:{grpc_port[1]}"
    group = Group(cluster)
    master = group.member(0, "ASYNC_MASTER", {"grpcPort": grpc_port[0]}).start()
    listen_port = int(group.addr(0).rpartition(":")[2])
    group.member(1, "SLAVE", {"grpcPort": grpc_port[1], "topicRouteServiceCacheRefreshSeconds": 1}).start()
    with Admin(cluster.namesrv_addr) as admin:
        admin.create_topic(TOPIC, queue_nums=1)
    cluster.wait_route(TOPIC)
    assert wait_until(lambda: _route(slave_endpoint) == {(f"127.0.0.1:{grpc_port[0]}", pb.READ_WRITE)}, 15), \
        _route(slave_endpoint)
    master.stop()
    moved = free_port()
    group.member(0, "ASYNC_MASTER", {"grpcPort": moved, "listenPort": listen_port}).start()
    assert wait_until(lambda: _route(slave_endpoint) == {(f"127.0.0.1:{moved}", pb.READ_WRITE)}, 15), \
        _route(slave_endpoint)
