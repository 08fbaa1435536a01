"""Latency at fixed offered rates: txmq beside RabbitMQ and NATS JetStream, open loop, one run.

    .venv/bin/python bench/latency.py [--rates 1000,5000,20000] [--seconds 10] [--size 256] [--no-max]
        [--systems txmq-sync,txmq-async,txmq-sync-master,rabbitmq,rabbitmq-quorum,nats] [--tx-rate 1000]
        [--plot docs/latency.png] [--json FILE] [--short]

A producer process sends 256-byte messages on a schedule fixed in advance (message i is due at t0 + i / rate)
and never waits for an answer before the next is due (open loop). Each body carries its index and its *intended*
send time (CLOCK_MONOTONIC, shared by the processes of one machine), and every latency is measured from that
time, not from when the send left: a producer or broker that falls behind shows as latency, not as a lower
rate (no coordinated omission). A consumer process, subscribed before the producer starts, records
end-to-end latency (intended send to delivery to the listener); the producer records publish-ack latency
(intended send to the broker's confirmation). Both go into HDR histograms (``hdrhistogram``, microseconds,
3 significant digits), and each run prints the CPU per message of the broker, the producer's process and
the consumer's process (over the run; the producer's includes the bench's own bookkeeping, alike for every
system). A rate counts as *sustained* when the producer sent every message within 100 ms of its
due time on average, every message arrived, and end-to-end p99 stayed under 1 s; ``max`` is the highest
sustained rate of the ladder 1k, 2k, 5k, 10k, 20k, 40k, 80k msg/s.

Systems, each on 127.0.0.1 with its own temporary state, one after the other:

* ``txmq-sync``: ``txmq server`` with ``flushDiskType=SYNC_FLUSH`` (a send is answered after fsync);
* ``txmq-async``: ``ASYNC_FLUSH`` (answered at once; fsync every 500 ms);
* ``txmq-sync-master``: a name server, a ``SYNC_MASTER`` broker and its ``SLAVE`` (ASYNC_FLUSH each: a send is
  answered once the slave holds it);
* ``rabbitmq``: RabbitMQ classic durable queue, persistent messages, publisher confirms (after fsync);
* ``rabbitmq-quorum``: a quorum queue (one node; confirm after the Raft log's fsync);
* ``nats``: NATS JetStream, file storage, one replica (ack after write, before fsync).

txmq: one topic of 8 queues, the client's ``Producer.send_async`` and a ``PushConsumer`` whose listener (it
records a latency and returns) runs on the client's loop (``listener_on_loop``, what a user with a listener that
never blocks would choose; ``--txmq-listener threads`` for 4 consume threads instead, ``--consume-threads``; the
table's title says which). RabbitMQ: pika
(``SelectConnection`` with confirms; a ``BlockingConnection`` consumer, prefetch 1000, one ack each). NATS:
nats-py (``publish_async``; a durable push consumer, one ack each). RabbitMQ and NATS come from the Debian
packages ``rabbitmq-server`` and ``nats-server``; this bench starts each as the current user under a temporary
directory, on its default port, and stops it at the end (the peers kit beside the repository does the starting;
a system that cannot start is reported and skipped).

Transactions (txmq, SYNC_FLUSH and ASYNC_FLUSH): ``TransactionProducer.send_message_in_transaction`` (half
message, local transaction COMMIT, END_TRANSACTION oneway) at ``--tx-rate`` from a pool of threads on the same
open-loop schedule; latency from the intended send time to the committed message reaching the consumer.

Every client process, of every system, has its cyclic collector tuned alike (``txmq.gctune.tune_gc``: what
start-up built frozen, the youngest generation collected every 50,000 allocations): the figures compare brokers,
not Python's collector pausing one client more than another. ``TXMQ_GC_TUNE=false`` runs them untuned.

``--short`` (CI): txmq only, 1,000 msg/s for 2 s, no ladder, 200 transactions: it prints the same tables.
Every process it starts is stopped on exit.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import datetime
import functools
import json
import multiprocessing as mp
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from hdrh.histogram import HdrHistogram  # noqa: E402

from txmq import bench, gctune  # noqa: E402
from txmq.launch import ServerProcess, free_port, txmq_command  # noqa: E402

PEERS = ROOT.parent / "shared" / "peers"
LADDER = [1000, 2000, 5000, 10_000, 20_000, 40_000, 80_000]
HEADER = 24  # body: 8-byte index, 8-byte intended send time (ns), 8-byte run tag; then filler
PROBE = 1 << 62  # index flag of warm-up messages, not recorded
BEHIND_S = 2.0  # a run whose sends fall this far behind schedule stops
LATE_AVG_S = 0.1  # a run whose sends left on average later than this behind schedule is not sustained
SUSTAINED_P99_S = 1.0
TOPIC_QUEUES = 8


def log(*a: object) -> None:
    print(*a, file=sys.stderr, flush=True)


def new_histogram() -> HdrHistogram:
    return HdrHistogram(1, 600_000_000, 3)  # 1 µs .. 10 min


def body(index: int, intended_ns: int, tag: int, fill: bytes) -> bytes:
    return index.to_bytes(8, "big") + intended_ns.to_bytes(8, "big") + tag.to_bytes(8, "big") + fill


def parse(b: bytes) -> tuple[int, int, int]:
    return int.from_bytes(b[:8], "big"), int.from_bytes(b[8:16], "big"), int.from_bytes(b[16:24], "big")


# --- the schedule ----------------------------------------------------------------------------------------


def schedule(rate: float, n: int, t0_ns: int) -> Iterator[list[tuple[int, int]]]:
    """Batches of (index, intended ns) that are due, sleeping until the next one is: an open-loop producer sends
    each batch at once and comes back, whatever the broker answered meanwhile. Ends early once the sends fall
    ``BEHIND_S`` behind the schedule: the rate is not sustained, and the rest would only lengthen the run."""
    interval, i = 1e9 / rate, 0
    while i < n:
        wait_s = _wait_s(i, interval, t0_ns)
        if wait_s is None:
            return
        if wait_s > 0:
            time.sleep(wait_s)
        batch, i = _due_batch(i, n, interval, t0_ns)
        yield batch


async def schedule_on_loop(rate: float, n: int, t0_ns: int) -> AsyncIterator[list[tuple[int, int]]]:
    """``schedule`` for a producer that runs on an event loop: it awaits instead of sleeping its thread."""
    interval, i = 1e9 / rate, 0
    while i < n:
        wait_s = _wait_s(i, interval, t0_ns)
        if wait_s is None:
            return
        if wait_s > 0:
            await asyncio.sleep(wait_s)
        batch, i = _due_batch(i, n, interval, t0_ns)
        yield batch


def _wait_s(i: int, interval: float, t0_ns: int) -> float | None:
    """Seconds until send ``i`` is due (0 when it is), or None once the sends are ``BEHIND_S`` behind."""
    late_ns = time.monotonic_ns() - (t0_ns + int(i * interval))
    return None if late_ns > BEHIND_S * 1e9 else max(0.0, -late_ns / 1e9)


def _due_batch(i: int, n: int, interval: float, t0_ns: int) -> tuple[list[tuple[int, int]], int]:
    """The sends from ``i`` that are due now (at least send ``i``), and the index after them."""
    last = max(min(n, int((time.monotonic_ns() - t0_ns) / interval) + 1), i + 1)
    return [(k, t0_ns + int(k * interval)) for k in range(i, last)], last


@dataclass
class ProducerResult:
    sent: int = 0
    acked: int = 0
    failed: int = 0
    late_ns: int = 0  # sum over messages of (left - intended)
    ack: bytes = b""  # encoded histogram
    errors: list[str] = field(default_factory=list)


class Recorder:
    """Publish-ack latencies from any thread (a lock: hdrhistogram is pure Python)."""

    def __init__(self) -> None:
        self.hist = new_histogram()
        self.lock = threading.Lock()
        self.result = ProducerResult()
        self.done = threading.Event()
        self.expected = 0

    def ack(self, intended_ns: int, ok: bool, error: str = "") -> None:
        now = time.monotonic_ns()
        with self.lock:
            if ok:
                self.result.acked += 1
                self.hist.record_value(max(1, (now - intended_ns) // 1000))
            else:
                self.result.failed += 1
                if len(self.result.errors) < 5:
                    self.result.errors.append(error)
            if self.result.acked + self.result.failed >= self.expected:
                self.done.set()

    def sent(self, intended_ns: int) -> None:
        self.result.sent += 1
        self.result.late_ns += time.monotonic_ns() - intended_ns

    def finish(self, timeout_s: float) -> ProducerResult:
        """Wait for the answers to what was sent (the schedule may have ended early), then the result."""
        with self.lock:
            self.expected = self.result.sent
            if self.result.acked + self.result.failed >= self.expected:
                self.done.set()
        self.done.wait(timeout_s)
        with self.lock:
            self.result.ack = self.hist.encode()
            return self.result


# --- consumers: each in its own process, records end-to-end latency of the run's tag ------------------------


class E2E:
    """What a consumer keeps: the histogram of one run's messages, probes seen (ready once they arrive fast)."""

    def __init__(self, tag: int, n: int) -> None:
        self.tag, self.n = tag, n
        self.hist = new_histogram()
        self.count = 0
        self.dupes = 0
        self.seen = bytearray(n)
        self.fast_probes = 0
        self.lock = threading.Lock()
        self.all_in = threading.Event()

    def on_message(self, data: bytes) -> None:
        now = time.monotonic_ns()
        index, intended, tag = parse(data)
        with self.lock:
            if index & PROBE:
                if now - intended < 50_000_000:
                    self.fast_probes += 1
                return
            if tag != self.tag or index >= self.n:
                return
            if self.seen[index]:
                self.dupes += 1
                return
            self.seen[index] = 1
            self.count += 1
            self.hist.record_value(max(1, (now - intended) // 1000))
            if self.count == self.n:
                self.all_in.set()


def tune_collector() -> None:
    """Every client process of every system alike (the producer's, this bench's own, and each consumer's):
    ``txmq.gctune.tune_gc`` unless ``$TXMQ_GC_TUNE`` is ``false``, so that the figures compare brokers, not
    Python's collector pausing one client more than another."""
    if gctune.asked(default=True):
        gctune.tune_gc()


def consumer_main(system: str, target: dict[str, Any], tag: int, n: int, ready: Any, conn: Any,
                  deadline_s: float) -> None:
    """Run in a child process: subscribe, tell ``ready`` once probes arrive fast, collect until every message of
    the run arrived or ``deadline_s`` passed with nothing new, send (count, dupes, histogram) through ``conn``."""
    tune_collector()
    e2e = E2E(tag, n)
    stop = CONSUMERS[system](target, e2e)
    cpu0 = time.process_time()
    try:
        while e2e.fast_probes < 20:
            time.sleep(0.01)
        cpu0 = time.process_time()
        ready.set()
        last, last_count = time.monotonic(), -1
        while not e2e.all_in.wait(0.2):
            if e2e.count != last_count:
                last, last_count = time.monotonic(), e2e.count
            elif time.monotonic() - last > deadline_s:
                break
    finally:
        cpu = time.process_time() - cpu0  # before stop(): the client's shutdown is not a message's cost
        stop()
    with e2e.lock:
        conn.send((e2e.count, e2e.dupes, e2e.hist.encode(), cpu))


def txmq_consumer(target: dict[str, Any], e2e: E2E) -> Callable[[], None]:
    from txmq.client.consumer import ConsumeFromWhere, ConsumeStatus, PushConsumer

    def listener(msgs: list[Any]) -> ConsumeStatus:
        for m in msgs:
            e2e.on_message(m.body)
        return ConsumeStatus.SUCCESS

    c = PushConsumer(f"lat_c_{e2e.tag}", target["namesrv"], consume_thread_nums=target["consume_threads"],
                     pull_batch_size=32, listener_on_loop=target["listener_on_loop"],
                     consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET)
    c.subscribe(target["topic"])
    c.register_listener(listener)
    c.start()
    return c.shutdown


def rabbit_consumer(target: dict[str, Any], e2e: E2E) -> Callable[[], None]:
    import pika

    conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", 5672))
    ch = conn.channel()
    ch.basic_qos(prefetch_count=1000)

    def on_message(chan: Any, method: Any, _props: Any, data: bytes) -> None:
        e2e.on_message(data)
        chan.basic_ack(method.delivery_tag)

    ch.basic_consume(target["queue"], on_message)
    stopping = threading.Event()

    def run() -> None:
        while not stopping.is_set():
            conn.process_data_events(time_limit=0.1)

    t = threading.Thread(target=run, daemon=True)
    t.start()

    def stop() -> None:
        stopping.set()
        t.join(5)
        with contextlib.suppress(Exception):
            conn.close()
    return stop


def nats_consumer(target: dict[str, Any], e2e: E2E) -> Callable[[], None]:
    import nats

    loop = asyncio.new_event_loop()
    stopping: asyncio.Event | None = None

    async def main() -> None:
        nonlocal stopping
        stopping = asyncio.Event()
        nc = await nats.connect("nats://127.0.0.1:4222")
        js = nc.jetstream()

        async def cb(msg: Any) -> None:
            e2e.on_message(msg.data)
            await msg.ack()

        await js.subscribe(target["subject"], durable=f"lat{e2e.tag}", cb=cb, manual_ack=True,
                           pending_msgs_limit=1_000_000)
        await stopping.wait()
        await nc.close()

    t = threading.Thread(target=loop.run_until_complete, args=(main(),), daemon=True)
    t.start()

    def stop() -> None:
        if stopping is not None:
            loop.call_soon_threadsafe(stopping.set)
        t.join(5)
    return stop


CONSUMERS: dict[str, Callable[[dict[str, Any], E2E], Callable[[], None]]] = {
    "txmq": txmq_consumer, "rabbitmq": rabbit_consumer, "nats": nats_consumer}


# --- producers: open loop, in the bench process -----------------------------------------------------------


def probes_until(ready: Any, send: Callable[[int, int], None], what: str, timeout_s: float = 60.0) -> None:
    """Send probes at 200/s until the consumer has seen them arrive fast (its queues are assigned)."""
    deadline = time.monotonic() + timeout_s
    k = 0
    while not ready.is_set():
        if time.monotonic() > deadline:
            raise bench.BenchError(f"{what}: the consumer did not receive probes within {timeout_s:.0f}s")
        send(PROBE | k, time.monotonic_ns())
        k += 1
        time.sleep(0.005)
    time.sleep(0.3)


async def probes_on_loop(ready: Any, send: Callable[[int, int], Awaitable[Any]], what: str,
                         timeout_s: float = 60.0) -> None:
    """``probes_until`` for a producer on an event loop."""
    deadline = time.monotonic() + timeout_s
    k = 0
    while not ready.is_set():
        if time.monotonic() > deadline:
            raise bench.BenchError(f"{what}: the consumer did not receive probes within {timeout_s:.0f}s")
        await send(PROBE | k, time.monotonic_ns())
        k += 1
        await asyncio.sleep(0.005)
    await asyncio.sleep(0.3)


async def answers_on_loop(rec: Recorder) -> None:
    """Wait (on the loop that receives them) for the answers to what was sent, at most ``bench.STALL_S``."""
    rec.finish(0)  # expect the answers to what was sent
    end = time.monotonic() + bench.STALL_S
    while not rec.done.is_set() and time.monotonic() < end:
        await asyncio.sleep(0.05)


def txmq_produce(target: dict[str, Any], rate: float, n: int, tag: int, fill: bytes, ready: Any) -> ProducerResult:
    if target["producer"] == "asyncio":
        return txmq_produce_on_asyncio(target, rate, n, tag, fill, ready)
    from txmq.client.producer import Producer, SendStatus
    from txmq.message import Message

    rec = Recorder()
    rec.expected = n
    producer = Producer(f"lat_p_{tag}", target["namesrv"], max_in_flight=100_000)
    producer.start()
    topic = target["topic"]
    try:
        def send(index: int, intended: int) -> Any:
            return producer.send_async(Message(topic, body(index, intended, tag, fill)))

        probes_until(ready, send, "txmq")

        def answered(intended: int, fut: Any) -> None:
            exc = fut.exception()
            ok = exc is None and fut.result().status == SendStatus.SEND_OK
            rec.ack(intended, ok, repr(exc) if exc else ("" if ok else fut.result().status.value))

        for batch in schedule(rate, n, time.monotonic_ns()):
            for index, intended in batch:
                send(index, intended).add_done_callback(lambda f, t=intended: answered(t, f))
                rec.sent(intended)
        return rec.finish(bench.STALL_S)
    finally:
        producer.shutdown()


def txmq_produce_on_asyncio(target: dict[str, Any], rate: float, n: int, tag: int, fill: bytes,
                            ready: Any) -> ProducerResult:
    """An application on asyncio: ``AsyncProducer`` on the bench's own loop, as the NATS producer runs."""
    from txmq.client.producer import AsyncProducer, SendStatus
    from txmq.message import Message

    rec = Recorder()
    rec.expected = n
    topic = target["topic"]

    def answered(intended: int, fut: asyncio.Future[Any]) -> None:
        exc = None if fut.cancelled() else fut.exception()
        ok = exc is None and not fut.cancelled() and fut.result().status == SendStatus.SEND_OK
        rec.ack(intended, ok, repr(exc) if exc else ("" if ok else "not SEND_OK"))

    async def main() -> None:
        async with AsyncProducer(f"lat_p_{tag}", target["namesrv"], max_in_flight=100_000) as producer:
            async def send(index: int, intended: int) -> asyncio.Future[Any]:
                return await producer.send_async(Message(topic, body(index, intended, tag, fill)))

            await probes_on_loop(ready, send, "txmq")
            async for batch in schedule_on_loop(rate, n, time.monotonic_ns()):
                for index, intended in batch:
                    (await send(index, intended)).add_done_callback(functools.partial(answered, intended))
                    rec.sent(intended)
            await answers_on_loop(rec)

    asyncio.run(main())
    return rec.finish(0)


def rabbit_produce(target: dict[str, Any], rate: float, n: int, tag: int, fill: bytes, ready: Any) -> ProducerResult:
    import pika

    rec = Recorder()
    rec.expected = n
    pending: collections.deque[tuple[int, int]] = collections.deque()  # (delivery tag, intended ns), tag order
    state = {"tag": 0}
    props = pika.BasicProperties(delivery_mode=2)
    conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", 5672))
    try:
        # A BlockingChannel in confirm mode makes each publish wait for its confirm (closed loop); the open loop
        # takes the confirms as they come, through the underlying channel's callback.
        impl = conn.channel()._impl
        queue = target["queue"]

        def on_confirm(frame: Any) -> None:
            method = frame.method
            ok = method.NAME == "Basic.Ack"
            last = method.delivery_tag
            while pending and pending[0][0] <= last and (method.multiple or pending[0][0] == last):
                _, intended = pending.popleft()
                if intended >= 0:
                    rec.ack(intended, ok, "" if ok else "nack")
            if not method.multiple and pending and pending[0][0] < last:  # out of order: rare
                for i, (t, intended) in enumerate(pending):
                    if t == last:
                        del pending[i]
                        if intended >= 0:
                            rec.ack(intended, ok, "" if ok else "nack")
                        break

        impl.confirm_delivery(on_confirm)
        conn.process_data_events(0.1)

        def send(index: int, intended: int) -> None:
            state["tag"] += 1
            pending.append((state["tag"], -1 if index & PROBE else intended))
            impl.basic_publish("", queue, body(index, intended, tag, fill), props)

        def probe(index: int, intended: int) -> None:
            send(index, intended)
            conn.process_data_events(0)

        probes_until(ready, probe, "rabbitmq")
        for batch in schedule(rate, n, time.monotonic_ns()):
            for index, intended in batch:
                send(index, intended)
                rec.sent(intended)
            conn.process_data_events(0)
        rec.finish(0)  # expect the answers to what was sent
        deadline = time.monotonic() + bench.STALL_S
        while not rec.done.is_set() and time.monotonic() < deadline:
            conn.process_data_events(0.05)
        return rec.finish(0)
    finally:
        with contextlib.suppress(Exception):
            conn.close()


def nats_produce(target: dict[str, Any], rate: float, n: int, tag: int, fill: bytes, ready: Any) -> ProducerResult:
    import nats

    rec = Recorder()
    rec.expected = n

    async def main() -> None:
        nc = await nats.connect("nats://127.0.0.1:4222")
        js = nc.jetstream(publish_async_max_pending=1_000_000)
        subject = target["subject"]

        def answered(intended: int, fut: Any) -> None:
            exc = None if fut.cancelled() else fut.exception()
            rec.ack(intended, exc is None and not fut.cancelled(), repr(exc))

        async def send(index: int, intended: int) -> None:
            fut = await js.publish_async(subject, body(index, intended, tag, fill))
            if not index & PROBE:
                fut.add_done_callback(functools.partial(answered, intended))

        await probes_on_loop(ready, send, "nats")
        async for batch in schedule_on_loop(rate, n, time.monotonic_ns()):
            for index, intended in batch:
                await send(index, intended)
                rec.sent(intended)
        await answers_on_loop(rec)
        await nc.close()

    asyncio.run(main())
    return rec.finish(0)


PRODUCERS = {"txmq": txmq_produce, "rabbitmq": rabbit_produce, "nats": nats_produce}


# --- the systems under test ------------------------------------------------------------------------------


@dataclass
class System:
    name: str
    family: str  # txmq | rabbitmq | nats
    durability: str
    start: Callable[[], dict[str, Any]]  # starts the server(s); returns what the clients need
    new_run: Callable[[dict[str, Any], int], dict[str, Any]]  # a fresh topic / queue / stream per run
    stop: Callable[[], None]
    broker_pid: Callable[[], int | None] = lambda: None


class Txmq:
    """One ``txmq server`` (name server + broker), or a name server with a SYNC_MASTER broker and its slave."""

    def __init__(self, root: Path, flush: str, replicated: bool = False) -> None:
        self.root = root / (flush.lower() + ("-master" if replicated else ""))
        self.root.mkdir(parents=True)
        self.flush, self.replicated = flush, replicated
        self.procs: list[ServerProcess] = []
        self.env = dict(os.environ, PYTHONPATH=str(ROOT / "src"), HOME=str(self.root), PYTHONUNBUFFERED="1")

    def _start(self, name: str, args: list[str]) -> ServerProcess:
        p = ServerProcess(txmq_command(*args), self.root / f"{name}.log", self.env).start(30)
        self.procs.append(p)
        return p

    def _member(self, broker_id: int, role: str) -> ServerProcess:
        conf = {"brokerName": "lat", "brokerId": broker_id, "brokerRole": role, "flushDiskType": self.flush,
                "namesrvAddr": self.namesrv, "grpcPort": -1, "storePathRootDir": self.root / f"store{broker_id}",
                "listenPort": free_port(), "haListenPort": free_port()}
        path = self.root / f"broker{broker_id}.conf"
        path.write_text("".join(f"{k}={v}\n" for k, v in conf.items()))
        return self._start(f"broker{broker_id}", ["broker", "-c", str(path)])

    def start(self) -> dict[str, Any]:
        if self.replicated:
            self.namesrv = self._start("namesrv", ["namesrv", "--port", str(free_port())]).namesrv
            self._member(0, "SYNC_MASTER")
            self._member(1, "SLAVE")
            self._wait_in_sync()
        else:
            conf = self.root / "broker.conf"
            conf.write_text(f"flushDiskType={self.flush}\nbrokerName=lat\ngrpcPort=-1\n")
            self.namesrv = self._start("server", ["server", "--store", str(self.root / "store"), "--port",
                                                  str(free_port()), "--namesrv-port", str(free_port()),
                                                  "-c", str(conf)]).namesrv
        return {"namesrv": self.namesrv}

    def _wait_in_sync(self, timeout_s: float = 60.0) -> None:
        """A SYNC_MASTER answers SLAVE_NOT_AVAILABLE until its slave has joined and caught up (as RocketMQ's
        does): the runs start once a send is answered SEND_OK."""
        from txmq.client.producer import Producer, SendStatus
        from txmq.message import Message

        bench.ensure_topic(self.namesrv, "lat_in_sync", 1)
        deadline = time.monotonic() + timeout_s
        with Producer("lat_in_sync", self.namesrv) as producer:
            while producer.send(Message("lat_in_sync", b"probe")).status != SendStatus.SEND_OK:
                if time.monotonic() > deadline:
                    raise bench.BenchError(f"the slave did not join its SYNC_MASTER within {timeout_s:g} s")
                time.sleep(0.2)

    def pid(self) -> int | None:
        return self.procs[-2 if self.replicated else 0].pid if self.procs else None

    def new_run(self, target: dict[str, Any], tag: int) -> dict[str, Any]:
        topic = f"lat_{tag}"
        bench.ensure_topic(self.namesrv, topic, TOPIC_QUEUES)
        return dict(target, topic=topic)

    def stop(self) -> None:
        for p in reversed(self.procs):
            p.stop(30)
        self.procs = []


class Peer:
    """RabbitMQ or NATS started with the peers kit's scripts under a temporary directory."""

    def __init__(self, root: Path, family: str, quorum: bool = False) -> None:
        self.family, self.quorum = family, quorum
        self.state = root / ("rabbitmq" if family == "rabbitmq" else "nats")
        self.started = False

    def _script(self, what: str) -> None:
        name = f"{what}-{'rabbitmq' if self.family == 'rabbitmq' else 'nats'}.sh"
        subprocess.run([str(PEERS / name), str(self.state)], check=True, stdout=sys.stderr, timeout=300)

    def start(self) -> dict[str, Any]:
        if not PEERS.is_dir():
            raise bench.BenchError(f"no peers kit at {PEERS}")
        try:
            self._script("start")
        except subprocess.CalledProcessError:
            # The kit's start script can look for the new server before it has exec'd and report it gone while it
            # runs; starting is idempotent (a server it started is found by its pid file), so look once more.
            self.started = True
            self._script("start")
        self.started = True
        return {}

    def pid(self) -> int | None:
        name = "rabbitmq.pid" if self.family == "rabbitmq" else "nats.pid"
        with contextlib.suppress(OSError, ValueError):
            return int((self.state / name).read_text().split()[0])
        return None

    def new_run(self, target: dict[str, Any], tag: int) -> dict[str, Any]:
        if self.family == "rabbitmq":
            import pika

            queue = f"lat-{'quorum' if self.quorum else 'classic'}-{tag}"
            conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", 5672))
            try:
                conn.channel().queue_declare(queue, durable=True,
                                             arguments={"x-queue-type": "quorum" if self.quorum else "classic"})
            finally:
                conn.close()
            return {"queue": queue}
        import nats
        import nats.js.api

        async def stream() -> None:
            nc = await nats.connect("nats://127.0.0.1:4222")
            await nc.jetstream().add_stream(name=f"LAT{tag}", subjects=[f"lat.{tag}"],
                                            storage=nats.js.api.StorageType.FILE, num_replicas=1)
            await nc.close()
        asyncio.run(stream())
        return {"subject": f"lat.{tag}"}

    def stop(self) -> None:
        if self.started:
            self._script("stop")
            self.started = False


def systems(root: Path, names: list[str]) -> list[System]:
    def txmq(name: str, flush: str, replicated: bool, durability: str) -> System:
        t = Txmq(root, flush, replicated)
        return System(name, "txmq", durability, t.start, t.new_run, t.stop, t.pid)

    rabbit = Peer(root, "rabbitmq")
    quorum = Peer(root, "rabbitmq", quorum=True)
    nats_ = Peer(root, "nats")
    table = {
        "txmq-sync": lambda: txmq("txmq-sync", "SYNC_FLUSH", False, "fsync before ack"),
        "txmq-async": lambda: txmq("txmq-async", "ASYNC_FLUSH", False, "ack at write; fsync every 500 ms"),
        "txmq-sync-master": lambda: txmq("txmq-sync-master", "ASYNC_FLUSH", True, "ack once the slave holds it"),
        "rabbitmq": lambda: System("rabbitmq", "rabbitmq", "fsync before confirm", rabbit.start,
                                   rabbit.new_run, lambda: None, rabbit.pid),
        # The quorum queue runs on the node started for the classic one (the kit's node serves both).
        "rabbitmq-quorum": lambda: System("rabbitmq-quorum", "rabbitmq", "Raft log fsync before confirm",
                                          lambda: {} if rabbit.started else rabbit.start(), quorum.new_run,
                                          rabbit.stop, rabbit.pid),
        "nats": lambda: System("nats", "nats", "ack at write; fsync every 2 min", nats_.start, nats_.new_run,
                               nats_.stop, nats_.pid),
    }
    out = [table[n]() for n in names]
    if "rabbitmq" in names and "rabbitmq-quorum" not in names:
        out[names.index("rabbitmq")].stop = rabbit.stop
    return out


# --- one run ---------------------------------------------------------------------------------------------


def percentiles(encoded: bytes) -> dict[str, float]:
    h = HdrHistogram.decode(encoded)
    if h.get_total_count() == 0:
        return {}
    return {"p50_ms": h.get_value_at_percentile(50) / 1000, "p99_ms": h.get_value_at_percentile(99) / 1000,
            "p999_ms": h.get_value_at_percentile(99.9) / 1000, "max_ms": h.get_max_value() / 1000}


_tags = iter(range(1, 1 << 30))


def one_run(system: System, target: dict[str, Any], rate: float, seconds: float, size: int,
            produce: Callable[..., ProducerResult] | None = None, consume_threads: int = 4,
            listener_on_loop: bool = True, txmq_producer: str = "thread") -> dict[str, Any]:
    """Subscribe a consumer process, produce ``rate`` x ``seconds`` messages open loop, collect both sides."""
    tag = next(_tags) + os.getpid() % 1000 * 100_000
    n = max(1, int(rate * seconds))
    run_target = {**system.new_run(target, tag), "consume_threads": consume_threads,
                  "listener_on_loop": listener_on_loop, "producer": txmq_producer}
    fill = bench.filler(size - HEADER + 8)  # size - HEADER bytes
    ctx = mp.get_context("spawn")
    ready = ctx.Event()
    parent, child = ctx.Pipe(duplex=False)
    consumer = ctx.Process(target=consumer_main, args=(system.family, run_target, tag, n, ready, child, 10.0),
                           daemon=True)
    consumer.start()
    cpu0 = bench.process_cpu_s(system.broker_pid())
    t0 = time.monotonic()
    producer_cpu0 = time.process_time()
    try:
        producer = (produce or PRODUCERS[system.family])(run_target, rate, n, tag, fill, ready)
        wall = time.monotonic() - t0
        producer_cpu = time.process_time() - producer_cpu0
        if not parent.poll(bench.STALL_S + 30):
            raise bench.BenchError(f"{system.name}: the consumer did not report")
        count, dupes, e2e, consumer_cpu = parent.recv()
    finally:
        consumer.join(10)
        if consumer.is_alive():
            consumer.kill()
    cpu1 = bench.process_cpu_s(system.broker_pid())
    late_avg_s = producer.late_ns / max(producer.sent, 1) / 1e9
    row: dict[str, Any] = {
        "system": system.name, "rate": rate, "n": n, "sent": producer.sent, "acked": producer.acked,
        "failed": producer.failed, "delivered": count, "duplicates": dupes, "late_avg_ms": round(late_avg_s * 1e3, 2),
        "ack": percentiles(producer.ack), "e2e": percentiles(e2e), "errors": producer.errors[:3],
        "broker_cpu_s": None if cpu0 is None or cpu1 is None else round(cpu1 - cpu0, 2), "wall_s": round(wall, 2),
        "producer_cpu_s": round(producer_cpu, 2), "consumer_cpu_s": round(consumer_cpu, 2)}
    row["sustained"] = (producer.sent == n and count == n and producer.failed == 0 and late_avg_s < LATE_AVG_S
                        and row["e2e"].get("p99_ms", 1e9) < SUSTAINED_P99_S * 1000)
    return row


def tx_produce(target: dict[str, Any], rate: float, n: int, tag: int, fill: bytes, ready: Any) -> ProducerResult:
    """Transactions on the open-loop schedule from a pool of threads: the half's send to END_TRANSACTION is the
    "ack" latency; the consumer measures half sent (intended) to committed message delivered."""
    from concurrent.futures import ThreadPoolExecutor

    from txmq.client.producer import SendStatus
    from txmq.client.transaction import LocalTransactionState, TransactionProducer
    from txmq.message import Message, MessageExt

    class Commit:
        def execute_local_transaction(self, msg: Message, arg: Any) -> LocalTransactionState:
            return LocalTransactionState.COMMIT

        def check_local_transaction(self, msg: MessageExt) -> LocalTransactionState:
            return LocalTransactionState.COMMIT

    rec = Recorder()
    rec.expected = n
    producer = TransactionProducer(f"lat_tx_{tag}", Commit(), target["namesrv"], max_in_flight=64)
    producer.start()
    topic = target["topic"]

    def one(index: int, intended: int) -> None:
        try:
            r = producer.send_message_in_transaction(Message(topic, body(index, intended, tag, fill)))
            ok = r.status == SendStatus.SEND_OK and r.local_transaction_state == LocalTransactionState.COMMIT
            err = "" if ok else f"{r.status.value}/{r.local_transaction_state.name}"
        except Exception as exc:
            ok, err = False, repr(exc)
        if not index & PROBE:
            rec.ack(intended, ok, err)

    try:
        with ThreadPoolExecutor(32, thread_name_prefix="lat-tx") as pool:
            probes_until(ready, lambda i, t: pool.submit(one, i, t), "txmq transactions")
            for batch in schedule(rate, n, time.monotonic_ns()):
                for index, intended in batch:
                    pool.submit(one, index, intended)
                    rec.sent(intended)
        return rec.finish(bench.STALL_S)
    finally:
        producer.shutdown()


# --- the whole bench -------------------------------------------------------------------------------------


def ladder(system: System, target: dict[str, Any], a: argparse.Namespace) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    rates = sorted(set(a.rates) | (set() if a.no_max else set(LADDER)))
    for rate in rates:
        if rate > max(a.rates) and rows and not rows[-1]["sustained"]:
            break  # past the asked rates, the ladder stops at the first rate not sustained
        if rate not in a.rates and rate < max(a.rates):
            continue
        row = one_run(system, target, rate, a.seconds, a.size, consume_threads=a.consume_threads,
                      listener_on_loop=a.txmq_listener == "loop", txmq_producer=a.txmq_producer)
        rows.append(row)
        e = row["e2e"]
        log(f"  {system.name} {rate:>6,}/s: ack p99 {row['ack'].get('p99_ms', '-')} ms, e2e p50/p99 "
            f"{e.get('p50_ms', '-')}/{e.get('p99_ms', '-')} ms, delivered {row['delivered']}/{row['n']}, "
            f"late {row['late_avg_ms']} ms; CPU µs/msg broker {per_msg_us(row, 'broker_cpu_s')}, producer "
            f"{per_msg_us(row, 'producer_cpu_s')}, consumer {per_msg_us(row, 'consumer_cpu_s')}"
            f"{'' if row['sustained'] else '  NOT SUSTAINED'}")
    return rows


def per_msg_us(row: dict[str, Any], key: str) -> str:
    """A process's CPU over the run per message sent (the producer's includes its probes and the bench's own
    bookkeeping, the same for every system)."""
    cpu = row.get(key)
    return "-" if cpu is None or not row["sent"] else f"{cpu / row['sent'] * 1e6:.0f}"


def fmt(v: Any) -> str:
    if v is None:
        return "-"
    return f"{v:,.2f}" if v < 100 else f"{v:,.0f}"


def table(rows: list[dict[str, Any]]) -> str:
    out = ["| system | offered msg/s | publish-ack p50 / p99 / p99.9 / max ms | end-to-end p50 / p99 / p99.9 / max ms "
           "| sustained |", "|---|---|---|---|---|"]
    for r in rows:
        a, e = r["ack"], r["e2e"]
        cells = [" / ".join(fmt(d.get(k)) for k in ("p50_ms", "p99_ms", "p999_ms", "max_ms")) for d in (a, e)]
        label = f"{r['rate']:,}" + (" (max)" if r.get("is_max") else "")
        out.append(f"| {r['system']} | {label} | {cells[0]} | {cells[1]} | "
                   f"{'yes' if r['sustained'] else 'no (' + str(r['delivered']) + '/' + str(r['n']) + ')'} |")
    return "\n".join(out)


def tx_table(rows: list[dict[str, Any]]) -> str:
    out = ["| system | offered tx/s | half sent → committed message consumed p50 / p99 / p99.9 / max ms "
           "| whole transaction p50 / p99 ms | delivered |", "|---|---|---|---|---|"]
    for r in rows:
        e, a = r["e2e"], r["ack"]
        out.append(f"| {r['system']} | {r['rate']:,} | "
                   + " / ".join(fmt(e.get(k)) for k in ("p50_ms", "p99_ms", "p999_ms", "max_ms"))
                   + f" | {fmt(a.get('p50_ms'))} / {fmt(a.get('p99_ms'))} | {r['delivered']}/{r['n']} |")
    return "\n".join(out)


def plot(rows: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2), sharey=True)
    for ax, key in zip(axes, ("p50_ms", "p99_ms"), strict=True):
        for name in dict.fromkeys(r["system"] for r in rows):
            pts = sorted((r["rate"], r["e2e"][key]) for r in rows if r["system"] == name and r["e2e"].get(key)
                         and r["sustained"])
            if pts:
                ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=name)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("offered rate, msg/s (256 B)")
        ax.set_title(f"end-to-end {key.split('_')[0]}")
        ax.grid(True, which="both", alpha=0.3)
    axes[0].set_ylabel("ms (from the intended send time)")
    axes[1].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rates", default="1000,5000,20000")
    p.add_argument("--seconds", type=float, default=10.0, help="measured seconds per rate")
    p.add_argument("--size", type=int, default=256)
    p.add_argument("--systems", default="txmq-sync,txmq-async,txmq-sync-master,rabbitmq,rabbitmq-quorum,nats")
    p.add_argument("--no-max", action="store_true", help="only --rates, not the ladder up to the highest sustained")
    p.add_argument("--tx-rate", type=int, default=1000, help="transactions/s (0: none)")
    p.add_argument("--tx-seconds", type=float, default=10.0)
    p.add_argument("--txmq-listener", choices=("loop", "threads"), default="loop",
                   help="the txmq PushConsumer's listener: on the client's loop, or on consume threads")
    p.add_argument("--txmq-producer", choices=("thread", "asyncio"), default="thread",
                   help="txmq's producer: Producer.send_async from the bench's thread, or AsyncProducer on the "
                        "bench's asyncio loop (an application on asyncio, as the NATS producer runs)")
    p.add_argument("--consume-threads", type=int, default=4,
                   help="the txmq PushConsumer's consume threads (with --txmq-listener threads)")
    p.add_argument("--plot", type=Path, help="write the end-to-end plot (PNG) here")
    p.add_argument("--json", type=Path, help="write every row as JSON here")
    p.add_argument("--short", action="store_true", help="CI: txmq only, 1,000 msg/s for 2 s, 200 transactions")
    a = p.parse_args()
    if a.short:
        a.rates, a.seconds, a.no_max, a.systems = "1000", 2.0, True, "txmq-sync,txmq-async"
        a.tx_rate, a.tx_seconds = 100, 2.0
    a.rates = [int(r) for r in a.rates.split(",")]
    if a.size < HEADER:
        p.error(f"--size must be at least {HEADER}")

    tune_collector()
    root = Path(tempfile.mkdtemp(prefix="txmq-latency-"))
    started = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
    load0 = os.getloadavg()
    rows: list[dict[str, Any]] = []
    tx_rows: list[dict[str, Any]] = []
    skipped: dict[str, str] = {}
    try:
        for system in systems(root, a.systems.split(",")):
            log(f"\n== {system.name} ({system.durability})")
            try:
                target = system.start()
                # Transactions first: after the ladder's last rung, one the system did not sustain, the disk
                # is still writing back its backlog, and a SYNC_FLUSH half waits for that (one 1.3 s stall).
                if a.tx_rate and system.name in ("txmq-sync", "txmq-async"):
                    r = one_run(system, target, a.tx_rate, a.tx_seconds, a.size, produce=tx_produce,
                                consume_threads=a.consume_threads, listener_on_loop=a.txmq_listener == "loop")
                    r["system"] += " transactions"
                    tx_rows.append(r)
                    log(f"  transactions {a.tx_rate}/s: consumable p50/p99 {r['e2e'].get('p50_ms')}/"
                        f"{r['e2e'].get('p99_ms')} ms, delivered {r['delivered']}/{r['n']}")
                sys_rows = ladder(system, target, a)
                sustained = [r for r in sys_rows if r["sustained"]]
                if sustained and not a.no_max:
                    sustained[-1]["is_max"] = True
                rows += [r for r in sys_rows if r["rate"] in a.rates or r.get("is_max")]
            except (bench.BenchError, subprocess.SubprocessError, OSError, ImportError) as exc:
                skipped[system.name] = str(exc)[:300]
                log(f"  {system.name} skipped: {exc}")
            finally:
                system.stop()
    finally:
        with contextlib.suppress(OSError):
            shutil.rmtree(root)
    load1 = os.getloadavg()
    print(f"\nlatency at fixed offered rates, {a.size} B, {a.seconds:g} s per rate; {started}, "
          f"{os.cpu_count()} CPUs, load average {load0[0]:.2f} → {load1[0]:.2f}; txmq's listener "
          + ("on the client's loop" if a.txmq_listener == "loop" else f"on {a.consume_threads} consume threads")
          + ("; txmq's producer AsyncProducer on asyncio" if a.txmq_producer == "asyncio" else ""))
    print(table(rows))
    if tx_rows:
        print("\n" + tx_table(tx_rows))
    for name, why in skipped.items():
        print(f"\n{name}: not measured ({why})")
    if a.plot and rows:
        plot(rows, a.plot)
    if a.json:
        a.json.write_text(json.dumps({"date": started, "machine": {"cpus": os.cpu_count(),
                                      "uname": " ".join(platform.uname()), "load": [load0, load1]},
                                      "txmq_listener": a.txmq_listener, "rows": rows, "tx": tx_rows,
                                      "skipped": skipped}, indent=1))
    return 1 if any(s.startswith("txmq") for s in skipped) else 0


if __name__ == "__main__":
    bench.run(main)
