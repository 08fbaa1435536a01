"""The order service: each order is a SQLite transaction (``orders`` row + ``tx_log`` row) tied to a txmq
transactional message, as RocketMQ's transactional producer intends:

* ``execute_local_transaction`` inserts the order and its log row in one SQLite transaction and answers
  COMMIT; a failed stock check rolls the SQLite transaction back and answers ROLLBACK;
* some orders commit in SQLite but answer UNKNOWN ("slow" path): the broker checks back, and
  ``check_local_transaction`` finds the ``tx_log`` row → COMMIT;
* some crash before the SQLite commit and answer UNKNOWN: the check finds no row → ROLLBACK;
* some stay in doubt (``tx_log.state = 'in-doubt'``): every check answers UNKNOWN until the broker discards
  them after ``transactionCheckMax`` checks.

``tx_log`` also records how the service decided and how many checks it answered, for the audit.
"""

from __future__ import annotations

import json
import random
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

from txmq import LocalTransactionState, Message, MessageExt, TransactionProducer

TOPIC = "orders"
PRODUCTS = {"keyboard": 49.0, "monitor": 219.0, "laptop": 1299.0, "mouse": 19.0, "dock": 159.0}
SCHEMA = """
create table if not exists orders (order_id text primary key, product text, qty int, price real, amount real,
                                   event_ms int);
create table if not exists tx_log (tx_id text primary key, order_id text, state text, decided_by text,
                                   checks int default 0, created_ms int, decided_ms int);
create table if not exists attempts (order_id text primary key, tx_id text, scenario text, answer text,
                                     sent_ms int);
"""


class OrderService:
    def __init__(self, db: Path) -> None:
        self.db = db
        self._lock = threading.Lock()
        with self._conn() as c:
            c.executescript(SCHEMA)

    def _conn(self) -> sqlite3.Connection:
        return sqlite3.connect(self.db, timeout=30, isolation_level=None)

    # --- TransactionListener ------------------------------------------------------------------------------

    def execute_local_transaction(self, msg: Message, arg: Any) -> LocalTransactionState:
        order, scenario = arg
        tx_id = msg.transaction_id
        now = int(time.time() * 1000)
        with self._lock, self._conn() as c:
            c.execute("insert into attempts values (?, ?, ?, ?, ?)",
                      (order["order_id"], tx_id, scenario, None, now))
            c.execute("begin")
            try:
                c.execute("insert into orders values (?, ?, ?, ?, ?, ?)",
                          (order["order_id"], order["product"], order["qty"], order["price"], order["amount"],
                           order["event_ms"]))
                if scenario == "out-of-stock":
                    raise RuntimeError("out of stock")
                if scenario == "crash":
                    c.execute("rollback")  # the process "died" before its commit: nothing in SQLite
                    answer = LocalTransactionState.UNKNOWN
                else:
                    state = "in-doubt" if scenario == "in-doubt" else "committed"
                    c.execute("insert into tx_log values (?, ?, ?, ?, 0, ?, ?)",
                              (tx_id, order["order_id"], state, "execute" if scenario == "ok" else None, now,
                               now if scenario == "ok" else None))
                    c.execute("commit")
                    answer = LocalTransactionState.COMMIT if scenario == "ok" else LocalTransactionState.UNKNOWN
            except RuntimeError:
                c.execute("rollback")
                answer = LocalTransactionState.ROLLBACK
            c.execute("update attempts set answer = ? where order_id = ?", (answer.name, order["order_id"]))
        return answer

    def check_local_transaction(self, msg: MessageExt) -> LocalTransactionState:
        tx_id = msg.transaction_id
        now = int(time.time() * 1000)
        with self._lock, self._conn() as c:
            row = c.execute("select state from tx_log where tx_id = ?", (tx_id,)).fetchone()
            if row is None:
                c.execute("insert into tx_log values (?, ?, 'rolled-back', 'check', 1, ?, ?)",
                          (tx_id, msg.keys, now, now))
                return LocalTransactionState.ROLLBACK
            c.execute("update tx_log set checks = checks + 1 where tx_id = ?", (tx_id,))
            if row[0] == "in-doubt":
                return LocalTransactionState.UNKNOWN
            c.execute("update tx_log set decided_by = coalesce(decided_by, 'check'), "
                      "decided_ms = coalesce(decided_ms, ?) where tx_id = ?", (now, tx_id))
            return LocalTransactionState.COMMIT


def scenario_of(rng: random.Random) -> str:
    r = rng.random()
    return ("out-of-stock" if r < 0.10 else "slow" if r < 0.20 else "crash" if r < 0.25
            else "in-doubt" if r < 0.28 else "ok")


def run_order_service(namesrv: str, db: Path, orders: int, *, seed: int = 7, settle_s: float = 30.0) -> dict[str, int]:
    """Send ``orders`` order events in transactions and wait until the broker has decided or discarded them
    all (check-back needs this producer alive). Event times spread over the last ``orders // 10`` minutes."""
    from txmq import Admin

    rng = random.Random(seed)
    service = OrderService(db)
    counts: dict[str, int] = {}
    span_ms = max(1, orders // 10) * 60_000
    start_ms = int(time.time() * 1000) - span_ms
    with TransactionProducer("order-service", service, namesrv) as producer:
        for i in range(orders):
            product = rng.choice(sorted(PRODUCTS))
            qty = rng.choice([1, 1, 1, 2, 3, 5, 10])
            order = {"order_id": f"o-{i:05d}", "product": product, "qty": qty, "price": PRODUCTS[product],
                     "amount": round(qty * PRODUCTS[product], 2), "event_ms": start_ms + i * span_ms // orders}
            scenario = scenario_of(rng)
            counts[scenario] = counts.get(scenario, 0) + 1
            msg = Message(TOPIC, json.dumps(order).encode(), tags=product, keys=order["order_id"])
            producer.send_message_in_transaction(msg, (order, scenario))
        deadline = time.monotonic() + settle_s
        with Admin(namesrv) as admin:
            while time.monotonic() < deadline:
                pending = sum(b["transactions"]["pendingPerTopic"].get(TOPIC, 0) for b in admin.stats().values())
                if not pending:
                    break
                time.sleep(0.5)
    return counts
