"""Transactions per second with ``txmq.TransactionLog`` on PostgreSQL, beside the same business writes without
txmq, in one run: what the transaction log and the transactional message cost an order service.

Each transaction places one order: an ``orders`` row and a ``stock`` update (five products, so threads meet on
row locks as a shop's would). Three ways, in rounds whose order alternates, medians reported:

* ``plain``: a database transaction per order, no txmq (the baseline);
* ``log``: ``TransactionLog.execute_local_transaction`` called directly: the order plus the log row, no broker;
* ``txmq``: ``TransactionProducer.send_message_in_transaction`` with ``TransactionLog``: the half message, the
  database transaction with the log row, END_TRANSACTION (oneway).

A real PostgreSQL server (Debian's, started as tests/txlog does: ``initdb``, a free port, fsync on) and a real
``txmq server`` (ASYNC_FLUSH, its default). Checked after each ``txmq`` phase: every transaction answered
COMMIT, and the topic holds one message per transaction. Prints a table; ``--json`` for machines; ``--short``
for CI (a few transactions: a smoke test, not a figure).

    .venv/bin/python bench/txlog.py [-n 3000] [--threads 4] [--rounds 3]
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import platform
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT))  # tests.txlog's PostgreSQL server

import sqlalchemy as sa  # noqa: E402
from tests.txlog.databases import PostgresServer  # noqa: E402

from txmq import Admin, LocalTransactionState, Message, TransactionLog, TransactionProducer, bench  # noqa: E402
from txmq.launch import ServerProcess, free_port, txmq_command  # noqa: E402

TOPIC = "bench_orders"
PRODUCTS = ["keyboard", "monitor", "laptop", "mouse", "dock"]
MODES = {"plain": "plain database transaction (no txmq)", "log": "TransactionLog, no broker",
         "txmq": "txmq + TransactionLog"}

md = sa.MetaData()
orders = sa.Table("orders", md, sa.Column("order_id", sa.String(32), primary_key=True),
                  sa.Column("product", sa.String(16)), sa.Column("qty", sa.Integer), sa.Column("amount", sa.Float))
stock = sa.Table("stock", md, sa.Column("product", sa.String(16), primary_key=True), sa.Column("qty", sa.BigInteger))


def place(order_id: str, i: int) -> Callable[[sa.Connection], None]:
    """One order's business writes."""
    product, qty = PRODUCTS[i % len(PRODUCTS)], 1 + i % 3

    def work(conn: sa.Connection) -> None:
        conn.execute(orders.insert().values(order_id=order_id, product=product, qty=qty, amount=qty * 19.0))
        conn.execute(stock.update().where(stock.c.product == product).values(qty=stock.c.qty - qty))
    return work


def timed(n: int, threads: int, one: Callable[[int], None]) -> float:
    """Transactions per second of ``one(i)`` for i < n over ``threads`` threads."""
    counter = itertools.count()
    errors: list[BaseException] = []

    def loop() -> None:
        try:
            while (i := next(counter)) < n:
                one(i)
        except BaseException as exc:
            errors.append(exc)

    workers = [threading.Thread(target=loop) for _ in range(threads)]
    t0 = time.monotonic()
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    elapsed = time.monotonic() - t0
    if errors:
        raise bench.BenchError(f"a transaction failed: {errors[0]!r}") from errors[0]
    return n / elapsed


def start_broker(root: Path) -> ServerProcess:
    args = txmq_command("server", "--store", str(root / "store"), "--port", str(free_port()), "--namesrv-port",
                        str(free_port()), "--grpc-port", "-1", "--console-port", "-1")
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"), HOME=str(root), PYTHONUNBUFFERED="1")
    return ServerProcess(args, root / "server.log", env).start(30)


def run(a: argparse.Namespace) -> dict[str, Any]:
    root = Path(tempfile.mkdtemp(prefix="txmq-bench-txlog-"))
    pg = PostgresServer().start()
    broker: ServerProcess | None = None
    engine = sa.create_engine(pg.url(), pool_size=a.threads + 4)
    try:
        broker = start_broker(root)
        with Admin(broker.namesrv) as admin:
            admin.create_topic(TOPIC, 4)
        md.create_all(engine)
        with engine.begin() as conn:
            conn.execute(stock.insert(), [{"product": p, "qty": 10**12} for p in PRODUCTS])
            version = conn.execute(sa.text("show server_version")).scalar()
        log = TransactionLog(engine, purge_interval_s=0)
        producer = TransactionProducer("bench_txlog", log, broker.namesrv).start()
        ids = itertools.count()
        rates: dict[str, list[float]] = {m: [] for m in MODES}
        failed: list[str] = []

        def plain(i: int) -> None:
            with engine.begin() as conn:
                place(f"p-{next(ids)}", i)(conn)

        def log_only(i: int) -> None:
            msg = Message(TOPIC, b"")
            msg.transaction_id = f"bench-{next(ids)}"
            if log.execute_local_transaction(msg, place(msg.transaction_id, i)) != LocalTransactionState.COMMIT:
                failed.append(msg.transaction_id)

        def txmq(i: int) -> None:
            order_id = f"t-{next(ids)}"
            r = producer.send_message_in_transaction(Message(TOPIC, order_id.encode(), keys=order_id),
                                                     place(order_id, i))
            if r.local_transaction_state != LocalTransactionState.COMMIT:
                failed.append(order_id)

        ways = {"plain": plain, "log": log_only, "txmq": txmq}
        for one in ways.values():  # warm up: connections, routes, the broker's first writes
            timed(a.threads * 5, a.threads, one)
        sent = a.threads * 5
        try:
            for r in range(a.rounds):
                order = list(MODES) if r % 2 == 0 else list(reversed(MODES))
                for mode in order:
                    rates[mode].append(timed(a.n, a.threads, ways[mode]))
                    sent += a.n if mode == "txmq" else 0
                    print(f"round {r + 1} {mode}: {rates[mode][-1]:,.0f} tx/s", file=sys.stderr, flush=True)
        finally:
            producer.shutdown()
        stored = bench.stored_messages(broker.namesrv, TOPIC)
        if failed or stored != sent:
            raise bench.BenchError(f"{len(failed)} transactions not committed, {stored} messages for {sent}")
    finally:
        engine.dispose()
        if broker is not None:
            broker.stop()
        pg.close()
    medians = {m: statistics.median(v) for m, v in rates.items()}
    return {"postgresql": version, "n": a.n, "threads": a.threads, "rounds": a.rounds, "rates": rates,
            "medians": medians, "ratio": medians["plain"] / medians["txmq"],
            "log_ratio": medians["plain"] / medians["log"], "load_average": os.getloadavg(),
            "python": platform.python_version(), "cpus": os.cpu_count()}


def table(res: dict[str, Any]) -> str:
    rounds = res["rounds"]
    lines = [f"TransactionLog on PostgreSQL {res['postgresql']}: {res['n']} transactions per phase, "
             f"{res['threads']} threads, {rounds} rounds (median)",
             f"{'way':<40}{'tx/s':>10}" + "".join(f"{'round ' + str(r + 1):>10}" for r in range(rounds))]
    for mode, label in MODES.items():
        lines.append(f"{label:<40}{res['medians'][mode]:>10,.0f}"
                     + "".join(f"{v:>10,.0f}" for v in res["rates"][mode]))
    lines.append(f"plain / (txmq + TransactionLog): {res['ratio']:.2f}x   "
                 f"plain / (TransactionLog, no broker): {res['log_ratio']:.2f}x")
    lines.append("load average " + " ".join(f"{x:.2f}" for x in res["load_average"]))
    return "\n".join(lines)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("-n", type=int, default=3000, help="transactions per phase")
    p.add_argument("--threads", type=int, default=4, help="threads placing orders")
    p.add_argument("--rounds", type=int, default=3, help="rounds of the three ways (medians are reported)")
    p.add_argument("--short", action="store_true", help="a smoke run: 50 transactions, one round")
    p.add_argument("--json", action="store_true")
    a = p.parse_args()
    if a.short:
        a.n, a.rounds = 50, 1
    res = run(a)
    print(json.dumps(res) if a.json else table(res))
    return 0


if __name__ == "__main__":
    bench.run(main)
