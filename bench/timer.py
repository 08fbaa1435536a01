"""Timer messages: how fast timers are indexed and delivered, how late they are delivered at 10,000 due per second,
and the memory of a broker's timer index with millions scheduled.

Run: .venv/bin/python bench/timer.py [--short] [--scheduled N] [--rate R --seconds S]. The store and its timer
index (``txmq.broker.timer``) run in this process, as in a broker, on a temporary directory (--dir): timer messages
are stored as a send stores them (diverted to ``rmq_sys_wheel_timer``), indexed, and delivered into their topic.
Prints one table; asserts nothing (tests/broker/test_timer_bench.py runs ``--short``).

``--kill N``: instead, the SIGKILL test (tests/e2e/test_timers.py) with N timers due over a minute against a real
broker process, killed and restarted while delivering: every one delivered exactly once, none early (CI runs it
with 5,000).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from txmq.broker.timer import TIMER_DELIVER_MS, TIMER_OUT_MS, TimerMessageStore
from txmq.message import MessageExt, decode_message
from txmq.store import DefaultMessageStore, StoreConfig

BODY = b"x" * 128
PUT_CHUNK = 512


def config(root: str, precision_ms: int) -> StoreConfig:
    return StoreConfig(store_path_root_dir=root, mapped_file_size_commit_log=256 << 20, timer_precision_ms=precision_ms)


def rss_mib() -> tuple[float, float]:
    """(VmRSS, RssAnon) of this process in MiB: all resident pages, and those that are not file pages."""
    fields = dict(line.split(":", 1) for line in Path("/proc/self/status").read_text().splitlines())
    return int(fields["VmRSS"].split()[0]) / 1024, int(fields["RssAnon"].split()[0]) / 1024


async def schedule(store: DefaultMessageStore, timers: TimerMessageStore, due_ms: list[int]) -> float:
    """Store one timer message per delivery time (wall-clock ms), as sends store them; returns the seconds taken."""
    t0 = time.perf_counter()
    for start in range(0, len(due_ms), PUT_CHUNK):
        puts = []
        for i, at in enumerate(due_ms[start:start + PUT_CHUNK], start):
            msg = MessageExt("bench_timer", BODY, {TIMER_DELIVER_MS: str(at), "UNIQ_KEY": f"{i:032X}"},
                             born_timestamp=int(time.time() * 1000), born_host=("127.0.0.1", 1))
            timers.divert(msg)
            puts.append(store.put_message(msg))
        for put in puts:
            assert (await put).stored
    return time.perf_counter() - t0


def delivered_lateness(store: DefaultMessageStore) -> list[int]:
    """Each delivered message's store timestamp minus its delivery time, in ms."""
    out = []
    for qid in store.queue_ids("bench_timer"):
        offset, end = 0, store.get_max_offset_in_queue("bench_timer", qid)
        while offset < end:
            got = store.get_message("bench_timer", qid, offset, 1024)
            for raw in got.messages:
                m, _ = decode_message(raw)
                out.append(m.store_timestamp - int(m.properties[TIMER_OUT_MS]))
            offset = max(offset + 1, got.next_begin_offset)
    return out


async def throughput(root: str, n: int) -> tuple[float, float, float]:
    """(stored/s, indexed/s, delivered/s) for ``n`` timers due together, 2 s after they are stored."""
    cfg = config(root, 1000)
    async with DefaultMessageStore(cfg) as store:
        timers = TimerMessageStore(store, cfg, Path(root))
        at = int(time.time() * 1000) + 60_000
        put_s = await schedule(store, timers, [at] * n)
        t0 = time.perf_counter()
        timers.catch_up()
        index_s = time.perf_counter() - t0
        # all due now: the account moves on by a minute (the clock's own hook for tests and benches)
        clock = store.clock
        skip = 61_000_000_000
        base = clock.monotonic_ns
        wall = clock.wall_ns
        clock.monotonic_ns = lambda: base() + skip
        clock.wall_ns = lambda: wall() + skip
        t0 = time.perf_counter()
        while timers.count:
            await timers._deliver_due()
        deliver_s = time.perf_counter() - t0
        timers.close()
    return n / put_s, n / index_s, n / deliver_s


async def lateness(root: str, rate: int, seconds: float, precision_ms: int, prepare_rate: float) -> list[int]:
    """``rate`` timers due per second for ``seconds``, the first 2 s after they are all stored and indexed (at
    ``prepare_rate`` a second, with a margin), the broker's delivery loop running: the lateness in ms of each."""
    cfg = config(root, precision_ms)
    async with DefaultMessageStore(cfg) as store:
        timers = TimerMessageStore(store, cfg, Path(root))
        n = int(rate * seconds)
        start = int(time.time() * 1000) + 2000 + int(1.5 * 1000 * n / prepare_rate)
        await schedule(store, timers, [start + i * 1000 // rate for i in range(n)])
        timers.catch_up()
        if time.time() * 1000 > start:
            print(f"(the stores and the index ran {time.time() * 1000 - start:.0f} ms past the first due time)")
        loop = asyncio.create_task(timers.run(deliver=True))
        try:
            while timers.delivered < n:
                await asyncio.sleep(0.05)
        finally:
            loop.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await loop
        late = delivered_lateness(store)
        timers.close()
    return late


async def memory(root: str, n: int) -> tuple[float, float, float, float]:
    """RSS (all, anonymous) with ``n`` timers scheduled over the next 30 days and indexed; the index's size on
    disk in MiB; and the seconds one tick takes with nothing due."""
    cfg = config(root, 1000)
    async with DefaultMessageStore(cfg) as store:
        timers = TimerMessageStore(store, cfg, Path(root))
        now = int(time.time() * 1000) + 60_000
        span = 30 * 86_400_000
        for start in range(0, n, 100_000):  # in slices: the list of times stays small
            count = min(100_000, n - start)
            await schedule(store, timers, [now + (start + i) * span // n for i in range(count)])
            timers.catch_up()
        rss, anon = rss_mib()
        await timers._deliver_due()  # the first saves the delivery position: the ticks after it read one index
        t0 = time.perf_counter()
        for _ in range(10):
            await timers._deliver_due()
        tick = (time.perf_counter() - t0) / 10
        size = sum(p.stat().st_size for p in (Path(root) / "timer").iterdir()) / (1 << 20)
        timers.close()
    return rss, anon, size, tick


def kill_run(count: int) -> int:
    """The SIGKILL test at ``count`` timers due over a minute; its exit status."""
    root = Path(__file__).resolve().parents[1]
    env = dict(os.environ, TXMQ_TIMER_KILL_COUNT=str(count), TXMQ_TIMER_KILL_SPREAD_S="60")
    t0 = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           "tests/e2e/test_timers.py::test_sigkill_with_timers_pending"], cwd=root, env=env)
    print(f"SIGKILL with {count:,} timers due over 60 s: {'passed' if done.returncode == 0 else 'FAILED'} "
          f"in {time.monotonic() - t0:.0f} s")
    return done.returncode


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--short", action="store_true", help="small counts (CI): a few seconds")
    ap.add_argument("--scheduled", type=int, default=10_000_000,
                    help="timers scheduled for the memory figure (0: none)")
    ap.add_argument("--burst", type=int, default=200_000, help="timers due together for the throughput figures")
    ap.add_argument("--rate", type=int, default=10_000, help="timers due per second for the lateness figure")
    ap.add_argument("--seconds", type=float, default=20, help="seconds of timers due at --rate")
    ap.add_argument("--precision", type=int, default=100, help="timerPrecisionMs of the lateness figure")
    ap.add_argument("--dir", default=None, help="where the stores go (default: a temporary directory)")
    ap.add_argument("--kill", type=int, metavar="N", help="run the SIGKILL test with N timers instead")
    a = ap.parse_args()
    if a.kill:
        raise SystemExit(kill_run(a.kill))
    if a.short:
        a.scheduled, a.burst, a.rate, a.seconds = 50_000, 20_000, 2_000, 2
    logging.basicConfig(level=logging.WARNING)
    with tempfile.TemporaryDirectory(dir=a.dir) as tmp:
        stored, indexed, delivered = asyncio.run(throughput(f"{tmp}/burst", a.burst))
        late = asyncio.run(lateness(f"{tmp}/late", a.rate, a.seconds, a.precision,
                                    1 / (1 / stored + 1 / indexed)))
        rss, anon, size, tick = asyncio.run(memory(f"{tmp}/memory", a.scheduled)) if a.scheduled else (0, 0, 0, 0)
    q = statistics.quantiles(late, n=100)
    print(f"Timer messages (txmq.broker.timer, in one process; load average {os.getloadavg()[0]:.1f} at the end)")
    print(f"{'figure':<52} {'value':>14}")
    print(f"{'timers stored (sends diverted), per second':<52} {stored:>14,.0f}")
    print(f"{'timers indexed, per second':<52} {indexed:>14,.0f}")
    print(f"{'timers delivered, per second':<52} {delivered:>14,.0f}")
    print(f"{f'lateness at {a.rate:,} due/s, p50 (ms)':<52} {q[49]:>14,.0f}")
    print(f"{f'lateness at {a.rate:,} due/s, p99 (ms)':<52} {q[98]:>14,.0f}")
    print(f"{'lateness, earliest (ms; never below 0)':<52} {min(late):>14,.0f}")
    print(f"{f'delivered of {int(a.rate * a.seconds):,} due':<52} {len(late):>14,}")
    print(f"{f'RSS with {a.scheduled:,} scheduled (MiB)':<52} {rss:>14,.0f}")
    print(f"{'  of which anonymous memory (MiB)':<52} {anon:>14,.0f}")
    print(f"{'timer index on disk (MiB)':<52} {size:>14,.0f}")
    print(f"{f'a tick with {a.scheduled:,} scheduled, none due (ms)':<52} {tick * 1000:>14,.2f}")


if __name__ == "__main__":
    main()
