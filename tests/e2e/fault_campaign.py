"""A fault campaign against a controller-mode group (tests/e2e/test_failover.py runs a short one, bench/faults.py
a long one): producers (txmq's, the C++ client's, the RocketMQ 5 client's), transaction producers and a consumer
run while the master is SIGKILLed, SIGSTOPped past its lease, or partitioned from the controller and its slaves
but not from its clients; at the end every replica is read from disk and checked, and what the consumer got."""

from __future__ import annotations

import bisect
import contextlib
import itertools
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.e2e.failover_group import FailoverGroup, log_messages
from tests.e2e.ha_group import commit_log_bytes, max_offset
from tests.e2e.helpers import Recorder, roundtrip, wait_until
from txmq import (
    Admin,
    ConsumeFromWhere,
    LocalTransactionState,
    Message,
    Producer,
    PushConsumer,
    SendStatus,
    TransactionProducer,
)
from txmq.client.transaction import HalfMessageRef, TransactionSendResult
from txmq.message import MessageConst, MessageSysFlag, decode_offset_msg_id, properties_to_string
from txmq.remoting.codes import RequestCode
from txmq.remoting.command import RemotingCommand
from txmq.remoting.request_headers import EndTransactionRequestHeader

TOPIC, TX_TOPIC, CPP_TOPIC, GRPC_TOPIC = "fo", "fo-tx", "fo-cpp", "fo-grpc"
CPP_DRIVER = Path(__file__).with_name("cpp") / "cpp_driver.py"
ROOT = Path(__file__).resolve().parents[2]
RMQ5_PYTHON, RMQ5_DRIVER = ROOT / ".venv-rmq5" / "bin" / "python", ROOT / "tests" / "grpc" / "drivers" / "rmq5_py.py"
COMMIT, ROLLBACK = LocalTransactionState.COMMIT, LocalTransactionState.ROLLBACK


@dataclass
class Figures:
    faults: Counter[str] = field(default_factory=Counter)
    sends_acked: int = 0  # by every client: txmq's, the C++ client's and the RocketMQ 5 (gRPC) client's
    cpp_sends_acked: int = 0
    grpc_sends_acked: int = 0
    client_errors: dict[str, int] = field(default_factory=dict)  # failed sends by external client
    sends_lost: int = 0
    sends_duplicated: int = 0
    tx_acked: int = 0
    tx_committed_lost: int = 0
    tx_duplicated: int = 0
    tx_rollback_visible: int = 0
    # the consumer reading every topic the whole time (at least once): acknowledged sends and COMMITs it never
    # got (aim 0; not met: see docs/reliability.md "What the consumer found"), ROLLBACKs and half messages it got
    # (aims 0)
    consumed: int = 0
    consumed_missing: int = 0
    consumed_missing_keys: list[str] = field(default_factory=list)  # the first 20, to look for in the logs
    consumed_rollback: int = 0
    consumed_halves: int = 0
    split_brain_epochs: int = 0
    failover_s: list[float] = field(default_factory=list)
    replicas_identical: bool = False
    # during each partition, once another master acts, a send straight to the old master (which clients still
    # reach): its answer codes, and how many were acknowledged or found in the log at the end (aim 0)
    fenced_answers: list[int] = field(default_factory=list)
    fenced_stored: int = 0
    # and a ROLLBACK, straight to it, of the last acknowledged transaction meant to COMMIT: its answer codes
    # (COMMIT lost would show it was taken)
    fenced_decision_answers: list[int] = field(default_factory=list)
    partition_ha_cut: list[int] = field(default_factory=list)  # slaves' HA connections to it that the cut closed
    # then their connections to its master/slave link (brokerIP2:listenPort: epoch table, metadata copy) that
    # the cut path refused (a slave whose HA session ended checks its master there before connecting again)
    partition_link_refused: list[int] = field(default_factory=list)
    # per client kind, per master fault: the longest pause between two acknowledged sends around it
    outage_s: dict[str, list[float]] = field(default_factory=dict)
    master_fault_spans: list[tuple[float, float]] = field(default_factory=list)  # wall clock, fault to healed


class Listener:
    """Transaction i: i % 3 == 0 COMMIT, 1 ROLLBACK, 2 UNKNOWN at first and COMMIT on check-back."""

    def __init__(self) -> None:
        self.intended: dict[str, LocalTransactionState] = {}
        self.lock = threading.Lock()

    def _state(self, i: int) -> LocalTransactionState:
        return ROLLBACK if i % 3 == 1 else COMMIT

    def execute_local_transaction(self, msg: Message, arg: Any) -> LocalTransactionState | None:
        with self.lock:
            self.intended[msg.keys or ""] = self._state(arg)
        return None if arg % 3 == 2 else self._state(arg)

    def check_local_transaction(self, msg: Any) -> LocalTransactionState | None:
        i = int((msg.keys or "t-1").split("-")[1])
        return self._state(i)


class DriverProducer:
    """An external client sending in its own process (a driver printing one JSON line per event), one attempt
    per message; ``acked`` holds the keys of the sends it says were acknowledged, ``ack_times`` when each was
    answered (wall clock), ``errors`` how many sends failed."""

    def __init__(self, args: list[str], home: Path, acked_key: Callable[[dict[str, Any]], str | None]) -> None:
        home.mkdir(parents=True, exist_ok=True)
        self.acked: set[str] = set()
        self.ack_times: list[float] = []
        self.errors = 0
        self._acked_key = acked_key
        self.stderr = (home / "driver.err").open("w")
        self.proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=self.stderr, text=True,
                                     env=dict(os.environ, HOME=str(home)), start_new_session=True)
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            with contextlib.suppress(ValueError):
                event = json.loads(line)
                key = self._acked_key(event)
                if key is not None:
                    self.acked.add(key)
                    self.ack_times.append(event.get("t") or time.time())  # the driver's clock: when answered
                elif event.get("event") == "error":
                    self.errors += 1

    def stop(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(10)
        self.reader.join(5)
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        self.stderr.close()


def cpp_producer(namesrv: str, home: Path) -> DriverProducer:
    """The RocketMQ C++ client (``rocketmq==0.4.4``) sending SYNC to ``CPP_TOPIC``, no retries."""
    return DriverProducer(
        [sys.executable, str(CPP_DRIVER), "produce", "--namesrv", namesrv, "--topic", CPP_TOPIC, "--count",
         "1000000", "--mode", "sync", "--keys-prefix", "c-", "--retry-times", "0", "--interval", "0.02",
         "--fast-exit"], home,
        lambda e: f"c-{e['i']}" if e.get("event") == "sent" and e.get("status") == "OK" else None)


def rmq5_producer(endpoints: str, home: Path) -> DriverProducer:
    """The official RocketMQ 5 Python client sending to ``GRPC_TOPIC`` over gRPC, configured with every
    replica's endpoint; one attempt per message (the group's ``grpcClientProducerMaxAttempts`` is 1)."""
    args = {"cmd": "send", "endpoint": endpoints, "topic": GRPC_TOPIC, "count": 10**6, "keys_prefix": "g-",
            "failover": True, "interval": 0.02, "timeout": 10}
    return DriverProducer([str(RMQ5_PYTHON), str(RMQ5_DRIVER), json.dumps(args)], home,
                          lambda e: f"g-{e['i']}" if e.get("event") == "sent" else None)


class Workload:
    """One thread of plain sends (no client retries: one attempt per message) and one of transactions, and
    with ``home`` the external clients' producers (the C++ client; the RocketMQ 5 client too with
    ``grpc_endpoints``); each records what the broker acknowledged. A push consumer reads every topic the
    whole time (``recorder``: what it got)."""

    def __init__(self, namesrv: str, home: Path | None = None, grpc_endpoints: str = "") -> None:
        self.namesrv = namesrv
        self.home = home
        self.grpc_endpoints = grpc_endpoints
        self.drivers: dict[str, DriverProducer] = {}
        self.acked: set[str] = set()
        self.ack_times: list[float] = []  # wall clock, as the drivers' (outage_s)
        self.tx_acked: set[str] = set()
        self.last_commit: TransactionSendResult | None = None  # the last acknowledged half meant to COMMIT
        self.listener = Listener()
        self.stop = threading.Event()
        self.last_ack = (0.0, "")  # monotonic time and broker address of the last acknowledged send
        self.producer = Producer("fo-p", namesrv, retry_times=0, send_timeout_s=3.0)
        self.tx_producer = TransactionProducer("fo-tx-p", self.listener, namesrv, send_timeout_s=3.0)
        self.threads = [threading.Thread(target=self._sends, daemon=True),
                        threading.Thread(target=self._transactions, daemon=True)]
        self.recorder = Recorder()
        self.consumer: PushConsumer | None = None

    def start(self) -> None:
        self.consumer = PushConsumer("fo-c", self.namesrv,
                                     consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET)
        for topic in (TOPIC, TX_TOPIC, CPP_TOPIC, GRPC_TOPIC):
            self.consumer.subscribe(topic)
        self.consumer.register_listener(self.recorder)
        self.consumer.start()
        self.producer.start()
        self.tx_producer.start()
        for t in self.threads:
            t.start()
        if self.home is not None:
            self.drivers["cpp"] = cpp_producer(self.namesrv, self.home / "cpp")
            if self.grpc_endpoints:
                self.drivers["grpc"] = rmq5_producer(self.grpc_endpoints, self.home / "rmq5")

    def _sends(self) -> None:
        i = 0
        while not self.stop.is_set():
            key = f"s-{i}"
            i += 1
            try:
                r = self.producer.send(Message(TOPIC, key.encode() * 20, keys=key))
                if r.status == SendStatus.SEND_OK:
                    self.acked.add(key)
                    self.ack_times.append(time.time())
                    host, port = decode_offset_msg_id(r.offset_msg_id)[0]
                    self.last_ack = (time.monotonic(), f"{host}:{port}")
                    continue
            except Exception:
                pass
            time.sleep(0.05)

    def _transactions(self) -> None:
        i = 0
        while not self.stop.is_set():
            key = f"t-{i}"
            try:
                r = self.tx_producer.send_message_in_transaction(Message(TX_TOPIC, key.encode() * 10, keys=key), i)
                if r.status == SendStatus.SEND_OK:
                    self.tx_acked.add(key)
                    if self.listener.intended.get(key) == COMMIT:
                        self.last_commit = r
                else:
                    time.sleep(0.05)
            except Exception:
                time.sleep(0.05)
            i += 1

    def close(self) -> None:
        for driver in self.drivers.values():
            driver.stop()
        self.stop.set()
        for t in self.threads:
            t.join(15)
        self.producer.shutdown()

    def close_tx(self) -> None:
        self.tx_producer.shutdown()
        if self.consumer is not None:
            self.consumer.shutdown()


def _wait_sends(workload: Workload, since: float, old: str, timeout: float) -> float | None:
    """Seconds from ``since`` to the first send after it acknowledged by another broker than ``old``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        at, addr = workload.last_ack
        if at > since and addr != old:
            return at - since
        time.sleep(0.02)
    return None


MASTER_FAULTS = ("kill", "pause", "partition")
SLAVE_FAULTS = ("slave-flip", "slave-truncate")
RESTART_FAULT = "restart"  # SIGKILL, the log's tail lost (ASYNC_FLUSH + a crash), back at once: a new epoch


def _damage_tail(group: FailoverGroup, rid: int, fault: str, rng: random.Random) -> None:
    """While the slave is down: flip one byte of its last records, or zero its log's last bytes."""
    segs = sorted((group.store(rid) / "commitlog").iterdir())
    if not segs:
        return
    seg = segs[-1]
    data = bytearray(seg.read_bytes())
    used = len(data.rstrip(b"\0"))
    if used < 64:
        return
    if fault == "slave-flip":
        at = rng.randrange(max(0, used - 2000), used)
        data[at] ^= 0xFF
    else:
        cut = rng.randrange(max(0, used - 2000), used)
        data[cut:used] = bytes(used - cut)
    seg.write_bytes(bytes(data))


def inject(group: FailoverGroup, workload: Workload, fault: str, figures: Figures, rng: random.Random) -> None:
    """One fault at a random instant; a master fault waits for the next master (the failover time: from the
    fault to the first send another broker acknowledged), then the victim comes back."""
    master = group.wait_master(60)
    time.sleep(rng.uniform(0.2, 1.5))
    figures.faults[fault] += 1
    if fault in SLAVE_FAULTS:
        rid = rng.choice([r for r in group.ids if r != master])
        group.members[rid].kill()
        _damage_tail(group, rid, fault, rng)
        group.members[rid].start()
        group.wait_master(60, full_set=True)
        return
    victim = group.members[master]
    assert victim.pid is not None
    if fault == RESTART_FAULT:
        epoch, wall0 = group.state()["epoch"], time.time()
        victim.kill()
        t0 = time.monotonic()  # acknowledged after this: by another process (it may be elected again)
        _damage_tail(group, master, "truncate", rng)
        victim.start()
        assert wait_until(lambda: group.state().get("epoch", 0) > epoch, 60), group.state()
        group.wait_master(60)
        took = _wait_sends(workload, t0, "", 30)
        if took is not None:
            figures.failover_s.append(took)
        group.wait_master(60, full_set=True)
        figures.master_fault_spans.append((wall0, time.time()))
        return
    t0, wall0 = time.monotonic(), time.time()
    if fault == "kill":
        victim.kill()
    elif fault == "pause":
        os.kill(victim.pid, signal.SIGSTOP)
    else:
        before = group.ha_proxies[master].cut_open, group.link_proxies[master].refused
        group.partition(master)
    group.wait_master(60, not_id=master)
    if fault == "partition":
        _probe_fenced(group.addr(master), figures, workload.last_commit)
        figures.partition_ha_cut.append(group.ha_proxies[master].cut_open - before[0])
        figures.partition_link_refused.append(group.link_proxies[master].refused - before[1])
    took = _wait_sends(workload, t0, group.addr(master), 30)
    if took is not None:
        figures.failover_s.append(took)
    if fault == "kill":
        victim.start()
    elif fault == "pause":
        os.kill(victim.pid, signal.SIGCONT)
    else:
        group.heal(master)
    group.wait_master(60, full_set=True)
    figures.master_fault_spans.append((wall0, time.time()))


FENCED_PREFIX = "fenced-"


def _probe_fenced(old_master: str, figures: Figures, commit: TransactionSendResult | None) -> None:
    """Another master acts, so the partitioned one's lease is over: a send that reaches it (as a client's
    still does) must not be acknowledged, nor a decision. The send's key is looked for in the log at the end; the
    decision is a ROLLBACK of a transaction meant to COMMIT, which the end's check would find missing."""
    key = f"{FENCED_PREFIX}{len(figures.fenced_answers)}"
    header = {"producerGroup": "fo-fenced", "topic": TOPIC, "defaultTopic": "TBW102", "defaultTopicQueueNums": "4",
              "queueId": "0", "sysFlag": "0", "bornTimestamp": str(int(time.time() * 1000)), "flag": "0",
              "properties": properties_to_string({MessageConst.KEYS: key}), "reconsumeTimes": "0",
              "unitMode": "false", "batch": "false"}
    figures.fenced_answers.append(_answer(old_master, RemotingCommand.request(RequestCode.SEND_MESSAGE, header,
                                                                              key.encode())))
    if commit is not None:
        ref = HalfMessageRef.of(commit)
        end = EndTransactionRequestHeader(producer_group="fo-tx-p", tran_state_table_offset=ref.tran_state_table_offset,
                                          commit_log_offset=ref.commit_log_offset,
                                          commit_or_rollback=MessageSysFlag.TRANSACTION_ROLLBACK_TYPE,
                                          msg_id=commit.msg_id, transaction_id=commit.transaction_id or "")
        figures.fenced_decision_answers.append(
            _answer(old_master, RemotingCommand.request(RequestCode.END_TRANSACTION, end.to_ext())))


def _answer(addr: str, request: RemotingCommand) -> int:
    """The answer's code; -1: no answer (not acknowledged either)."""
    try:
        return roundtrip(addr, request).code
    except (OSError, AssertionError):
        return -1


def check(group: FailoverGroup, workload: Workload, figures: Figures, timeout: float = 90.0) -> None:
    """Read every replica: sends, transactions, epochs, bytes."""
    master = group.wait_master(60, full_set=True)
    # Undecided transactions are resolved by check-back on the master: wait until every intended COMMIT is visible.
    def visible() -> Counter[str]:
        end = max_offset(group.addr(master))
        return Counter(m.keys or "" for m in log_messages(group.store(master), end)
                       if m.topic == TX_TOPIC and m.properties.get(MessageConst.TRANSACTION_PREPARED) != "true")

    wanted = {k for k in workload.tx_acked if workload.listener.intended.get(k) == COMMIT}
    wait_until(lambda: wanted <= set(visible()), timeout)
    end = max_offset(group.addr(master))
    assert wait_until(lambda: all(max_offset(group.addr(r)) == end for r in group.ids), 30), \
        [max_offset(group.addr(r)) for r in group.ids]
    base = commit_log_bytes(group.store(master), end)
    figures.replicas_identical = all(commit_log_bytes(group.store(r), end) == base for r in group.ids)
    msgs = log_messages(group.store(master), end)
    sends = Counter(m.keys for m in msgs if m.topic in (TOPIC, CPP_TOPIC, GRPC_TOPIC))
    drivers = workload.drivers
    acked = workload.acked.union(*(d.acked for d in drivers.values()))
    figures.sends_acked = len(acked)
    figures.cpp_sends_acked = len(drivers["cpp"].acked) if "cpp" in drivers else 0
    figures.grpc_sends_acked = len(drivers["grpc"].acked) if "grpc" in drivers else 0
    figures.client_errors = {kind: d.errors for kind, d in drivers.items()}
    figures.sends_lost = sum(1 for k in acked if sends[k] == 0)
    figures.sends_duplicated = sum(1 for k in acked if sends[k] > 1)
    figures.fenced_stored = sum(n for k, n in sends.items() if k and k.startswith(FENCED_PREFIX))
    times = {"txmq": workload.ack_times, **{kind: d.ack_times for kind, d in drivers.items()}}
    figures.outage_s = {kind: [_longest_pause(sorted(ts), span) for span in figures.master_fault_spans]
                        for kind, ts in times.items()}
    seen = visible()
    figures.tx_acked = len(workload.tx_acked)
    figures.tx_committed_lost = sum(1 for k in wanted if seen[k] == 0)
    figures.tx_duplicated = sum(1 for k in workload.tx_acked if seen[k] > 1)
    figures.tx_rollback_visible = sum(1 for k in workload.tx_acked
                                      if workload.listener.intended.get(k) == ROLLBACK and seen[k])
    _check_consumed(workload, figures, acked | wanted, CONSUMER_CATCH_UP_S)
    # One start offset per epoch across every replica's epoch file (two masters of one epoch would differ).
    import orjson

    starts: dict[int, set[int]] = {}
    for r in group.ids:
        for epoch, start in orjson.loads((group.store(r) / "epochFileCheckpoint").read_bytes()):
            starts.setdefault(epoch, set()).add(start)
    figures.split_brain_epochs = sum(1 for s in starts.values() if len(s) > 1)


WARM_UP_ACKS = 25  # per producer, before the first fault
CONSUMER_CATCH_UP_S = 30.0  # after the last fault and the replicas' check; it catches up within seconds


def _check_consumed(workload: Workload, figures: Figures, wanted: set[str], timeout: float) -> None:
    """What the consumer got, at least once: every acknowledged send and COMMIT (given ``timeout`` more to catch
    up), no ROLLBACK and no half message."""
    def got() -> set[str]:
        return {d.keys or "" for d in workload.recorder.deliveries}

    wait_until(lambda: wanted <= got(), timeout)
    deliveries = list(workload.recorder.deliveries)
    keys = got()
    figures.consumed = len(deliveries)
    figures.consumed_missing = len(wanted - keys)
    figures.consumed_missing_keys = sorted(wanted - keys)[:20]
    figures.consumed_rollback = sum(1 for k in keys if workload.listener.intended.get(k) == ROLLBACK)
    figures.consumed_halves = sum(1 for d in deliveries
                                  if d.properties.get(MessageConst.TRANSACTION_PREPARED) == "true")


def _longest_pause(times: list[float], span: tuple[float, float]) -> float:
    """The longest gap between consecutive acknowledgements (sorted ``times``) overlapping ``span``: from the
    last one before it, through those within it, to the first after it. None after its start: the time from
    the last one before it (or its start) to its end, a lower bound."""
    start, end = span
    i, j = bisect.bisect_right(times, start), bisect.bisect_right(times, end)
    if i == len(times):
        return end - (times[i - 1] if i else start)
    points = ([] if i else [start]) + times[max(i - 1, 0):j + 1]
    return max(b - a for a, b in itertools.pairwise(points))


def run_campaign(cluster: Any, group: FailoverGroup, faults: Iterable[str], rng: random.Random, home: Path,
                 on_fault: Callable[[int, str, Figures], None] | None = None) -> Figures:
    """The campaign on a started group: its topics, the workload (the external clients' processes under
    ``home``; the RocketMQ 5 client when the group serves gRPC), each fault in turn (``faults`` may be drawn
    lazily from ``rng``), then the invariants read from every replica. Shared by tests/e2e/test_failover.py and
    bench/faults.py."""
    group.wait_master(30, full_set=True)
    topics = (TOPIC, TX_TOPIC, CPP_TOPIC, GRPC_TOPIC)
    with Admin(cluster.namesrv_addr) as admin:
        for topic in topics:
            admin.create_topic(topic, queue_nums=4)
    for topic in topics:
        cluster.wait_route(topic)
        group.wait_topic_copied(topic)  # the slaves copy the topic configs (slaveSynchronizeInterval 1 s)
    workload = Workload(cluster.namesrv_addr, home, group.grpc_endpoints if group.grpc else "")
    workload.start()
    figures = Figures()
    try:
        # The first fault waits until every producer has WARM_UP_ACKS sends acknowledged, which the faults must then
        # keep: a kill at a client's start left the RocketMQ 5 client on a dead route for its 30 s route refresh,
        # longer than a short campaign, with nothing acknowledged to check.
        assert wait_until(lambda: min(len(workload.acked), len(workload.tx_acked),
                                      *(len(d.acked) for d in workload.drivers.values())) >= WARM_UP_ACKS, 30), \
            {"txmq": len(workload.acked), "tx": len(workload.tx_acked),
             **{kind: len(d.acked) for kind, d in workload.drivers.items()}}
        for n, fault in enumerate(faults):
            inject(group, workload, fault, figures, rng)
            if on_fault is not None:
                on_fault(n, fault, figures)
        time.sleep(1.0)
    finally:
        workload.close()
    try:
        check(group, workload, figures)
    finally:
        workload.close_tx()
    return figures
