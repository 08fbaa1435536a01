"""Transactions across crashes: a producer killed after its half sends, and the broker killed (SIGKILL) at
random points of a run of transactions (README, Transactions, item 5)."""

from __future__ import annotations

import itertools
import random
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from typing import Any

from tests.e2e.test_transactions import (
    COMMIT,
    ROLLBACK,
    TX_CONF,
    UNKNOWN,
    Collector,
    RuleListener,
    create_topic,
    scan_topic,
    tx_stats,
    wait_for,
)
from txmq import LocalTransactionState, Message, SendStatus, TransactionProducer

CHILD = r"""
import sys, time
from txmq import LocalTransactionState, Message, TransactionProducer

class Undecided:
    def execute_local_transaction(self, msg, arg):
        return LocalTransactionState.UNKNOWN
    def check_local_transaction(self, msg):
        return LocalTransactionState.UNKNOWN

namesrv, topic, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
p = TransactionProducer("p_tx_orphans", Undecided(), namesrv)
p.start()
for n in range(count):
    r = p.send_message_in_transaction(Message(topic, f"orphan-{n}".encode()))
    print("TX", n, r.transaction_id, r.status.name, flush=True)
print("SENT", flush=True)
time.sleep(600)
"""


def test_producer_killed_after_half_sends(cluster):
    cluster.start_broker("broker-a", TX_CONF)
    topic, count = "tx_orphans", 60
    create_topic(cluster, topic)
    child = subprocess.Popen([sys.executable, "-c", CHILD, cluster.namesrv_addr, topic, str(count)],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=cluster.env)
    txids: dict[int, str] = {}
    try:
        assert child.stdout is not None
        for line in child.stdout:
            if line.startswith("SENT"):
                break
            _, n, txid, status = line.split()
            assert status == "SEND_OK"
            txids[int(n)] = txid
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(10)
        assert child.stdout is not None and child.stderr is not None
        err = child.stderr.read()
        child.stdout.close()
        child.stderr.close()
    assert len(txids) == count, err
    assert tx_stats(cluster.namesrv_addr)["pending"] == count

    # The record of outcomes: a rule on the transaction's number, checked against the transaction id too.
    def decide(n: int) -> LocalTransactionState:
        return COMMIT if n % 3 else ROLLBACK

    seen_ids: dict[int, str] = {}

    class Recorded(RuleListener):
        def check_local_transaction(self, msg: Any) -> LocalTransactionState:
            seen_ids[int(msg.body.decode().rsplit("-", 1)[1])] = msg.transaction_id
            return super().check_local_transaction(msg)

    listener = Recorded(lambda n: UNKNOWN, decide)
    collector = Collector(cluster.namesrv_addr, topic, "c_tx_orphans")
    producer = TransactionProducer("p_tx_orphans", listener, cluster.namesrv_addr)
    producer.start()
    try:
        collector.wait_exactly({f"orphan-{n}" for n in range(count) if decide(n) == COMMIT}, 20)
        st = wait_for(lambda: (s := tx_stats(cluster.namesrv_addr))["pending"] == 0 and s, 10, "no pending")
        assert seen_ids == txids  # every transaction was checked by its own transaction id
        assert (st["commits"], st["rollbacks"], st["discards"]) == (40, 20, 0)
        # Checks sent to the dead producer's closed connection were not counted: at most the ones before the kill.
        assert st["checks"] >= count and st["checks"] - sum(listener.checked.values()) <= count
    finally:
        producer.shutdown()
        collector.close()


def final(n: int) -> LocalTransactionState:
    """The local outcome of transaction n: what execute decided, or for the UNKNOWN ones what check answers."""
    return (COMMIT, ROLLBACK, COMMIT if n % 2 == 0 else ROLLBACK)[n % 3]


def test_broker_killed_during_transactions(cluster):
    broker = cluster.start_broker("broker-a", TX_CONF)
    topic = "tx_crash"
    create_topic(cluster, topic)
    rng = random.Random(4)
    listener = RuleListener(lambda n: (COMMIT, ROLLBACK, UNKNOWN)[n % 3], final)
    numbers = itertools.count()
    acked: set[int] = set()
    failed: set[int] = set()
    lock = threading.Lock()
    stop = threading.Event()

    producer = TransactionProducer("p_tx_crash", listener, cluster.namesrv_addr, send_timeout_s=2.0)
    producer.start()

    def sender() -> None:
        while not stop.is_set():
            n = next(numbers)
            try:
                r = producer.send_message_in_transaction(Message(topic, f"crash-{n}".encode()))
                ok = r.status == SendStatus.SEND_OK
            except Exception:
                ok = False
            with lock:
                (acked if ok else failed).add(n)
            if not ok:
                time.sleep(0.05)

    threads = [threading.Thread(target=sender, daemon=True) for _ in range(4)]
    try:
        for t in threads:
            t.start()
        for _ in range(3):
            time.sleep(rng.uniform(0.5, 2.0))
            broker.kill()
            with lock:
                acked_at_kill = len(acked)
            broker.start()
            assert acked_at_kill > 0
        wait_for(lambda: len(acked) > acked_at_kill + 100, 20, "transactions after the last restart")
        stop.set()
        for t in threads:
            t.join(20)
        st = wait_for(lambda: (s := tx_stats(cluster.namesrv_addr))["pending"] == 0 and s, 30, "no pending")
        assert st["discards"] == 0 and st["discarded"] == 0

        stored = Counter(int(m.body.decode().rsplit("-", 1)[1]) for m in scan_topic(cluster.namesrv_addr, topic))
        dups = {n: c for n, c in stored.items() if c > 1}
        assert not dups, f"committed more than once: {dups}"
        lost = {n for n in acked if final(n) == COMMIT and n not in stored}
        assert not lost, f"acknowledged and committed but never stored: {sorted(lost)}"
        visible_rollbacks = {n for n in stored if final(n) == ROLLBACK}
        assert not visible_rollbacks, f"rolled back but visible: {sorted(visible_rollbacks)}"
        assert set(stored) <= acked | failed
        # A half send that failed may still have stored its half message: then check-back decided it.
        print(f"\n{len(acked)} acknowledged, {len(failed)} failed sends, {len(stored)} committed")
    finally:
        stop.set()
        for t in threads:
            t.join(20)
        producer.shutdown()

    # The consumers agree with the log: each committed transaction exactly once.
    collector = Collector(cluster.namesrv_addr, topic, "c_tx_crash")
    try:
        collector.wait_exactly({f"crash-{n}" for n in stored}, 30)
    finally:
        collector.close()
