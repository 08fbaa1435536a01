"""A fault campaign against a controller-mode group (tests/e2e/test_failover.py runs a short one, bench/faults.py
a long one): producers and transaction producers run while the master is SIGKILLed, SIGSTOPped past its lease,
or cut off from the controller and its slaves; at the end every replica is read from disk and checked."""

from __future__ import annotations

import contextlib
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

from failover_group import FailoverGroup, log_messages
from ha_group import commit_log_bytes, max_offset
from helpers import wait_until

from txmq import Admin, LocalTransactionState, Message, Producer, SendStatus, TransactionProducer
from txmq.message import MessageConst, decode_offset_msg_id

TOPIC, TX_TOPIC, CPP_TOPIC = "fo", "fo-tx", "fo-cpp"
CPP_DRIVER = Path(__file__).with_name("cpp") / "cpp_driver.py"
COMMIT, ROLLBACK = LocalTransactionState.COMMIT, LocalTransactionState.ROLLBACK


@dataclass
class Figures:
    faults: Counter[str] = field(default_factory=Counter)
    sends_acked: int = 0
    cpp_sends_acked: int = 0
    sends_lost: int = 0
    sends_duplicated: int = 0
    tx_acked: int = 0
    tx_committed_lost: int = 0
    tx_duplicated: int = 0
    tx_rollback_visible: int = 0
    split_brain_epochs: int = 0
    failover_s: list[float] = field(default_factory=list)
    replicas_identical: bool = False


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


class CppProducer:
    """The RocketMQ C++ client (``rocketmq==0.4.4``) sending SYNC to ``CPP_TOPIC`` in its own process, one
    attempt per message; its ``sent`` lines say which were acknowledged."""

    def __init__(self, namesrv: str, home: Path) -> None:
        home.mkdir(parents=True, exist_ok=True)
        self.acked: set[str] = set()
        self.proc = subprocess.Popen(
            [sys.executable, str(CPP_DRIVER), "produce", "--namesrv", namesrv, "--topic", CPP_TOPIC, "--count",
             "1000000", "--mode", "sync", "--keys-prefix", "c-", "--retry-times", "0", "--interval", "0.02",
             "--fast-exit"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
            env=dict(os.environ, HOME=str(home)), start_new_session=True)
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            with contextlib.suppress(ValueError):
                event = json.loads(line)
                if event.get("event") == "sent" and event.get("status") == "OK":
                    self.acked.add(f"c-{event['i']}")

    def stop(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(10)
        self.reader.join(5)
        if self.proc.stdout is not None:
            self.proc.stdout.close()


class Workload:
    """One thread of plain sends (no client retries: one attempt per message) and one of transactions; each
    records what the broker acknowledged."""

    def __init__(self, namesrv: str, cpp_home: Path | None = None) -> None:
        self.namesrv = namesrv
        self.cpp_home = cpp_home  # None: no C++ producer
        self.cpp: CppProducer | None = None
        self.acked: set[str] = set()
        self.tx_acked: set[str] = set()
        self.listener = Listener()
        self.stop = threading.Event()
        self.last_ack = (0.0, "")  # monotonic time and broker address of the last acknowledged send
        self.producer = Producer("fo-p", namesrv, retry_times=0, send_timeout_s=3.0)
        self.tx_producer = TransactionProducer("fo-tx-p", self.listener, namesrv, send_timeout_s=3.0)
        self.threads = [threading.Thread(target=self._sends, daemon=True),
                        threading.Thread(target=self._transactions, daemon=True)]

    def start(self) -> None:
        self.producer.start()
        self.tx_producer.start()
        for t in self.threads:
            t.start()
        if self.cpp_home is not None:
            self.cpp = CppProducer(self.namesrv, self.cpp_home)

    def _sends(self) -> None:
        i = 0
        while not self.stop.is_set():
            key = f"s-{i}"
            i += 1
            try:
                r = self.producer.send(Message(TOPIC, key.encode() * 20, keys=key))
                if r.status == SendStatus.SEND_OK:
                    self.acked.add(key)
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
                else:
                    time.sleep(0.05)
            except Exception:
                time.sleep(0.05)
            i += 1

    def close(self) -> None:
        if self.cpp is not None:
            self.cpp.stop()
        self.stop.set()
        for t in self.threads:
            t.join(15)
        self.producer.shutdown()

    def close_tx(self) -> None:
        self.tx_producer.shutdown()


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
    t0 = time.monotonic()
    if fault == RESTART_FAULT:
        epoch = group.state()["epoch"]
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
        return
    if fault == "kill":
        victim.kill()
    elif fault == "pause":
        os.kill(victim.pid, signal.SIGSTOP)
    else:
        group.proxies[master].cut()
    group.wait_master(60, not_id=master)
    took = _wait_sends(workload, t0, group.addr(master), 30)
    if took is not None:
        figures.failover_s.append(took)
    if fault == "kill":
        victim.start()
    elif fault == "pause":
        os.kill(victim.pid, signal.SIGCONT)
    else:
        group.proxies[master].heal()
    group.wait_master(60, full_set=True)


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
    sends = Counter(m.keys for m in msgs if m.topic in (TOPIC, CPP_TOPIC))
    cpp_acked = workload.cpp.acked if workload.cpp is not None else set()
    acked = workload.acked | cpp_acked
    figures.sends_acked = len(acked)
    figures.cpp_sends_acked = len(cpp_acked)
    figures.sends_lost = sum(1 for k in acked if sends[k] == 0)
    figures.sends_duplicated = sum(1 for k in acked if sends[k] > 1)
    seen = visible()
    figures.tx_acked = len(workload.tx_acked)
    figures.tx_committed_lost = sum(1 for k in wanted if seen[k] == 0)
    figures.tx_duplicated = sum(1 for k in workload.tx_acked if seen[k] > 1)
    figures.tx_rollback_visible = sum(1 for k in workload.tx_acked
                                      if workload.listener.intended.get(k) == ROLLBACK and seen[k])
    # One start offset per epoch across every replica's epoch file (two masters of one epoch would differ).
    import orjson

    starts: dict[int, set[int]] = {}
    for r in group.ids:
        for epoch, start in orjson.loads((group.store(r) / "epochFileCheckpoint").read_bytes()):
            starts.setdefault(epoch, set()).add(start)
    figures.split_brain_epochs = sum(1 for s in starts.values() if len(s) > 1)


def run_campaign(cluster: Any, group: FailoverGroup, faults: Iterable[str], rng: random.Random, cpp_home: Path,
                 on_fault: Callable[[int, str, Figures], None] | None = None) -> Figures:
    """The campaign on a started group: its topics, the workload, each fault in turn (``faults`` may be drawn
    lazily from ``rng``), then the invariants read from every replica. Shared by tests/e2e/test_failover.py and
    bench/faults.py."""
    group.wait_master(30, full_set=True)
    with Admin(cluster.namesrv_addr) as admin:
        for topic in (TOPIC, TX_TOPIC, CPP_TOPIC):
            admin.create_topic(topic, queue_nums=4)
    for topic in (TOPIC, TX_TOPIC, CPP_TOPIC):
        cluster.wait_route(topic)
    time.sleep(2.0)  # the slaves copy the topic configs (slaveSynchronizeInterval 1 s)
    workload = Workload(cluster.namesrv_addr, cpp_home)
    workload.start()
    figures = Figures()
    try:
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
