"""Client workloads for benchmarks, shared by ``txmq bench produce|consume|tx`` and ``bench/produce_consume.py``.

The workload is the one ``../shared/peers/`` runs on RabbitMQ and NATS JetStream, so figures can be set side
by side:

* **produce**: N messages of ``size`` bytes (an 8-byte big-endian index, then filler bytes), sent with
  ``Producer.send_async`` and at most ``window`` unconfirmed (``max_in_flight``). The clock runs from the
  first send to the last broker answer; every answer must be ``SEND_OK``.
* **consume**: a clustering ``PushConsumer`` reads the topic from its first offset; the listener is called
  per message (RocketMQ's default ``consumeMessageBatchMaxSize`` of 1) and returns SUCCESS. The "ack" of
  RocketMQ's model is the consumer offset committed to the broker: the consumer commits every
  ``commit_interval_s`` and the clock stops once the broker holds, for every queue, a committed offset equal
  to its max offset. Checked (untimed): every index arrived exactly once and intact, nothing more arrives.
* **tx**: ``TransactionProducer.send_message_in_transaction`` whose local transaction answers COMMIT, from
  ``threads`` threads; transactions/s is committed transactions over the wall time.

Connection set-up (route lookup, first connect) is outside the produce clock; the consume clock includes
the consumer's start (rebalance), like the peers' subscribe. CPU: this process (``time.process_time``, all
threads) and, given its pid, the broker's (``/proc/PID/stat``).
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

STALL_S = 30.0  # a phase without progress for this long fails

_CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def run(main: Callable[[], int | None]) -> None:
    """Run a bench's ``main`` and exit with its code. SIGTERM (a timeout's kill, ``kill PID``) becomes SystemExit,
    so the bench's ``finally`` blocks stop the servers it started in their own sessions instead of leaving them."""
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    sys.exit(main())


def workload_parser(doc: str | None, n: int) -> argparse.ArgumentParser:
    """The options every produce benchmark takes: how many messages, their size, the window of unanswered sends
    and the runs whose median is reported (the peers' kit takes the same)."""
    p = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("-n", type=int, default=n, help="messages per run")
    p.add_argument("--size", type=int, default=256, help="body bytes")
    p.add_argument("--window", type=int, default=1000, help="unanswered sends at most")
    p.add_argument("--runs", type=int, default=3, help="runs per case (medians are reported)")
    return p


class BenchError(Exception):
    """A check failed or a phase stalled."""


# --- CPU accounting -------------------------------------------------------------------------------------


def process_cpu_s(pid: int | None) -> float | None:
    """User + system CPU seconds of ``pid`` (all threads), from /proc; None when unreadable."""
    if not pid:
        return None
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / _CLK_TCK


def machine_busy_s() -> float | None:
    """CPU seconds spent by all processes on the machine (user, nice, system, steal), from /proc/stat."""
    try:
        with open("/proc/stat") as f:
            fields = f.readline().split()
    except OSError:
        return None
    user, nice, system, _idle, _iowait, _irq, _softirq, steal = (int(x) for x in fields[1:9])
    return (user + nice + system + steal) / _CLK_TCK


class Meter:
    """Wall time and CPU seconds between ``start`` and ``stop``: this process, the broker, everything else."""

    def __init__(self, broker_pid: int | None = None) -> None:
        self.broker_pid = broker_pid
        self.elapsed = 0.0
        self.client_cpu: float | None = None
        self.broker_cpu: float | None = None
        self.other_cpu: float | None = None

    def start(self) -> None:
        self._b0 = process_cpu_s(self.broker_pid)
        self._m0 = machine_busy_s()
        self._c0 = time.process_time()
        self._t0 = time.perf_counter()

    def stop(self) -> None:
        self.elapsed = time.perf_counter() - self._t0
        self.client_cpu = time.process_time() - self._c0
        b1, m1 = process_cpu_s(self.broker_pid), machine_busy_s()
        if b1 is not None and self._b0 is not None:
            self.broker_cpu = b1 - self._b0
        if m1 is not None and self._m0 is not None:
            self.other_cpu = max(0.0, (m1 - self._m0) - (self.broker_cpu or 0.0) - self.client_cpu)


@dataclass
class PhaseResult:
    phase: str
    n: int
    seconds: float
    client_cpu_s: float | None
    broker_cpu_s: float | None
    other_cpu_s: float | None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def rate(self) -> float:
        return self.n / self.seconds if self.seconds > 0 else 0.0

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["per_s"] = round(self.rate)
        return d


def _result(phase: str, n: int, meter: Meter, **extra: Any) -> PhaseResult:
    def r(x: float | None) -> float | None:
        return None if x is None else round(x, 3)
    return PhaseResult(phase, n, round(meter.elapsed, 4), r(meter.client_cpu), r(meter.broker_cpu),
                       r(meter.other_cpu), extra)


# --- progress and payloads ------------------------------------------------------------------------------


class Progress:
    """One status line on stderr, rewritten at most every 0.5 s, only when stderr is a terminal and ``enabled``:
    output sent to a file or a pipe gets no carriage returns."""

    def __init__(self, what: str, total: int | None, enabled: bool = True) -> None:
        self.what, self.total = what, total
        self.enabled = enabled and sys.stderr.isatty()
        self.done = 0
        self._start = time.monotonic()
        self._next = self._start + 0.5

    def add(self, n: int = 1) -> None:
        self.done += n
        if not self.enabled:
            return
        now = time.monotonic()
        if now >= self._next or self.done == self.total:
            self._next = now + 0.5
            rate = self.done / max(now - self._start, 1e-6)
            of = f"/{self.total}" if self.total else ""
            print(f"\r{self.what}: {self.done}{of} ({rate:,.0f}/s)   ", end="", file=sys.stderr, flush=True)

    def close(self) -> float:
        """End the line; the seconds since the start."""
        if self.enabled:
            print(file=sys.stderr, flush=True)
        return time.monotonic() - self._start


def filler(size: int, seed: int = 0) -> bytes:
    """The bytes after each body's 8-byte index: random, but the same for one (size, seed)."""
    if size < 8:
        raise ValueError("message size must be at least 8 bytes (the index)")
    return random.Random(seed).randbytes(size - 8)


def payload(index: int, fill: bytes) -> bytes:
    return index.to_bytes(8, "big") + fill


# --- topic set-up and offsets ---------------------------------------------------------------------------


def ensure_topic(namesrv: str | None, topic: str, queues: int, timeout: float = 10.0) -> None:
    """Create ``topic`` with ``queues`` queues on every broker and wait until the name server routes it."""
    from txmq.client.admin import Admin

    with Admin(namesrv) as admin:
        admin.create_topic(topic, queues)
        deadline = time.monotonic() + timeout
        while topic not in admin.list_topics():
            if time.monotonic() > deadline:
                raise BenchError(f"the name server does not route {topic} after {timeout}s")
            time.sleep(0.05)


def queue_offsets(namesrv: str | None, topic: str, group: str | None = None) -> dict[Any, tuple[int, int, int]]:
    """Per queue of ``topic``: (min offset, max offset, committed offset of ``group`` or -1)."""
    from txmq.client.pull_consumer import PullConsumer

    out: dict[Any, tuple[int, int, int]] = {}
    with PullConsumer(group or "txmq_bench_probe", namesrv) as pc:
        for mq in pc.fetch_subscribe_message_queues(topic):
            out[mq] = (pc.min_offset(mq), pc.max_offset(mq), pc.fetch_consume_offset(mq) if group else -1)
    return out


def stored_messages(namesrv: str | None, topic: str) -> int:
    return sum(mx - mn for mn, mx, _ in queue_offsets(namesrv, topic).values())


# --- produce --------------------------------------------------------------------------------------------


def produce(namesrv: str | None, topic: str, n: int, *, size: int = 256, window: int = 1000, seed: int = 0,
            group: str = "txmq_bench_producer", broker_pid: int | None = None, progress: bool = True,
            batch_max_messages: int = 128) -> PhaseResult:
    """Send ``n`` messages with at most ``window`` unanswered (the producer's batching: ``batch_max_messages``,
    1 for one request per message); raises ``BenchError`` if any send fails."""
    from txmq.client.producer import Producer, SendStatus
    from txmq.message import Message

    fill = filler(size, seed)
    bodies = [payload(i, fill) for i in range(n)]
    done = threading.Event()
    lock = threading.Lock()
    state = {"ok": 0, "answered": 0, "last": time.monotonic()}
    errors: list[str] = []
    prog = Progress("produce", n, progress)

    def answered(fut: Any) -> None:
        exc = fut.exception()
        with lock:
            state["answered"] += 1
            state["last"] = time.monotonic()
            if exc is None and fut.result().status == SendStatus.SEND_OK:
                state["ok"] += 1
            elif len(errors) < 10:
                errors.append(repr(exc) if exc is not None else fut.result().status.value)
            prog.add()
            if state["answered"] == n:
                done.set()

    meter = Meter(broker_pid)
    producer = Producer(group, namesrv, max_in_flight=window, batch_max_messages=batch_max_messages)
    producer.start()
    try:
        assert producer.instance is not None
        # Set-up outside the clock: the route, and a connection to every broker (heartbeats).
        producer._call(producer.instance.update_route(topic), 10)
        producer._call(producer.instance.send_heartbeat_to_all(), 10)
        meter.start()
        for body in bodies:
            producer.send_async(Message(topic, body)).add_done_callback(answered)
        while not done.wait(1.0):
            if time.monotonic() - state["last"] > STALL_S:
                raise BenchError(f"produce stalled: {state['answered']}/{n} answered")
        meter.stop()
    finally:
        prog.close()
        producer.shutdown()
    if state["ok"] != n:
        raise BenchError(f"{n - state['ok']} of {n} sends failed, e.g. {errors[:3]}")
    return _result("produce", n, meter, size=size, window=window)


# --- consume --------------------------------------------------------------------------------------------


def consume(namesrv: str | None, topic: str, n: int, *, size: int = 256, seed: int = 0,
            group: str = "txmq_bench_consumer", broker_pid: int | None = None, progress: bool = True,
            commit_interval_s: float = 0.05, pull_batch_size: int = 32, consume_threads: int = 4,
            settle_s: float = 0.3) -> PhaseResult:
    """Consume the ``n`` messages of ``topic`` (as ``produce`` sent them) and check each arrived once, intact."""
    from txmq.client.consumer import ConsumeFromWhere, ConsumeStatus, PushConsumer
    from txmq.client.pull_consumer import PullConsumer

    fill = filler(size, seed)
    seen = bytearray(n)
    lock = threading.Lock()
    state = {"count": 0, "dupes": 0, "bad": 0, "last": time.monotonic()}
    bad_examples: list[str] = []
    all_seen = threading.Event()
    prog = Progress("consume", n, progress)

    def listener(msgs: list[Any]) -> ConsumeStatus:
        with lock:
            for m in msgs:
                body = m.body
                idx = int.from_bytes(body[:8], "big") if len(body) >= 8 else -1
                if not 0 <= idx < n or body[8:] != fill:
                    state["bad"] += 1
                    if len(bad_examples) < 3:
                        bad_examples.append(f"{m.msg_id} ({len(body)} bytes)")
                elif seen[idx]:
                    state["dupes"] += 1
                else:
                    seen[idx] = 1
                    state["count"] += 1
                prog.add()
            state["last"] = time.monotonic()
            if state["count"] == n:
                all_seen.set()
        return ConsumeStatus.SUCCESS

    with PullConsumer(group, namesrv) as probe:
        mqs = probe.fetch_subscribe_message_queues(topic)
        max_offsets = {mq: probe.max_offset(mq) for mq in mqs}
        stored = sum(max_offsets[mq] - probe.min_offset(mq) for mq in mqs)
        if stored != n:
            raise BenchError(f"the broker holds {stored} messages of {topic}, expected {n}")

        def committed_all() -> bool:
            return all(probe.fetch_consume_offset(mq) >= max_offsets[mq] for mq in mqs)

        consumer = PushConsumer(group, namesrv, consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
                                persist_interval_s=commit_interval_s, pull_batch_size=pull_batch_size,
                                consume_thread_nums=consume_threads)
        consumer.subscribe(topic)
        consumer.register_listener(listener)
        meter = Meter(broker_pid)
        meter.start()
        consumer.start()
        try:
            while not all_seen.wait(1.0):
                if time.monotonic() - state["last"] > STALL_S:
                    raise BenchError(f"consume stalled: {state['count']}/{n} received")
            # The acks: wait until the broker holds every queue's offset committed up to its max offset.
            while not committed_all():
                if time.monotonic() - state["last"] > STALL_S:
                    raise BenchError("committed offsets do not reach the max offsets")
                time.sleep(0.002)
            meter.stop()
            time.sleep(settle_s)  # untimed: anything delivered late is a duplicate
        finally:
            prog.close()
            consumer.shutdown()
    if state["bad"]:
        raise BenchError(f"{state['bad']} messages were not ones we sent or arrived damaged, e.g. {bad_examples}")
    if state["dupes"]:
        raise BenchError(f"{state['dupes']} messages arrived more than once")
    if state["count"] != n:
        raise BenchError(f"{n - state['count']} messages never arrived")
    return _result("consume", n, meter, pull_batch_size=pull_batch_size, consume_threads=consume_threads,
                   commit_interval_s=commit_interval_s)


# --- transactions ---------------------------------------------------------------------------------------


def transactions(namesrv: str | None, topic: str, n: int, *, size: int = 256, threads: int = 8, seed: int = 0,
                 group: str = "txmq_bench_tx", broker_pid: int | None = None, progress: bool = True) -> PhaseResult:
    """``n`` transactional sends (half message, local transaction COMMIT, end transaction) from ``threads``
    threads; raises ``BenchError`` if any does not end SEND_OK + COMMIT."""
    from txmq.client.producer import SendStatus
    from txmq.client.transaction import LocalTransactionState, TransactionProducer
    from txmq.message import Message, MessageExt

    class Commit:
        def execute_local_transaction(self, msg: Message, arg: Any) -> LocalTransactionState:
            return LocalTransactionState.COMMIT

        def check_local_transaction(self, msg: MessageExt) -> LocalTransactionState:
            return LocalTransactionState.COMMIT

    fill = filler(size, seed)
    next_index = iter(range(n))
    lock = threading.Lock()
    failures: list[str] = []
    prog = Progress("tx", n, progress)
    producer = TransactionProducer(group, Commit(), namesrv, max_in_flight=max(threads, 1))

    def worker() -> None:
        while True:
            with lock:
                i = next(next_index, None)
            if i is None:
                return
            try:
                r = producer.send_message_in_transaction(Message(topic, payload(i, fill)))
                ok = r.status == SendStatus.SEND_OK and r.local_transaction_state == LocalTransactionState.COMMIT
                err = None if ok else f"{r.status.value}/{r.local_transaction_state.name}"
            except Exception as exc:
                err = repr(exc)
            with lock:
                if err is not None:
                    failures.append(err)
                prog.add()

    meter = Meter(broker_pid)
    producer.start()
    try:
        assert producer.instance is not None
        producer._call(producer.instance.update_route(topic), 10)
        producer._call(producer.instance.send_heartbeat_to_all(), 10)
        pool = [threading.Thread(target=worker, name=f"bench-tx-{k}", daemon=True) for k in range(threads)]
        meter.start()
        for t in pool:
            t.start()
        for t in pool:
            t.join()
        meter.stop()
    finally:
        prog.close()
        producer.shutdown()
    if failures:
        raise BenchError(f"{len(failures)} of {n} transactions failed, e.g. {failures[:3]}")
    return _result("tx", n, meter, size=size, threads=threads)


def wait_for(cond: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise BenchError(f"timed out waiting for {what}")
        time.sleep(0.05)
