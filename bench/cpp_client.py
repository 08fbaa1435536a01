"""The real RocketMQ C++ client (PyPI ``rocketmq==0.4.4``, librocketmq 1.2.x) sending to txmq: ``send_sync`` from 8
threads, and ``send_async`` with at most ``--window`` unanswered; single messages, as that client sends them.

    .venv/bin/python bench/cpp_client.py [-n 20000] [--size 256] [--runs 3] [--modes SYNC_FLUSH,ASYNC_FLUSH]

Per flush mode this starts its own ``txmq server`` (as ``bench/produce_consume.py`` does) and a topic of 4 queues;
each run is a child process (the C++ client writes logs under its own ``$HOME``) that prints its send rate,
every send checked SEND_OK (a send the client fails by itself, such as its "No route info" while it refreshes
routes from 8 threads, is retried and counted). Prints medians and the broker's CPU µs per message.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "bench"))

from txmq import bench  # noqa: E402


def child(a: argparse.Namespace) -> None:
    import rocketmq.client as rmq

    producer = rmq.Producer("cpp_bench", timeout=10_000)
    producer.set_namesrv_addr(a.namesrv)
    producer.start()
    body = "x" * a.size
    errors: list[str] = []
    retried: list[str] = []  # sends the client failed by itself and the bench sent again

    def message() -> rmq.Message:
        msg = rmq.Message(a.topic)
        msg.set_body(body)
        return msg

    producer.send_sync(message())  # route lookup and connection before the clock
    start = time.perf_counter()
    if a.mode == "sync8":
        def worker(count: int) -> None:
            for _ in range(count):
                for _attempt in range(20):
                    try:
                        r = producer.send_sync(message())
                        break
                    except Exception as exc:  # the client's own failure ("No route info" while it refreshes)
                        retried.append(repr(exc))
                        time.sleep(0.05)
                else:
                    errors.append(retried[-1])
                    continue
                if r.status != rmq.SendStatus.OK:
                    errors.append(r.status.name)
        threads = [threading.Thread(target=worker, args=(a.n // 8,)) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        n = a.n // 8 * 8
    else:
        window = threading.Semaphore(a.window)
        done = threading.Semaphore(0)

        def ok(r: object) -> None:
            window.release()
            done.release()

        def bad(exc: object) -> None:
            errors.append(repr(exc))
            window.release()
            done.release()

        for _ in range(a.n):
            window.acquire()
            producer.send_async(message(), ok, bad)
        for _ in range(a.n):
            done.acquire()
        n = a.n
    elapsed = time.perf_counter() - start
    print(json.dumps({"n": n, "seconds": elapsed, "errors": len(errors), "first_error": errors[:1],
                      "retried": len(retried), "first_retry": retried[:1]}), flush=True)
    os._exit(0)  # the wrapper's shutdown can hang; every answer is in


def main() -> None:
    p = bench.workload_parser(__doc__, 20000)
    p.add_argument("--modes", default="SYNC_FLUSH,ASYNC_FLUSH")
    p.add_argument("--child", choices=["sync8", "async"])
    p.add_argument("--namesrv")
    p.add_argument("--topic")
    a = p.parse_args()
    if a.child:
        a.mode = a.child
        child(a)
        return
    from produce_consume import start_txmq

    print(f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, load average {os.getloadavg()}")
    with tempfile.TemporaryDirectory(prefix="txmq-cpp-") as tmp:
        for flush in a.modes.split(","):
            server = start_txmq(flush, Path(tmp))
            try:
                for mode in ("sync8", "async"):
                    rates, cpu = [], []
                    for i in range(a.runs):
                        topic = f"cpp_{flush.lower()}_{mode}_{i}"
                        bench.ensure_topic(server.namesrv, topic, 4)
                        home = Path(tmp) / f"home_{flush}_{mode}_{i}"
                        home.mkdir()
                        b0 = bench.process_cpu_s(server.pid) or 0.0
                        out = subprocess.run(
                            [sys.executable, __file__, "--child", mode, "--namesrv", server.namesrv, "--topic", topic,
                             "-n", str(a.n), "--size", str(a.size), "--window", str(a.window)],
                            env=dict(os.environ, HOME=str(home)), capture_output=True, text=True, timeout=600,
                            check=True)
                        cpu_s = (bench.process_cpu_s(server.pid) or 0.0) - b0
                        r = json.loads(out.stdout.strip().splitlines()[-1])
                        stored = bench.stored_messages(server.namesrv, topic)
                        if r["errors"] or stored < r["n"]:
                            raise bench.BenchError(f"{mode}: {r['errors']} errors ({r['first_error']}), {stored} "
                                                   f"stored of {r['n']}")
                        rates.append(r["n"] / r["seconds"])
                        cpu.append(cpu_s / (r["n"] + 1) * 1e6)
                        print(f"  {flush} {mode} run {i + 1}: {rates[-1]:,.0f}/s (sends the client failed by itself "
                              f"and the bench retried: {r['retried']} {r['first_retry']})", file=sys.stderr, flush=True)
                    print(f"{flush:12s} {mode:6s} {statistics.median(rates):>10,.0f} msg/s  "
                          f"(runs {', '.join(f'{x:,.0f}' for x in rates)}; broker {statistics.median(cpu):.0f} µs/msg)")
            finally:
                server.kill(15)


if __name__ == "__main__":
    bench.run(main)
