"""The orders pipeline (examples/orders) end to end on the session's Spark, against the session's broker; with
TXMQ_SPARK_MASTER set (e.g. spark://127.0.0.1:7077) the same test runs the pipeline on that master in a child."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).parent.parent.parent


def test_orders_pipeline(spark: Any, txmq_cluster: Any, tmp_path: Path) -> None:
    sys.path.insert(0, str(ROOT))
    from examples.orders.audit import run_audit
    from examples.orders.service import run_order_service
    from examples.orders.streaming import ALERTS, run_streaming_job

    from txmq import Admin

    with Admin(txmq_cluster.namesrv_addr) as admin:
        for topic in ("orders", ALERTS):
            admin.create_topic(topic, 2)
    txmq_cluster.wait_route("orders")
    counts = run_order_service(txmq_cluster.namesrv_addr, tmp_path / "orders.db", 120, settle_s=12)
    streamed = run_streaming_job(spark, txmq_cluster.namesrv_addr, tmp_path)
    audit = run_audit(spark, txmq_cluster.namesrv_addr, tmp_path / "orders.db", tmp_path)
    t = audit["table"]
    assert audit["transactions"] == 120
    assert t["committed"]["transactions"] == counts["ok"]
    assert t["committed by check"]["transactions"] == counts["slow"]
    assert t["rolled back"]["transactions"] == counts["out-of-stock"]
    assert t["rolled back by check"]["transactions"] == counts["crash"]
    assert t.get("discarded", {}).get("transactions", 0) + t.get("pending", {}).get("transactions", 0) \
        == counts["in-doubt"]
    assert streamed["revenue_rows"] > 0
    committed_orders = counts["ok"] + counts["slow"]
    assert spark.read.parquet(str(tmp_path / "audit")).count() == 120
    assert 0 < streamed["alerts"] <= committed_orders
    assert (tmp_path / "audit.png").stat().st_size > 10_000


def test_orders_pipeline_cli_on_a_master(tmp_path: Path) -> None:
    """``python -m examples.orders`` as ``make run`` drives it; on TXMQ_SPARK_MASTER when set."""
    import pytest

    master = os.environ.get("TXMQ_SPARK_MASTER")
    if not master:
        pytest.skip("set TXMQ_SPARK_MASTER (a standalone master URL) to run the pipeline CLI on a cluster")
    out = subprocess.run([sys.executable, "-m", "examples.orders", "--orders", "100", "--out", str(tmp_path),
                          "--master", master], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "committed by check" in out.stdout and (tmp_path / "audit.png").exists()
