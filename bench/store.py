"""Store benchmarks: append throughput (ASYNC_FLUSH, SYNC_FLUSH with group commit) and recovery time.

Run: .venv/bin/python bench/store.py [--quick]; ``--queue-recovery TOPICS``: only the open after a crash with
TOPICS topics of 8 queues (``bench_queue_recovery``). Prints numbers, asserts nothing. Everything happens under
a temporary directory on the same file system as /tmp (override with --dir).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

from txmq import bench
from txmq.message import MessageExt
from txmq.store import DefaultMessageStore, FlushDiskType, StoreConfig, tail_journal

BODY = b"x" * 256
MiB = 1 << 20


def config(root: str, **kw: object) -> StoreConfig:
    base: dict[str, object] = dict(store_path_root_dir=root, mapped_file_size_commit_log=256 * MiB)
    base.update(kw)
    return StoreConfig(**base)  # type: ignore[arg-type]


def message(i: int, body: bytes = BODY) -> MessageExt:
    return MessageExt("bench", body, {"TAGS": "A", "KEYS": f"k{i}"}, queue_id=i % 8, born_host=("10.0.0.9", 1))


def raw_fsync_rate(directory: str, seconds: float = 1.0) -> float:
    """What the disk does alone: 4 KiB append + fdatasync, back to back."""
    path = os.path.join(directory, "fsync-probe")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    n, deadline = 0, time.monotonic() + seconds
    try:
        while time.monotonic() < deadline:
            os.write(fd, b"\1" * 4096)
            os.fdatasync(fd)
            n += 1
    finally:
        os.close(fd)
        os.unlink(path)
    return n / seconds


async def bench_async(root: str, n: int) -> dict[str, float]:
    store = DefaultMessageStore(config(root))
    await store.start()
    t0 = time.perf_counter()
    for i in range(n):
        await store.put_message(message(i))
    elapsed = time.perf_counter() - t0
    record = store.max_phy_offset // n
    t0 = time.perf_counter()
    read = 0
    for qid in range(8):
        offset = 0
        while True:
            got = store.get_message("bench", qid, offset, max_msg_nums=32)
            if not got.messages:
                break
            read += got.message_count
            offset = got.next_begin_offset
    read_elapsed = time.perf_counter() - t0
    await store.shutdown()
    return {"appends_per_s": n / elapsed, "record_bytes": record, "reads_per_s": read / read_elapsed}


async def bench_sync(root: str, n: int, producers: int) -> dict[str, float]:
    store = DefaultMessageStore(config(root, flush_disk_type=FlushDiskType.SYNC_FLUSH))
    await store.start()
    per_task = n // producers

    async def producer(p: int) -> None:
        for i in range(per_task):
            result = await store.put_message(message(p * per_task + i))
            assert result.ok, result.status

    fsyncs0 = store.runtime_info()["fsyncs"]
    t0 = time.perf_counter()
    await asyncio.gather(*(producer(p) for p in range(producers)))
    elapsed = time.perf_counter() - t0
    fsyncs = store.runtime_info()["fsyncs"] - fsyncs0
    await store.shutdown()
    total = per_task * producers
    return {"appends_per_s": total / elapsed, "fsyncs_per_s": fsyncs / elapsed, "records_per_fsync": total / fsyncs}


def median_runs(runs: int, fn) -> dict[str, float]:  # type: ignore[no-untyped-def]
    results = [fn() for _ in range(runs)]
    return {k: statistics.median(r[k] for r in results) for k in results[0]}


# --- recovery ---------------------------------------------------------------------------------------


async def generate(root: str, size: int, tail_records: int) -> None:
    """Child: fill the log to ``size`` bytes with 4 KiB bodies, checkpoint, add a tail, then wait to be killed."""
    store = DefaultMessageStore(config(root))
    await store.start()
    body = os.urandom(4096)
    i, last_report = 0, 0
    while store.max_phy_offset < size:
        await store.put_messages([message(i + j, body) for j in range(64)])
        i += 64
        if store.max_phy_offset - last_report >= 64 * MiB:
            last_report = store.max_phy_offset
            print(f"  generating: {last_report // MiB} MiB, {i} records", file=sys.stderr, flush=True)
    store.flush_and_checkpoint()
    for j in range(tail_records):
        await store.put_message(message(i + j, body))
    rss_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"done {i + tail_records} {rss_mib:.0f}", flush=True)
    await asyncio.sleep(3600)


def make_crashed_store(root: str, size: int, tail_records: int) -> tuple[int, float]:
    """Records written and the writer's peak RSS in MiB."""
    child = subprocess.Popen(
        [sys.executable, __file__, "--generate", root, str(size), str(tail_records)], stdout=subprocess.PIPE
    )
    assert child.stdout is not None
    line = child.stdout.readline().decode()
    child.send_signal(signal.SIGKILL)
    child.wait()
    assert line.startswith("done"), line
    return int(line.split()[1]), float(line.split()[2])


def time_open(root: str) -> tuple[float, int]:
    t0 = time.perf_counter()
    store = DefaultMessageStore(config(root))
    elapsed = time.perf_counter() - t0
    scanned = store.recovery_report.records_scanned
    store.close_without_shutdown()  # stays "crashed": the next open does the same work
    return elapsed, scanned


def bench_recovery(base: str, size: int, runs: int) -> dict[str, float]:
    root = os.path.join(base, f"recovery-{size // MiB}")
    records, rss_mib = make_crashed_store(root, size, tail_records=1000)
    with_cp = [time_open(root) for _ in range(runs)]
    os.unlink(os.path.join(root, "checkpoint"))
    without_cp = [time_open(root) for _ in range(runs)]
    shutil.rmtree(root)
    return {
        "log_mib": size / MiB,
        "records": records,
        "writer_peak_rss_mib": rss_mib,
        "with_checkpoint_s": statistics.median(t for t, _ in with_cp),
        "with_checkpoint_scanned": with_cp[0][1],
        "no_checkpoint_s": statistics.median(t for t, _ in without_cp),
        "no_checkpoint_scanned": without_cp[0][1],
    }


async def fill_queues(root: str, topics: int, journal: bool) -> None:
    """One message in each of ``topics`` x 8 queues, a checkpoint, a tail (a message in every seventh topic), a
    crash. ``journal``: the checkpoint is a periodic thorough one, which puts the queues' buffered entries in a tails
    journal (recovery writes it back into their files); else a full one, which writes them to their files."""
    store = DefaultMessageStore(config(root, checkpoint_interval_ms=200,
                                       flush_consume_queue_thorough_interval_ms=1 if journal else 3_600_000))
    await store.start()
    for first in range(0, topics, 250):
        await asyncio.gather(*(store.put_message(MessageExt(f"t{t}", BODY, {}, queue_id=q))
                               for t in range(first, min(first + 250, topics)) for q in range(8)))
    if journal:  # a periodic checkpoint after the last put (thorough, since the interval is 1 ms)
        deadline = time.monotonic() + 120
        while store.checkpoint_offset < store.max_phy_offset and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
    else:
        store.flush_and_checkpoint()
    await asyncio.gather(*(store.put_message(MessageExt(f"t{t}", BODY, {}, queue_id=t % 8))
                           for t in range(0, topics, 7)))
    store.commit_log.flush()
    store.close_without_shutdown()


def bench_queue_recovery(base: str, topics: int, runs: int) -> None:
    """The open after a crash with many consume queues (each opened and checked), with and without a journal."""
    for journal in (False, True):
        root = os.path.join(base, f"queues-{topics}-{journal}")
        asyncio.run(fill_queues(root, topics, journal))
        opens = [time_open(root) for _ in range(runs)]  # (each leaves it crashed: the next does the same work)
        assert bool(tail_journal.numbers(root)) == journal
        shutil.rmtree(root)
        print(f"recovery after a crash, {topics} topics x 8 queues, "
              f"{'a tails journal written back' if journal else 'the queues fsynced'}: "
              f"{statistics.median(t for t, _ in opens) * 1000:.0f} ms (median of {runs}; "
              f"{opens[0][1]} records scanned; page cache warm)", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--dir", default=tempfile.gettempdir())
    parser.add_argument("--quick", action="store_true", help="smaller runs (smoke test)")
    parser.add_argument("--recovery-only", action="store_true", help="skip the append benchmarks")
    parser.add_argument("--generate", nargs=3, help=argparse.SUPPRESS)
    parser.add_argument("--queue-recovery", type=int, metavar="TOPICS",
                        help="only the open after a crash with TOPICS topics of 8 queues each")
    args = parser.parse_args()
    logging.getLogger("txmq.store").setLevel(logging.ERROR)  # recovery events are expected here
    if args.generate:
        asyncio.run(generate(args.generate[0], int(args.generate[1]), int(args.generate[2])))
        return

    base = tempfile.mkdtemp(prefix="txmq-bench-", dir=args.dir)
    n = 20_000 if args.quick else 100_000
    runs = 1 if args.quick else 3
    try:
        if args.queue_recovery:
            bench_queue_recovery(base, args.queue_recovery, runs)
            return
        if not args.recovery_only:
            bench_appends(base, n, runs)
        sizes = [64 * MiB, 256 * MiB] if args.quick else [256 * MiB, 1024 * MiB]
        for size in sizes:
            r = bench_recovery(base, size, runs)
            print(
                f"recovery after SIGKILL, {r['log_mib']:.0f} MiB log ({r['records']:.0f} records): "
                f"checkpoint {r['with_checkpoint_s'] * 1000:.0f} ms ({r['with_checkpoint_scanned']:.0f} records "
                f"scanned), no checkpoint {r['no_checkpoint_s'] * 1000:.0f} ms "
                f"({r['no_checkpoint_scanned']:.0f} records scanned); writer peak RSS "
                f"{r['writer_peak_rss_mib']:.0f} MiB"
            )
    finally:
        shutil.rmtree(base, ignore_errors=True)


def bench_appends(base: str, n: int, runs: int) -> None:
    print(f"raw disk: {raw_fsync_rate(base):.0f} fsyncs/s (4 KiB append + fdatasync)")

    def fresh(name: str) -> str:
        path = os.path.join(base, name)
        shutil.rmtree(path, ignore_errors=True)
        return path

    r = median_runs(runs, lambda: asyncio.run(bench_async(fresh("async"), n)))
    print(f"ASYNC_FLUSH: {r['appends_per_s']:.0f} appends/s ({r['record_bytes']:.0f}-byte records, 1 producer)")
    print(f"get_message, 32 per call, page cache warm: {r['reads_per_s']:.0f} messages/s")
    for producers in (1, 64, 256):
        count = n // 10 if producers == 1 else n
        r = median_runs(runs, lambda p=producers, c=count: asyncio.run(bench_sync(fresh("sync"), c, p)))
        print(
            f"SYNC_FLUSH, {producers:3d} producers: {r['appends_per_s']:.0f} appends/s, "
            f"{r['fsyncs_per_s']:.0f} fsyncs/s, {r['records_per_fsync']:.1f} records/fsync"
        )


if __name__ == "__main__":
    bench.run(main)
