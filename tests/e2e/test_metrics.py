"""Prometheus metrics (issue 16): a real Prometheus server scrapes a broker process started with
``metricsExporterType=PROM``; after known traffic, PromQL through Prometheus's HTTP API returns those counts."""

from __future__ import annotations

import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.cluster import Cluster
from tests.e2e.helpers import Recorder, push_consumer
from tests.e2e.prometheus import Prometheus
from txmq import Admin, ConsumeStatus, LocalTransactionState, Message, Producer, TransactionProducer
from txmq.admin import MQAdminExt
from txmq.launch import free_port

N_SENDS, K_COMMITS, R_ROLLBACKS = 7, 3, 2


class Decide:
    """Commits a transaction whose body says so, rolls back the rest."""

    def execute_local_transaction(self, msg, arg):
        return LocalTransactionState.COMMIT if msg.body.startswith(b"commit") else LocalTransactionState.ROLLBACK

    def check_local_transaction(self, msg):
        return LocalTransactionState.ROLLBACK


@pytest.fixture(scope="module")
def scraped(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Cluster, Prometheus]]:
    root: Path = tmp_path_factory.mktemp("metrics")
    cluster = Cluster(root)
    prom = None
    try:
        cluster.start_namesrv()
        broker = cluster.start_broker(conf={"metricsExporterType": "PROM", "metricsPromExporterPort": free_port(),
                                            "grpcPort": -1})
        prom = Prometheus(root / "prometheus", [broker.addrs["metrics"]])
        yield cluster, prom
    finally:
        if prom is not None:
            prom.stop()
        cluster.close()


def test_prometheus_counts_known_traffic(scraped):
    cluster, prom = scraped
    with Admin(cluster.namesrv_addr) as admin:
        admin.create_topic("m_t", 2)
        admin.create_topic("m_tx", 2)
    cluster.wait_route("m_tx")
    with Producer("m_p", cluster.namesrv_addr) as producer:
        for i in range(N_SENDS):
            producer.send(Message("m_t", b"x" * (100 + i)))
    with TransactionProducer("m_txp", Decide(), cluster.namesrv_addr) as tx:
        for body in [b"commit"] * K_COMMITS + [b"rollback"] * R_ROLLBACKS:
            tx.send_message_in_transaction(Message("m_tx", body))
    rec = Recorder()
    consumer = push_consumer(cluster.namesrv_addr, "m_g", "m_t", rec)
    dead = Recorder(decide=lambda m: ConsumeStatus.RECONSUME_LATER)  # each message straight to %DLQ%m_dlq
    refuser = push_consumer(cluster.namesrv_addr, "m_dlq", "m_t", dead, max_reconsume_times=0)
    try:
        assert rec.wait_for(N_SENDS) and dead.wait_for(N_SENDS)
    finally:
        consumer.shutdown()
        refuser.shutdown()

    node = 'cluster="DefaultCluster",node_type="broker",node_id="broker-a"'
    assert prom.wait_value(f'sum(rocketmq_messages_in_total{{{node},topic="m_t",message_type="normal"}})',
                           N_SENDS) == N_SENDS
    assert prom.value('sum(rocketmq_messages_in_total{topic="m_tx",message_type="transaction"})') == (
        K_COMMITS + R_ROLLBACKS)
    assert prom.value('rocketmq_throughput_in_total{topic="m_t"}') == sum(100 + i for i in range(N_SENDS))
    assert prom.value('rocketmq_message_size_bucket{topic="m_t",le="1024"}') == N_SENDS
    assert prom.wait_value('rocketmq_messages_out_total{topic="m_t",consumer_group="m_g"}', N_SENDS) == N_SENDS
    assert prom.value('rocketmq_throughput_out_total{topic="m_t",consumer_group="m_g"}') > N_SENDS * 100
    assert prom.value('rocketmq_commit_messages_total{producer_group="m_txp"}') == K_COMMITS
    assert prom.value('rocketmq_rollback_messages_total{producer_group="m_txp"}') == R_ROLLBACKS
    assert prom.value('rocketmq_finish_message_latency_count{producer_group="m_txp"}') == K_COMMITS
    assert prom.value('sum(rocketmq_half_messages{topic="m_tx"})') in (None, 0.0)
    assert prom.value("rocketmq_topic_number") >= 2
    assert prom.value("rocketmq_storage_size") > 0
    # Consumed and committed (offsets are committed every few seconds): no lag is left.
    assert prom.wait_value('rocketmq_consumer_lag_messages{topic="m_t",consumer_group="m_g"}', 0) == 0
    assert prom.value('rocketmq_consumer_ready_messages{topic="m_t",consumer_group="m_g"}') == 0
    assert prom.value('rocketmq_consumer_lag_latency{topic="m_t",consumer_group="m_g"}') == 0
    assert prom.value('rocketmq_consumer_queueing_latency{topic="m_t",consumer_group="m_g"}') == 0
    # A group that committed offset 0 and pulled nothing: all N behind, ready, waiting since they were stored.
    with MQAdminExt(cluster.namesrv_addr) as admin:
        admin.set_offsets("m_behind", "m_t", 0)
    behind = '{topic="m_t",consumer_group="m_behind"}'
    assert prom.wait_value(f"rocketmq_consumer_lag_messages{behind}", N_SENDS) == N_SENDS
    assert prom.value(f"rocketmq_consumer_ready_messages{behind}") == N_SENDS
    assert prom.value(f"rocketmq_consumer_inflight_messages{behind}") == 0
    assert prom.value(f"rocketmq_consumer_lag_latency{behind}") > 0
    assert prom.value(f"rocketmq_consumer_queueing_latency{behind}") > 0
    assert prom.wait_value('rocketmq_send_to_dlq_messages_total{topic="m_t",consumer_group="m_dlq"}',
                           N_SENDS) == N_SENDS
    sends = prom.value('sum(rocketmq_rpc_latency_count{request_code=~"10|310|320",response_code="0"})')
    assert sends is not None and sends >= N_SENDS + K_COMMITS + R_ROLLBACKS
    assert prom.value('sum(rocketmq_rpc_latency_count{request_code="37"})') == K_COMMITS + R_ROLLBACKS
    assert prom.value('up{job="txmq"}') == 1


def test_exporter_answers_only_metrics(scraped):
    cluster, _ = scraped
    addr = cluster.procs[-1].addrs["metrics"]
    with urllib.request.urlopen(f"http://{addr}/metrics", timeout=5) as r:
        text = r.read().decode()
        assert r.headers["Content-Type"].startswith("text/plain")
    assert "# TYPE rocketmq_messages_in_total counter" in text
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(f"http://{addr}/other", timeout=5)
    assert err.value.code == 404
    err.value.close()


def test_metrics_are_off_by_default(tmp_path):
    cluster = Cluster(tmp_path)
    try:
        cluster.start_namesrv()
        broker = cluster.start_broker(conf={"grpcPort": -1})
        assert "metrics" not in broker.addrs and "broker" in broker.addrs
    finally:
        cluster.close()
