"""The order service: each order is a database transaction (SQLite, through SQLAlchemy) tied to a txmq
transactional message by ``txmq.TransactionLog``, which writes the transaction's log row in the same database
transaction and answers the broker's checks from it. The service has no log table and no check code of its own.

Each order inserts its ``orders`` row and takes its quantity from ``stock``. Scenarios, and what becomes of each:

* ``ok``: the database commits; COMMIT.
* ``out-of-stock``: the stock update finds too little (laptops sell out); the work raises, the database rolls
  back; ROLLBACK.
* ``slow``: the work outlasts the broker's ``transactionTimeOut``; a check arrives meanwhile, waits for the
  database transaction and answers COMMIT with it.
* ``crash-before-commit``: the process dies with its database transaction open: the database rolls it back and
  no END_TRANSACTION leaves; the check finds no log row, fences the id and answers ROLLBACK.
* ``crash-after-commit``: the process dies after the database commit, before END_TRANSACTION; the check finds
  the log row and answers COMMIT.

A crash is played in this process: the work raises where the process would have died, or the commit is kept,
and the producer then sends END_TRANSACTION with UNKNOWN, which the broker takes as no answer at all.
``attempts`` records each order's scenario, first answer and the checks it drew, for the audit.
"""

from __future__ import annotations

import json
import random
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from txmq import LocalTransactionState, Message, MessageExt, TransactionLog, TransactionProducer

TOPIC = "orders"
PRODUCTS = {"keyboard": 49.0, "monitor": 219.0, "laptop": 1299.0, "mouse": 19.0, "dock": 159.0}
STOCK = {"laptop": 80}  # units; the other products are never short
CRASHES = ("crash-before-commit", "crash-after-commit")

db = sa.MetaData()
orders = sa.Table("orders", db, sa.Column("order_id", sa.String(16), primary_key=True),
                  sa.Column("product", sa.String(16)), sa.Column("qty", sa.Integer), sa.Column("price", sa.Float),
                  sa.Column("amount", sa.Float), sa.Column("event_ms", sa.BigInteger))
stock = sa.Table("stock", db, sa.Column("product", sa.String(16), primary_key=True), sa.Column("qty", sa.Integer))
attempts = sa.Table("attempts", db, sa.Column("order_id", sa.String(16), primary_key=True),
                    sa.Column("tx_id", sa.String(64)), sa.Column("scenario", sa.String(24)),
                    sa.Column("answer", sa.String(8)), sa.Column("checks", sa.Integer))


class OutOfStock(Exception):
    pass


class ProcessDied(Exception):
    """Where a crash-before-commit scenario's process dies: its database transaction never commits."""


class Order:
    """One order's local transaction: ``place(conn)`` is the work ``TransactionLog`` runs in its database
    transaction. ``scenario`` becomes ``out-of-stock`` when the stock is short."""

    def __init__(self, order: dict[str, Any], scenario: str, slow_s: float) -> None:
        self.order = order
        self.scenario = scenario
        self.slow_s = slow_s

    def place(self, conn: sa.Connection) -> None:
        o = self.order
        conn.execute(orders.insert().values(**o))
        took = conn.execute(stock.update().where(stock.c.product == o["product"], stock.c.qty >= o["qty"])
                            .values(qty=stock.c.qty - o["qty"])).rowcount
        if o["product"] in STOCK and not took:
            self.scenario = "out-of-stock"
            raise OutOfStock(o["product"])
        if self.scenario == "slow":
            time.sleep(self.slow_s)
        if self.scenario == "crash-before-commit":
            raise ProcessDied()


class CrashPlay:
    """The producer's listener: ``TransactionLog`` does all the work; this plays the crashes (no END_TRANSACTION
    decision) and counts the checks each transaction drew, for the audit."""

    def __init__(self, log: TransactionLog) -> None:
        self.log = log
        self.checks: Counter[str] = Counter()
        self._lock = threading.Lock()

    def execute_local_transaction(self, msg: Message, order: Order) -> LocalTransactionState:
        state = self.log.execute_local_transaction(msg, order.place)
        return LocalTransactionState.UNKNOWN if order.scenario in CRASHES else state

    def check_local_transaction(self, msg: MessageExt) -> LocalTransactionState:
        with self._lock:
            self.checks[msg.transaction_id or ""] += 1
        return self.log.check_local_transaction(msg)


def scenario_of(rng: random.Random) -> str:
    r = rng.random()
    return ("slow" if r < 0.01 else "crash-before-commit" if r < 0.06 else "crash-after-commit" if r < 0.11
            else "ok")


def run_order_service(namesrv: str, path: Path, orders_n: int, *, seed: int = 7, settle_s: float = 30.0,
                      slow_s: float = 3.5) -> dict[str, int]:
    """Send ``orders_n`` order events in transactions and wait until the broker has decided them all (check-back
    needs this producer alive). Event times spread over the last ``orders_n // 10`` minutes. ``slow_s`` must
    outlast the broker's ``transactionTimeOut``. Returns the count of each scenario as played."""
    from txmq import Admin

    engine = sa.create_engine(f"sqlite:///{path}", connect_args={"timeout": 60})
    db.create_all(engine)
    with engine.begin() as conn:
        conn.execute(stock.insert(), [{"product": p, "qty": STOCK.get(p, 1_000_000)} for p in PRODUCTS])
    rng = random.Random(seed)
    span_ms = max(1, orders_n // 10) * 60_000
    start_ms = int(time.time() * 1000) - span_ms
    played: list[tuple[Order, str, str]] = []
    listener = CrashPlay(TransactionLog(engine))
    with TransactionProducer("order-service", listener, namesrv) as producer:
        for i in range(orders_n):
            product = rng.choice(sorted(PRODUCTS))
            qty = rng.choice([1, 1, 1, 2, 3, 5, 10])
            o = {"order_id": f"o-{i:05d}", "product": product, "qty": qty, "price": PRODUCTS[product],
                 "amount": round(qty * PRODUCTS[product], 2), "event_ms": start_ms + i * span_ms // orders_n}
            order = Order(o, scenario_of(rng), slow_s)
            msg = Message(TOPIC, json.dumps(o).encode(), tags=product, keys=o["order_id"])
            result = producer.send_message_in_transaction(msg, order)
            played.append((order, msg.transaction_id or "", result.local_transaction_state.name))
        deadline = time.monotonic() + settle_s
        with Admin(namesrv) as admin:
            while time.monotonic() < deadline:
                if not sum(b["transactions"]["pendingPerTopic"].get(TOPIC, 0) for b in admin.stats().values()):
                    break
                time.sleep(0.5)
    listener.log.close()
    with engine.begin() as conn:
        conn.execute(attempts.insert(), [
            {"order_id": order.order["order_id"], "tx_id": tx_id, "scenario": order.scenario, "answer": answer,
             "checks": listener.checks[tx_id]} for order, tx_id, answer in played])
    engine.dispose()
    return dict(Counter(order.scenario for order, _, _ in played))
