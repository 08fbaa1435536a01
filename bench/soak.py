"""Soak: mixed load against a real broker for an hour (``--duration``), one broker restart in the middle, and a line
of figures every minute (``--interval``), to show leaks and slow failures that short tests cannot.

    nice .venv/bin/python bench/soak.py [--duration 3600] [--interval 60] [--restart term|kill|none] [--json FILE]

A name server and a broker, each its own process on free ports of 127.0.0.1 with the store in a temporary directory
(``--workdir`` keeps it), stopped by pid at the end. Load, paced at fixed rates from one thread each:

* plain sends (``Producer.send``, timed for the interval's p99);
* transactions (``TransactionProducer``): by sequence number COMMIT, ROLLBACK, or UNKNOWN that the check-back later
  answers with COMMIT or ROLLBACK (half of those answer UNKNOWN to their first check);
* delayed messages at the delay levels ``--delay-levels``;
* a ``PushConsumer`` of the plain and transaction topics and ``PullConsumer`` threads (one per queue, long polls)
  of the delayed topic, consuming everything.

At half time the broker is stopped (SIGTERM, or SIGKILL with ``--restart kill``) and started again on the same ports
and store. Each line: elapsed time, load average, the broker's RSS, open files and threads (from /proc), this
process's RSS, queue lag (messages acknowledged and visible minus messages consumed), the interval's send p99,
transactions pending on the broker, checks answered, errors (client calls that failed), sends and distinct consumed.
After the load, a drain (until everything is consumed and no transaction is pending), then a summary: each figure's
least-squares slope per hour over the whole run and before and after the restart (a leak shows as a positive slope
on both sides), and the checks: every acknowledged plain or delayed message and every committed transaction
consumed (at least once; duplicates are counted), no rolled-back transaction consumed, no delayed message consumed
before its due time, nothing consumed that was not sent, no transaction pending or discarded. Exit status 1 when a
check fails.

Durations and due times are ``time.monotonic()`` of this one process (sender and consumers are threads of it); no
message carries a timestamp. Messages are identified by their body (kind, sequence number, filler).
"""

from __future__ import annotations

import argparse
import contextlib
import heapq
import itertools
import json
import logging
import math
import os
import signal
import statistics
import sys
import tempfile
import threading
import time
from array import array
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from txmq import (
    Admin,
    ConsumeFromWhere,
    ConsumeStatus,
    LocalTransactionState,
    Message,
    MessageExt,
    MessageQueue,
    Producer,
    PullConsumer,
    PullStatus,
    PushConsumer,
    SendStatus,
    TransactionProducer,
    TxmqError,
    bench,
)
from txmq.launch import ServerProcess, free_port, txmq_command

COMMIT, ROLLBACK, UNKNOWN = LocalTransactionState.COMMIT, LocalTransactionState.ROLLBACK, LocalTransactionState.UNKNOWN
PLAIN, TX, DELAY = "p", "t", "d"
TOPICS = {PLAIN: "soak_plain", TX: "soak_tx", DELAY: "soak_delay"}
DEFAULT_DELAY_LEVELS = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"  # RocketMQ's messageDelayLevel
CALL_ERRORS = (TxmqError, TimeoutError, OSError)  # what a client call raises while the broker is away
EARLY_SLACK_S = 0.010  # the broker's due time is its store time in whole milliseconds
COLUMNS = ("elapsed", "load1", "rss_MiB", "anon_MiB", "fds", "threads", "client_MiB", "lag", "p99_ms", "pending",
           "checks", "errors", "sent", "consumed")
TRENDS = ("rss_MiB", "anon_MiB", "fds", "threads", "client_MiB", "lag", "p99_ms", "pending", "checks", "errors")


# --- what each transaction does ----------------------------------------------------------------------------


def executed(seq: int) -> LocalTransactionState:
    """The local transaction's answer: COMMIT, ROLLBACK, UNKNOWN in turn."""
    return (COMMIT, ROLLBACK, UNKNOWN)[seq % 3]


def final(seq: int) -> LocalTransactionState:
    """The transaction's outcome: its local answer, or for an UNKNOWN one what its check-back answers."""
    state = executed(seq)
    if state is UNKNOWN:
        return COMMIT if (seq // 3) % 2 == 0 else ROLLBACK
    return state


def undecided_at_first_check(seq: int) -> bool:
    """Half of the UNKNOWN transactions answer their first check UNKNOWN too, so the broker checks them again."""
    return executed(seq) is UNKNOWN and (seq // 6) % 2 == 0


def body(kind: str, seq: int, filler: bytes) -> bytes:
    return f"{kind}{seq:010d}".encode() + filler


def parse(data: bytes) -> tuple[str, int] | None:
    kind = data[:1].decode(errors="replace")
    try:
        return (kind, int(data[1:11])) if kind in TOPICS else None
    except ValueError:
        return None


# --- the record of what was sent and consumed --------------------------------------------------------------


class Track:
    """One kind of message by sequence number (dense from 0), in bytearrays: a few bytes a message, so the
    ledger's own memory stays small beside the client's, whose RSS is a figure of the run."""

    def __init__(self) -> None:
        self.attempted = 0
        self.acked = bytearray()  # the send (or half send) was answered SEND_OK
        self.visible = bytearray()  # acknowledged and due, or committed: a consumer must get it
        self.consumed = bytearray()  # deliveries, up to 255
        self.n_visible = 0
        self.n_visible_consumed = 0

    def attempt(self, seq: int) -> None:
        if seq >= self.attempted:
            grow = seq + 1 - self.attempted
            for flags in (self.acked, self.visible, self.consumed):
                flags.extend(bytes(grow))
            self.attempted = seq + 1

    def make_visible(self, seq: int) -> None:
        if not self.visible[seq]:
            self.visible[seq] = 1
            self.n_visible += 1
            self.n_visible_consumed += self.consumed[seq] > 0

    def consume(self, seq: int) -> int:
        """Count a delivery; the deliveries before it."""
        before = self.consumed[seq]
        self.consumed[seq] = min(before + 1, 255)
        if before == 0 and self.visible[seq]:
            self.n_visible_consumed += 1
        return before

    def missing(self, must: Callable[[int], bool]) -> list[int]:
        return [seq for seq in range(self.attempted) if must(seq) and not self.consumed[seq]]

    def duplicates(self) -> int:
        return sum(n - 1 for n in self.consumed if n > 1)

    def distinct(self) -> int:
        return self.attempted - self.consumed.count(0)


@dataclass
class Ledger:
    """Everything the load threads and consumers saw, under one lock."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    tracks: dict[str, Track] = field(default_factory=lambda: {k: Track() for k in TOPICS})
    delay_due: array[float] = field(default_factory=lambda: array("d"))  # delayed seq -> monotonic due time
    due_heap: list[tuple[float, int]] = field(default_factory=list)  # acknowledged delayed messages not yet due
    strangers: int = 0  # consumed bodies that no sender made
    rollback_consumed: list[int] = field(default_factory=list)
    early: list[tuple[int, float]] = field(default_factory=list)  # delayed seq, seconds before its due time
    lateness: array[float] = field(default_factory=lambda: array("d"))  # first delivery - due time
    checks: Counter[str] = field(default_factory=Counter)  # check answers by outcome name
    checks_of: bytearray = field(default_factory=bytearray)  # checks answered per transaction, up to 255
    errors: Counter[str] = field(default_factory=Counter)
    error_examples: list[str] = field(default_factory=list)
    latencies: list[float] = field(default_factory=list)  # plain sends of the current interval, seconds
    all_latencies: array[float] = field(default_factory=lambda: array("d"))

    def error(self, what: str, exc: BaseException | str) -> None:
        with self.lock:
            self.errors[what] += 1
            if len(self.error_examples) < 20:
                self.error_examples.append(f"{what}: {exc!r}"[:300])

    def attempt(self, kind: str, seq: int, due: float | None = None) -> None:
        """Before a send: a consumer may get the message before its answer comes."""
        with self.lock:
            self.tracks[kind].attempt(seq)
            if due is not None:
                if seq >= len(self.delay_due):
                    self.delay_due.extend([math.nan] * (seq + 1 - len(self.delay_due)))
                self.delay_due[seq] = due

    def acked(self, kind: str, seq: int, visible: bool, latency: float | None = None) -> None:
        with self.lock:
            track = self.tracks[kind]
            track.acked[seq] = 1
            if visible:
                track.make_visible(seq)
            if kind == DELAY:
                heapq.heappush(self.due_heap, (self.delay_due[seq], seq))
            if latency is not None:
                self.latencies.append(latency)

    def check_answer(self, seq: int) -> LocalTransactionState:
        """What the producer answers the broker's check of transaction ``seq`` (recorded)."""
        with self.lock:
            if seq >= len(self.checks_of):
                self.checks_of.extend(bytes(seq + 1 - len(self.checks_of)))
            first = self.checks_of[seq] == 0
            self.checks_of[seq] = min(self.checks_of[seq] + 1, 255)
            answer = UNKNOWN if first and undecided_at_first_check(seq) else final(seq)
            self.checks[answer.name] += 1
            if answer is COMMIT:  # also a half whose send raised: it was stored after all
                self.tracks[TX].make_visible(seq)
            return answer

    def consume(self, data: bytes, now: float) -> None:
        parsed = parse(data)
        with self.lock:
            if parsed is None or parsed[1] >= self.tracks[parsed[0]].attempted:
                self.strangers += 1
                return
            kind, seq = parsed
            before = self.tracks[kind].consume(seq)
            if kind == TX and final(seq) is ROLLBACK:
                self.rollback_consumed.append(seq)
            elif kind == DELAY:
                due = self.delay_due[seq]
                if now < due - EARLY_SLACK_S:
                    self.early.append((seq, due - now))
                elif before == 0:
                    self.lateness.append(now - due)

    def lag(self, now: float) -> int:
        """Messages a consumer must get (acknowledged and due, or committed) that none got yet."""
        with self.lock:
            while self.due_heap and self.due_heap[0][0] <= now:
                self.tracks[DELAY].make_visible(heapq.heappop(self.due_heap)[1])
            return sum(t.n_visible - t.n_visible_consumed for t in self.tracks.values())

    def nbytes(self) -> int:
        """Roughly what the record itself holds (a part of this process's RSS that grows with the run)."""
        with self.lock:
            flags = sum(len(t.acked) + len(t.visible) + len(t.consumed) for t in self.tracks.values())
            floats = (len(self.delay_due) + len(self.lateness) + len(self.all_latencies)) * 8
            return flags + floats + len(self.checks_of) + 16 * len(self.due_heap)

    def take_latencies(self) -> list[float]:
        with self.lock:
            out, self.latencies = self.latencies, []
            self.all_latencies.extend(out)
            return out


# --- the broker and its figures ----------------------------------------------------------------------------


class Servers:
    """A name server and one broker, separate processes, so the broker can restart under the same name server."""

    def __init__(self, root: Path, conf: dict[str, object]) -> None:
        self.root = root
        env = dict(os.environ, HOME=str(root / "home"), PYTHONUNBUFFERED="1")
        (root / "home").mkdir(parents=True, exist_ok=True)
        self.namesrv = ServerProcess(txmq_command("namesrv", "--port", str(free_port())), root / "namesrv.log", env)
        self.namesrv.start()
        settings = {"brokerName": "broker-soak", "namesrvAddr": self.namesrv.namesrv, "brokerIP1": "127.0.0.1",
                    "listenPort": free_port(), "haListenPort": free_port(), "grpcPort": free_port(),
                    "storePathRootDir": str(root / "store"), **conf}
        conf_path = root / "broker.conf"
        conf_path.write_text("".join(f"{k}={v}\n" for k, v in settings.items()))
        self.broker = ServerProcess(txmq_command("broker", "-c", str(conf_path)), root / "broker.log", env)
        try:
            self.broker.start()
        except BaseException:
            self.namesrv.stop()
            raise

    @property
    def addr(self) -> str:
        return self.namesrv.namesrv

    def restart(self, how: str) -> float:
        """Stop the broker (SIGTERM and wait, or SIGKILL) and start it again; the seconds it was away."""
        t0 = time.monotonic()
        if how == "kill":
            self.broker.kill(signal.SIGKILL)
        else:
            self.broker.stop()
        self.broker.start()
        return time.monotonic() - t0

    def close(self) -> None:
        self.broker.stop()
        self.namesrv.stop()

    def log_errors(self) -> list[str]:
        lines = []
        for log in (self.root / "broker.log", self.root / "namesrv.log"):
            with contextlib.suppress(OSError), open(log, errors="replace") as f:
                lines += [line.rstrip() for line in f if " ERROR " in line or "Traceback" in line]
        return lines


def proc_figures(pid: int | None) -> dict[str, float | None]:
    """RSS and its anonymous part (MiB: the heap; the rest is mapped files, such as the index files, and shared
    libraries), open files and threads of ``pid`` from /proc; None for each when it is not running."""
    out: dict[str, float | None] = {"rss_MiB": None, "anon_MiB": None, "fds": None, "threads": None}
    if pid is None:
        return out
    try:
        with open(f"/proc/{pid}/status") as f:
            status = dict(line.split(":", 1) for line in f if ":" in line)
        out["rss_MiB"] = round(int(status["VmRSS"].split()[0]) / 1024, 1)
        out["anon_MiB"] = round(int(status["RssAnon"].split()[0]) / 1024, 1)
        out["threads"] = int(status["Threads"])
        out["fds"] = len(os.listdir(f"/proc/{pid}/fd"))
    except (OSError, KeyError, ValueError):
        return {k: None for k in out}
    return out


def p99(xs: list[float]) -> float | None:
    if not xs:
        return None
    if len(xs) < 2:
        return xs[0]
    return statistics.quantiles(xs, n=100, method="inclusive")[98]


def slope_per_hour(points: list[tuple[float, float | None]]) -> float | None:
    """Least-squares slope of (elapsed seconds, value) in units per hour; None with fewer than 3 values."""
    pts = [(t / 3600, v) for t, v in points if v is not None]
    if len(pts) < 3 or len({t for t, _ in pts}) < 2:
        return None
    return statistics.linear_regression([t for t, _ in pts], [v for _, v in pts]).slope


# --- load -------------------------------------------------------------------------------------------------


def paced(rate: float, stop: threading.Event) -> Iterator[int]:
    """Sequence numbers at ``rate`` per second until ``stop``; a sender that falls behind does not burst."""
    period = 1.0 / rate
    next_t = time.monotonic()
    for seq in itertools.count():
        now = time.monotonic()
        if next_t > now and stop.wait(next_t - now):
            return
        if stop.is_set():
            return
        yield seq
        next_t = max(next_t + period, time.monotonic() - 1.0)


class Load:
    """The senders and consumers, each on its own thread, all recording into one ``Ledger``."""

    def __init__(self, namesrv: str, args: argparse.Namespace, ledger: Ledger) -> None:
        self.namesrv, self.args, self.ledger = namesrv, args, ledger
        self.stop = threading.Event()
        self.stop_consumers = threading.Event()
        self.filler = bench.filler(max(args.size, 11) - 3)  # after the 11 bytes of kind and sequence number
        self.delays = [_parse_delay(d) for d in args.delay_level_table.split()]
        self.levels = [int(x) for x in args.delay_levels.split(",")]
        self.producer = Producer("soak_producer", namesrv)
        self.tx_producer = TransactionProducer("soak_tx_producer", _Listener(ledger), namesrv)
        self.push = PushConsumer("soak_push", namesrv, consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET)
        self.pull = PullConsumer("soak_pull", namesrv)
        self.threads: list[threading.Thread] = []
        self.consumer_threads: list[threading.Thread] = []

    def start(self) -> None:
        self.producer.start()
        self.tx_producer.start()
        self.push.subscribe(TOPICS[PLAIN])
        self.push.subscribe(TOPICS[TX])
        self.push.register_listener(self._on_push)
        self.push.start()
        self.pull.start()
        for mq in self.pull.fetch_subscribe_message_queues(TOPICS[DELAY]):
            self.consumer_threads.append(_thread(f"soak-pull-{mq.queue_id}", self._pull_loop, mq))
        for name, fn, rate in (("plain", self._send_plain, self.args.rate),
                               ("tx", self._send_tx, self.args.tx_rate),
                               ("delay", self._send_delayed, self.args.delay_rate)):
            if rate > 0:
                self.threads.append(_thread(f"soak-{name}", fn, rate))

    def stop_load(self) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(30)

    def close(self) -> None:
        """Stop everything (again is harmless): the senders, the pull threads, then the clients."""
        self.stop_load()
        self.stop_consumers.set()
        for t in self.consumer_threads:
            t.join(30)
        for client in (self.push, self.pull, self.tx_producer, self.producer):
            try:
                client.shutdown()
            except CALL_ERRORS as exc:
                self.ledger.error("shutdown", exc)

    # senders

    def _send_plain(self, rate: float) -> None:
        led = self.ledger
        for seq in paced(rate, self.stop):
            led.attempt(PLAIN, seq)
            t0 = time.monotonic()
            try:
                r = self.producer.send(Message(TOPICS[PLAIN], body(PLAIN, seq, self.filler)))
            except CALL_ERRORS as exc:
                led.error("send", exc)
                continue
            took = time.monotonic() - t0
            if r.status != SendStatus.SEND_OK:
                led.error("send", r.status.value)
                continue
            led.acked(PLAIN, seq, visible=True, latency=took)

    def _send_tx(self, rate: float) -> None:
        led = self.ledger
        for seq in paced(rate, self.stop):
            led.attempt(TX, seq)
            try:
                r = self.tx_producer.send_message_in_transaction(Message(TOPICS[TX], body(TX, seq, self.filler)))
            except CALL_ERRORS as exc:
                led.error("transaction", exc)
                continue
            if r.status != SendStatus.SEND_OK:
                led.error("transaction", r.status.value)
                continue
            led.acked(TX, seq, visible=r.local_transaction_state is COMMIT)

    def _send_delayed(self, rate: float) -> None:
        led = self.ledger
        for seq in paced(rate, self.stop):
            level = self.levels[seq % len(self.levels)]
            msg = Message(TOPICS[DELAY], body(DELAY, seq, self.filler))
            msg.delay_time_level = level
            led.attempt(DELAY, seq, due=time.monotonic() + self.delays[level - 1])
            try:
                r = self.producer.send(msg)
            except CALL_ERRORS as exc:
                led.error("delayed send", exc)
                continue
            if r.status != SendStatus.SEND_OK:
                led.error("delayed send", r.status.value)
                continue
            led.acked(DELAY, seq, visible=False)  # visible once due

    # consumers

    def _on_push(self, msgs: list[MessageExt]) -> ConsumeStatus:
        now = time.monotonic()
        for m in msgs:
            self.ledger.consume(m.body, now)
        return ConsumeStatus.SUCCESS

    def _pull_loop(self, mq: MessageQueue) -> None:
        """Pull one queue of the delayed topic from the group's committed offset (or 0), committing every 5 s."""
        offset = -1
        committed_at = time.monotonic()
        while not self.stop_consumers.is_set():
            try:
                if offset < 0:
                    offset = max(self.pull.fetch_consume_offset(mq), 0)
                r = self.pull.pull(mq, offset=offset, max_nums=32, block_s=2.0)
                now = time.monotonic()
                for m in r.msgs:
                    self.ledger.consume(m.body, now)
                if r.status == PullStatus.OFFSET_ILLEGAL:
                    self.ledger.error("pull", f"offset {offset} of {mq} moved to {r.next_begin_offset}")
                offset = r.next_begin_offset
                if now - committed_at > 5.0:
                    self.pull.update_consume_offset(mq, offset)
                    committed_at = now
            except CALL_ERRORS as exc:
                self.ledger.error("pull", exc)
                self.stop_consumers.wait(1.0)
        with contextlib.suppress(*CALL_ERRORS):
            self.pull.update_consume_offset(mq, offset)


class _Listener:
    """The local transactions and their check-back answers, by the sequence number in the body."""

    def __init__(self, ledger: Ledger) -> None:
        self.ledger = ledger

    def execute_local_transaction(self, msg: Message, arg: Any) -> LocalTransactionState:
        parsed = parse(msg.body)
        return executed(parsed[1]) if parsed else ROLLBACK

    def check_local_transaction(self, msg: MessageExt) -> LocalTransactionState:
        parsed = parse(msg.body)
        if parsed is None:
            return ROLLBACK
        return self.ledger.check_answer(parsed[1])


def _thread(name: str, fn: Callable[..., None], *args: Any) -> threading.Thread:
    t = threading.Thread(target=fn, args=args, name=name, daemon=True)
    t.start()
    return t


def _parse_delay(text: str) -> float:
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400}
    return float(text[:-1]) * units[text[-1]]


# --- the run -------------------------------------------------------------------------------------------------


class Soak:
    def __init__(self, args: argparse.Namespace, root: Path) -> None:
        self.args = args
        self.root = root
        self.ledger = Ledger()
        self.samples: list[dict[str, Any]] = []
        self.restart_at: float | None = None
        self.restart: dict[str, Any] = {}
        self.final: dict[str, Any] = {}
        self.tty = sys.stderr.isatty()

    def conf(self) -> dict[str, object]:
        conf: dict[str, object] = {"transactionTimeOut": self.args.tx_timeout_ms,
                                   "transactionCheckInterval": self.args.tx_check_interval_ms,
                                   "messageDelayLevel": self.args.delay_level_table}
        for kv in self.args.conf:
            key, _, value = kv.partition("=")
            conf[key] = value
        return conf

    def run(self) -> int:
        a = self.args
        # The clients' own log lines (a pull that failed while the broker was away, ...) go to a file, not the table.
        logging.basicConfig(filename=self.root / "client.log", level=logging.INFO,
                            format="%(asctime)s %(levelname)s %(name)s %(threadName)s %(message)s")
        print(f"soak: {a.duration:.0f} s, a line every {a.interval:.0f} s; plain {a.rate}/s, transactions "
              f"{a.tx_rate}/s, delayed {a.delay_rate}/s (levels {a.delay_levels}), {a.size}-byte bodies; restart "
              f"({a.restart}) at {a.duration * a.restart_at:.0f} s; store and logs in {self.root}", flush=True)
        servers = Servers(self.root, self.conf())
        load: Load | None = None
        admin = Admin(servers.addr)
        try:
            admin.start()
            for topic in TOPICS.values():
                bench.ensure_topic(servers.addr, topic, a.queues)
            load = Load(servers.addr, a, self.ledger)
            load.start()
            self.t0 = time.monotonic()
            self._loop(servers, admin)
            load.stop_load()
            drained = self._drain(admin)
            print("# after the drain:", flush=True)
            self.final = self.sample(servers, admin, time.monotonic(), record=False)
            tx_final = self._tx_stats(admin)
            load.close()
            return self._summary(servers, drained, tx_final)
        finally:
            if load is not None:
                load.close()
            admin.shutdown()
            servers.close()

    def _loop(self, servers: Servers, admin: Admin) -> None:
        a = self.args
        print("  ".join(f"{c:>{_width(c)}}" for c in COLUMNS), flush=True)
        next_sample = self.t0 + a.interval
        end = self.t0 + a.duration
        restart_due = self.t0 + a.duration * a.restart_at if a.restart != "none" else None
        while (now := time.monotonic()) < end:
            if restart_due is not None and now >= restart_due:
                restart_due = None
                self._restart(servers)
                continue
            if now >= next_sample:
                self.sample(servers, admin, now)
                next_sample += a.interval
                continue
            self._status(now)
            time.sleep(min(1.0, max(0.0, min(next_sample, end) - now)))

    def _restart(self, servers: Servers) -> None:
        self._clear_status()
        led = self.ledger
        with led.lock:
            errors_before = sum(led.errors.values())
        old_pid = servers.broker.pid
        self.restart_at = time.monotonic() - self.t0
        away = servers.restart(self.args.restart)
        self.restart = {"how": "SIGKILL" if self.args.restart == "kill" else "SIGTERM", "at_s": round(self.restart_at),
                        "broker_away_s": round(away, 2), "old_pid": old_pid, "new_pid": servers.broker.pid,
                        "errors_before": errors_before}
        print(f"# broker restarted ({self.restart['how']}) at {_clock(self.restart_at)}: away {away:.1f} s, "
              f"pid {old_pid} -> {servers.broker.pid}", flush=True)

    def _tx_stats(self, admin: Admin) -> dict[str, Any] | None:
        try:
            return dict(next(iter(admin.stats().values()))["transactions"])
        except (*CALL_ERRORS, StopIteration, KeyError, TypeError):
            return None

    def sample(self, servers: Servers, admin: Admin, now: float, record: bool = True) -> dict[str, Any]:
        """Print one line of figures; ``record`` keeps it for the slopes (the line after the drain is not: the
        load has stopped)."""
        led = self.ledger
        tx = self._tx_stats(admin)
        with led.lock:
            checks = sum(led.checks.values())
            errors = sum(led.errors.values())
            sent = sum(t.acked.count(1) for t in led.tracks.values())
            consumed = sum(t.distinct() for t in led.tracks.values())
        lat = led.take_latencies()
        row: dict[str, Any] = {"elapsed": round(now - self.t0, 1), "load1": round(os.getloadavg()[0], 2),
                               **proc_figures(servers.broker.pid if servers.broker.alive else None),
                               "client_MiB": proc_figures(os.getpid())["rss_MiB"], "lag": led.lag(now),
                               "p99_ms": _round_ms(p99(lat)),
                               "pending": tx["pending"] if tx else None, "checks": checks, "errors": errors,
                               "sent": sent, "consumed": consumed}
        if record:
            self.samples.append(row)
        self._clear_status()
        print("  ".join(_cell(c, row[c]) for c in COLUMNS), flush=True)
        return row

    def _status(self, now: float) -> None:
        if not self.tty:
            return
        led = self.ledger
        with led.lock:
            sent = sum(t.attempted for t in led.tracks.values())
            consumed = sum(t.distinct() for t in led.tracks.values())
            errors = sum(led.errors.values())
        print(f"\r\033[K  {_clock(now - self.t0)} / {_clock(self.args.duration)}: sent {sent:,}, consumed "
              f"{consumed:,}, errors {errors}", end="", file=sys.stderr, flush=True)

    def _clear_status(self) -> None:
        if self.tty:
            print("\r\033[K", end="", file=sys.stderr, flush=True)

    def _drain(self, admin: Admin) -> bool:
        """Wait until everything visible is consumed, every delayed message is due and no transaction pends."""
        led = self.ledger
        deadline = time.monotonic() + self.args.drain_timeout
        while time.monotonic() < deadline:
            now = time.monotonic()
            tx = self._tx_stats(admin)
            with led.lock:
                not_due = len(led.due_heap)
            if led.lag(now) == 0 and tx is not None and tx["pending"] == 0 and not_due == 0:
                time.sleep(self.args.settle)  # anything arriving now is a duplicate, counted as such
                return True
            if self.tty:
                print(f"\r\033[K  draining: lag {led.lag(now)}, pending {tx['pending'] if tx else '?'}, not yet due "
                      f"{not_due}", end="", file=sys.stderr, flush=True)
            time.sleep(1.0)
        self._clear_status()
        return False

    def _summary(self, servers: Servers, drained: bool, tx: dict[str, Any] | None) -> int:
        led = self.ledger
        a = self.args
        with led.lock:
            tracks = led.tracks
            tx_track = tracks[TX]
            # Every acknowledged plain and delayed message, every transaction acknowledged and committed in the
            # end, and every one a check committed (its half's answer may have been lost).
            missing = [(kind, seq) for kind in (PLAIN, DELAY) for seq in tracks[kind].missing(
                lambda s, t=tracks[kind]: bool(t.acked[s]))]
            missing += [(TX, seq) for seq in tx_track.missing(
                lambda s: bool(tx_track.visible[s] or (tx_track.acked[s] and final(s) is COMMIT)))]
            dupes_by_kind = {TOPICS[k]: t.duplicates() for k, t in tracks.items()}
            dupes = sum(dupes_by_kind.values())
            distinct = sum(t.distinct() for t in tracks.values())
            unacked_consumed = sum(1 for t in tracks.values() for a, c in zip(t.acked, t.consumed, strict=True)
                                   if c and not a)
            tx_final_commit = sum(1 for seq in range(tx_track.attempted)
                                  if tx_track.acked[seq] and final(seq) is COMMIT)
            lateness = sorted(led.lateness)
            all_lat = [*led.all_latencies, *led.latencies]
            checks, errors = dict(led.checks), dict(led.errors)
            attempted = {k: t.attempted for k, t in tracks.items()}
            acked = {k: t.acked.count(1) for k, t in tracks.items()}
            early, rollback_consumed, strangers = list(led.early), list(led.rollback_consumed), led.strangers
            examples = list(led.error_examples)
        log_errors = servers.log_errors()
        print()
        # Each segment without its first --warmup seconds (the broker's caches, allocator arenas, first index
        # pages): a slope over the warm-up says nothing of a leak.
        w = a.warmup
        print(f"slopes per hour (least squares, each segment from {w:.0f} s after its start):")
        print(f"  {'':<31}" + "  ".join(f"{c:>{_width(c)}}" for c in TRENDS))
        segments = [("whole run", lambda t: t >= w)]
        if self.restart_at is not None:
            r = self.restart_at
            segments += [("before restart", lambda t: w <= t < r), ("after restart", lambda t: t >= r + w)]
        for label, keep in segments:
            cells = []
            for c in TRENDS:
                s = slope_per_hour([(row["elapsed"], row[c]) for row in self.samples if keep(row["elapsed"])])
                cells.append(f"{'-' if s is None else f'{s:+.2f}':>{_width(c)}}")
            print(f"  {label:<31}" + "  ".join(cells))
        first, last = self.samples[0] if self.samples else {}, self.samples[-1] if self.samples else {}
        print(f"broker RSS {first.get('rss_MiB')} -> {last.get('rss_MiB')} MiB (anonymous {first.get('anon_MiB')} -> "
              f"{last.get('anon_MiB')}), open files {first.get('fds')} -> "
              f"{last.get('fds')}, threads {first.get('threads')} -> {last.get('threads')}; load average "
              f"{min(r['load1'] for r in self.samples) if self.samples else '-'}-"
              f"{max(r['load1'] for r in self.samples) if self.samples else '-'}")
        print(f"sent: plain {acked[PLAIN]:,}/{attempted.get(PLAIN, 0):,} acknowledged, transactions "
              f"{acked[TX]:,}/{attempted.get(TX, 0):,} halves acknowledged (final COMMIT "
              f"{tx_final_commit:,}), delayed {acked[DELAY]:,}/"
              f"{attempted.get(DELAY, 0):,}")
        print(f"send latency over the run: p50 {_ms(statistics.median(all_lat) if all_lat else None)}, "
              f"p99 {_ms(p99(all_lat))}, max {_ms(max(all_lat) if all_lat else None)}")
        print(f"checks answered: {checks}; broker: {tx if tx is None else {k: tx[k] for k in _TX_KEYS}}")
        median_late = statistics.median(lateness) if lateness else None
        print(f"delayed messages, first delivery after due: p50 {_ms(median_late)}, p99 {_ms(p99(lateness))}, "
              f"max {_ms(lateness[-1] if lateness else None)}")
        print(f"this process's record of sends and deliveries: {led.nbytes() / 2**20:.1f} MiB (in client_MiB)")
        print(f"consumed: {distinct:,} distinct, {dupes} duplicate deliveries {dupes_by_kind}, {unacked_consumed} "
              f"of sends whose answer was lost")
        print(f"errors (client calls that failed): {errors or 0}" + (f", e.g. {examples[:3]}" if examples else ""))
        if self.restart:
            print(f"restart: {self.restart}")
        print(f"store on disk: {_disk_mib(self.root / 'store'):.1f} MiB")
        print(f"server log ERROR lines: {len(log_errors)}" + (f", e.g. {log_errors[:3]}" if log_errors else ""))
        checks_failed = [
            ("drained (everything consumed, nothing pending, within --drain-timeout)", drained),
            (f"every acknowledged or committed message consumed ({len(missing)} missing: {missing[:5]})",
             not missing),
            (f"no rolled-back transaction consumed ({len(rollback_consumed)}: {rollback_consumed[:5]})",
             not rollback_consumed),
            (f"no delayed message before its due time ({len(early)}: {early[:5]})", not early),
            (f"nothing consumed that was not sent ({strangers})", strangers == 0),
            ("no transaction pending or discarded on the broker",
             tx is not None and tx["pending"] == 0 and tx["discarded"] == 0),
        ]
        ok = all(passed for _, passed in checks_failed)
        for what, passed in checks_failed:
            print(f"  {'ok  ' if passed else 'FAIL'} {what}")
        print(f"correctness: {'passed' if ok else 'FAILED'}")
        if a.json:
            Path(a.json).write_text(json.dumps({
                "args": vars(a), "samples": self.samples, "restart": self.restart, "acked": acked,
                "attempted": attempted, "checks": checks, "errors": errors, "broker_transactions": tx,
                "duplicates": dupes, "duplicates_by_topic": dupes_by_kind, "missing": len(missing),
                "early": len(early), "passed": ok,
                "slopes_per_hour": {label: {c: slope_per_hour([(r["elapsed"], r[c]) for r in self.samples
                                                                if keep(r["elapsed"])]) for c in TRENDS}
                                    for label, keep in segments}}, indent=2))
        return 0 if ok else 1


_TX_KEYS = ("pending", "discarded", "commits", "rollbacks", "checks", "discards", "duplicates", "conflicts", "orphans")


def _disk_mib(path: Path) -> float:
    """Space the files under ``path`` take on disk (segments are sparse: their length says little)."""
    return sum(f.stat().st_blocks * 512 for f in path.rglob("*") if f.is_file()) / 2**20


def _width(column: str) -> int:
    return max(len(column), 8)


def _cell(column: str, value: Any) -> str:
    if value is None:
        text = "-"
    elif column == "elapsed":
        text = _clock(value)
    else:
        text = f"{value:,}" if isinstance(value, int) else f"{value}"
    return f"{text:>{_width(column)}}"


def _clock(seconds: float) -> str:
    s = int(seconds)
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}"


def _round_ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1000, 2)


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1000:.1f} ms"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--duration", type=float, default=3600.0, help="seconds of load (default 3600)")
    ap.add_argument("--interval", type=float, default=60.0, help="seconds between lines (default 60)")
    ap.add_argument("--rate", type=float, default=100.0, help="plain sends per second (default 100)")
    ap.add_argument("--tx-rate", type=float, default=20.0, help="transactions per second (default 20)")
    ap.add_argument("--delay-rate", type=float, default=10.0, help="delayed sends per second (default 10)")
    ap.add_argument("--delay-levels", default="1,2,3,4,5", help="delay levels used in turn (default 1-5: 1s to 1m)")
    ap.add_argument("--delay-level-table", default=DEFAULT_DELAY_LEVELS, help="the broker's messageDelayLevel")
    ap.add_argument("--size", type=int, default=256, help="body bytes (default 256)")
    ap.add_argument("--queues", type=int, default=4, help="queues per topic (default 4)")
    ap.add_argument("--tx-timeout-ms", type=int, default=6000, help="transactionTimeOut (default 6000)")
    ap.add_argument("--tx-check-interval-ms", type=int, default=10_000, help="transactionCheckInterval (10000)")
    ap.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE", help="more broker.conf settings")
    ap.add_argument("--restart", choices=["term", "kill", "none"], default="term",
                    help="the broker restart: SIGTERM (default), SIGKILL, or none")
    ap.add_argument("--restart-at", type=float, default=0.5, help="when, as a fraction of --duration (0.5)")
    ap.add_argument("--drain-timeout", type=float, default=None,
                    help="seconds to wait after the load for everything to be consumed (default: the longest delay "
                         "used + 3 check intervals + 60 s)")
    ap.add_argument("--warmup", type=float, default=None,
                    help="seconds after the start and after the restart left out of the slopes (default: 300, "
                         "or a tenth of --duration if less)")
    ap.add_argument("--settle", type=float, default=2.0, help="seconds to wait for late duplicates after the drain")
    ap.add_argument("--workdir", help="store and logs here, kept (default: a temporary directory, removed)")
    ap.add_argument("--json", help="write the samples, slopes and checks to this file")
    a = ap.parse_args()
    delays = [_parse_delay(d) for d in a.delay_level_table.split()]
    levels = [int(x) for x in a.delay_levels.split(",")]
    if not all(1 <= lv <= len(delays) for lv in levels):
        ap.error(f"--delay-levels: each from 1 to {len(delays)}")
    if a.drain_timeout is None:
        a.drain_timeout = max(delays[lv - 1] for lv in levels) + 3 * a.tx_check_interval_ms / 1000 + 60
    if a.warmup is None:
        a.warmup = min(300.0, a.duration / 10)
    if a.workdir:
        root = Path(a.workdir)
        root.mkdir(parents=True, exist_ok=True)
        return Soak(a, root).run()
    with tempfile.TemporaryDirectory(prefix="txmq-soak-") as tmp:
        return Soak(a, Path(tmp)).run()


if __name__ == "__main__":
    bench.run(main)
