"""A producer process of group ``p_txlog`` for tests/txlog/test_txlog_e2e.py, to be SIGKILLed at random moments.

``send``: transactions n = FIRST, FIRST+1, … forever, each with ``TransactionLog``: the work inserts order n (every
fifth is out of stock: it raises), prints ``IN n`` and lingers; after the database commit and before
END_TRANSACTION the listener prints ``DB n`` and lingers; ``END n STATE`` once the transaction is sent. The test
kills it right after an ``IN`` (before the database commit) or a ``DB`` (between it and END_TRANSACTION).
``answer``: sends nothing, answers the broker's checks until killed.

    python producer_child.py send|answer NAMESRV DB_URL TOPIC FIRST SEED
"""

from __future__ import annotations

import random
import sys
import time
from typing import Any

import sqlalchemy as sa

from tests.txlog.databases import create_engine
from txmq import LocalTransactionState, Message, MessageExt, TransactionLog, TransactionProducer

GROUP = "p_txlog"
ORDERS = sa.Table("orders", sa.MetaData(), sa.Column("n", sa.Integer, primary_key=True))


class Announcing:
    """``TransactionLog`` that says when its database transaction has committed, then lingers."""

    def __init__(self, log: TransactionLog, rng: random.Random) -> None:
        self.log = log
        self.rng = rng

    def execute_local_transaction(self, msg: Message, arg: Any) -> LocalTransactionState:
        state = self.log.execute_local_transaction(msg, arg)
        if state == LocalTransactionState.COMMIT:
            print("DB", msg.keys, flush=True)
            time.sleep(self.rng.uniform(0.04, 0.08))
        return state

    def check_local_transaction(self, msg: MessageExt) -> LocalTransactionState:
        return self.log.check_local_transaction(msg)


def main(mode: str, namesrv: str, url: str, topic: str, first: str, seed: str) -> None:
    rng = random.Random(int(seed))
    engine = create_engine(url)
    listener = Announcing(TransactionLog(engine), rng)
    producer = TransactionProducer(GROUP, listener, namesrv, send_timeout_s=5.0).start()
    if mode == "answer":
        print("READY", flush=True)
        time.sleep(3600)
    n = int(first)
    while True:
        def work(conn: Any, n: int = n) -> None:
            conn.execute(ORDERS.insert().values(n=n))
            if n % 5 == 0:
                raise RuntimeError("out of stock")
            print("IN", n, flush=True)
            time.sleep(rng.uniform(0.04, 0.08))

        result = producer.send_message_in_transaction(Message(topic, str(n).encode(), keys=str(n)), work)
        print("END", n, result.local_transaction_state.name, flush=True)
        n += 1


if __name__ == "__main__":
    main(*sys.argv[1:])
