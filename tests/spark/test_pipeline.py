"""The orders pipeline (examples/orders) end to end: in this process on the session's local SparkSession against
the session's broker, and as ``python -m examples.orders --master spark://127.0.0.1:PORT`` (what ``make run``
runs, master URL only) on a standalone master + worker that the ``spark_master`` fixture starts from the pip
package. Both assert the same things."""

from __future__ import annotations

import ast
import os
import re
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.spark.spark_helpers import spark_env
from tests.spark.standalone import kill_processes_under

ROOT = Path(__file__).parent.parent.parent
CLI_TIMEOUT_S = 180


def check_pipeline(n: int, counts: dict[str, int], outcomes: dict[str, int], streamed: dict[str, Any],
                   audit_rows: int, out: Path) -> None:
    """What both tests assert: the audit's outcome per transaction equals the service's scenario, and the
    outputs (revenue Parquet, alerts in the topic, audit Parquet, chart) are there."""
    assert sum(counts.values()) == n
    assert sum(outcomes.values()) == n
    assert outcomes.get("committed", 0) == counts.get("ok", 0) + counts.get("slow", 0)
    assert outcomes.get("committed by check", 0) == counts.get("crash-after-commit", 0)
    assert outcomes.get("rolled back", 0) == counts.get("out-of-stock", 0)
    assert outcomes.get("rolled back by check", 0) == counts.get("crash-before-commit", 0)
    assert outcomes.get("discarded", 0) + outcomes.get("pending", 0) == 0  # TransactionLog never answers UNKNOWN
    assert streamed["revenue_rows"] > 0
    assert audit_rows == n
    assert 0 < streamed["alerts"] <= counts.get("ok", 0) + counts.get("slow", 0) + counts.get("crash-after-commit", 0)
    assert (out / "audit.png").stat().st_size > 10_000


def test_orders_pipeline(spark: Any, txmq_cluster: Any, tmp_path: Path) -> None:
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
    outcomes = {name: row["transactions"] for name, row in audit["table"].items()}
    assert audit["consistent"], audit["text"]
    check_pipeline(120, counts, outcomes, streamed, spark.read.parquet(str(tmp_path / "audit")).count(), tmp_path)


def test_orders_pipeline_cli_on_a_master(spark_master: tuple[str, Any], tmp_path: Path) -> None:
    """``python -m examples.orders --master spark://127.0.0.1:PORT`` in a child (a process has one SparkContext,
    and this one's is ``local[2]``), with its own ``txmq server``; then the same assertions as above, from its
    outputs: the service's scenarios (stdout, checked against its SQLite database), the streaming job's result
    (stdout), the audit Parquet and chart; and the master's record that the application ran on its worker."""

    url, cluster = spark_master
    env = {**os.environ, **spark_env(), "TXMQ_ORDERS_CLEANUP": "0"}
    args = [sys.executable, "-m", "examples.orders", "--orders", "120", "--out", str(tmp_path), "--master", url]
    with subprocess.Popen(args, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          start_new_session=True) as proc:
        try:
            stdout, stderr = proc.communicate(timeout=CLI_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            stdout, stderr = _interrupt(proc, tmp_path)
            pytest.fail(f"the pipeline on {url} did not finish in {CLI_TIMEOUT_S}s\n{stdout[-3000:]}\n"
                        f"{stderr[-3000:]}\n{cluster.log_tail()}", pytrace=False)
    assert proc.returncode == 0, stdout[-3000:] + stderr[-3000:]
    check_cli_outputs(stdout, tmp_path)

    apps = [a for a in cluster.state()["completedapps"] if a["name"] == "txmq-orders"]
    assert len(apps) == 1 and apps[0]["cores"] > 0, cluster.state()["completedapps"]
    assert list((cluster.root / "work" / apps[0]["id"]).glob("*/stderr")), "no executor ran on the worker"


def check_cli_outputs(stdout: str, tmp_path: Path) -> None:
    """``python -m examples.orders --orders 120 --out tmp_path``'s outputs: the service's scenarios (stdout,
    checked against its SQLite database), the streaming job's result (stdout), the audit Parquet and chart."""
    import pyarrow.parquet as pq

    counts = _dict_after("scenarios ", stdout)
    streamed = _dict_after("streaming job (availableNow): ", stdout)
    with sqlite3.connect(tmp_path / "orders.db") as db:
        assert dict(db.execute("select scenario, count(*) from attempts group by scenario").fetchall()) == counts
    audit = pq.read_table(tmp_path / "audit").to_pylist()
    outcomes: dict[str, int] = {}
    for row in audit:
        outcomes[row["outcome"]] = outcomes.get(row["outcome"], 0) + 1
    check_pipeline(120, counts, outcomes, streamed, len(audit), tmp_path)
    assert "committed by check" in stdout
    assert "the same orders: yes" in stdout


def _dict_after(prefix: str, stdout: str) -> dict[str, Any]:
    m = re.search(re.escape(prefix) + r"(\{[^}]*\})", stdout)
    assert m, f"no '{prefix}{{...}}' in the output:\n{stdout[-3000:]}"
    value: dict[str, Any] = ast.literal_eval(m.group(1))
    return value


def _interrupt(proc: subprocess.Popen[str], marker: Path) -> tuple[str, str]:
    """SIGINT the CLI's process group (its ``finally`` stops its txmq server and Spark), SIGKILL it after 20 s,
    and kill whatever still names ``marker`` (its ``txmq server``, in a session of its own)."""
    os.killpg(proc.pid, signal.SIGINT)
    try:
        out = proc.communicate(timeout=20)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out = proc.communicate(timeout=10)
    if kill_processes_under(marker):
        time.sleep(0.5)
    return out
