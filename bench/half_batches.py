"""The exactly-once sink's broker path without Spark: rows sent by two producer threads (as two tasks would),
then ended by one ``TransactionProducer.end_transactions`` (as the driver's commit), in three modes:

* ``plain``: ``send_async`` of plain messages (the at-least-once sink; nothing to end);
* ``halves``: one half message per row through ``send_async`` (which coalesces them into batches of halves),
  then one COMMIT per row in 9005 batches;
* ``half-batches``: ``send_half_batch_async`` of ``--rows-per-half`` rows each, then one COMMIT per half.

Modes alternate, each ``--reps`` times, into fresh topics; medians are printed (the machine is shared).

    .venv/bin/python bench/half_batches.py [--rows 100000] [--body 200] [--rows-per-half 1000] [--reps 3]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent.parent))  # the repository: tests.e2e's cluster

from tests.e2e.cluster import Cluster

from txmq import Admin, HalfMessageRef, LocalTransactionState, Message, Producer, TransactionProducer, bench
from txmq.client.producer import SendFuture
from txmq.message import MessageConst

MODES = ("plain", "halves", "half-batches")
GROUP = "bench-half-batches"


class NoChecks:
    def execute_local_transaction(self, msg: Message, arg: Any) -> LocalTransactionState:
        return LocalTransactionState.UNKNOWN

    def check_local_transaction(self, msg: Any) -> LocalTransactionState:
        return LocalTransactionState.UNKNOWN


def send_rows(namesrv: str, topic: str, mode: str, first: int, count: int, body: bytes, rows_per_half: int,
              refs: list[HalfMessageRef]) -> None:
    """One 'task': ``count`` rows of ``mode``; the refs of the halves it stored are appended to ``refs``."""
    with Producer(f"{GROUP}-task", namesrv, max_in_flight=2048) as producer:
        futures: list[SendFuture] = []
        half = {MessageConst.TRANSACTION_PREPARED: "true", MessageConst.PRODUCER_GROUP: GROUP}
        if mode == "half-batches":
            end = first + count
            for start in range(first, end, rows_per_half):
                rows = [Message(topic, body, keys=str(i)) for i in range(start, min(end, start + rows_per_half))]
                futures.append(producer.send_half_batch_async(rows, GROUP))
        else:
            for i in range(first, first + count):
                msg = Message(topic, body, keys=str(i), properties=half if mode == "halves" else None)
                futures.append(producer.send_async(msg))
        results = [f.result(120) for f in futures]
    if mode != "plain":
        refs.extend(HalfMessageRef.of(r) for r in results)


def run(namesrv: str, topic: str, mode: str, rows: int, body: bytes, rows_per_half: int,
        ender: TransactionProducer) -> tuple[float, float]:
    """Seconds to send every row (two threads), and to end every transaction (0 for plain)."""
    refs: list[HalfMessageRef] = []
    half_rows = rows // 2
    started = time.monotonic()
    threads = [threading.Thread(target=send_rows, args=(namesrv, topic, mode, k * half_rows,
                                                         half_rows if k == 0 else rows - half_rows, body,
                                                         rows_per_half, refs)) for k in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    sent = time.monotonic()
    if mode == "plain":
        return sent - started, 0.0
    chunk = max(1, 10_000 * len(refs) // rows)  # about 10,000 rows a request, as the Spark sink does
    answers = ender.end_transactions([(ref, LocalTransactionState.COMMIT) for ref in refs], chunk=chunk)
    assert all(a.decided for a in answers), [a for a in answers if not a.decided][:3]
    return sent - started, time.monotonic() - sent


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--rows", type=int, default=100_000)
    p.add_argument("--body", type=int, default=200)
    p.add_argument("--rows-per-half", type=int, default=1000)
    p.add_argument("--reps", type=int, default=3)
    args = p.parse_args()
    cluster = Cluster(Path(tempfile.mkdtemp(prefix="txmq-bench-half-batches-")))
    try:
        cluster.start_namesrv()
        cluster.start_broker("broker-a")
        topics = {(mode, rep): f"bench-{mode}-{rep}" for rep in range(args.reps) for mode in MODES}
        with Admin(cluster.namesrv_addr) as admin:
            for topic in topics.values():
                admin.create_topic(topic, 4)
        cluster.wait_route(topics[(MODES[-1], args.reps - 1)])
        body = b"x" * args.body
        times: dict[str, list[tuple[float, float]]] = {mode: [] for mode in MODES}
        with TransactionProducer(GROUP, NoChecks(), cluster.namesrv_addr) as ender:
            for (mode, rep), topic in topics.items():
                times[mode].append(run(cluster.namesrv_addr, topic, mode, args.rows, body, args.rows_per_half,
                                       ender))
                print(f"run {rep + 1}/{args.reps} {mode:<13} send {times[mode][-1][0]:.2f}s "
                      f"end {times[mode][-1][1]:.2f}s", flush=True)
        print(f"\nrows={args.rows} body={args.body}B rows-per-half={args.rows_per_half}, medians of {args.reps}")
        total = {mode: statistics.median(s + e for s, e in runs) for mode, runs in times.items()}
        for mode, runs in times.items():
            send = statistics.median(s for s, _ in runs)
            end = statistics.median(e for _, e in runs)
            ends = f"end {args.rows / end:9.0f} rows/s" if end else f"{'':>20}"
            print(f"{mode:<13} send {args.rows / send:9.0f} rows/s  {ends}  total {total[mode]:5.2f}s "
                  f"= {total['plain'] / total[mode]:.0%} of plain's rows/s")
    finally:
        cluster.close()
    return 0


if __name__ == "__main__":
    bench.run(main)
