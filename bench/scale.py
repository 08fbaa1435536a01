"""How the broker's cost grows: topics, consumer groups, connections and the size of the commit log.

    .venv/bin/python bench/scale.py [--curves topics,groups,connections,log] [--short] [--json FILE]
        [--topics 1,100,1000,10000] [--groups 1,10,100,1000] [--connections 10,100,1000,10000]
        [--log-gb 1,5,10,20]

Each curve starts its own ``txmq server`` (name server + broker, ASYNC_FLUSH) on free ports of 127.0.0.1 with a
temporary store, grows one dimension point by point on that server and measures at each point:

* **topics** (8 queues each): topics are created up to the point (seconds per topic created: the registration
  with the name server); one send to every queue (the first send to a queue: its consume-queue file is created;
  broker CPU per such send); the broker's CPU until its next thorough checkpoint (``--thorough-s``, its
  flushConsumeQueueThoroughInterval) has flushed every queue; then, well before the next one, ``--messages``
  sends of 256 B spread round-robin over every queue of every topic through a window of 1,000, and one
  checkpoint interval after (the consume-queue files those sends dirtied are fsynced then): broker CPU per
  message over both, of it the collector's (the broker's runtime info), the thorough checkpoint's CPU shared
  over an interval of sends at the measured rate (a long window holds thorough checkpoints of its own: those are
  counted out and the share its length is due counted in), throughput of the sends, the broker's RSS (of it the
  anonymous part and the index files' pages, which follow the messages, not the queues) and open files.
* **groups** on one topic of 8 queues holding ``--messages`` messages: each group commits an offset on every
  queue; then the topic is pulled once (32 per pull) by requests that rotate over the groups, each followed by
  an offset commit: pull throughput, the broker's RSS, and the time to persist the offset table (the broker's
  ``ConsumerOffsetManager.persist`` on the broker's own file, timed in this process).
* **connections**: N idle TCP connections to the broker (each sends one heartbeat, as a client would) and 10
  busy producers sending synchronously for ``--busy-seconds``: the busy sends' p50/p99 latency and the broker's
  RSS. The open-file limit of this process (inherited by the broker) is raised to its hard limit first, and the
  broker's ``serverMaxConnections`` (4,096 by default) past the last point.
* **log**: the commit log is filled to each size with 64 KiB messages; the broker then takes a tail of
  ``--tail-mb`` after its last checkpoint and is killed with SIGKILL; the time from the restart to the first
  send answered SEND_OK, the tail recovery had to read, and the broker's RSS before the kill and after the
  restart. The sizes are scaled down when the disk holding the temporary directory lacks room (said in the log).

``--short`` (CI): small points of every curve, well under a minute. Every process it starts is stopped on exit.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import platform
import resource
import shutil
import signal
import socket
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from txmq import bench  # noqa: E402
from txmq.launch import ServerProcess, free_port, txmq_command  # noqa: E402

GB = 1 << 30
QUEUES = 8
SETTLE_S = 3.5  # a checkpoint interval (3 s) and a little: --short waits less (its figures include a checkpoint's
# work or tail, or not, by chance)


def log(*a: object) -> None:
    print(*a, file=sys.stderr, flush=True)


def rss_mb(pid: int | None, field: str = "VmRSS") -> float | None:
    """The process's resident memory in MB; ``field``: ``RssAnon`` for its anonymous part alone (its own objects
    and heap, not the pages of files it maps, such as the index files' pages its messages touched)."""
    with contextlib.suppress(OSError, ValueError, StopIteration):
        with open(f"/proc/{pid}/status") as f:
            kb = next(int(line.split()[1]) for line in f if line.startswith(f"{field}:"))
        return round(kb / 1024, 1)
    return None


def index_mb(pid: int | None, store: Path) -> float | None:
    """The resident pages of the store's index files the process maps (``/proc/<pid>/smaps``), MB: they follow the
    messages indexed (each message's keys), not the queues, so a point that sent more messages holds more of them."""
    index_dir = str(store / "index") + os.sep
    kb, mapping = 0, ""
    with contextlib.suppress(OSError):
        with open(f"/proc/{pid}/smaps") as f:
            for line in f:
                field = line.split(None, 1)
                if field and not field[0].endswith(":"):  # a mapping's header: address range ... path
                    parts = line.split(None, 5)
                    mapping = parts[5].strip() if len(parts) > 5 else ""
                elif field and field[0] == "Rss:" and mapping.startswith(index_dir):
                    kb += int(field[1].split()[0])
        return round(kb / 1024, 1)
    return None


def per_queue_kb(rows: list[dict[str, Any]], row: dict[str, Any], key: str) -> float | None:
    """``row[key]`` (MB) grown over the first row's, per queue added since (KB): what a queue costs."""
    first = rows[0] if rows else None
    if first is None or row[key] is None or first[key] is None or row["queues"] <= first["queues"]:
        return None
    return round((row[key] - first[key]) * 1024 / (row["queues"] - first["queues"]), 2)


def open_files(pid: int | None) -> int | None:
    with contextlib.suppress(OSError):
        return len(os.listdir(f"/proc/{pid}/fd"))
    return None


def raise_nofile() -> int:
    """The soft open-file limit up to the hard one (children inherit it); returns the limit now in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            log(f"open-file limit raised from {soft} to {hard} (the hard limit) for this process and the broker")
            return hard
        except (ValueError, OSError) as exc:
            log(f"open-file limit stays {soft}: raising it to {hard} was refused ({exc})")
    return soft


class Server:
    """One ``txmq server`` with its store under ``root``; ``conf``: broker.conf lines."""

    def __init__(self, root: Path, name: str, conf: str = "") -> None:
        self.home = root / name
        self.home.mkdir(parents=True)
        (self.home / "broker.conf").write_text(f"flushDiskType=ASYNC_FLUSH\nbrokerName=scale\ngrpcPort=-1\n{conf}")
        self.proc = ServerProcess(
            txmq_command("server", "--store", str(self.home / "store"), "--port", str(free_port()),
                         "--namesrv-port", str(free_port()), "-c", str(self.home / "broker.conf")),
            self.home / "server.log",
            dict(os.environ, PYTHONPATH=str(ROOT / "src"), HOME=str(self.home), PYTHONUNBUFFERED="1"))

    def __enter__(self) -> Server:
        self.start()
        return self

    def start(self) -> float:
        """Start (or restart after a kill); the seconds until the ready line."""
        t0 = time.monotonic()
        self.proc.start(600)
        return time.monotonic() - t0

    def __exit__(self, *_: object) -> None:
        self.proc.stop(60)

    @property
    def namesrv(self) -> str:
        return self.proc.namesrv

    @property
    def broker(self) -> str:
        return self.proc.addrs["broker"]

    @property
    def pid(self) -> int | None:
        return self.proc.pid

    def cpu(self) -> float:
        return bench.process_cpu_s(self.pid) or 0.0


# --- topics ----------------------------------------------------------------------------------------------


def create_topics(namesrv: str, names: list[str]) -> float:
    """Create ``names`` (8 queues each), wait until the last is routed; seconds per topic."""
    from txmq.client.admin import Admin

    t0 = time.monotonic()
    with Admin(namesrv) as admin:
        for name in names:
            admin.create_topic(name, QUEUES)
    if names:
        bench.ensure_topic(namesrv, names[-1], QUEUES, timeout=60)
    return (time.monotonic() - t0) / max(len(names), 1)


def spread_sends(namesrv: str, queues: list[Any], n: int, size: int, mark: Callable[[], Any],
                 window: int = 1000) -> tuple[float, Any]:
    """``n`` sends round-robin over ``queues`` (each send to its queue), through a window: the wall seconds, and
    ``mark()`` (the broker's CPU, ...) when the sends began (after the producer looked up every topic's route,
    which at 10,000 topics costs the name server sharing the broker's process more than the sends)."""
    from txmq.client.producer import Producer, SendStatus
    from txmq.message import Message

    fill = bench.filler(size)
    producer = Producer("scale_producer", namesrv, max_in_flight=window)
    producer.start()
    done = threading.Event()
    state = {"answered": 0, "bad": 0}
    lock = threading.Lock()

    def answered(fut: Any) -> None:
        exc = fut.exception()
        with lock:
            state["answered"] += 1
            if exc is not None or fut.result().status != SendStatus.SEND_OK:
                state["bad"] += 1
            if state["answered"] == n:
                done.set()

    try:
        topics = sorted({mq.topic for mq in queues})
        for topic in topics:  # routes outside the clock
            assert producer.instance is not None
            producer._call(producer.instance.update_route(topic), 30)
        mark0, t0 = mark(), time.monotonic()
        for i in range(n):
            mq = queues[i % len(queues)]
            producer.send_async(Message(mq.topic, bench.payload(i, fill)), mq).add_done_callback(answered)
        if not done.wait(300):
            raise bench.BenchError(f"sends stalled: {state['answered']}/{n} answered")
        wall = time.monotonic() - t0
    finally:
        producer.shutdown()
    if state["bad"]:
        raise bench.BenchError(f"{state['bad']} of {n} sends failed")
    return wall, mark0


def all_queues(namesrv: str, topics: list[str]) -> list[Any]:
    from txmq.client.instance import MessageQueue

    return [MessageQueue(t, "scale", q) for q in range(QUEUES) for t in topics]


class ThoroughWatch:
    """Tells when the broker's thorough checkpoint (every ``flushConsumeQueueThoroughInterval``: it makes every
    queue's entries durable, however few) has run: each writes a new tails journal (the queues' buffered entries in
    one file, ``store/cqtails/<n>``). Watched on disk, not through the broker's ``thorough_checkpoints`` count: a
    request every poll would add the broker CPU that the wait measures."""

    def __init__(self, srv: Server) -> None:
        self.store = str(srv.home / "store")

    def wait(self, timeout: float) -> None:
        """Wait for a tails journal newer than the newest on disk now: a thorough checkpoint ran meanwhile."""
        from txmq.store import tail_journal

        seen = max(tail_journal.numbers(self.store), default=0)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if max(tail_journal.numbers(self.store), default=0) > seen:
                return
            time.sleep(0.1)
        raise bench.BenchError(f"no thorough checkpoint within {timeout:.0f} s")


def runtime_info(srv: Server) -> tuple[float, int]:
    """The broker's seconds in its cyclic collector since start (GET_BROKER_RUNTIME_INFO's ``gcSeconds``), and the
    checkpoints it took that made every queue durable (``thorough_checkpoints``)."""
    from txmq.admin.client import MQAdminExt

    with MQAdminExt(srv.namesrv) as admin:
        info = admin.runtime_info(srv.broker)
    return sum(float(s) for s in info.get("gcSeconds", "").split()), int(info["thorough_checkpoints"])


def marks(srv: Server) -> tuple[float, tuple[float, int]]:
    """The broker's CPU seconds, then its collector's and its thorough checkpoints (that request not timed)."""
    info = runtime_info(srv)
    return srv.cpu(), info


def curve_topics(root: Path, points: list[int], n: int, size: int, thorough_s: float) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    conf = f"flushConsumeQueueThoroughInterval={int(thorough_s * 1000)}\n"
    with Server(root, "topics", conf) as srv:
        watch = ThoroughWatch(srv)
        topics: list[str] = []
        for point in points:
            new = [f"scale_t{i}" for i in range(len(topics), point)]
            create_s = create_topics(srv.namesrv, new)
            topics += new
            queues = all_queues(srv.namesrv, topics)
            first = [mq for mq in queues if mq.topic in set(new)]
            first_cpu_us: float | None = None  # too few first sends for /proc's 10 ms ticks: not shown
            if first:
                _, c0 = spread_sends(srv.namesrv, first, len(first), size, srv.cpu)
                if len(first) >= 100:
                    first_cpu_us = round((srv.cpu() - c0) / len(first) * 1e6, 1)
            # every queue holds an entry put since its last flush (the first sends to the new queues, the previous
            # point's sends to the others), as every queue does after a thorough interval of spread sends: the
            # next thorough checkpoint makes them all durable (their tails in one journal, the files written since
            # their last fsync fsynced). Its CPU is measured apart from the sends', whose window follows it, well
            # inside the next interval
            c0 = srv.cpu()
            watch.wait(thorough_s + 30)
            time.sleep(SETTLE_S)  # its last batches and fsyncs, and a periodic checkpoint
            thorough_cpu_s = srv.cpu() - c0
            log(f"  topics {point}: {n} sends spread over {len(queues)} queues")
            wall, (c0, (gc0, thorough0)) = spread_sends(srv.namesrv, queues, n, size, lambda: marks(srv))
            time.sleep(SETTLE_S)  # one checkpoint interval: it fsyncs what the sends dirtied
            cpu_us = (srv.cpu() - c0) / n * 1e6
            gc_s, thorough1 = runtime_info(srv)
            gc_us = (gc_s - gc0) / n * 1e6
            # The thorough checkpoints at their steady rate, one per interval of sends: those the window held (a
            # sustained window holds some; their CPU is in cpu_us already) replaced by the share its length is due
            held = thorough1 - thorough0
            thorough_due = wall / thorough_s - held
            row = {"topics": point, "queues": point * QUEUES, "create_ms_per_topic": round(create_s * 1e3, 2),
                   "first_send_cpu_us": first_cpu_us, "cpu_us_per_msg": round(cpu_us, 1),
                   "gc_us_per_msg": round(gc_us, 1), "thorough_cpu_s": round(thorough_cpu_s, 2),
                   "thorough_in_window": held,
                   "cpu_us_with_thorough": round(cpu_us + thorough_due * thorough_cpu_s / n * 1e6, 1),
                   "msgs_s": round(n / wall), "rss_mb": rss_mb(srv.pid), "anon_mb": rss_mb(srv.pid, "RssAnon"),
                   "index_mb": index_mb(srv.pid, srv.home / "store"), "open_files": open_files(srv.pid)}
            row["rss_kb_per_queue"] = per_queue_kb(rows, row, "rss_mb")
            row["anon_kb_per_queue"] = per_queue_kb(rows, row, "anon_mb")
            row["queues_mb"] = (None if row["rss_mb"] is None or row["index_mb"] is None
                                else round(row["rss_mb"] - row["index_mb"], 1))
            row["queues_kb_per_queue"] = per_queue_kb(rows, row, "queues_mb")
            rows.append(row)
            log(f"  topics {row}")
    return rows


# --- groups ----------------------------------------------------------------------------------------------


def curve_groups(root: Path, points: list[int], n: int, size: int) -> list[dict[str, Any]]:
    from txmq.broker.consumer_offset_manager import ConsumerOffsetManager
    from txmq.client.pull_consumer import PullConsumer, PullStatus

    rows: list[dict[str, Any]] = []
    with Server(root, "groups", "flushConsumerOffsetInterval=1000\n") as srv:
        bench.ensure_topic(srv.namesrv, "scale_g", QUEUES)
        bench.produce(srv.namesrv, "scale_g", n, size=size, progress=False)
        with PullConsumer("scale_g0", srv.namesrv) as pc:
            mqs = pc.fetch_subscribe_message_queues("scale_g")
            have = 0
            for point in points:
                for g in range(have, point):  # each new group commits an offset on every queue
                    pc.group = f"scale_g{g}"  # one client, its group set per request
                    for mq in mqs:
                        pc.update_consume_offset(mq, 0)
                have = max(have, point)
                pulled, k = 0, 0
                t0 = time.monotonic()
                for mq in mqs:
                    offset = 0
                    while True:
                        pc.group = f"scale_g{k % point}"
                        k += 1
                        r = pc.pull(mq, offset=offset, max_nums=32)
                        if r.status != PullStatus.FOUND:
                            break
                        pulled += len(r.msgs)
                        offset = r.next_begin_offset
                        pc.update_consume_offset(mq, offset)
                wall = time.monotonic() - t0
                if pulled != n:
                    raise bench.BenchError(f"pulled {pulled} of {n} messages")
                time.sleep(1.2)  # the broker persists the offsets (flushConsumerOffsetInterval 1 s here)
                manager = ConsumerOffsetManager(srv.home / "store", max_entries=10**9)
                t1 = time.perf_counter()
                manager.persist(force=True)
                persist_ms = (time.perf_counter() - t1) * 1e3
                row = {"groups": point, "offsets": manager.entries, "pull_msgs_s": round(pulled / wall),
                       "rss_mb": rss_mb(srv.pid), "persist_ms": round(persist_ms, 2),
                       "offset_file_kb": round((srv.home / "store" / "config" / "consumerOffset.json")
                                               .stat().st_size / 1024, 1)}
                rows.append(row)
                log(f"  groups {row}")
    return rows


# --- connections -----------------------------------------------------------------------------------------


def heartbeat_frame(i: int) -> bytes:
    from txmq.remoting.codec import encode_command
    from txmq.remoting.codes import RequestCode
    from txmq.remoting.command import RemotingCommand

    body = json.dumps({"clientID": f"127.0.0.1@idle{i}", "producerDataSet": [{"groupName": "scale_idle"}],
                       "consumerDataSet": []}).encode()
    return encode_command(RemotingCommand.request(RequestCode.HEART_BEAT, {}, body=body))


def busy_latencies(namesrv: str, topic: str, seconds: float, clients: int = 10) -> list[float]:
    from txmq.client.producer import Producer
    from txmq.message import Message

    out: list[float] = []
    lock = threading.Lock()
    producers = [Producer(f"scale_busy{i}", namesrv, instance_name=f"busy{i}").start() for i in range(clients)]

    def work(p: Any) -> None:
        mine: list[float] = []
        msg_body = bytes(256)
        p.send(Message(topic, msg_body))  # route and connection outside the clock
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            t0 = time.perf_counter()
            p.send(Message(topic, msg_body))
            mine.append(time.perf_counter() - t0)
        with lock:
            out.extend(mine)

    try:
        threads = [threading.Thread(target=work, args=(p,)) for p in producers]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        for p in producers:
            p.shutdown()
    return sorted(out)


def curve_connections(root: Path, points: list[int], seconds: float) -> list[dict[str, Any]]:
    limit = raise_nofile()
    rows: list[dict[str, Any]] = []
    # The broker serves at most serverMaxConnections (4,096 by default): raised here past the curve's last point.
    with Server(root, "connections", f"serverMaxConnections={max(points) + 1000}\n") as srv:
        bench.ensure_topic(srv.namesrv, "scale_c", QUEUES)
        host, port = srv.broker.rsplit(":", 1)
        idle: list[socket.socket] = []
        base_rss: float | None = None
        try:
            for point in points:
                if point + 100 > limit:
                    log(f"  connections {point}: over the open-file limit {limit}, skipped")
                    continue
                while len(idle) < point:
                    s = socket.create_connection((host, int(port)), timeout=10)
                    s.sendall(heartbeat_frame(len(idle)))
                    idle.append(s)
                time.sleep(1.0)
                for s in idle:  # drain the heartbeat answers so no buffer holds them
                    s.setblocking(False)
                    with contextlib.suppress(BlockingIOError):
                        if not s.recv(65536):
                            raise bench.BenchError("the broker closed an idle connection")
                lat = busy_latencies(srv.namesrv, "scale_c", seconds)
                rss = rss_mb(srv.pid)
                base_rss = rss if base_rss is None else base_rss
                row = {"idle": point, "busy_sends": len(lat),
                       "busy_p50_ms": round(lat[len(lat) // 2] * 1e3, 3) if lat else None,
                       "busy_p99_ms": round(lat[int(len(lat) * 0.99)] * 1e3, 3) if lat else None,
                       "rss_mb": rss, "open_files": open_files(srv.pid)}
                if rss is not None and base_rss is not None and point > points[0]:
                    row["rss_kb_per_conn"] = round((rss - base_rss) * 1024 / (point - points[0]), 1)
                rows.append(row)
                log(f"  connections {row}")
        finally:
            for s in idle:
                s.close()
    return rows


# --- commit-log size -------------------------------------------------------------------------------------


def checkpoint_offset(store: Path) -> int:
    from txmq.store.checkpoint import StoreCheckpoint

    cp, _ = StoreCheckpoint(str(store)).load()
    return cp.recovery_offset if cp else 0


def log_end(namesrv: str) -> int:
    """The broker's commit-log max offset (its HA status)."""
    from txmq.client.admin import Admin

    with Admin(namesrv) as admin:
        return int(admin.ha_status()["scale"]["0"]["maxOffset"])


def fill_log(namesrv: str, topic: str, nbytes: int, body_size: int = 64 * 1024) -> None:
    n = max(1, nbytes // (body_size + 200))
    bench.produce(namesrv, topic, n, size=body_size, window=64, progress=False)


def first_send_ok(namesrv: str, topic: str, timeout: float = 120) -> None:
    from txmq.client.producer import Producer, SendStatus
    from txmq.message import Message

    deadline = time.monotonic() + timeout
    p = Producer("scale_probe", namesrv, send_timeout_s=1.0).start()
    try:
        while True:
            try:
                if p.send(Message(topic, b"probe")).status == SendStatus.SEND_OK:
                    return
            except Exception:
                if time.monotonic() > deadline:
                    raise
            time.sleep(0.01)
    finally:
        p.shutdown()


def curve_log(root: Path, points_gb: list[float], tail_mb: int) -> list[dict[str, Any]]:
    free_gb = shutil.disk_usage(root).free / GB
    room = free_gb - 10  # leave 10 GB to everything else on the disk
    if max(points_gb) > room:
        scaled = [round(p * room / max(points_gb), 1) for p in points_gb]
        log(f"  log: {free_gb:.0f} GB free on the disk of {root}: sizes scaled from {points_gb} to {scaled} GB")
        points_gb = scaled
    rows: list[dict[str, Any]] = []
    srv = Server(root, "log", "mappedFileSizeCommitLog=1073741824\n")
    srv.start()
    try:
        bench.ensure_topic(srv.namesrv, "scale_l", QUEUES)
        store = srv.home / "store"
        for point in points_gb:
            fill_log(srv.namesrv, "scale_l", max(0, int(point * GB) - log_end(srv.namesrv)))
            time.sleep(SETTLE_S)  # a checkpoint passes: recovery reads only the tail written after it
            fill_log(srv.namesrv, "scale_l", tail_mb << 20)
            rss_before = rss_mb(srv.pid)
            end = log_end(srv.namesrv)
            srv.proc.kill(signal.SIGKILL)
            tail = max(0, end - checkpoint_offset(store))
            t0 = time.monotonic()
            ready_s = srv.start()
            first_send_ok(srv.namesrv, "scale_l")
            serving_s = time.monotonic() - t0
            row = {"log_gb": round(end / GB, 2), "tail_mb": round(tail / 2**20, 1),
                   "ready_s": round(ready_s, 2), "serving_s": round(serving_s, 2),
                   "rss_before_mb": rss_before, "rss_after_mb": rss_mb(srv.pid)}
            rows.append(row)
            log(f"  log {row}")
    finally:
        srv.proc.stop(60)
    return rows


# --- output ----------------------------------------------------------------------------------------------


def md_table(rows: list[dict[str, Any]], columns: list[tuple[str, str]]) -> str:
    head = "| " + " | ".join(title for _, title in columns) + " |"
    lines = [head, "|" + "---|" * len(columns)]
    for r in rows:
        lines.append("| " + " | ".join("-" if r.get(k) is None else f"{r[k]:,}" if isinstance(r[k], int)
                                       else f"{r[k]}" for k, _ in columns) + " |")
    return "\n".join(lines)


TABLES: dict[str, list[tuple[str, str]]] = {
    "topics": [("topics", "topics"), ("queues", "queues"), ("create_ms_per_topic", "create ms/topic"),
               ("first_send_cpu_us", "first send µs CPU"), ("cpu_us_per_msg", "broker CPU µs/msg"),
               ("gc_us_per_msg", "of it collector µs/msg"), ("thorough_cpu_s", "thorough checkpoint CPU s"),
               ("thorough_in_window", "thorough in window"), ("cpu_us_with_thorough", "µs/msg with thorough"),
               ("msgs_s", "sends/s"), ("rss_mb", "RSS MB"), ("anon_mb", "of it anonymous MB"),
               ("index_mb", "of it index pages MB"), ("rss_kb_per_queue", "RSS KB/queue added"),
               ("anon_kb_per_queue", "anonymous KB/queue added"),
               ("queues_kb_per_queue", "RSS KB/queue added, index pages out"), ("open_files", "open files")],
    "groups": [("groups", "groups"), ("offsets", "offsets"), ("pull_msgs_s", "pull msg/s"), ("rss_mb", "RSS MB"),
               ("persist_ms", "offset persist ms"), ("offset_file_kb", "offset file KB")],
    "connections": [("idle", "idle connections"), ("busy_sends", "busy sends"), ("busy_p50_ms", "busy p50 ms"),
                    ("busy_p99_ms", "busy p99 ms"), ("rss_mb", "RSS MB"), ("rss_kb_per_conn", "RSS KB/conn"),
                    ("open_files", "open files")],
    "log": [("log_gb", "log GB"), ("tail_mb", "tail after checkpoint MB"), ("ready_s", "restart to ready s"),
            ("serving_s", "restart to first send s"), ("rss_before_mb", "RSS before kill MB"),
            ("rss_after_mb", "RSS after restart MB")],
}


def ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",")]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--curves", default="topics,groups,connections,log")
    p.add_argument("--topics", type=ints, default=[1, 100, 1000, 10_000])
    p.add_argument("--groups", type=ints, default=[1, 10, 100, 1000])
    p.add_argument("--connections", type=ints, default=[10, 100, 1000, 10_000])
    p.add_argument("--log-gb", type=lambda s: [float(x) for x in s.split(",")], default=[1.0, 5.0, 10.0, 20.0])
    p.add_argument("--messages", type=int, default=30_000, help="sends per topics point; messages of the groups topic")
    p.add_argument("--size", type=int, default=256)
    p.add_argument("--thorough-s", type=float, default=60.0,
                   help="the topics broker's flushConsumeQueueThoroughInterval, seconds (RocketMQ's default 60)")
    p.add_argument("--busy-seconds", type=float, default=5.0)
    p.add_argument("--tail-mb", type=int, default=64)
    p.add_argument("--json", type=Path)
    p.add_argument("--short", action="store_true", help="CI: small points of every curve")
    a = p.parse_args()
    if a.short:
        a.topics, a.groups, a.connections = [1, 5, 20, 50], [1, 5, 20, 50], [10, 50, 100, 200]
        a.log_gb, a.messages, a.busy_seconds, a.tail_mb = [0.02, 0.04, 0.06, 0.08], 2000, 1.0, 4
        a.thorough_s = 1.0  # every checkpoint (3 s) is thorough: a short wait for one
        global SETTLE_S
        SETTLE_S = 0.5

    root = Path(tempfile.mkdtemp(prefix="txmq-scale-"))
    started = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
    load0 = os.getloadavg()
    curves: dict[str, Callable[[], list[dict[str, Any]]]] = {
        "topics": lambda: curve_topics(root, a.topics, a.messages, a.size, a.thorough_s),
        "groups": lambda: curve_groups(root, a.groups, a.messages, a.size),
        "connections": lambda: curve_connections(root, a.connections, a.busy_seconds),
        "log": lambda: curve_log(root, a.log_gb, a.tail_mb),
    }
    results: dict[str, list[dict[str, Any]]] = {}
    try:
        for name in a.curves.split(","):
            log(f"\n== {name}")
            results[name] = curves[name]()
    finally:
        with contextlib.suppress(OSError):
            shutil.rmtree(root)
    load1 = os.getloadavg()
    print(f"\nscale curves; {started}, {os.cpu_count()} CPUs, load average {load0[0]:.2f} → {load1[0]:.2f}")
    for name, rows in results.items():
        print(f"\n{name}:\n" + md_table(rows, TABLES[name]))
    if a.json:
        a.json.write_text(json.dumps({"date": started, "machine": {"cpus": os.cpu_count(),
                                      "uname": " ".join(platform.uname()), "load": [load0, load1]},
                                      "curves": results}, indent=1))
    return 0


if __name__ == "__main__":
    bench.run(main)
