"""Creating a topic tells the name server about that topic only (RocketMQ REGISTER_TOPIC_IN_NAMESRV), not about
every topic of the broker again: what a creation costs must not grow with the topics already there. Real
name server and broker processes; the broker reaches the name server through a proxy that counts its bytes."""

from __future__ import annotations

from tests.e2e.helpers import wait_until
from tests.e2e.tcp_proxy import TcpProxy
from txmq import Admin, Message, Producer, SendStatus
from txmq.launch import free_port

TOPICS = 300


def test_creating_a_topic_sends_that_topic_only_and_every_topic_stays_routed(cluster):
    host, port = cluster.namesrv_addr.rsplit(":", 1)
    proxy = TcpProxy((host, int(port)))
    try:
        # No periodic full registration during the test: the creations alone talk to the name server.
        cluster.broker(conf={"namesrvAddr": proxy.addr, "registerNameServerPeriod": 600_000}).start()
        with Admin(cluster.namesrv_addr) as admin:
            wait_until(lambda: admin.brokers(), 10)
            for i in range(TOPICS):
                admin.create_topic(f"reg_t{i}", queue_nums=8)
            before = proxy.bytes_up
            admin.create_topic("reg_last", queue_nums=8)
            sent = proxy.bytes_up - before
            # A full registration of 300 topics is over 30 KB; one topic's is a few hundred bytes.
            assert sent < 2048, f"creating one topic sent {sent} bytes to the name server"
            routed = set(admin.list_topics())
        assert {f"reg_t{i}" for i in range(TOPICS)} | {"reg_last"} <= routed
        # Answered once routed: a producer asking right after the creation finds the route.
        with Producer("p_reg", cluster.namesrv_addr) as producer:
            assert producer.send(Message("reg_last", b"x")).status == SendStatus.SEND_OK
    finally:
        proxy.close()


def test_a_name_server_that_does_not_know_the_broker_gets_a_full_registration(cluster):
    """A name server refuses a topic of a broker it has not registered (here: one restarted with an empty table,
    the broker's next period ten minutes away): the broker then registers everything with it, so the new topic and
    the earlier ones are routed there at once."""
    second = cluster._proc("namesrv2", ["namesrv", "--port", str(free_port())]).start()
    second_addr = second.addrs["namesrv"]
    cluster.start_broker(conf={"namesrvAddr": f"{cluster.namesrv_addr};{second_addr}",
                               "registerNameServerPeriod": 600_000})
    with Admin(cluster.namesrv_addr) as admin:
        assert wait_until(lambda: admin.brokers(), 10)
        admin.create_topic("reg_before", queue_nums=2)
    second.kill()
    second.start()  # same port, empty table
    with Admin(second_addr) as admin:
        assert "reg_before" not in admin.list_topics()
    with Admin(cluster.namesrv_addr) as admin:  # the first name server still routes the broker
        admin.create_topic("reg_after", queue_nums=2)
    with Admin(second_addr) as admin:
        assert {"reg_before", "reg_after"} <= set(admin.list_topics())
