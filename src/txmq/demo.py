"""``make run``: start ``txmq server`` on its embedded default and show a transactional flow end to end.

An order service sends order events in transactions: some commit at once, some roll back, some leave the
decision open until the broker checks back. A consumer shows that exactly the committed orders arrive, each
once; then the broker's transaction metrics.
"""

from __future__ import annotations

import os
import sys
import tempfile
import threading
import time
from pathlib import Path

from txmq import (
    Admin,
    ConsumeFromWhere,
    ConsumeStatus,
    LocalTransactionState,
    Message,
    MessageExt,
    PushConsumer,
    TransactionProducer,
)
from txmq.launch import ServerProcess, print_ready, txmq_command

ORDERS = 12
TOPIC = "DemoOrders"


class OrderService:
    """Order i commits when i % 3 == 0, rolls back when i % 3 == 1, and answers only at check-back otherwise."""

    def __init__(self) -> None:
        self.outcome: dict[str, LocalTransactionState] = {}
        self.checked: list[str] = []

    def execute_local_transaction(self, msg: Message, arg: int) -> LocalTransactionState:
        decided = [LocalTransactionState.COMMIT, LocalTransactionState.ROLLBACK, LocalTransactionState.COMMIT][arg % 3]
        assert msg.transaction_id is not None
        self.outcome[msg.transaction_id] = decided
        return decided if arg % 3 != 2 else LocalTransactionState.UNKNOWN

    def check_local_transaction(self, msg: MessageExt) -> LocalTransactionState:
        self.checked.append(msg.transaction_id or "")
        return self.outcome.get(msg.transaction_id or "", LocalTransactionState.ROLLBACK)


def start_server(store: Path, conf: Path) -> ServerProcess:
    try:
        server = ServerProcess(txmq_command("server", "--store", str(store), "-c", str(conf)),
                               store.parent / "server.log").start(30)
    except RuntimeError as exc:
        raise SystemExit(str(exc)) from None
    print_ready(server.addrs)
    return server


def main() -> int:
    work = Path(tempfile.mkdtemp(prefix="txmq-demo-"))
    conf = work / "broker.conf"
    conf.write_text("transactionTimeOut=2000\ntransactionCheckInterval=1000\nflushDiskType=SYNC_FLUSH\n")
    print(f"starting txmq server (store {work / 'store'}, log {work / 'server.log'})")
    server = start_server(work / "store", conf)
    namesrv = server.namesrv
    os.environ["NAMESRV_ADDR"] = namesrv
    try:
        with Admin(namesrv) as admin:
            admin.create_topic(TOPIC, 4)
        service = OrderService()
        producer = TransactionProducer("DemoOrderService", service, namesrv).start()
        for i in range(ORDERS):
            r = producer.send_message_in_transaction(Message(TOPIC, f"order-{i}".encode(), tags="created",
                                                             keys=f"order-{i}"), arg=i)
            print(f"  order-{i}: half {r.status.value}, local transaction {r.local_transaction_state.name}")
        expected = {f"order-{i}".encode() for i in range(ORDERS) if i % 3 != 1}

        got: list[bytes] = []
        done = threading.Event()

        def listener(msgs: list[MessageExt]) -> ConsumeStatus:
            got.extend(m.body for m in msgs)
            if len(got) >= len(expected):
                done.set()
            return ConsumeStatus.SUCCESS

        consumer = PushConsumer("DemoOrderConsumer", namesrv,
                                consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET)
        consumer.subscribe(TOPIC)
        consumer.register_listener(listener)
        consumer.start()
        print("waiting for check-back to resolve the undecided orders...")
        done.wait(30)
        time.sleep(1.0)  # a late duplicate would show up here
        consumer.shutdown()
        producer.shutdown()
        print(f"consumer received {len(got)} orders: {sorted(b.decode() for b in got)}")
        print(f"broker checked back {len(set(service.checked))} transactions")
        ok = sorted(got) == sorted(expected)
        print("exactly the committed orders, each once: " + ("yes" if ok else "NO"))
        with Admin(namesrv) as admin:
            for name, stats in admin.stats().items():
                tx = stats["transactions"]
                print(f"broker {name}: commits={tx['commits']} rollbacks={tx['rollbacks']} checks={tx['checks']} "
                      f"pending={tx['pending']} commit latency ms={tx['commitLatencyMs']}")
        return 0 if ok else 1
    finally:
        server.stop(30)
        print("txmq server stopped")


if __name__ == "__main__":
    sys.exit(main())
