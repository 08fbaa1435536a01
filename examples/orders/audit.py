"""The audit: every transaction the order service started, and what became of it.

Sources, each read for what it knows: the real topic ``orders`` through the txmq source (committed messages,
with the half offset each came from and its born/store times: commit latency = store − born), the broker's
lists of pending and discarded transactions (``Admin.tx_list``: discarded after how many checks), the service's
``attempts`` (each order's scenario, its first answer, the checks it drew) and its ``orders`` table. The half, op
and discard topics are refused by the broker to every consumer: they hold uncommitted bodies.

Outcomes: committed, committed by check, rolled back, rolled back by check, discarded, pending. The last line
compares the committed messages with the committed orders: with ``TransactionLog`` they are the same orders.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import txmq.spark
from txmq import Admin

OUTCOMES = ["committed", "committed by check", "rolled back", "rolled back by check", "discarded", "pending"]


def run_audit(spark: Any, namesrv: str, db: Path, out: Path) -> dict[str, Any]:
    from pyspark.sql import functions as F

    txmq.spark.register(spark)
    committed = (spark.read.format("txmq").option("namesrv", namesrv).option("topic", "orders").load()
                 .select("transaction_id", (F.col("store_timestamp").cast("double")
                                            - F.col("born_timestamp").cast("double")).alias("latency_s"))
                 .collect())
    committed_latency = {r.transaction_id: r.latency_s * 1000 for r in committed}
    with Admin(namesrv) as admin:
        listed = admin.tx_list(100_000).values()
    pending, discarded = ({t["transactionId"]: t.get("checks") or 0 for b in listed for t in b[kind]
                           if t["topic"] == "orders"} for kind in ("pending", "discarded"))
    with sqlite3.connect(db) as c:
        attempts = c.execute("select order_id, tx_id, scenario, answer, checks from attempts").fetchall()
        in_database = {r[0] for r in c.execute("select order_id from orders")}
    rows = []
    for order_id, tx_id, scenario, answer, checks in attempts:
        if tx_id in committed_latency:
            outcome = "committed by check" if answer != "COMMIT" else "committed"
        elif tx_id in discarded:
            outcome, checks = "discarded", max(checks, discarded[tx_id])
        elif tx_id in pending:
            outcome = "pending"
        else:
            outcome = "rolled back by check" if answer == "UNKNOWN" else "rolled back"
        rows.append((order_id, tx_id, scenario, answer or "", outcome, int(checks),
                     committed_latency.get(tx_id)))
    df = spark.createDataFrame(rows, "order_id string, transaction_id string, scenario string, "
                                     "first_answer string, outcome string, checks int, commit_latency_ms double")
    df.write.mode("overwrite").parquet(str(out / "audit"))
    summary = (df.groupBy("outcome").agg(F.count("*").alias("transactions"), F.sum("checks").alias("checks"),
                                         F.expr("percentile_approx(commit_latency_ms, 0.5)").alias("p50_ms"),
                                         F.expr("percentile_approx(commit_latency_ms, 0.99)").alias("p99_ms"))
               .collect())
    table = {r.outcome: {"transactions": r.transactions, "checks": int(r.checks or 0), "p50_ms": r.p50_ms,
                         "p99_ms": r.p99_ms} for r in summary}
    sent = {r[0] for r in rows if r[1] in committed_latency}
    text = _table(table) + (f"committed orders in the database: {len(in_database)}, committed order messages: "
                            f"{len(sent)}, the same orders: {'yes' if sent == in_database else 'NO'}\n")
    (out / "audit.txt").write_text(text)
    _chart(table, [r[6] for r in rows if r[6] is not None], out / "audit.png")
    return {"table": table, "text": text, "transactions": len(rows), "consistent": sent == in_database}


def _table(table: dict[str, dict[str, Any]]) -> str:
    lines = [f"{'outcome':<22}{'transactions':>13}{'checks':>8}{'p50 ms':>9}{'p99 ms':>9}"]
    for name in OUTCOMES:
        r = table.get(name, {"transactions": 0, "checks": 0, "p50_ms": None, "p99_ms": None})
        fmt = lambda v: f"{v:9.0f}" if v is not None else f"{'-':>9}"  # noqa: E731
        lines.append(f"{name:<22}{r['transactions']:>13}{r['checks']:>8}{fmt(r['p50_ms'])}{fmt(r['p99_ms'])}")
    return "\n".join(lines) + "\n"


def _chart(table: dict[str, dict[str, Any]], latencies: list[float], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colors = ["#2e7d32", "#81c784", "#c62828", "#ef9a9a", "#6d4c41", "#f9a825"]
    fig, (a, b) = plt.subplots(1, 2, figsize=(12, 4.5))
    counts = [table.get(o, {}).get("transactions", 0) for o in OUTCOMES]
    bars = a.barh(OUTCOMES[::-1], counts[::-1], color=colors[::-1])
    a.bar_label(bars, padding=3)
    a.set_title("What became of each order transaction")
    a.set_xlabel("transactions")
    if latencies:
        b.hist(latencies, bins=40, color="#1565c0")
        b.set_yscale("log")
    b.set_title("Commit latency (half sent → committed message stored)")
    b.set_xlabel("ms")
    b.set_ylabel("transactions (log)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
