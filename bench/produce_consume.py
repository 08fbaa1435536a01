"""txmq beside RabbitMQ and NATS JetStream: 256-byte messages, confirmed sends through a window, then
consumption with committed offsets; in SYNC_FLUSH and in ASYNC_FLUSH.

    .venv/bin/python bench/produce_consume.py [-n 50000] [--size 256] [--window 1000] [--runs 3]
        [--modes SYNC_FLUSH,ASYNC_FLUSH] [--tx 5000] [--peers OUTDIR | --no-peers] [--json]

For each flush mode this starts its own ``txmq server`` (name server + broker, one process) on free ports of
127.0.0.1 with a temporary store, and per run: creates a fresh topic (4 queues), produces N messages
(``txmq.bench.produce``), checks the broker holds N, consumes them back with a PushConsumer whose offsets are
committed to the broker (``txmq.bench.consume``, which checks every message arrived once and intact).
``--tx N`` adds a transaction-rate run (``txmq.bench.transactions``: half message, COMMIT, end) per mode,
whose committed messages are then consumed and checked the same way (that consume is not reported).

Then, unless ``--no-peers``, it runs ``../shared/peers/run-all.sh`` with the same -n/--size/--window/--runs
(its clients run by PEERS_PYTHON or this interpreter, whose ``bench`` extra has pika and nats-py) and prints the ratios
txmq / RabbitMQ classic durable and txmq / NATS JetStream. Every process it starts is stopped on exit.
``TXMQ_BROKER_PROFILE=DIR`` runs the broker under cProfile and writes DIR/broker-<mode>.prof at shutdown.
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
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from txmq import bench  # noqa: E402
from txmq.launch import ServerProcess, free_port, txmq_command  # noqa: E402

PEERS = ROOT.parent / "shared" / "peers"


def log(*a: object) -> None:
    print(*a, file=sys.stderr, flush=True)


def start_txmq(flush: str, root: Path, timeout: float = 30.0, conf: str = "") -> ServerProcess:
    """``txmq server`` in its own session, on free ports, with a temporary store under ``root/<flush>``; ``conf``:
    more broker.conf lines."""
    home = root / flush.lower()
    home.mkdir(parents=True)
    conf_path = home / "broker.conf"
    conf_path.write_text(f"flushDiskType={flush}\nbrokerName=bench-{flush.lower()}\n{conf}")
    args = txmq_command("server", "--store", str(home / "store"), "--port", str(free_port()),
                        "--namesrv-port", str(free_port()), "-c", str(conf_path))
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"), HOME=str(home), PYTHONUNBUFFERED="1")
    prof_dir = os.environ.get("TXMQ_BROKER_PROFILE")
    if prof_dir:
        prof = Path(prof_dir).resolve() / f"broker-{flush.lower()}.prof"
        prof.parent.mkdir(parents=True, exist_ok=True)
        args[1:3] = ["-m", "cProfile", "-o", str(prof), "-m", "txmq.cli"]
    return ServerProcess(args, home / "server.log", env).start(timeout)


def median_row(runs: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key in runs[0]:
        values = [r[key] for r in runs if isinstance(r.get(key), int | float)]
        if key != "run" and values:
            out[key] = statistics.median(values)
    return out


OTHER_CPU_WARN = 0.15  # CPU seconds per wall second used by other processes: the peers kit's threshold


def disturbance(row: dict[str, Any]) -> str:
    """What other processes used during the timed phases of ``row``, when noticeable (else "")."""
    busy = [f"{phase} {row[phase + '_other_cpu_s']:.2f} CPU s in {row[phase + '_s']:.2f} s"
            for phase in ("publish", "consume")
            if (row.get(phase + "_other_cpu_s") or 0) > OTHER_CPU_WARN * row[phase + "_s"]]
    return "; ".join(busy)


def run_txmq(flush: str, a: argparse.Namespace, root: Path) -> dict[str, Any]:
    server = start_txmq(flush, root)
    log(f"\n== txmq {flush}: server pid {server.pid}, namesrv {server.namesrv}")
    runs: list[dict[str, Any]] = []
    tx: dict[str, Any] | None = None
    try:
        for i in range(1, a.runs + 1):
            topic = f"bench_{flush.lower()}_{i}"
            bench.ensure_topic(server.namesrv, topic, a.queues)
            pub = bench.produce(server.namesrv, topic, a.n, size=a.size, window=a.window, broker_pid=server.pid,
                                progress=not a.quiet)
            stored = bench.stored_messages(server.namesrv, topic)
            if stored != a.n:
                raise bench.BenchError(f"broker holds {stored} messages after producing {a.n}")
            con = bench.consume(server.namesrv, topic, a.n, size=a.size, group=f"bench_c_{flush.lower()}_{i}",
                                broker_pid=server.pid, progress=not a.quiet)
            row = {"run": i, "publish_msgs_s": round(pub.rate), "consume_msgs_s": round(con.rate),
                   "publish_s": pub.seconds, "consume_s": con.seconds,
                   "publish_broker_cpu_s": pub.broker_cpu_s, "consume_broker_cpu_s": con.broker_cpu_s,
                   "publish_client_cpu_s": pub.client_cpu_s, "consume_client_cpu_s": con.client_cpu_s,
                   "publish_other_cpu_s": pub.other_cpu_s, "consume_other_cpu_s": con.other_cpu_s}
            runs.append(row)
            log(f"run {i}: publish {row['publish_msgs_s']:,}/s  consume {row['consume_msgs_s']:,}/s  "
                f"(broker CPU {pub.broker_cpu_s}/{con.broker_cpu_s} s, client CPU "
                f"{pub.client_cpu_s}/{con.client_cpu_s} s)")
            note = disturbance(row)
            if note:
                log(f"  note: run {i}: other load on the machine ({note}); figures disturbed")
        if a.tx:
            topic = f"bench_tx_{flush.lower()}"
            bench.ensure_topic(server.namesrv, topic, a.queues)
            r = bench.transactions(server.namesrv, topic, a.tx, size=a.size, threads=a.tx_threads,
                                   broker_pid=server.pid, progress=not a.quiet)
            bench.wait_for(lambda: bench.stored_messages(server.namesrv, topic) >= a.tx, 30,
                           "committed transactions to reach the topic")
            bench.consume(server.namesrv, topic, a.tx, size=a.size, group=f"bench_txc_{flush.lower()}",
                          progress=False)
            tx = {"transactions_s": round(r.rate), "seconds": r.seconds, "threads": a.tx_threads,
                  "broker_cpu_s": r.broker_cpu_s, "client_cpu_s": r.client_cpu_s, "verified": True}
            log(f"tx: {tx['transactions_s']:,} transactions/s ({a.tx_threads} threads; broker CPU "
                f"{r.broker_cpu_s} s, client CPU {r.client_cpu_s} s); every committed message consumed once")
    finally:
        server.stop(30)
    return {"flush": flush, "runs": runs, "median": median_row(runs), "tx": tx}


def run_peers(a: argparse.Namespace) -> dict[str, Any]:
    out = Path(a.peers or tempfile.mkdtemp(prefix="txmq-peers-"))
    python = os.environ.get("PEERS_PYTHON", sys.executable)
    log(f"\n== peers: {PEERS / 'run-all.sh'} {out} (PYTHON={python})")
    for attempt in (1, 2):
        # The kit's start scripts can lose a race with a slow fork on a busy machine: try once more.
        done = subprocess.run([str(PEERS / "run-all.sh"), str(out), "-n", str(a.n), "--size", str(a.size),
                               "--window", str(a.window), "--runs", str(a.runs)],
                              env=dict(os.environ, PYTHON=python), stdout=sys.stderr)
        if done.returncode == 0:
            break
        log(f"peers kit failed (exit {done.returncode}, attempt {attempt})")
    else:
        raise RuntimeError("the peers kit failed twice")
    return {m: json.loads((out / f"{m}.json").read_text()) for m in ("rabbitmq", "rabbitmq-quorum", "nats")}


def fmt_runs(runs: list[dict[str, Any]], key: str) -> str:
    return " ".join(f"{r[key]:,}" for r in runs)


def cpu(m: dict[str, Any], who: str) -> str:
    vals = [m.get(f"publish_{who}_cpu_s"), m.get(f"consume_{who}_cpu_s")]
    return " / ".join("-" if v is None else f"{v:.2f}" for v in vals)


def table(txmq: list[dict[str, Any]], peers: dict[str, Any]) -> str:
    lines = ["| system | fsync before ack | publish msg/s | consume msg/s | broker CPU s pub / con "
             "| client CPU s pub / con |", "|---|---|---|---|---|---|"]
    for r in txmq:
        m = r["median"]
        lines.append(f"| txmq `{r['flush']}` | {'yes' if r['flush'] == 'SYNC_FLUSH' else 'no'} "
                     f"| **{round(m['publish_msgs_s']):,}** ({fmt_runs(r['runs'], 'publish_msgs_s')}) "
                     f"| **{round(m['consume_msgs_s']):,}** ({fmt_runs(r['runs'], 'consume_msgs_s')}) "
                     f"| {cpu(m, 'broker')} | {cpu(m, 'client')} |")
    for name, p in peers.items():
        m = p["median"]
        lines.append(f"| {name} | {'yes' if p['fsync_before_ack'] else 'no'} "
                     f"| **{round(m['publish_msgs_s']):,}** ({fmt_runs(p['runs'], 'publish_msgs_s')}) "
                     f"| **{round(m['consume_msgs_s']):,}** ({fmt_runs(p['runs'], 'consume_msgs_s')}) "
                     f"| {cpu(m, 'broker')} | {cpu(m, 'client')} |")
    return "\n".join(lines)


def ratios(txmq: list[dict[str, Any]], peers: dict[str, Any]) -> dict[str, float]:
    out: dict[str, float] = {}
    by = {r["flush"]: r["median"] for r in txmq}
    for flush, m in by.items():
        for peer in ("rabbitmq", "nats"):
            if peer in peers:
                pm = peers[peer]["median"]
                for phase in ("publish", "consume"):
                    out[f"{flush} {phase} / {peer} {phase}"] = round(
                        m[f"{phase}_msgs_s"] / pm[f"{phase}_msgs_s"], 2)
    return out


AIMS = [("SYNC_FLUSH publish / rabbitmq publish", 2.0), ("ASYNC_FLUSH publish / nats publish", 1.0),
        ("SYNC_FLUSH consume / rabbitmq consume", 1.5), ("ASYNC_FLUSH consume / rabbitmq consume", 1.5)]


def main() -> int:
    p = bench.workload_parser(__doc__, 50_000)
    p.add_argument("--queues", type=int, default=4, help="queues of each bench topic (default 4)")
    p.add_argument("--modes", default="SYNC_FLUSH,ASYNC_FLUSH")
    p.add_argument("--tx", type=int, default=5000, help="transactions for the tx-rate run per mode (0: none)")
    p.add_argument("--tx-threads", type=int, default=8)
    p.add_argument("--peers", metavar="OUTDIR", help="where run-all.sh writes its JSON (default: a temp dir)")
    p.add_argument("--no-peers", action="store_true")
    p.add_argument("--json", action="store_true", help="one JSON object on stdout, the table on stderr")
    p.add_argument("--quiet", action="store_true", help="no progress lines")
    a = p.parse_args()

    root = Path(tempfile.mkdtemp(prefix="txmq-bench-"))
    started = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
    txmq: list[dict[str, Any]] = []
    try:
        for flush in a.modes.split(","):
            txmq.append(run_txmq(flush.strip(), a, root))
    finally:
        with contextlib.suppress(OSError):
            shutil.rmtree(root)
    peers: dict[str, Any] = {}
    if not a.no_peers:
        try:
            peers = run_peers(a)
        except RuntimeError as exc:
            log(f"no peer figures: {exc}")
    result = {"date": started, "params": {"n": a.n, "size": a.size, "window": a.window, "runs": a.runs,
                                          "queues": a.queues},
              "machine": {"cpus": os.cpu_count(), "uname": " ".join(platform.uname()),
                          "python": platform.python_version()},
              "txmq": txmq, "peers": {k: {"median": v["median"], "runs": v["runs"]} for k, v in peers.items()},
              "ratios": ratios(txmq, peers)}
    out = sys.stderr if a.json else sys.stdout
    print("\n" + table(txmq, peers), file=out)
    for r in txmq:
        if r["tx"]:
            print(f"txmq {r['flush']} transactions: {r['tx']['transactions_s']:,}/s "
                  f"({r['tx']['threads']} threads)", file=out)
    if result["ratios"]:
        print("\nratios (medians):", file=out)
        for k, v in result["ratios"].items():
            aim = next((f"  (aim >= {x})" + ("" if v >= x else "  MISSED") for name, x in AIMS if name == k), "")
            print(f"  {k}: {v:.2f}{aim}", file=out)
    disturbed = [f"txmq {r['flush']} run {run['run']}" for r in txmq for run in r["runs"] if disturbance(run)]
    disturbed += [f"{name} run {run['run']}" for name, p in peers.items() for run in p["runs"] if disturbance(run)]
    result["disturbed_runs"] = disturbed
    if disturbed:
        print("\nnote: other load on the machine during " + ", ".join(disturbed)
              + "; those figures are disturbed (*_other_cpu_s in the JSON)", file=out)
    if a.json:
        print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    bench.run(main)
