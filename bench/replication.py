"""Replication: SYNC_MASTER with one slave beside SYNC_FLUSH alone, replication lag under load, and the
catch-up rate of an empty slave.

    .venv/bin/python bench/replication.py [-n 50000] [--size 256] [--window 1000] [--runs 3]
        [--catch-up-mb 100] [--peers OUTDIR | --no-peers] [--json]

One name server and three broker groups, each its own process on free ports of 127.0.0.1 with a temporary
store: ``alone`` (a master, SYNC_FLUSH, no slave), ``sync`` (SYNC_MASTER + SYNC_FLUSH with one slave) and
``async`` (ASYNC_MASTER + ASYNC_FLUSH with one slave). Per run, ``alone`` and ``sync`` each produce N
messages through a window (``txmq.bench.produce``, every send confirmed) into a fresh topic, alternately in
the same run, medians of ``--runs``. ``async`` produces N while its HA status (acknowledged offset, lag) is
sampled every 20 ms: replication lag p50/p99 in bytes and in milliseconds of store time. Then ``async``'s
master is filled to ``--catch-up-mb``, an empty slave is started, and the time until it has the whole log
gives the catch-up rate; the master keeps taking sends meanwhile (their rate is reported beside the rate
without a catching-up slave).

Unless ``--no-peers``, the peers kit (``../shared/peers/run-all.sh``, its clients run by PEERS_PYTHON or this
interpreter, whose ``bench`` extra has pika and nats-py) runs the same -n/--size/--window/--runs for RabbitMQ
quorum queues. Every process it starts is stopped on exit.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "bench"))

from produce_consume import run_peers  # noqa: E402

from txmq import bench  # noqa: E402
from txmq.client.admin import Admin  # noqa: E402
from txmq.launch import ServerProcess, free_port, txmq_command  # noqa: E402

SEGMENT = 256 * 1024 * 1024


def log(*a: object) -> None:
    print(*a, file=sys.stderr, flush=True)


class Bench:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.env = dict(os.environ, PYTHONPATH=str(ROOT / "src"), HOME=str(root), PYTHONUNBUFFERED="1")
        self.procs: list[ServerProcess] = []
        self.namesrv = ""

    def start(self, name: str, args: list[str]) -> ServerProcess:
        p = ServerProcess(txmq_command(*args), self.root / f"{name}.log", self.env).start(30)
        self.procs.append(p)
        return p

    def member(self, group: str, broker_id: int, conf: dict[str, object]) -> ServerProcess:
        name = f"{group}-{broker_id}"
        settings = {"brokerName": group, "brokerId": broker_id, "namesrvAddr": self.namesrv, "grpcPort": -1,
                    "storePathRootDir": self.root / name, "listenPort": free_port(), "haListenPort": free_port(),
                    "mappedFileSizeCommitLog": SEGMENT, **conf}
        path = self.root / f"{name}.conf"
        path.write_text("".join(f"{k}={v}\n" for k, v in settings.items()))
        return self.start(name, ["broker", "-c", str(path)])

    def close(self) -> None:
        for p in reversed(self.procs):
            p.stop(30)


def ha_status(admin: Admin, group: str) -> dict[str, Any]:
    return admin.ha_status()[group]


def produce(b: Bench, group: str, topic: str, a: argparse.Namespace, pid: int | None, n: int | None = None,
            size: int | None = None) -> bench.PhaseResult:
    """Produce into a new topic that only ``group`` serves."""
    with Admin(b.namesrv) as admin:
        admin.create_topic(topic, 4, brokers=[group])
        bench.wait_for(lambda: topic in admin.list_topics(), 10, f"a route to {topic}")
    return bench.produce(b.namesrv, topic, n or a.n, size=size or a.size, window=a.window, broker_pid=pid,
                         progress=not a.quiet)


def percentile(values: list[float], p: float) -> float:
    data = sorted(values)
    return data[min(len(data) - 1, int(len(data) * p / 100))] if data else 0.0


def lag_under_load(b: Bench, a: argparse.Namespace, master: ServerProcess) -> dict[str, Any]:
    """Produce into the async group while sampling its slave's lag."""
    samples: list[tuple[int, float]] = []
    stop = threading.Event()

    def sample() -> None:
        with Admin(b.namesrv) as admin:
            while not stop.is_set():
                st = ha_status(admin, "async")["0"]
                for s in st["slaves"]:
                    if s["connected"]:
                        samples.append((s["lag_bytes"], s["lag_seconds"] * 1000))
                time.sleep(0.02)

    t = threading.Thread(target=sample, daemon=True)
    t.start()
    try:
        pub = produce(b, "async", "lag", a, master.pid)
    finally:
        stop.set()
        t.join(10)
    lag_b = [float(x) for x, _ in samples]
    lag_ms = [y for _, y in samples]
    return {"samples": len(samples), "publish_msgs_s": round(pub.rate),
            "lag_bytes_p50": percentile(lag_b, 50), "lag_bytes_p99": percentile(lag_b, 99),
            "lag_ms_p50": percentile(lag_ms, 50), "lag_ms_p99": percentile(lag_ms, 99)}


def catch_up(b: Bench, a: argparse.Namespace, master: ServerProcess) -> dict[str, Any]:
    """Fill the async master to --catch-up-mb, start an empty slave and time it (from its ready line) to the
    master's end while a producer keeps sending."""
    size = 1024
    with Admin(b.namesrv) as admin:
        have = ha_status(admin, "async")["0"]["maxOffset"]
        need = a.catch_up_mb * 1024 * 1024 - have
        for i in range(1000):
            if need <= 0:
                break
            produce(b, "async", f"fill{i}", a, master.pid, n=min(need // size + 1, 200_000), size=size)
            need = a.catch_up_mb * 1024 * 1024 - ha_status(admin, "async")["0"]["maxOffset"]
        filled = ha_status(admin, "async")["0"]["maxOffset"]
        baseline = produce(b, "async", "steady", a, master.pid)
        slave = b.member("async", 2, {"brokerRole": "SLAVE"})
        t0 = time.perf_counter()
        during: list[bench.PhaseResult] = []
        sender = threading.Thread(target=lambda: during.append(produce(b, "async", "during", a, master.pid)))
        sender.start()
        while True:
            st = ha_status(admin, "async")
            end = st["0"]["maxOffset"]
            if (st.get("2") or {}).get("maxOffset", 0) >= end and not sender.is_alive():
                break
            time.sleep(0.05)
        seconds = time.perf_counter() - t0
        sender.join()
    slave.stop(30)
    return {"log_mb": round(end / 2**20, 1), "filled_mb": round(filled / 2**20, 1), "seconds": round(seconds, 2),
            "mb_s": round(end / 2**20 / seconds, 1), "publish_msgs_s_without": round(baseline.rate),
            "publish_msgs_s_during": round(during[0].rate) if during else 0}


def main() -> int:
    p = bench.workload_parser(__doc__, 50_000)
    p.add_argument("--catch-up-mb", type=int, default=100)
    p.add_argument("--peers", metavar="OUTDIR", help="where run-all.sh writes its JSON (default: a temp dir)")
    p.add_argument("--no-peers", action="store_true")
    p.add_argument("--json", action="store_true")
    p.add_argument("--quiet", action="store_true", help="no progress lines")
    a = p.parse_args()

    root = Path(tempfile.mkdtemp(prefix="txmq-bench-ha-"))
    started = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
    b = Bench(root)
    result: dict[str, Any] = {"date": started, "params": vars(a),
                              "machine": {"cpus": os.cpu_count(), "uname": " ".join(platform.uname()),
                                          "python": platform.python_version()}}
    try:
        b.namesrv = b.start("namesrv", ["namesrv", "--port", str(free_port())]).addrs["namesrv"]
        alone = b.member("alone", 0, {"brokerRole": "ASYNC_MASTER", "flushDiskType": "SYNC_FLUSH"})
        sync = b.member("sync", 0, {"brokerRole": "SYNC_MASTER", "flushDiskType": "SYNC_FLUSH"})
        b.member("sync", 1, {"brokerRole": "SLAVE"})
        async_master = b.member("async", 0, {"brokerRole": "ASYNC_MASTER", "flushDiskType": "ASYNC_FLUSH"})
        b.member("async", 1, {"brokerRole": "SLAVE"})
        with Admin(b.namesrv) as admin:
            bench.wait_for(lambda: all(ha_status(admin, g)["0"].get("inSyncSlaveNums") == 1 for g in ("sync", "async")),
                           30, "both slaves to connect")
        runs: dict[str, list[float]] = {"alone": [], "sync": []}
        for i in range(1, a.runs + 1):
            for name, proc in (("alone", alone), ("sync", sync)):
                r = produce(b, name, f"{name}_{i}", a, proc.pid)
                runs[name].append(round(r.rate))
                log(f"run {i} {name}: {round(r.rate):,} msg/s (broker CPU {r.broker_cpu_s} s, "
                    f"other CPU {r.other_cpu_s} s)")
        med = {k: statistics.median(v) for k, v in runs.items()}
        result["publish"] = {"runs": runs, "median": med, "sync_over_alone": round(med["sync"] / med["alone"], 2)}
        result["lag"] = lag_under_load(b, a, async_master)
        log(f"lag under load: {result['lag']}")
        result["catch_up"] = catch_up(b, a, async_master)
        log(f"catch-up: {result['catch_up']}")
    finally:
        b.close()
        with contextlib.suppress(OSError):
            shutil.rmtree(root)
    if not a.no_peers:
        try:
            peers = run_peers(argparse.Namespace(peers=a.peers, n=a.n, size=a.size, window=a.window, runs=a.runs))
            q = peers["rabbitmq-quorum"]["median"]["publish_msgs_s"]
            result["rabbitmq_quorum_publish_msgs_s"] = q
            result["sync_over_rabbitmq_quorum"] = round(result["publish"]["median"]["sync"] / q, 2)
        except (RuntimeError, OSError, KeyError) as exc:
            log(f"no peer figures: {exc}")
    out = sys.stderr if a.json else sys.stdout
    pub, lag, cu = result["publish"], result["lag"], result["catch_up"]
    print(f"\npublish, {a.n} x {a.size} B, window {a.window}, medians of {a.runs}:", file=out)
    print(f"  SYNC_FLUSH alone:             {pub['median']['alone']:>9,.0f} msg/s  {pub['runs']['alone']}", file=out)
    print(f"  SYNC_MASTER + slave (+ fsync): {pub['median']['sync']:>9,.0f} msg/s  {pub['runs']['sync']}"
          f"  -> {pub['sync_over_alone']:.2f}x (aim >= 0.7)", file=out)
    if "sync_over_rabbitmq_quorum" in result:
        print(f"  RabbitMQ quorum queue:        {result['rabbitmq_quorum_publish_msgs_s']:>9,.0f} msg/s"
              f"  -> SYNC_MASTER {result['sync_over_rabbitmq_quorum']:.2f}x (aim >= 1.5)", file=out)
    print(f"replication lag, ASYNC_MASTER under {lag['publish_msgs_s']:,} msg/s ({lag['samples']} samples): "
          f"p50 {lag['lag_bytes_p50']:.0f} B / {lag['lag_ms_p50']:.0f} ms, "
          f"p99 {lag['lag_bytes_p99']:.0f} B / {lag['lag_ms_p99']:.0f} ms", file=out)
    print(f"catch-up of an empty slave: {cu['log_mb']} MB in {cu['seconds']} s = {cu['mb_s']} MB/s; master "
          f"sends meanwhile {cu['publish_msgs_s_during']:,} msg/s (without: {cu['publish_msgs_s_without']:,})",
          file=out)
    if a.json:
        print(json.dumps(result, indent=2, default=str))
    return 0


if __name__ == "__main__":
    bench.run(main)
