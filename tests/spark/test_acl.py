"""The connector against a broker with ACL and TLS enforcing: options ``accessKey``, ``secretKey``, ``tls`` and
``tlsTrustCertPath`` reach every client the reader and writer make, on the driver and in the Python workers."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from acl.conftest import CONSUMER, VICTIM, AclServer, start_acl_server
from acl.test_tls import make_certificates


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
