"""``TransactionLog`` with a real broker (``txmq`` processes on free ports) and real databases: producer processes
SIGKILLed before and after their database commits, a check racing a local transaction slower than
``transactionTimeOut``, and PostgreSQL stopped and started while checks arrive. In each, the committed messages
are exactly the committed business rows, each once, and no check answers UNKNOWN while the database answers."""

from __future__ import annotations

import contextlib
import logging
import random
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from tests.e2e.test_transactions import create_topic, scan_topic, tx_stats, wait_for
from tests.txlog.conftest import new_database_url
from tests.txlog.databases import PostgresServer, create_engine
from txmq import LocalTransactionState, Message, MessageExt, TransactionLog, TransactionProducer

COMMIT, ROLLBACK, UNKNOWN = LocalTransactionState.COMMIT, LocalTransactionState.ROLLBACK, LocalTransactionState.UNKNOWN
CHILD = Path(__file__).parent / "producer_child.py"
TX_CONF: dict[str, object] = {"transactionTimeOut": 1000, "transactionCheckInterval": 500, "transactionCheckMax": 30,
                              "flushDiskType": "SYNC_FLUSH"}
ORDERS = sa.Table("orders", sa.MetaData(), sa.Column("n", sa.Integer, primary_key=True))


def business_rows(engine: Any) -> set[int]:
    with engine.connect() as conn:
        return set(conn.execute(sa.select(ORDERS.c.n)).scalars())


def committed_messages(namesrv: str, topic: str) -> Counter[int]:
    return Counter(int(m.body) for m in scan_topic(namesrv, topic))


def settle(namesrv: str, timeout: float = 60) -> dict[str, Any]:
    """Wait until the broker holds no pending transaction; its transaction stats then."""
    return wait_for(lambda: (s := tx_stats(namesrv))["pending"] == 0 and s, timeout, "no pending transaction")  # type: ignore[no-any-return]


class Recorder:
    """``TransactionLog`` whose answers to checks are kept, with when each check came."""

    def __init__(self, log: TransactionLog, execute_answer: LocalTransactionState | None = None) -> None:
        self.log = log
        self.execute_answer = execute_answer
        self.checks: list[tuple[float, float, str, LocalTransactionState]] = []
        self.started: Counter[str] = Counter()  # checks begun, by keys
        self.lock = threading.Lock()

    def execute_local_transaction(self, msg: Message, arg: Any) -> LocalTransactionState:
        state = self.log.execute_local_transaction(msg, arg)
        return self.execute_answer or state  # UNKNOWN: as if END_TRANSACTION were lost

    def check_local_transaction(self, msg: MessageExt) -> LocalTransactionState:
        began = time.monotonic()
        with self.lock:
            self.started[msg.keys or ""] += 1
        state = self.log.check_local_transaction(msg)
        with self.lock:
            self.checks.append((began, time.monotonic(), msg.keys or "", state))
        return state

    def answers(self) -> list[LocalTransactionState]:
        with self.lock:
            return [c[3] for c in self.checks]


class Child:
    """One producer process (tests/txlog/producer_child.py) and the lines it printed."""

    def __init__(self, cluster: Any, mode: str, url: str, topic: str, first: int, seed: int) -> None:
        self.proc = subprocess.Popen([sys.executable, str(CHILD), mode, cluster.namesrv_addr, url, topic, str(first),
                                      str(seed)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                     env={**cluster.env, "PYTHONPATH": str(CHILD.parents[2])}, start_new_session=True)
        self.stderr = ""

    def lines(self) -> Any:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            yield line.split()
        raise AssertionError(f"producer process ended: {self.kill()}")

    def kill(self) -> str:
        """SIGKILL (once); its stderr."""
        if self.proc.returncode is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)
            assert self.proc.stdout is not None and self.proc.stderr is not None
            self.stderr = self.proc.stderr.read()
            self.proc.stdout.close()
            self.proc.stderr.close()
        return self.stderr


@pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
def test_producers_sigkilled_at_random_moments(cluster: Any, kind: str, tmp_path: Path,
                                               request: pytest.FixtureRequest) -> None:
    """Six producer processes killed one after another, alternately right after a local transaction's work
    (before its database commit) and right after its commit (before END_TRANSACTION); then a fresh process of
    the group answers the checks. Committed messages = committed business rows, each message once."""
    cluster.start_broker("broker-a", TX_CONF)
    topic = "txlog_kills"
    create_topic(cluster, topic)
    url = new_database_url(kind, tmp_path, request)
    engine = create_engine(url)
    ORDERS.metadata.create_all(engine)
    TransactionLog(engine, purge_interval_s=0)  # the table, before the processes race to create it
    rng = random.Random(31)
    kills: list[tuple[str, int]] = []
    try:
        for k in range(6):
            target = ("IN", "DB")[k % 2]
            child = Child(cluster, "send", url, topic, first=k * 10_000, seed=k)
            try:
                pass_over = rng.randrange(5, 25)
                for words in child.lines():
                    if words[0] == "END":
                        pass_over -= 1
                    elif words[0] == target and pass_over <= 0:
                        child.kill()
                        kills.append((target, int(words[1])))
                        break
            finally:
                child.kill()
        answering = Child(cluster, "answer", url, topic, first=0, seed=0)
        try:
            assert next(answering.lines()) == ["READY"]
            stats = settle(cluster.namesrv_addr)
        finally:
            answering.kill()
        messages = committed_messages(cluster.namesrv_addr, topic)
        rows = business_rows(engine)
    finally:
        engine.dispose()
    assert not {n: c for n, c in messages.items() if c > 1}, "a message committed twice"
    assert set(messages) == rows
    assert stats["discards"] == 0 and stats["checks"] > 0
    # Where the kills landed: a transaction killed in its work left no row and no message (rolled back by a
    # check); one killed after its commit left both (committed by a check, END_TRANSACTION having never left).
    assert any(phase == "IN" and n not in rows for phase, n in kills), kills
    assert any(phase == "DB" and n in rows for phase, n in kills), kills
    assert len(rows) > 20 and all(n % 5 for n in rows)  # the out-of-stock ones never commit
    print(f"\n{len(rows)} committed, {stats['rollbacks']} rolled back, {stats['checks']} checks; kills {kills}")


@pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
@pytest.mark.parametrize("work_ends", ["commits", "raises"])
def test_a_check_racing_a_slow_local_transaction(cluster: Any, kind: str, work_ends: str, tmp_path: Path,
                                                 request: pytest.FixtureRequest) -> None:
    """The work sleeps past ``transactionTimeOut``: the broker's checks come while it runs, wait for it, and
    answer what it did; the message is delivered if and only if the business row exists."""
    cluster.start_broker("broker-a", TX_CONF)
    topic = "txlog_slow"
    create_topic(cluster, topic)
    engine = create_engine(new_database_url(kind, tmp_path, request))
    ORDERS.metadata.create_all(engine)
    recorder = Recorder(TransactionLog(engine))
    ended: list[float] = []

    def slow(conn: Any) -> None:
        conn.execute(ORDERS.insert().values(n=1))
        time.sleep(4.0)  # the first check comes 1-2.5 s after the half
        ended.append(time.monotonic())
        if work_ends == "raises":
            raise RuntimeError("payment refused")

    try:
        with TransactionProducer("p_txlog_slow", recorder, cluster.namesrv_addr) as producer:
            result = producer.send_message_in_transaction(Message(topic, b"1", keys="1"), slow)
            settle(cluster.namesrv_addr)
        rows = business_rows(engine)
    finally:
        recorder.log.close()
        engine.dispose()
    expected = COMMIT if work_ends == "commits" else ROLLBACK
    assert result.local_transaction_state == expected
    assert recorder.checks and recorder.checks[0][0] < ended[0], "no check came while the transaction ran"
    assert set(recorder.answers()) == {expected}  # no UNKNOWN: the check waited for the transaction
    assert rows == ({1} if expected == COMMIT else set())
    assert set(committed_messages(cluster.namesrv_addr, topic)) == rows


def test_postgresql_restarted_while_checks_arrive(cluster: Any, caplog: pytest.LogCaptureFixture) -> None:
    """Every END_TRANSACTION is lost (the listener answers UNKNOWN) and PostgreSQL stops right after the
    transactions: checks answer UNKNOWN while it is down, logged once; once it is back they answer what the
    database holds, and nothing was decided wrongly."""
    caplog.set_level(logging.INFO, "txmq.client")
    cluster.start_broker("broker-a", TX_CONF)
    topic = "txlog_restart"
    create_topic(cluster, topic)
    with contextlib.ExitStack() as stack:
        server = PostgresServer().start()  # its own: the session's server stays up for the other tests
        stack.callback(server.close)
        engine = create_engine(server.url())
        stack.callback(engine.dispose)
        ORDERS.metadata.create_all(engine)
        log = TransactionLog(engine)
        stack.callback(log.close)
        recorder = Recorder(log, execute_answer=UNKNOWN)

        def order(n: int) -> Any:
            def work(conn: Any) -> None:
                conn.execute(ORDERS.insert().values(n=n))
                if n % 2:
                    raise RuntimeError("out of stock")
            return work

        with TransactionProducer("p_txlog_restart", recorder, cluster.namesrv_addr) as producer:
            for n in range(10):
                producer.send_message_in_transaction(Message(topic, str(n).encode(), keys=str(n)), order(n))
            server.stop()
            stopped_at = time.monotonic()
            # Two rounds of checks (every 0.5 s, each of the 10 transactions) while it is down.
            wait_for(lambda: recorder.answers().count(UNKNOWN) >= 20, 20, "checks while PostgreSQL is down")
            restarting_at = time.monotonic()
            server.start()
            started_at = time.monotonic()
            stats = settle(cluster.namesrv_addr)
        rows = business_rows(engine)
    assert rows == {0, 2, 4, 6, 8}
    assert Counter(committed_messages(cluster.namesrv_addr, topic)) == Counter(rows)
    assert stats["discards"] == 0
    down = [state for began, ended, _, state in recorder.checks if began >= stopped_at and ended <= restarting_at]
    after = [state for began, _, _, state in recorder.checks if began >= started_at]
    assert len(down) >= 20 and set(down) == {UNKNOWN}
    assert after and set(after) <= {COMMIT, ROLLBACK}  # right once it is back, never UNKNOWN again
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and "transaction log" in
                r.getMessage()]
    assert len(warnings) == 2, warnings
    assert "unreachable" in warnings[0] and "answers again" in warnings[1]


@pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
def test_one_message_object_sent_in_two_transactions_is_two_transactions(cluster: Any, kind: str, tmp_path: Path,
                                                                         request: pytest.FixtureRequest) -> None:
    """A ``Message`` sent again (a template, or a retry after a send that raised) is a new half message and a new
    transaction: each has its own transaction id, so its local transaction is not refused as fenced, and a check
    of one is not answered from the other's log row. Every END_TRANSACTION is lost: checks decide both."""
    cluster.start_broker("broker-a", TX_CONF)
    topic = "txlog_resent"
    create_topic(cluster, topic)
    engine = create_engine(new_database_url(kind, tmp_path, request))
    ORDERS.metadata.create_all(engine)
    recorder = Recorder(TransactionLog(engine), execute_answer=UNKNOWN)
    msg = Message(topic, b"")
    try:
        with TransactionProducer("p_txlog_resent", recorder, cluster.namesrv_addr) as producer:
            ids = []
            for n in (1, 2):
                msg.body = str(n).encode()
                result = producer.send_message_in_transaction(msg, lambda conn, n=n: conn.execute(
                    ORDERS.insert().values(n=n)))
                ids.append(result.transaction_id)
            settle(cluster.namesrv_addr)
        rows = business_rows(engine)
    finally:
        recorder.log.close()
        engine.dispose()
    assert len(set(ids)) == 2, ids
    assert rows == {1, 2}
    assert committed_messages(cluster.namesrv_addr, topic) == Counter({1: 1, 2: 1})


def test_a_transaction_held_open_does_not_hold_back_the_checks_of_others(cluster: Any, tmp_path: Path,
                                                                          request: pytest.FixtureRequest) -> None:
    """One local transaction stays open (its work waits on something else) while the broker checks it every
    0.5 s; every END_TRANSACTION is lost. The checks of five other transactions, committed meanwhile, are still
    answered and their messages delivered while it is open; it is answered UNKNOWN, never ROLLBACK, until it
    commits, and then COMMIT."""
    cluster.start_broker("broker-a", TX_CONF)
    topic = "txlog_held"
    create_topic(cluster, topic)
    engine = create_engine(new_database_url("postgresql", tmp_path, request))
    ORDERS.metadata.create_all(engine)
    recorder = Recorder(TransactionLog(engine, check_timeout_s=1.0), execute_answer=UNKNOWN)
    inside, release = threading.Event(), threading.Event()

    def held(conn: Any) -> None:
        conn.execute(ORDERS.insert().values(n=0))
        inside.set()
        release.wait(60)

    def order(n: int) -> Any:
        return lambda conn: conn.execute(ORDERS.insert().values(n=n))

    try:
        with TransactionProducer("p_txlog_held", recorder, cluster.namesrv_addr) as producer:
            holder = threading.Thread(target=producer.send_message_in_transaction,
                                      args=(Message(topic, b"0", keys="0"), held))
            holder.start()
            try:
                assert inside.wait(15)
                # As many of its checks as the producer has check threads have begun (each waits on it).
                wait_for(lambda: recorder.started["0"] >= producer.check_thread_pool_size, 30, "checks of it")
                for n in range(1, 6):
                    producer.send_message_in_transaction(Message(topic, str(n).encode(), keys=str(n)), order(n))
                wait_for(lambda: set(committed_messages(cluster.namesrv_addr, topic)) == {1, 2, 3, 4, 5}, 20,
                         "the other transactions' messages while one is held open")
                assert holder.is_alive()
            finally:
                release.set()
                holder.join(30)
            settle(cluster.namesrv_addr)
        rows = business_rows(engine)
    finally:
        recorder.log.close()
        engine.dispose()
    assert rows == {0, 1, 2, 3, 4, 5}
    assert committed_messages(cluster.namesrv_addr, topic) == Counter(rows)
    held_answers = [state for _, _, keys, state in recorder.checks if keys == "0"]
    assert UNKNOWN in held_answers and ROLLBACK not in held_answers and held_answers[-1] == COMMIT, held_answers
