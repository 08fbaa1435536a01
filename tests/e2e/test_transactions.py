"""Transactional messages end to end, against real broker processes (issue 4; the contract in README, Transactions).

Short settings: transactionTimeOut 1 s, transactionCheckInterval 0.5 s (the broker's check wheel has
one-second buckets, so a check comes 1–2 s after the half message, then about every second).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import orjson
import pytest

from tests.e2e.cluster import ALL_HOURS
from tests.e2e.helpers import addr_of, carry_forged_record, hold_unregister
from txmq import (
    Admin,
    BrokerError,
    ClientError,
    ConsumeFromWhere,
    ConsumeStatus,
    LocalTransactionState,
    Message,
    MessageQueue,
    Producer,
    PullConsumer,
    PullStatus,
    PushConsumer,
    SendStatus,
    TransactionProducer,
)
from txmq.message import MessageExt, MessageSysFlag, decode_offset_msg_id
from txmq.remoting.codec import encode_command
from txmq.remoting.codes import RequestCode, ResponseCode
from txmq.remoting.command import RemotingCommand
from txmq.remoting.request_headers import EndTransactionRequestHeader
from txmq.remoting.transport import RemotingClient

COMMIT, ROLLBACK, UNKNOWN = LocalTransactionState.COMMIT, LocalTransactionState.ROLLBACK, LocalTransactionState.UNKNOWN
TX_CONF: dict[str, object] = {"transactionTimeOut": 1000, "transactionCheckInterval": 500, "transactionCheckMax": 3,
                              "flushDiskType": "SYNC_FLUSH"}
HALF_TOPIC = "RMQ_SYS_TRANS_HALF_TOPIC"
CHECK_MAX_TOPIC = "TRANS_CHECK_MAX_TIME_TOPIC"


# --- helpers -------------------------------------------------------------------------------------------


def wait_for(pred: Callable[[], Any], timeout: float, what: str, interval: float = 0.1) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        got = pred()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


def tx_stats(namesrv: str, broker: str = "broker-a") -> dict[str, Any]:
    with Admin(namesrv) as admin:
        return admin.stats()[broker]["transactions"]  # type: ignore[no-any-return]


def create_topic(cluster: Any, topic: str, queues: int = 4) -> None:
    with Admin(cluster.namesrv_addr) as admin:
        admin.create_topic(topic, queues)
    cluster.wait_route(topic)


def scan_topic(namesrv: str, topic: str, group: str = "scan_tx") -> list[Any]:
    """Every message stored in ``topic``, read queue by queue from offset 0 to the end."""
    out = []
    with PullConsumer(group, namesrv) as pc:
        for mq in pc.fetch_subscribe_message_queues(topic):
            offset, end = 0, pc.max_offset(mq)
            while offset < end:
                r = pc.pull(mq, "*", offset, 32)
                if r.status != PullStatus.FOUND:
                    break
                out.extend(r.msgs)
                offset = r.next_begin_offset
    return out


def cli(cluster: Any, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "txmq.cli", *args, "-n", cluster.namesrv_addr],
                          capture_output=True, text=True, timeout=60, env=cluster.env)


class Collector:
    """A PushConsumer counting bodies of one topic from its first offset."""

    def __init__(self, namesrv: str, topic: str, group: str) -> None:
        self.bodies: Counter[str] = Counter()
        self.lock = threading.Lock()
        self.consumer = PushConsumer(group, namesrv, consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
                                     rebalance_interval_s=2.0)
        self.consumer.subscribe(topic, "*")
        self.consumer.register_listener(self._on)
        self.consumer.start()

    def _on(self, msgs: list[Any]) -> ConsumeStatus:
        with self.lock:
            for m in msgs:
                self.bodies[m.body.decode()] += 1
        return ConsumeStatus.SUCCESS

    def total(self) -> int:
        with self.lock:
            return sum(self.bodies.values())

    def wait_exactly(self, expected: set[str], timeout: float, quiet: float = 1.5) -> None:
        """Wait for ``expected``, then a quiet period; assert nothing else and nothing twice arrived."""
        wait_for(lambda: expected <= set(self.bodies), timeout,
                 f"{len(expected)} messages (got {len(set(self.bodies) & expected)})", 0.2)
        time.sleep(quiet)
        with self.lock:
            extra = set(self.bodies) - expected
            dups = {b: n for b, n in self.bodies.items() if n > 1}
        assert not extra, f"unexpected messages consumed: {sorted(extra)[:10]}"
        assert not dups, f"messages consumed more than once: {dict(list(dups.items())[:10])}"

    def close(self) -> None:
        self.consumer.shutdown()


def body_no(msg: Any) -> int:
    return int(msg.body.decode().rsplit("-", 1)[1])


class RuleListener:
    """Decides by the number in the body, so check answers always agree with what execute decided."""

    def __init__(self, execute: Callable[[int], LocalTransactionState],
                 check: Callable[[int], LocalTransactionState]) -> None:
        self.execute, self.check = execute, check
        self.lock = threading.Lock()
        self.checked: Counter[int] = Counter()
        self.check_times: dict[int, list[float]] = {}

    def execute_local_transaction(self, msg: Message, arg: Any) -> LocalTransactionState:
        return self.execute(body_no(msg))

    def check_local_transaction(self, msg: Any) -> LocalTransactionState:
        n = body_no(msg)
        with self.lock:
            self.checked[n] += 1
            self.check_times.setdefault(n, []).append(time.monotonic())
        return self.check(n)


def end_tx_header(producer: TransactionProducer, result: Any, state: int, group: str | None = None) -> dict[str, str]:
    _, clo = decode_offset_msg_id(result.offset_msg_id)
    return EndTransactionRequestHeader(producer_group=group or producer.group,
                                       tran_state_table_offset=result.queue_offset, commit_log_offset=clo,
                                       commit_or_rollback=state, from_transaction_check=False,
                                       msg_id=result.msg_id, transaction_id="").to_ext()


async def raw_end(addr: str, ext: dict[str, str], copies: int = 1) -> list[RemotingCommand]:
    async with RemotingClient() as client:
        cmds = [RemotingCommand.request(RequestCode.END_TRANSACTION, dict(ext)) for _ in range(copies)]
        return list(await asyncio.gather(*(client.invoke(addr, c, 5.0) for c in cmds)))


def max_offsets(namesrv: str, topic: str) -> int:
    with PullConsumer("scan_tx_max", namesrv) as pc:
        return sum(pc.max_offset(mq) for mq in pc.fetch_subscribe_message_queues(topic))


# --- the seeds' example ----------------------------------------------------------------------------------


def test_seed_example_3000_transactions(cluster):
    """execute answers UNKNOWN, COMMIT, ROLLBACK by turns; check gives a fixed outcome per transaction."""
    cluster.start_broker("broker-a", TX_CONF)
    topic, n_total, threads = "tx_seed", 3000, 6
    create_topic(cluster, topic)
    turns = [UNKNOWN, COMMIT, ROLLBACK]

    def final(n: int) -> LocalTransactionState:  # what check answers for the UNKNOWN ones
        return COMMIT if n % 2 == 0 else ROLLBACK

    listener = RuleListener(lambda n: turns[n % 3], final)
    sent_at: dict[int, tuple[float, float]] = {}
    results: dict[int, Any] = {}
    collector = Collector(cluster.namesrv_addr, topic, "c_tx_seed")
    started = time.monotonic()
    producer = TransactionProducer("p_tx_seed", listener, cluster.namesrv_addr, check_thread_pool_size=4)
    producer.start()
    try:
        def send(n: int) -> None:
            before = time.monotonic()
            r = producer.send_message_in_transaction(Message(topic, f"seed-{n}".encode(), keys=f"k{n}"))
            sent_at[n] = (before, time.monotonic())
            results[n] = r

        with ThreadPoolExecutor(threads) as pool:
            list(pool.map(send, range(n_total)))
        send_s = time.monotonic() - started
        # Half messages are sent once (no retry), without changing the producer's retry setting for others.
        assert producer.retry_times == 2
        assert all(r.status == SendStatus.SEND_OK for r in results.values())
        assert {n: r.local_transaction_state for n, r in results.items()} == {n: turns[n % 3] for n in range(n_total)}
        assert len({r.transaction_id for r in results.values()}) == n_total

        unknown = {n for n in range(n_total) if n % 3 == 0}
        committed = {f"seed-{n}" for n in range(n_total)
                     if turns[n % 3] == COMMIT or (n in unknown and final(n) == COMMIT)}
        collector.wait_exactly(committed, 60)

        st = wait_for(lambda: (s := tx_stats(cluster.namesrv_addr))["pending"] == 0 and s, 30, "no pending")
        # Only the UNKNOWN ones were ever checked, each once, no sooner than transactionTimeOut after its
        # half message and within transactionTimeOut + transactionCheckInterval (+ whole-second buckets and slack).
        assert set(listener.checked) == unknown
        assert set(listener.checked.values()) == {1}
        for n in unknown:
            before, after = sent_at[n]
            t = listener.check_times[n][0]
            assert t - before >= 1.0 - 0.05, f"seed-{n} checked {t - before:.3f}s after its half message"
            assert t - after <= 1.0 + 0.5 + 1.5, f"seed-{n} checked only {t - after:.3f}s after its send returned"
        n_rolled = n_total - len(committed)
        assert (st["commits"], st["rollbacks"], st["checks"]) == (len(committed), n_rolled, len(unknown))
        assert (st["discards"], st["conflicts"], st["discarded"]) == (0, 0, 0)
        assert st["pendingPerTopic"] == {}
        assert set(st["commitLatencyMs"]) == {"p50", "p90", "p99"}
        assert producer.checks_received == len(unknown)
        print(f"\n3000 transactions sent in {send_s:.1f}s, all resolved in {time.monotonic() - started:.1f}s")
    finally:
        producer.shutdown()
        collector.close()
    # The CLI shows the same numbers.
    out = cli(cluster, "stats", "--json")
    assert out.returncode == 0, out.stderr
    tx = json.loads(out.stdout)["broker-a"]["transactions"]
    assert (tx["pending"], tx["commits"], tx["checks"]) == (0, len(committed), len(unknown))


# --- END_TRANSACTION: duplicates and conflicts, also after restarts --------------------------------------


@pytest.mark.dated
@pytest.mark.parametrize("restart", ["SIGTERM", "SIGKILL"])
def test_duplicate_and_conflicting_end_transaction(cluster, restart):
    broker = cluster.start_broker("broker-a", TX_CONF)
    topic = "tx_dup"
    create_topic(cluster, topic, 1)
    listener = RuleListener(lambda n: UNKNOWN, lambda n: UNKNOWN)
    producer = TransactionProducer("p_tx_dup", listener, cluster.namesrv_addr)
    producer.start()
    try:
        # a: committed twice; b: rolled back then committed; c: 5 concurrent COMMITs.
        a, b, c = (producer.send_message_in_transaction(Message(topic, f"dup-{i}".encode())) for i in range(3))
    finally:
        producer.shutdown()
    assert all(r.status == SendStatus.SEND_OK and r.local_transaction_state == UNKNOWN for r in (a, b, c))
    addr = broker.addrs["broker"]
    commit, rollback = MessageSysFlag.TRANSACTION_COMMIT_TYPE, MessageSysFlag.TRANSACTION_ROLLBACK_TYPE
    ha, hb, hc = end_tx_header(producer, a, commit), end_tx_header(producer, b, rollback), \
        end_tx_header(producer, c, commit)
    ha_rb, hb_commit = dict(ha, commitOrRollback=str(rollback)), dict(hb, commitOrRollback=str(commit))

    def run() -> list[int]:
        codes = [r.code for r in asyncio.run(raw_end(addr, ha))]
        codes += [r.code for r in asyncio.run(raw_end(addr, ha))]
        codes += [r.code for r in asyncio.run(raw_end(addr, ha_rb))]
        codes += [r.code for r in asyncio.run(raw_end(addr, hb))]
        codes += [r.code for r in asyncio.run(raw_end(addr, hb_commit))]
        codes += [r.code for r in asyncio.run(raw_end(addr, hc, copies=5))]
        return codes

    expected = [ResponseCode.SUCCESS, ResponseCode.SUCCESS, ResponseCode.TRANSACTION_SHOULD_COMMIT,
                ResponseCode.SUCCESS, ResponseCode.TRANSACTION_SHOULD_ROLLBACK] + [ResponseCode.SUCCESS] * 5
    assert run() == expected
    # A wrong producer group is refused and changes nothing.
    wrong = asyncio.run(raw_end(addr, end_tx_header(producer, b, commit, group="p_other")))[0]
    assert wrong.code == ResponseCode.SYSTEM_ERROR and "group" in (wrong.remark or "")

    def check_store() -> None:
        assert max_offsets(cluster.namesrv_addr, topic) == 2
        bodies = Counter(m.body.decode() for m in scan_topic(cluster.namesrv_addr, topic))
        assert bodies == {"dup-0": 1, "dup-2": 1}

    check_store()
    st = tx_stats(cluster.namesrv_addr)
    assert (st["commits"], st["rollbacks"], st["pending"], st["conflicts"]) == (2, 1, 0, 2)
    assert st["duplicates"] == 1 + 4

    (broker.stop if restart == "SIGTERM" else broker.kill)()
    broker.start()
    cluster.wait_route(topic)
    assert run() == expected
    check_store()
    st = tx_stats(cluster.namesrv_addr)
    assert st["pending"] == 0 and st["commits"] == 0  # nothing new was committed after the restart


def forged_half(half_offset: int, group: str, real_topic: str) -> MessageExt:
    """A half message claiming half offset ``half_offset`` for ``group``: what a producer forges in a body
    (``carry_forged_record``)."""
    return MessageExt(HALF_TOPIC, b"forged", {"PGROUP": group, "REAL_TOPIC": real_topic, "REAL_QID": "0",
                                              "TRAN_MSG": "true", "UNIQ_KEY": "F" * 32}, queue_offset=half_offset)


def test_a_half_forged_in_a_message_body_decides_nothing(cluster):
    broker = cluster.start_broker("broker-a", TX_CONF)
    victim_topic, carrier, forged_topic = "tx_victim", "tx_carrier", "tx_forged"
    for t in (victim_topic, carrier, forged_topic):
        create_topic(cluster, t, 1)
    listener = RuleListener(lambda n: UNKNOWN, lambda n: UNKNOWN)
    with TransactionProducer("p_tx_victim", listener, cluster.namesrv_addr) as victim:
        pending = victim.send_message_in_transaction(Message(victim_topic, b"victim-0"))
    assert pending.status == SendStatus.SEND_OK
    with Producer("p_tx_forger", cluster.namesrv_addr) as forger:
        forged = forged_half(pending.queue_offset, "p_tx_forger", forged_topic)
        at = decode_offset_msg_id(carry_forged_record(forger, carrier, forged))[1]
    # The forger's own group, the victim's half offset, a commit-log offset inside the forger's message body.
    ext = EndTransactionRequestHeader(producer_group="p_tx_forger", tran_state_table_offset=pending.queue_offset,
                                      commit_log_offset=at, commit_or_rollback=MessageSysFlag.TRANSACTION_COMMIT_TYPE,
                                      from_transaction_check=False, msg_id="", transaction_id="").to_ext()
    answer = asyncio.run(raw_end(broker.addrs["broker"], ext))[0]
    assert answer.code == ResponseCode.SYSTEM_ERROR, answer.remark
    assert scan_topic(cluster.namesrv_addr, forged_topic) == []
    assert tx_stats(cluster.namesrv_addr)["pending"] == 1
    # The victim's own COMMIT stores its message.
    mine = asyncio.run(raw_end(broker.addrs["broker"], end_tx_header(victim, pending,
                                                                      MessageSysFlag.TRANSACTION_COMMIT_TYPE)))[0]
    assert mine.code == ResponseCode.SUCCESS, mine.remark
    assert [m.body for m in scan_topic(cluster.namesrv_addr, victim_topic)] == [b"victim-0"]


# --- a listener that never decides ---------------------------------------------------------------------------


class Switchable:
    def __init__(self) -> None:
        self.state = UNKNOWN
        self.checks = 0

    def execute_local_transaction(self, msg: Message, arg: Any) -> LocalTransactionState:
        return UNKNOWN

    def check_local_transaction(self, msg: Any) -> LocalTransactionState:
        self.checks += 1
        return self.state


@pytest.mark.dated
def test_never_decided_is_discarded_listed_and_resumed(cluster):
    cluster.start_broker("broker-a", TX_CONF)
    topic = "tx_never"
    create_topic(cluster, topic, 1)
    listener = Switchable()
    collector = Collector(cluster.namesrv_addr, topic, "c_tx_never")
    producer = TransactionProducer("p_tx_never", listener, cluster.namesrv_addr)
    producer.start()
    try:
        r = producer.send_message_in_transaction(Message(topic, b"never-1", keys="never"))
        assert r.status == SendStatus.SEND_OK
        txid = r.transaction_id
        st = wait_for(lambda: (s := tx_stats(cluster.namesrv_addr))["discards"] == 1 and s, 15, "a discard")
        assert st["checks"] == 3 and listener.checks == 3 and st["pending"] == 0 and st["discarded"] == 1
        assert max_offsets(cluster.namesrv_addr, CHECK_MAX_TOPIC) == 1

        out = cli(cluster, "tx", "list", "--json")
        assert out.returncode == 0, out.stderr
        data = json.loads(out.stdout)["broker-a"]
        assert data["pending"] == [] and data["totals"] == [{"pending": 0, "discarded": 1}]
        (d,) = data["discarded"]
        assert (d["transactionId"], d["topic"], d["group"], d["checks"], d["state"]) == \
            (txid, topic, "p_tx_never", 3, "DISCARD")
        text = cli(cluster, "tx", "list")
        assert text.returncode == 0 and "1 discarded" in text.stdout
        assert txid in text.stdout and "checks=3" in text.stdout

        out = cli(cluster, "tx", "show", txid, "--json")
        assert out.returncode == 0, out.stderr
        shown = json.loads(out.stdout)
        assert (shown["transactionId"], shown["state"], shown["checks"], shown["keys"]) == (txid, "DISCARD", 3, "never")

        time.sleep(2.5)  # a discarded transaction is not checked any more
        assert listener.checks == 3

        listener.state = COMMIT
        out = cli(cluster, "tx", "resume", txid)
        assert out.returncode == 0, out.stderr
        assert "resumed" in out.stdout
        collector.wait_exactly({"never-1"}, 15)
        st = tx_stats(cluster.namesrv_addr)
        assert (st["commits"], st["pending"], st["discarded"], st["resumes"], st["checks"]) == (1, 0, 0, 1, 4)
        assert "resumes=1" in cli(cluster, "stats").stdout  # the text shows what --json does
        assert json.loads(cli(cluster, "tx", "show", txid, "--json").stdout)["state"] == "COMMIT"
        again = cli(cluster, "tx", "resume", txid)  # only a discarded transaction can be resumed
        assert again.returncode != 0 and "COMMIT" in again.stderr
    finally:
        producer.shutdown()
        collector.close()


def test_checks_count_only_when_a_producer_is_connected(cluster):
    broker = cluster.start_broker("broker-a", TX_CONF)
    topic = "tx_orphan"
    create_topic(cluster, topic, 1)
    first = TransactionProducer("p_tx_orphan", Switchable(), cluster.namesrv_addr)
    first.start()
    try:
        first.send_message_in_transaction(Message(topic, b"orphan-1"))
    finally:
        first.shutdown()  # unregisters: no producer of the group is connected
    time.sleep(4.0)  # transactionTimeOut + several intervals, more than transactionCheckMax passes
    st = tx_stats(cluster.namesrv_addr)
    assert (st["pending"], st["checks"], st["discards"]) == (1, 0, 0)
    out = json.loads(cli(cluster, "tx", "list", "--json").stdout)["broker-a"]
    assert [(t["checks"], t["state"]) for t in out["pending"]] == [(0, "PENDING")]
    assert out["pending"][0]["ageS"] >= 3.5

    # Also across a restart: recovery keeps it pending with no checks.
    broker.kill()
    broker.start()
    cluster.wait_route(topic)
    time.sleep(2.5)
    st = tx_stats(cluster.namesrv_addr)
    assert (st["pending"], st["checks"], st["discards"]) == (1, 0, 0)

    with committing_producer(cluster, "p_tx_orphan", topic, "c_tx_orphan") as (second, _, collector):
        second.send_message_in_transaction(Message(topic, b"orphan-2"))  # UNKNOWN too; both resolved by check
        collector.wait_exactly({"orphan-1", "orphan-2"}, 15)
        st = tx_stats(cluster.namesrv_addr)
        assert (st["pending"], st["commits"], st["checks"], st["discards"]) == (0, 2, 2, 0)


def test_a_transaction_producer_started_again_answers_check_backs(cluster):
    """A ``TransactionProducer`` shut down and started again (as a ``Producer`` may be) answers the broker's
    check-backs: its check threads are its own at each start. Its pool was the one the first ``shutdown()`` ended:
    every check raised in the handler ("cannot schedule new futures after shutdown"), held a place of the check
    queue for good, and the transaction was never decided."""
    cluster.start_broker("broker-a", TX_CONF)
    topic = "tx_started_again"
    create_topic(cluster, topic, 1)
    listener = Switchable()
    listener.state = COMMIT  # execute answers UNKNOWN: the check decides
    producer = TransactionProducer("p_tx_again", listener, cluster.namesrv_addr)
    producer.start()
    producer.shutdown()
    collector = Collector(cluster.namesrv_addr, topic, "c_tx_again")
    producer.start()
    try:
        producer.send_message_in_transaction(Message(topic, b"again-1"))
        collector.wait_exactly({"again-1"}, 15)
    finally:
        producer.shutdown()
        collector.close()


def test_a_local_transaction_that_ends_while_the_producer_shuts_down_is_still_committed(cluster, monkeypatch):
    """``shutdown()`` began while a local transaction ran (its unregistration held here, the loop still up): the
    transaction's END_TRANSACTION is still sent, so its message is committed at once, not left to a check-back
    (a minute away here) after every other call of the producer is refused."""
    cluster.start_broker("broker-a", {**TX_CONF, "transactionTimeOut": 60_000, "transactionCheckInterval": 60_000})
    topic = "tx_end_while_stopping"
    create_topic(cluster, topic, 1)
    executing, finish = threading.Event(), threading.Event()

    class Listener:
        def execute_local_transaction(self, msg: Message, arg: Any) -> LocalTransactionState:
            executing.set()
            finish.wait(10)
            return COMMIT

        def check_local_transaction(self, msg: Any) -> LocalTransactionState:
            return COMMIT

    producer = TransactionProducer("p_tx_stopping", Listener(), cluster.namesrv_addr).start()
    unregistering, release = hold_unregister(producer, monkeypatch)
    with ThreadPoolExecutor(2) as pool:
        sending = pool.submit(producer.send_message_in_transaction, Message(topic, b"ended while stopping"))
        assert executing.wait(10)
        stopping = pool.submit(producer.shutdown)
        try:
            assert unregistering.wait(10)
            finish.set()
            assert sending.result(10).local_transaction_state == COMMIT
            wait_for(lambda: [m.body for m in scan_topic(cluster.namesrv_addr, topic)] == [b"ended while stopping"],
                     10, "the committed message")
        finally:
            finish.set()
            release.set()
            stopping.result(15)


def test_shutdown_inside_check_local_transaction_is_refused_and_the_check_answered(cluster):
    """``shutdown()`` called from ``check_local_transaction`` raises ``ClientError`` at once and changes nothing
    (a shutdown waits for the checks in progress: this one is its own caller), and the check's answer goes out. The
    producer was shut down under the check, which then raised ``RuntimeError`` ("cannot join current thread")."""
    cluster.start_broker("broker-a", TX_CONF)
    topic = "tx_stop_in_check"
    create_topic(cluster, topic, 1)
    raised: list[BaseException] = []

    class StoppingInCheck(Switchable):
        def check_local_transaction(self, msg: Any) -> LocalTransactionState:
            if not raised:
                try:
                    producer.shutdown()
                except BaseException as exc:
                    raised.append(exc)
            return COMMIT

    producer = TransactionProducer("p_tx_stop_in_check", StoppingInCheck(), cluster.namesrv_addr)
    collector = Collector(cluster.namesrv_addr, topic, "c_tx_stop_in_check")
    producer.start()
    try:
        producer.send_message_in_transaction(Message(topic, b"stop-1"))  # UNKNOWN: the check decides
        collector.wait_exactly({"stop-1"}, 15)
        assert producer.started
    finally:
        producer.shutdown()
        collector.close()
    assert [type(exc) for exc in raised] == [ClientError], raised


def test_shutdown_returns_while_a_check_never_returns(cluster):
    """A ``check_local_transaction`` that never returns (a database that hangs) does not keep ``shutdown()`` from
    returning: it waits a while for the checks in progress, then leaves them (their answers would go nowhere; the
    broker checks the transaction again with the group's next producer)."""
    cluster.start_broker("broker-a", TX_CONF)
    topic = "tx_check_hangs"
    create_topic(cluster, topic, 1)
    entered, release = threading.Event(), threading.Event()

    class Hanging(Switchable):
        def check_local_transaction(self, msg: Any) -> LocalTransactionState:
            entered.set()
            release.wait()
            return ROLLBACK

    producer = TransactionProducer("p_tx_check_hangs", Hanging(), cluster.namesrv_addr)
    producer.start()
    stopper = threading.Thread(target=producer.shutdown, name="stopper")
    try:
        producer.send_message_in_transaction(Message(topic, b"hang-1"))  # UNKNOWN: the check decides
        assert entered.wait(15), "no check came"
        stopper.start()
        stopper.join(20)
        assert not stopper.is_alive(), "shutdown() did not return while a check hangs"
        assert not producer.started
    finally:
        release.set()
        if stopper.is_alive():
            stopper.join(30)


HANGING_CHECK_CHILD = """
import sys, threading
from txmq import LocalTransactionState, Message, TransactionProducer

entered = threading.Event()

class Hanging:
    def execute_local_transaction(self, msg, arg):
        return LocalTransactionState.UNKNOWN

    def check_local_transaction(self, msg):
        entered.set()
        threading.Event().wait()  # a database call that never returns

producer = TransactionProducer("p_tx_check_hangs_exit", Hanging(), sys.argv[1])
producer.start()
producer.send_message_in_transaction(Message(sys.argv[2], b"hang-1"))
assert entered.wait(30), "no check came"
producer.shutdown()
print("shut down", flush=True)
"""


def test_a_process_exits_after_shutdown_while_a_check_never_returns(cluster):
    """``shutdown()`` returns while a check hangs (the test above), and the process then ends when its main
    thread does: a producer process that hung at exit could not be restarted by its supervisor's stop."""
    cluster.start_broker("broker-a", TX_CONF)
    topic = "tx_check_hangs_exit"
    create_topic(cluster, topic, 1)
    proc = subprocess.Popen([sys.executable, "-c", HANGING_CHECK_CHILD, cluster.namesrv_addr, topic],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=cluster.env)
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "shut down", proc.stderr.read() if proc.stderr else ""
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            pytest.fail("the process did not exit after shutdown() returned")
        assert proc.returncode == 0
    finally:
        proc.kill()
        proc.wait(10)
        for stream in (proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()


@contextlib.contextmanager
def committing_producer(cluster, group: str, topic: str,
                        consumer_group: str) -> Iterator[tuple[TransactionProducer, Switchable, Collector]]:
    """A producer of ``group`` whose checks answer COMMIT, and a collector of ``topic``; both stopped after."""
    listener = Switchable()
    listener.state = COMMIT
    collector = Collector(cluster.namesrv_addr, topic, consumer_group)
    producer = TransactionProducer(group, listener, cluster.namesrv_addr)
    producer.start()
    try:
        yield producer, listener, collector
    finally:
        producer.shutdown()
        collector.close()


def test_orphan_halves_are_discarded_after_the_bound_and_resumable(cluster):
    """A half whose group never has a live producer was pending forever (the table grew without limit): it is
    discarded after transactionTimeOut x transactionOrphanFactor (1 s x 3 here), counted, listed, and resumed once a
    producer of the group is back. So is a half whose producer answered one check UNKNOWN and then left (its check
    count could never reach transactionCheckMax: it stayed pending until fileReservedTime)."""
    cluster.start_broker("broker-a", {**TX_CONF, "transactionOrphanFactor": 3})
    topic = "tx_orphan_bound"
    create_topic(cluster, topic, 1)
    first = TransactionProducer("p_tx_orphan_bound", Switchable(), cluster.namesrv_addr)
    asked = Switchable()  # answers UNKNOWN
    second = TransactionProducer("p_tx_orphan_checked", asked, cluster.namesrv_addr)
    first.start()
    try:
        txid = first.send_message_in_transaction(Message(topic, b"orphan")).transaction_id
        sent = time.monotonic()
    finally:
        first.shutdown()  # no producer of the group is connected any more
    second.start()
    try:
        checked_txid = second.send_message_in_transaction(Message(topic, b"checked")).transaction_id
        wait_for(lambda: asked.checks >= 1, 10, "the first check of the second half")
    finally:
        second.shutdown()  # gone after one check: the next finds no producer of its group
    st = wait_for(lambda: (s := tx_stats(cluster.namesrv_addr))["discards"] == 2 and s, 10, "the orphans' discards")
    assert time.monotonic() - sent >= 2.0  # not before the bound (3 s from its store second)
    assert (st["pending"], st["discarded"], st["orphans"], st["checks"]) == (0, 2, 2, 1)
    assert max_offsets(cluster.namesrv_addr, CHECK_MAX_TOPIC) == 2
    discarded = json.loads(cli(cluster, "tx", "list", "--json").stdout)["broker-a"]["discarded"]
    assert sorted((d["transactionId"], d["checks"], d["state"]) for d in discarded) == sorted(
        [(txid, 0, "DISCARD"), (checked_txid, 1, "DISCARD")])

    with committing_producer(cluster, "p_tx_orphan_bound", topic, "c_tx_orphan_bound") as (_, _, collector):
        out = cli(cluster, "tx", "resume", txid)
        assert out.returncode == 0, out.stderr
        collector.wait_exactly({"orphan"}, 15)
        st = tx_stats(cluster.namesrv_addr)
        assert (st["commits"], st["pending"], st["discarded"], st["resumes"], st["orphans"]) == (1, 0, 1, 1, 2)


def test_check_immunity_is_capped_by_the_orphan_bound(cluster):
    """CHECK_IMMUNITY_TIME_IN_SECONDS of a day delayed the first check by a day; the broker honours it only up to
    transactionTimeOut x transactionOrphanFactor (3 s here), so the producer is asked within seconds."""
    cluster.start_broker("broker-a", {**TX_CONF, "transactionOrphanFactor": 3})
    topic = "tx_immunity"
    create_topic(cluster, topic, 1)
    with committing_producer(cluster, "p_tx_immunity", topic, "c_tx_immunity") as (producer, listener, collector):
        sent = time.monotonic()
        producer.send_message_in_transaction(Message(topic, b"immune",
                                                     properties={"CHECK_IMMUNITY_TIME_IN_SECONDS": "86400"}))
        collector.wait_exactly({"immune"}, 15)
        assert time.monotonic() - sent >= 2.0
        assert listener.checks == 1
        st = tx_stats(cluster.namesrv_addr)
        assert (st["commits"], st["pending"], st["discards"]) == (1, 0, 0)


# --- retention -----------------------------------------------------------------------------------------------


def test_a_transaction_whose_half_retention_deleted_is_refused_with_the_reason(cluster):
    """The broker's own retention (segments of 64 KiB, fileReservedTime about a second) deletes a committed
    transaction's half: a late END_TRANSACTION for it, either way, and `txmq tx show|resume` answer that its half
    was deleted by retention; nothing is stored, and new transactions end as before."""
    broker = cluster.start_broker("broker-a", {**TX_CONF, "mappedFileSizeCommitLog": 64 * 1024,
                                               "fileReservedTime": 0.0003, "deleteWhen": ALL_HOURS,
                                               "cleanResourceInterval": 500})
    topic = "tx_retention"
    create_topic(cluster, topic, 1)
    listener = RuleListener(lambda n: COMMIT, lambda n: COMMIT)
    with TransactionProducer("p_tx_retention", listener, cluster.namesrv_addr) as producer:
        first = producer.send_message_in_transaction(Message(topic, b"retention-0"))
        assert first.local_transaction_state == COMMIT
        with Producer("p_tx_filler", cluster.namesrv_addr) as filler:
            for _ in range(24):  # three segments of plain messages after the half
                assert filler.send(Message("tx_retention_filler", b"f" * 8000)).status == SendStatus.SEND_OK
        addr = broker.addrs["broker"]
        commit = end_tx_header(producer, first, MessageSysFlag.TRANSACTION_COMMIT_TYPE)
        rollback = end_tx_header(producer, first, MessageSysFlag.TRANSACTION_ROLLBACK_TYPE)
        # a repeat ("already committed") until the store's checkpoint (3 s) and retention (every 0.5 s) have run
        refused = wait_for(lambda: (r := asyncio.run(raw_end(addr, commit))[0]).code != ResponseCode.SUCCESS and r,
                           30, "the half deleted by retention")
        assert refused.code == ResponseCode.SYSTEM_ERROR and "deleted by retention" in (refused.remark or ""), refused
        rolled = asyncio.run(raw_end(addr, rollback))[0]
        assert rolled.code == ResponseCode.SYSTEM_ERROR and "deleted by retention" in (rolled.remark or ""), rolled
        for command in ("show", "resume"):
            out = cli(cluster, "tx", command, str(first.queue_offset))
            assert out.returncode != 0 and "deleted by retention" in out.stderr, (command, out.stderr)
        after = producer.send_message_in_transaction(Message(topic, b"retention-1"))
        assert after.local_transaction_state == COMMIT
    # the two committed messages and nothing else (the late COMMIT stored none), once the oneway COMMIT is in
    wait_for(lambda: max_offsets(cluster.namesrv_addr, topic) == 2, 10, "the new transaction's message")
    time.sleep(0.5)
    assert max_offsets(cluster.namesrv_addr, topic) == 2


# --- invisibility ------------------------------------------------------------------------------------------


@pytest.mark.dated
def test_half_messages_are_never_visible(cluster):
    # Checked many times and never discarded while the test looks: with TX_CONF's 3 checks, a loaded machine's
    # slower test could see the undecided transaction discarded before it counts it pending.
    broker = cluster.start_broker("broker-a", {**TX_CONF, "transactionCheckMax": 1000})
    topic = "tx_hidden"
    create_topic(cluster, topic, 2)
    decisions = {0: COMMIT, 1: ROLLBACK, 2: UNKNOWN, 3: COMMIT}
    listener = RuleListener(lambda n: decisions[n], lambda n: UNKNOWN)
    collector = Collector(cluster.namesrv_addr, topic, "c_tx_hidden")
    producer = TransactionProducer("p_tx_hidden", listener, cluster.namesrv_addr)
    producer.start()
    try:
        results = [producer.send_message_in_transaction(Message(topic, f"hidden-{n}".encode())) for n in decisions]
        collector.wait_exactly({"hidden-0", "hidden-3"}, 15, quiet=2.5)  # past the first checks, still hidden
        assert listener.checked[2] >= 1 and set(listener.checked) == {2}
        assert Counter(m.body.decode() for m in scan_topic(cluster.namesrv_addr, topic)) == \
            {"hidden-0": 1, "hidden-3": 1}

        with PullConsumer("c_tx_peek", cluster.namesrv_addr) as pc:
            pc.fetch_subscribe_message_queues(topic)  # learns the broker's address
            for sys_topic in (HALF_TOPIC, "RMQ_SYS_TRANS_OP_HALF_TOPIC"):
                with pytest.raises(BrokerError) as err:
                    pc.pull(MessageQueue(sys_topic, "broker-a", 0), "*", 0, 32)
                assert err.value.code == ResponseCode.NO_PERMISSION

        async def view(offset: int) -> RemotingCommand:
            async with RemotingClient() as client:
                return await client.invoke(broker.addrs["broker"], RemotingCommand.request(
                    RequestCode.VIEW_MESSAGE_BY_ID, {"offset": str(offset)}), 5.0)

        for r in results:
            resp = asyncio.run(view(decode_offset_msg_id(r.offset_msg_id)[1]))
            assert resp.code == ResponseCode.NO_PERMISSION, (resp.code, resp.remark)
        assert tx_stats(cluster.namesrv_addr)["pending"] == 1
    finally:
        producer.shutdown()
        collector.close()


def test_reject_transaction_message(cluster):
    cluster.start_broker("broker-a", {**TX_CONF, "rejectTransactionMessage": "true"})
    topic = "tx_reject"
    create_topic(cluster, topic, 1)
    listener = RuleListener(lambda n: COMMIT, lambda n: COMMIT)
    with TransactionProducer("p_tx_reject", listener, cluster.namesrv_addr) as producer:
        with pytest.raises(BrokerError) as err:
            producer.send_message_in_transaction(Message(topic, b"reject-1"))
        assert err.value.code == ResponseCode.NO_PERMISSION
        assert "rejectTransactionMessage" in (err.value.remark or "") and "forbidden" in (err.value.remark or "")
        halves = [Message(topic, f"reject-batch-{i}".encode(),
                          properties={"TRAN_MSG": "true", "PGROUP": producer.group}) for i in range(2)]
        with pytest.raises(BrokerError) as err:  # a batch of halves too
            producer.send_batch(halves)
        assert err.value.code == ResponseCode.NO_PERMISSION
        with pytest.raises(BrokerError) as err:  # and a half batch
            producer.send_half_batch_async([Message(topic, b"reject-hb")], producer.group).result(10)
        assert err.value.code == ResponseCode.NO_PERMISSION
        plain = producer.send(Message(topic, b"plain-1"))  # ordinary messages still go through
        assert plain.status == SendStatus.SEND_OK
    assert not listener.checked
    assert [m.body for m in scan_topic(cluster.namesrv_addr, topic)] == [b"plain-1"]
    assert max_offsets(cluster.namesrv_addr, topic) == 1


def _megabyte(i: int) -> str:
    return f"{i:02d}" * (1 << 19)


def _pending_megabyte_halves(cluster, topic: str, group: str) -> None:
    """Twenty pending transactions of ``group`` whose halves are 1 MB each, their producer gone (unregistered)."""
    sender = TransactionProducer(group, Switchable(), cluster.namesrv_addr)
    sender.start()
    try:
        for i in range(20):
            sender.send_message_in_transaction(Message(topic, _megabyte(i).encode()))
    finally:
        sender.shutdown()


def _rss_kb(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))


def test_check_backs_to_a_producer_that_never_reads_are_not_piled_up(cluster):
    """A check-back carries its half's body. A connection registered in the producer group that never reads had
    each pass's checks written to it all the same, piling up in the broker's memory (20 halves of 1 MB: about 20 MB
    a pass); a connection whose peer does not read (its transport over its high-water mark) gets no check, which the
    next pass tries again, and a producer that reads gets every one."""
    conf = {**TX_CONF, "transactionCheckMax": 1000, "transactionOrphanFactor": 1000}
    broker = cluster.start_broker("broker-a", conf)
    topic, group = "tx_unread", "p_tx_unread"
    create_topic(cluster, topic, 1)
    _pending_megabyte_halves(cluster, topic, group)  # nobody is checked until the stuck connection below registers
    stuck = socket.socket()
    stuck.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # before the connect: a small window
    stuck.connect(addr_of(broker.addrs["broker"]))
    try:
        heartbeat = orjson.dumps({"clientID": "127.0.0.1@stuck@1", "producerDataSet": [{"groupName": group}],
                                  "consumerDataSet": []})
        stuck.sendall(encode_command(RemotingCommand.request(RequestCode.HEART_BEAT, body=heartbeat)))
        assert broker.pid is not None
        before = _rss_kb(broker.pid)
        time.sleep(5.0)  # about nine check passes, none of them read
        grown = _rss_kb(broker.pid) - before
        assert grown < 40_000, f"the broker grew {grown} KB holding check-backs nobody reads"
    finally:
        stuck.close()
    with committing_producer(cluster, group, topic, "c_tx_unread") as (_, _, collector):
        collector.wait_exactly({_megabyte(i) for i in range(20)}, 30)


def test_a_producer_that_reads_its_check_backs_loses_no_transaction_as_an_orphan(cluster):
    """A producer that reads its check-backs more slowly than the broker writes them (a slow link: here 6.4 MB/s)
    has its connection over the high-water mark now and then. The checks of a pass that came then found no
    connection that reads, and a half past the orphan bound (transactionTimeOut x transactionOrphanFactor) was
    discarded as if no producer of its group were connected. A connection paused for a moment still counts as its
    group's producer: the check comes at the next pass and nothing is discarded."""
    conf = {**TX_CONF, "transactionCheckMax": 1000, "transactionOrphanFactor": 3}
    broker = cluster.start_broker("broker-a", conf)
    topic, group = "tx_paused", "p_tx_paused"
    create_topic(cluster, topic, 1)
    _pending_megabyte_halves(cluster, topic, group)  # the slow producer below is the group's only one
    slow = socket.create_connection(addr_of(broker.addrs["broker"]))
    read, stop = [0], threading.Event()

    def read_slowly() -> None:
        while not stop.is_set():
            read[0] += len(slow.recv(65536))
            time.sleep(0.01)

    reader = threading.Thread(target=read_slowly, daemon=True)
    try:
        heartbeat = orjson.dumps({"clientID": "127.0.0.1@slow@1", "producerDataSet": [{"groupName": group}],
                                  "consumerDataSet": []})
        slow.sendall(encode_command(RemotingCommand.request(RequestCode.HEART_BEAT, body=heartbeat)))
        reader.start()
        time.sleep(8.0)  # past the orphan bound (3 s) by several passes
        st = tx_stats(cluster.namesrv_addr)
        assert (st["pending"], st["discards"]) == (20, 0), st
        assert read[0] > 20_000_000  # it was checked, every half at least once
    finally:
        stop.set()
        reader.join(5)
        slow.close()
