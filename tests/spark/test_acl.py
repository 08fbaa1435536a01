"""The connector against a broker with ACL and TLS enforcing: options ``accessKey``, ``secretKey``, ``tls`` and
``tlsTrustCertPath`` reach every client the reader and writer make, on the driver and in the Python workers."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.acl.conftest import CONSUMER, VICTIM, AclServer, start_acl_server
from tests.acl.test_tls import make_certificates


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[AclServer, Path]]:
    ca, cert, key = make_certificates(tmp_path_factory.mktemp("spark-certs"))
    conf = (f"tls.server.mode=enforcing\ntls.server.certPath={cert}\ntls.server.keyPath={key}\n"
            f"tls.enable=true\ntls.client.trustCertPath={ca}\n")
    server = start_acl_server(tmp_path_factory.mktemp("spark-acl"), conf, tls_trust=str(ca))
    try:
        yield server, ca
    finally:
        server.proc.stop()


def _options(server: AclServer, ca: Path, creds: Any) -> dict[str, str]:
    return {"namesrv": server.namesrv, "topic": "orders", "accessKey": creds.access_key,
            "secretKey": creds.secret_key, "tls": "true", "tlsTrustCertPath": str(ca)}


def test_write_and_read_with_an_account_over_tls(spark: Any, secured: tuple[AclServer, Path]) -> None:
    server, ca = secured
    rows = [(f"spark-{i}".encode(),) for i in range(20)]
    spark.createDataFrame(rows, "body binary").write.format("txmq") \
        .options(**_options(server, ca, VICTIM), producerGroup="order-service").mode("append").save()
    df = spark.read.format("txmq").options(**_options(server, ca, CONSUMER), group="billing").load()
    assert {bytes(r.body) for r in df.select("body").collect()} >= {body for (body,) in rows}
    # the same read without the account is refused by the broker
    plain = {k: v for k, v in _options(server, ca, CONSUMER).items() if k not in ("accessKey", "secretKey")}
    with pytest.raises(Exception, match=r"code 16.*no AccessKey"):
        spark.read.format("txmq").options(**plain, group="billing").load().collect()


def test_a_streams_offsets_reach_the_broker_with_sub_on_its_group(spark: Any, secured: tuple[AclServer, Path],
                                                                  tmp_path: Path) -> None:
    """The reader's account, with SUB on the topic and its group and nothing more, commits the stream's offsets to
    the broker under the group (UPDATE_CONSUMER_OFFSET), as any consumer."""
    from txmq.client.pull_consumer import PullConsumer

    server, ca = secured
    spark.createDataFrame([(f"stream-{i}".encode(),) for i in range(12)], "body binary").write.format("txmq") \
        .options(**_options(server, ca, VICTIM), producerGroup="order-service").mode("append").save()
    q = (spark.readStream.format("txmq").options(**_options(server, ca, CONSUMER), group="billing")
         .option("startingOffsets", "earliest").load().writeStream.format("parquet")
         .option("path", str(tmp_path / "out")).option("checkpointLocation", str(tmp_path / "ckpt"))
         .trigger(availableNow=True).start())
    q.awaitTermination(120)
    assert q.exception() is None
    probe = PullConsumer("billing", server.namesrv).set_session_credentials(CONSUMER.access_key, CONSUMER.secret_key)
    with probe.use_tls(str(ca)) as consumer:
        queues = consumer.fetch_subscribe_message_queues("orders")
        committed = {mq.queue_id: consumer.fetch_consume_offset(mq) for mq in queues}
        top = {mq.queue_id: consumer.max_offset(mq) for mq in queues}
    assert committed == top, (committed, top)
