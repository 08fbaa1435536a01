"""Check-back cost and transaction memory: the numbers behind README's Transactions items 6 and 7.

1. A check pass over M due transactions, after a committed backlog of N transactions (N = 0 … large):
   the pass time should stay flat in N (RocketMQ's pass walks the half queue from its check offset and
   re-appends every checked half message; txmq's takes only the due wheel buckets).
2. Memory per pending transaction in the state table (tracemalloc), for 1M pending.
3. Bytes appended to the log by one check pass (txmq writes one op record per pass, not M messages).
4. Restart: rebuilding the state table after a crash, from the last snapshot plus the records after it, vs
   replaying the whole half and op history.

Runs in-process on a real file store; the check sender is a counter (no network: the pass cost is the
subject). Prints a table; ``--json`` for machines.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

from txmq import bench
from txmq.broker.transaction.check_service import TransactionalMessageCheckService
from txmq.broker.transaction.service import TransactionalMessageService
from txmq.broker.transaction.state import Outcome, TransactionStateTable
from txmq.message import MessageConst, MessageExt, create_uniq_id
from txmq.store import DefaultMessageStore, FlushDiskType, StoreConfig


class CountingSender:
    def __init__(self) -> None:
        self.sent = 0

    def send_check(self, group: str, half: MessageExt, half_offset: int) -> bool:
        self.sent += 1
        return True


def half(i: int) -> MessageExt:
    props = {MessageConst.TRANSACTION_PREPARED: "true", MessageConst.PRODUCER_GROUP: "bench",
             MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX: create_uniq_id()}
    return MessageExt("BenchTx", b"x" * 256, props, queue_id=i % 4, born_timestamp=int(time.time() * 1000))


def progress(what: str, done: int, total: int) -> None:
    if done % 5000 == 0 or done == total:
        print(f"\r  {what}: {done}/{total}", end="", file=sys.stderr, flush=True)
        if done == total:
            print(file=sys.stderr)


async def pass_cost(backlog: int, due: int, runs: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as root:
        store = DefaultMessageStore(StoreConfig(store_path_root_dir=root, flush_disk_type=FlushDiskType.ASYNC_FLUSH,
                                                mapped_file_size_commit_log=256 * 1024 * 1024))
        await store.start()
        service = TransactionalMessageService(store, transaction_timeout_ms=0, file_reserved_time_h=72)
        checker = TransactionalMessageCheckService(service, check_max=10_000, check_interval_ms=1000)
        sender = CountingSender()
        checker.senders.append(sender)
        for i in range(backlog):
            m = half(i)
            r = await service.prepare_message(m)
            assert r.append_result is not None
            await service.end_transaction(producer_group="bench", half_offset=r.append_result.logics_offset,
                                          commit_log_offset=r.append_result.wrote_offset, outcome=Outcome.COMMIT,
                                          source="bench")
            progress(f"committed backlog {backlog}", i + 1, backlog)
        for i in range(due):
            await service.prepare_message(half(i))
        times = []
        log_bytes = []
        now = store.clock.elapsed_ms() / 1000 + 10  # the store's elapsed-time account, as the broker's passes
        for _ in range(runs):
            before = store.max_phy_offset
            t0 = time.perf_counter()
            sent = await checker.check_pass(now)
            times.append(time.perf_counter() - t0)
            log_bytes.append(store.max_phy_offset - before)
            assert sent == due, (sent, due)
            now += 2  # every transaction is due again at the next pass
        await store.shutdown()
        return {"backlog": backlog, "due": due, "pass_ms": statistics.median(times) * 1000,
                "per_check_us": statistics.median(times) / due * 1e6,
                "log_bytes_per_pass": statistics.median(log_bytes)}


async def restart_cost(backlog: int, tail: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as root:
        config = StoreConfig(store_path_root_dir=root, flush_disk_type=FlushDiskType.ASYNC_FLUSH,
                             mapped_file_size_commit_log=256 * 1024 * 1024)
        snapshot = Path(root) / "transactionState.snapshot"
        store = DefaultMessageStore(config)
        await store.start()
        service = TransactionalMessageService(store, transaction_timeout_ms=6000, file_reserved_time_h=72,
                                              snapshot_path=snapshot)
        for i in range(backlog + tail):
            r = await service.prepare_message(half(i))
            assert r.append_result is not None
            if i % 2 == 0:
                await service.end_transaction(producer_group="bench", half_offset=r.append_result.logics_offset,
                                              commit_log_offset=r.append_result.wrote_offset,
                                              outcome=Outcome.COMMIT, source="bench")
            if i + 1 == backlog:
                service.snapshot()
            progress(f"restart backlog {backlog}", i + 1, backlog + tail)
        store.close_without_shutdown()
        out: dict[str, float] = {"backlog": backlog, "tail": tail}
        for label in ("with_snapshot_s", "full_replay_s"):
            store = DefaultMessageStore(config)
            await store.start()
            service = TransactionalMessageService(store, transaction_timeout_ms=6000, file_reserved_time_h=72,
                                                  snapshot_path=snapshot)
            t0 = time.perf_counter()
            service.recover()
            out[label] = time.perf_counter() - t0
            out["pending"] = len(service.table)
            store.close_without_shutdown()
            snapshot.unlink(missing_ok=True)
        return out


def table_memory(pending: int) -> dict[str, float]:
    table = TransactionStateTable()
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    now = int(time.time())
    for i in range(pending):
        table.add_pending(i, "BenchTx", "bench", now, now + 6)
    used = tracemalloc.get_traced_memory()[0] - base
    tracemalloc.stop()
    return {"pending": pending, "bytes_per_pending": used / pending}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--backlogs", default="0,20000,100000", help="committed transactions before the pass")
    ap.add_argument("--due", type=int, default=2000, help="transactions due in each pass")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--pending", type=int, default=1_000_000, help="pending transactions for the memory figure")
    ap.add_argument("--restart-tail", type=int, default=1000, help="transactions after the last snapshot")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    rows = [asyncio.run(pass_cost(int(b), args.due, args.runs)) for b in args.backlogs.split(",")]
    restarts = [asyncio.run(restart_cost(int(b), args.restart_tail)) for b in args.backlogs.split(",") if int(b)]
    mem = table_memory(args.pending)
    if args.json:
        print(json.dumps({"passes": rows, "restarts": restarts, "memory": mem}, indent=2))
        return
    print(f"{'committed backlog':>18} {'due':>6} {'pass ms (median)':>17} {'µs per check':>13} {'log bytes/pass':>15}")
    for r in rows:
        print(f"{r['backlog']:>18,} {r['due']:>6} {r['pass_ms']:>17.1f} {r['per_check_us']:>13.1f} "
              f"{r['log_bytes_per_pass']:>15,.0f}")
    print(f"{'history (transactions)':>24} {'tail':>6} {'restart with snapshot s':>24} {'full replay s':>14}")
    for r in restarts:
        print(f"{r['backlog']:>24,} {r['tail']:>6} {r['with_snapshot_s']:>24.3f} {r['full_replay_s']:>14.3f}")
    print(f"state table: {mem['bytes_per_pending']:.0f} bytes per pending transaction ({mem['pending']:,} pending)")


if __name__ == "__main__":
    bench.run(main)
