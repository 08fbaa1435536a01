"""``TransactionLog`` against real databases (a SQLite file, a PostgreSQL server), without a broker: the log row
and the work commit together, a check answers from the table and fences what it does not find, a check racing a
local transaction in flight waits for it, a commit the database refuses is decided by the log, an unreachable
database answers UNKNOWN (logged once), retention deletes in batches, and the table's DDL is the documented one."""

from __future__ import annotations

import contextlib
import logging
import re
import socket
import threading
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

import txmq
from tests.txlog.databases import PostgresServer, create_engine
from txmq import LocalTransactionState, Message, MessageConst, MessageExt, TransactionLog
from txmq.client.txlog import log_table
from txmq.launch import free_port
from txmq.message import create_uniq_id

COMMIT, ROLLBACK, UNKNOWN = LocalTransactionState.COMMIT, LocalTransactionState.ROLLBACK, LocalTransactionState.UNKNOWN
ORDERS = sa.Table("orders", sa.MetaData(), sa.Column("order_id", sa.String(32), primary_key=True))
DOCS = Path(__file__).resolve().parents[2] / "docs" / "transactions.md"


def half(tx_id: str) -> Message:
    """A message as ``execute_local_transaction`` gets it: its half is stored and it carries its id."""
    msg = Message("orders", b"{}")
    msg.transaction_id = tx_id
    return msg


def checked(tx_id: str) -> MessageExt:
    """A half message as a check hands it over."""
    return MessageExt("orders", b"{}", {MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX: tx_id})


def insert_order(order_id: str) -> Any:
    return lambda conn: conn.execute(ORDERS.insert().values(order_id=order_id))


def orders(engine: Any) -> set[str]:
    with engine.connect() as conn:
        return set(conn.execute(sa.select(ORDERS.c.order_id)).scalars())


def log_rows(engine: Any, log: TransactionLog) -> dict[str, str]:
    with engine.connect() as conn:
        return dict(conn.execute(sa.select(log.table.c.transaction_id, log.table.c.outcome)).all())


@pytest.fixture
def txlog(engine: Any) -> Any:
    ORDERS.metadata.create_all(engine)
    with TransactionLog(engine) as log:
        yield log


def test_exported_from_txmq() -> None:
    assert "TransactionLog" in txmq.__all__ and txmq.TransactionLog is TransactionLog


def test_a_committed_transaction_is_answered_commit(engine: Any, txlog: TransactionLog) -> None:
    tx = create_uniq_id()
    assert txlog.execute_local_transaction(half(tx), insert_order("o-1")) == COMMIT
    assert orders(engine) == {"o-1"} and log_rows(engine, txlog) == {tx: "COMMIT"}
    assert [txlog.check_local_transaction(checked(tx)) for _ in range(3)] == [COMMIT] * 3
    assert log_rows(engine, txlog) == {tx: "COMMIT"}  # a check of a committed transaction writes nothing
    assert txlog.execute_local_transaction(half(create_uniq_id()), None) == COMMIT  # no work: just the log row


def test_work_that_raises_rolls_back_the_log_row_too_and_a_check_fences_it(engine: Any, txlog: TransactionLog) -> None:
    tx = create_uniq_id()

    def out_of_stock(conn: Any) -> None:
        conn.execute(ORDERS.insert().values(order_id="o-1"))
        raise RuntimeError("out of stock")

    assert txlog.execute_local_transaction(half(tx), out_of_stock) == ROLLBACK
    assert orders(engine) == set() and log_rows(engine, txlog) == {}
    assert [txlog.check_local_transaction(checked(tx)) for _ in range(3)] == [ROLLBACK] * 3
    assert log_rows(engine, txlog) == {tx: "ROLLBACK"}


def ends_itself(order_id: str, end: str, then_raise: bool) -> Any:
    """Work that inserts an order, ends the database transaction itself (``conn.commit()`` or
    ``conn.rollback()``), and then returns or raises."""
    def work(conn: Any) -> None:
        conn.execute(ORDERS.insert().values(order_id=order_id))
        getattr(conn, end)()
        if then_raise:
            raise RuntimeError("after the end")
    return work


@pytest.mark.parametrize("then_raise", [False, True], ids=["returns", "raises"])
@pytest.mark.parametrize("end", ["commit", "rollback"])
def test_work_that_ends_the_database_transaction_itself_is_decided_by_the_log(
        engine: Any, txlog: TransactionLog, end: str, then_raise: bool) -> None:
    tx = create_uniq_id()
    expected = COMMIT if end == "commit" else ROLLBACK
    assert txlog.execute_local_transaction(half(tx), ends_itself("o-1", end, then_raise)) == expected
    assert orders(engine) == ({"o-1"} if end == "commit" else set())
    assert txlog.check_local_transaction(checked(tx)) == expected


def test_a_check_before_the_local_transaction_fences_it(engine: Any, txlog: TransactionLog) -> None:
    tx = create_uniq_id()
    assert txlog.check_local_transaction(checked(tx)) == ROLLBACK
    ran: list[bool] = []
    assert txlog.execute_local_transaction(half(tx), lambda conn: ran.append(True)) == ROLLBACK
    assert ran == [] and orders(engine) == set()  # the log row is written first: the work never ran
    assert txlog.check_local_transaction(checked(tx)) == ROLLBACK


@pytest.mark.parametrize("work_ends", ["commits", "raises"])
def test_a_check_racing_a_transaction_in_flight_waits_for_its_end(engine: Any, txlog: TransactionLog,
                                                                  work_ends: str) -> None:
    tx = create_uniq_id()
    inside = threading.Event()
    ended: list[float] = []

    def slow(conn: Any) -> None:
        conn.execute(ORDERS.insert().values(order_id="o-slow"))
        inside.set()
        time.sleep(1.5)
        ended.append(time.monotonic())
        if work_ends == "raises":
            raise RuntimeError("payment refused")

    answers: list[LocalTransactionState] = []
    t = threading.Thread(target=lambda: answers.append(txlog.execute_local_transaction(half(tx), slow)))
    t.start()
    try:
        assert inside.wait(10)
        check = txlog.check_local_transaction(checked(tx))
        checked_at = time.monotonic()
    finally:
        t.join(30)
    assert checked_at >= ended[0]  # the check waited for the local transaction instead of answering UNKNOWN
    expected = COMMIT if work_ends == "commits" else ROLLBACK
    assert answers == [expected] and check == expected
    assert orders(engine) == ({"o-slow"} if expected == COMMIT else set())
    assert log_rows(engine, txlog) == {tx: expected.name}


def test_a_commit_the_database_refuses_is_decided_by_the_log(engine: Any, txlog: TransactionLog) -> None:
    """A deferred foreign key fails at COMMIT, after the work returned: the log's fence decides ROLLBACK."""
    if engine.dialect.name == "sqlite":
        sa.event.listen(engine, "connect", lambda dbapi_conn, _: dbapi_conn.execute("pragma foreign_keys = on"))
        engine.dispose()
    md = sa.MetaData()
    sa.Table("customers", md, sa.Column("id", sa.Integer, primary_key=True))
    lines = sa.Table("order_lines", md, sa.Column("id", sa.Integer, primary_key=True),
                     sa.Column("customer", sa.Integer, sa.ForeignKey("customers.id", deferrable=True,
                                                                     initially="DEFERRED")))
    md.create_all(engine)
    tx = create_uniq_id()
    assert txlog.execute_local_transaction(half(tx), lambda c: c.execute(lines.insert().values(customer=7))) == ROLLBACK
    assert log_rows(engine, txlog) == {tx: "ROLLBACK"}
    assert txlog.check_local_transaction(checked(tx)) == ROLLBACK
    with engine.connect() as conn:
        assert conn.execute(sa.select(sa.func.count()).select_from(lines)).scalar() == 0


COMMIT_QUERY = b"Q\x00\x00\x00\x0bCOMMIT\x00"  # the protocol's simple query message "COMMIT", as psycopg sends it


class Relay:
    """A TCP relay to PostgreSQL on a port of its own; a subclass says what each direction passes (``_up``: the
    client's bytes to the server, ``_down``: the server's back), with an event per connection to share."""

    def __init__(self, port: int) -> None:
        self.target = ("127.0.0.1", port)
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.relayed: list[tuple[socket.socket, socket.socket, list[threading.Thread]]] = []
        self.acceptor = threading.Thread(target=self._accept, daemon=True)
        self.acceptor.start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            server = socket.create_connection(self.target)
            drop = threading.Event()
            # Each direction shuts both sockets down when it ends; ``close`` closes them once both have ended.
            threads = [threading.Thread(target=self._up, args=(client, server, drop), daemon=True),
                       threading.Thread(target=self._down, args=(server, client, drop), daemon=True)]
            self.relayed.append((client, server, threads))
            for t in threads:
                t.start()

    def _up(self, client: socket.socket, server: socket.socket, drop: threading.Event) -> None:
        raise NotImplementedError

    def _down(self, server: socket.socket, client: socket.socket, drop: threading.Event) -> None:
        raise NotImplementedError

    @staticmethod
    def _shut(*socks: socket.socket) -> None:
        for s in socks:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        """Stop accepting, end every relayed connection, and close the sockets once their threads are done."""
        self._shut(self.listener)
        self.listener.close()
        self.acceptor.join(5)
        for client, server, threads in self.relayed:
            self._shut(client, server)
            for t in threads:
                t.join(5)
            client.close()
            server.close()


class LosesCommitAnswers(Relay):
    """A relay that, once armed, passes a client's COMMIT to the server and closes the connection instead of
    relaying the server's answer: the database commits, the client never learns it."""

    def __init__(self, port: int) -> None:
        self.armed = threading.Event()
        self.dropped = 0
        super().__init__(port)

    def _up(self, client: socket.socket, server: socket.socket, drop: threading.Event) -> None:
        with contextlib.suppress(OSError):
            while data := client.recv(65536):
                if self.armed.is_set() and COMMIT_QUERY in data:
                    self.armed.clear()
                    drop.set()
                server.sendall(data)
        self._shut(client, server)

    def _down(self, server: socket.socket, client: socket.socket, drop: threading.Event) -> None:
        with contextlib.suppress(OSError):
            while data := server.recv(65536):
                if drop.is_set():  # the server has answered the COMMIT: it committed
                    self.dropped += 1
                    break
                client.sendall(data)
        self._shut(client, server)


def test_a_commit_whose_answer_is_lost_is_decided_by_the_log(postgres: PostgresServer) -> None:
    """The database committed but the connection died with its answer: the log finds the row and answers
    COMMIT (answering ROLLBACK there would drop the message of a committed order)."""
    relay = LosesCommitAnswers(postgres.port)
    url = postgres.create_schema(f"lost{relay.port}").replace(f":{postgres.port}/", f":{relay.port}/")
    engine = create_engine(url)
    try:
        ORDERS.metadata.create_all(engine)
        with TransactionLog(engine) as log:
            tx = create_uniq_id()
            relay.armed.set()
            assert log.execute_local_transaction(half(tx), insert_order("o-1")) == COMMIT
            assert relay.dropped == 1
            assert orders(engine) == {"o-1"} and log_rows(engine, log) == {tx: "COMMIT"}
            assert log.check_local_transaction(checked(tx)) == COMMIT
    finally:
        engine.dispose()
        relay.close()


@pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
def test_an_unreachable_database_answers_unknown_logged_once_per_outage(
        kind: str, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, "txmq.client")
    missing = tmp_path / "not-yet"
    url = (f"sqlite:///{missing / 'app.db'}" if kind == "sqlite"
           else f"postgresql+psycopg://postgres@127.0.0.1:{free_port()}/postgres?connect_timeout=2")
    engine = create_engine(url)
    log = TransactionLog(engine, create=False)
    try:
        assert [log.check_local_transaction(checked(create_uniq_id())) for _ in range(20)] == [UNKNOWN] * 20
        ran: list[bool] = []
        assert log.execute_local_transaction(half(create_uniq_id()), lambda conn: ran.append(True)) == ROLLBACK
        assert ran == []
        warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
        assert len(warnings) == 1 and "unreachable" in warnings[0], warnings
        if kind == "sqlite":  # the database comes back: the right answer, and one line saying so
            missing.mkdir()
            log_table().create(engine)
            tx = create_uniq_id()
            assert log.check_local_transaction(checked(tx)) == ROLLBACK
            assert log.check_local_transaction(checked(tx)) == ROLLBACK
            warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
            assert len(warnings) == 2 and "answers again" in warnings[1] and "20 checks" in warnings[1], warnings
    finally:
        log.close()
        engine.dispose()


def count_deletes(engine: Any) -> list[str]:
    deletes: list[str] = []
    sa.event.listen(engine, "before_cursor_execute",
                    lambda conn, cursor, stmt, *a: deletes.append(stmt) if stmt.lstrip().upper().startswith("DELETE")
                    else None)
    return deletes


def test_retention_deletes_old_rows_in_small_batches(engine: Any) -> None:
    with TransactionLog(engine, retention=timedelta(days=1), purge_interval_s=0, purge_batch=2) as log:
        txs = [create_uniq_id() for _ in range(8)]
        for tx in txs:
            assert log.execute_local_transaction(half(tx), None) == COMMIT
        old = txs[:5]
        with engine.begin() as conn:  # five rows written two days ago
            conn.execute(log.table.update().where(log.table.c.transaction_id.in_(old))
                         .values(created_at_ms=log.table.c.created_at_ms - 2 * 86_400_000))
        deletes = count_deletes(engine)
        assert log.purge() == 5
        assert len(deletes) == 3  # 2 + 2 + 1
        assert set(log_rows(engine, log)) == set(txs[5:])
        assert log.purge() == 0
        assert log.purge(now=time.time() + 86_400 + 60) == 3  # a day later the rest are old too


def test_the_purge_thread_deletes_expired_rows_and_close_stops_it(engine: Any) -> None:
    log = TransactionLog(engine, retention=timedelta(milliseconds=1), purge_interval_s=0.1)
    try:
        assert log.execute_local_transaction(half(create_uniq_id()), None) == COMMIT
        deadline = time.monotonic() + 10
        while log_rows(engine, log) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert log_rows(engine, log) == {}
    finally:
        log.close()
    assert log._purger is not None and not log._purger.is_alive()


def test_the_table_has_its_key_and_index_and_is_created_once(engine: Any) -> None:
    logs = []
    errors: list[BaseException] = []

    def create() -> None:
        try:
            logs.append(TransactionLog(engine, "orders_txlog"))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=create) for _ in range(4)]  # processes of a group starting together
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not errors and len(logs) == 4
    inspector = sa.inspect(engine)
    assert inspector.get_pk_constraint("orders_txlog")["constrained_columns"] == ["transaction_id"]
    assert [i["column_names"] for i in inspector.get_indexes("orders_txlog")] == [["created_at_ms"]]
    if engine.dialect.name == "sqlite":  # a check is one read of the primary key's index
        with engine.connect() as conn:
            plan = conn.execute(sa.text("explain query plan select outcome from orders_txlog "
                                        "where transaction_id = 'x'")).all()
        assert "USING INDEX" in str(plan), plan


def test_the_documented_ddl_is_what_create_makes() -> None:
    from sqlalchemy.dialects import postgresql, sqlite
    from sqlalchemy.schema import CreateIndex, CreateTable

    def norm(sql: str) -> str:
        return re.sub(r"\s+([),;])", r"\1", re.sub(r"\(\s+", "(", re.sub(r"\s+", " ", sql)))

    table = log_table()
    docs = norm(DOCS.read_text())
    for dialect in (postgresql.dialect(), sqlite.dialect()):
        for ddl in (CreateTable(table), *(CreateIndex(i) for i in table.indexes)):
            statement = norm(str(ddl.compile(dialect=dialect)).strip() + ";")
            assert statement in docs, statement


def test_bad_uses_are_refused_with_the_reason(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="in-memory SQLite"):
        TransactionLog(sa.create_engine("sqlite://"))
    engine = create_engine(f"sqlite:///{tmp_path / 'app.db'}")
    try:
        with pytest.raises(ValueError, match="retention"):
            TransactionLog(engine, retention=timedelta(0))
        log = TransactionLog(engine)
        with pytest.raises(TypeError, match="callable"):
            log.execute_local_transaction(half(create_uniq_id()), ("order", "ok"))
        with pytest.raises(ValueError, match="transaction id"):
            log.execute_local_transaction(Message("orders", b"{}"), None)
        assert log_rows(engine, log) == {}
    finally:
        engine.dispose()


# --- a check that would wait: a transaction held open, a lock held by another session, a database gone silent ------


@contextlib.contextmanager
def held_open(txlog: TransactionLog, tx: str, order_id: str) -> Any:
    """A local transaction whose work stays inside its database transaction until the block ends; yields the list
    its answer is put in once it ends (the work then returns, and the transaction commits)."""
    inside, release = threading.Event(), threading.Event()
    answers: list[LocalTransactionState] = []

    def work(conn: Any) -> None:
        conn.execute(ORDERS.insert().values(order_id=order_id))
        inside.set()
        release.wait(60)

    t = threading.Thread(target=lambda: answers.append(txlog.execute_local_transaction(half(tx), work)))
    t.start()
    try:
        assert inside.wait(10)
        yield answers
    finally:
        release.set()
        t.join(30)


def timed_check(txlog: TransactionLog, tx: str, limit_s: float) -> tuple[LocalTransactionState | None, float]:
    """A check on a thread of its own (the test goes on if it never returns): its answer, or None past
    ``limit_s``, and how long it took."""
    answer: list[LocalTransactionState] = []
    began = time.monotonic()
    t = threading.Thread(target=lambda: answer.append(txlog.check_local_transaction(checked(tx))), daemon=True)
    t.start()
    t.join(limit_s)
    return (answer[0] if answer else None), time.monotonic() - began


def test_a_check_of_a_transaction_held_open_answers_unknown_after_its_wait(postgres: PostgresServer) -> None:
    """A local transaction stays open (its work waits on something else): a check waits for it ``check_timeout_s``
    at most, then answers UNKNOWN, never ROLLBACK (it may still commit) and writes no fence; the broker asks again
    and, once it has committed, gets COMMIT. Checks of other transactions answer meanwhile."""
    engine = create_engine(postgres.create_schema(f"held{free_port()}"))
    try:
        ORDERS.metadata.create_all(engine)
        with TransactionLog(engine, check_timeout_s=1.0) as txlog:
            tx, other = create_uniq_id(), create_uniq_id()
            assert txlog.execute_local_transaction(half(other), insert_order("o-other")) == COMMIT
            with held_open(txlog, tx, "o-held") as answers:
                for _ in range(3):  # the broker's repeated checks of the same transaction
                    answer, took = timed_check(txlog, tx, 8)
                    assert answer == UNKNOWN and took < 4, (answer, took)
                assert timed_check(txlog, other, 8)[0] == COMMIT
                assert log_rows(engine, txlog) == {other: "COMMIT"}  # no fence went in
            assert answers == [COMMIT]
            assert txlog.check_local_transaction(checked(tx)) == COMMIT
            assert orders(engine) == {"o-held", "o-other"}
    finally:
        engine.dispose()


def test_a_check_meeting_a_lock_of_another_session_answers_unknown_after_its_wait(
        postgres: PostgresServer, caplog: pytest.LogCaptureFixture) -> None:
    """Another session holds the log table (a migration's ALTER, an operator's LOCK TABLE): checks wait
    ``check_timeout_s`` at most and answer UNKNOWN, then the right answer once the lock is gone."""
    caplog.set_level(logging.INFO, "txmq.client")
    engine = create_engine(postgres.create_schema(f"locked{free_port()}"))
    try:
        with TransactionLog(engine, check_timeout_s=1.0) as txlog:
            committed, unknown = create_uniq_id(), create_uniq_id()
            assert txlog.execute_local_transaction(half(committed), None) == COMMIT
            with engine.connect() as locker:
                locker.execute(sa.text(f"LOCK TABLE {txlog.table.name} IN ACCESS EXCLUSIVE MODE"))
                for tx in (committed, unknown):
                    answer, took = timed_check(txlog, tx, 8)
                    assert answer == UNKNOWN and took < 4, (answer, took)
                locker.rollback()
            assert txlog.check_local_transaction(checked(committed)) == COMMIT
            assert txlog.check_local_transaction(checked(unknown)) == ROLLBACK
        waits = [r.getMessage() for r in caplog.records if "waited" in r.getMessage()]
        assert len(waits) == 2 and all(r.levelno < logging.WARNING for r in caplog.records), caplog.text
    finally:
        engine.dispose()


class Stalls(Relay):
    """A relay that, once ``stalled`` is set, stops forwarding either way while keeping every connection open: what
    a client sees of a hung server, a dead NAT entry or a relay that stopped."""

    def __init__(self, port: int) -> None:
        self.stalled = threading.Event()
        super().__init__(port)

    def _up(self, client: socket.socket, server: socket.socket, drop: threading.Event) -> None:
        self._pipe(client, server)

    def _down(self, server: socket.socket, client: socket.socket, drop: threading.Event) -> None:
        self._pipe(server, client)

    def _pipe(self, src: socket.socket, dst: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := src.recv(65536):
                if not self.stalled.is_set():
                    dst.sendall(data)


def test_a_check_on_a_connection_that_never_answers_answers_unknown(postgres: PostgresServer,
                                                                    caplog: pytest.LogCaptureFixture) -> None:
    """The database stops answering in the middle of the connection's life (nothing reaches it, nothing comes
    back, the TCP connection stays up): the check answers UNKNOWN after ``check_timeout_s`` and a little more, not
    never, and logs the outage; a connection cut that way is not given back to the pool."""
    caplog.set_level(logging.INFO, "txmq.client")
    relay = Stalls(postgres.port)
    url = postgres.create_schema(f"stall{relay.port}").replace(f":{postgres.port}/", f":{relay.port}/")
    engine = create_engine(url)
    invalidated: list[object] = []
    sa.event.listen(engine, "invalidate", lambda dbapi_conn, record, exc: invalidated.append(dbapi_conn))
    try:
        with TransactionLog(engine, check_timeout_s=1.0) as txlog:
            tx = create_uniq_id()
            assert txlog.execute_local_transaction(half(tx), None) == COMMIT
            relay.stalled.set()
            answer, took = timed_check(txlog, tx, 15)
            assert answer == UNKNOWN and took < 8, (answer, took)
            warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
            assert len(warnings) == 1 and "unreachable" in warnings[0], warnings
            assert len(invalidated) == 1  # the cut connection was thrown away
    finally:
        relay.close()
        engine.dispose()


def test_hundreds_of_checks_at_once_with_duplicates_and_unknown_ids(postgres: PostgresServer) -> None:
    """300 checks on 60 threads at once: each of 40 committed transactions and 40 ids the producer never wrote
    (a crashed process's, or no one's) checked twice, and a transaction in flight checked 20 times while it
    commits. Committed: COMMIT; never written: ROLLBACK, one fence each, every duplicate the same; in flight:
    COMMIT or UNKNOWN (it waited past its bound), never ROLLBACK."""
    import concurrent.futures

    engine = create_engine(postgres.create_schema(f"many{free_port()}"))
    try:
        ORDERS.metadata.create_all(engine)
        with TransactionLog(engine, check_timeout_s=2.0) as txlog:
            committed = [create_uniq_id() for _ in range(40)]
            for n, tx in enumerate(committed):
                assert txlog.execute_local_transaction(half(tx), insert_order(f"o-{n}")) == COMMIT
            strangers = [create_uniq_id() for _ in range(40)]
            in_flight = create_uniq_id()
            ids = [*committed, *strangers] * 2 + [in_flight] * 20
            ids = [*ids, *committed, *strangers][:300]
            with held_open(txlog, in_flight, "o-flight") as answers, \
                    concurrent.futures.ThreadPoolExecutor(60) as pool:
                futures = [pool.submit(txlog.check_local_transaction, checked(tx)) for tx in ids]
                time.sleep(1.0)
            got: dict[str, set[LocalTransactionState]] = {}
            for tx, future in zip(ids, futures, strict=True):
                got.setdefault(tx, set()).add(future.result(30))
            assert answers == [COMMIT]
        assert all(got[tx] == {COMMIT} for tx in committed), got
        assert all(got[tx] == {ROLLBACK} for tx in strangers), got
        assert got[in_flight] <= {COMMIT, UNKNOWN} and got[in_flight], got[in_flight]
        rows = log_rows(engine, txlog)
        assert rows == {**dict.fromkeys(committed, "COMMIT"), **dict.fromkeys(strangers, "ROLLBACK"),
                        in_flight: "COMMIT"}
    finally:
        engine.dispose()


def test_close_returns_while_the_purge_waits_on_a_lock(postgres: PostgresServer) -> None:
    """Retention's delete waits on a lock another session holds on the log table (or on a database that stopped
    answering): ``close()``, called at the producer's shutdown, still returns, leaving the purge thread (a
    daemon) to end on its own."""
    engine = create_engine(postgres.create_schema(f"purgelock{free_port()}"))
    try:
        txlog = TransactionLog(engine, retention=timedelta(milliseconds=1), purge_interval_s=0.1)
        assert txlog.execute_local_transaction(half(create_uniq_id()), None) == COMMIT  # starts the purge thread
        with engine.connect() as locker:
            locker.execute(sa.text(f"LOCK TABLE {txlog.table.name} IN ACCESS EXCLUSIVE MODE"))
            time.sleep(1.0)  # the purge thread's next round waits on the lock
            closer = threading.Thread(target=txlog.close)
            closer.start()
            closer.join(20)
            returned = not closer.is_alive()
            locker.rollback()
        closer.join(30)
        assert returned, "close() did not return while the purge waited on a lock"
    finally:
        engine.dispose()


def test_a_check_on_sqlite_meeting_a_transaction_held_open_answers_unknown_as_a_lock_wait(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """On SQLite a check waits the engine's busy timeout for a local transaction held open, then answers UNKNOWN
    (never ROLLBACK, no fence) and says it waited for a lock: the database is not down, and no outage is logged."""
    caplog.set_level(logging.INFO, "txmq.client")
    engine = sa.create_engine(f"sqlite:///{tmp_path / 'app.db'}", connect_args={"timeout": 0.5})
    try:
        ORDERS.metadata.create_all(engine)
        with TransactionLog(engine) as txlog:
            tx = create_uniq_id()
            with held_open(txlog, tx, "o-held") as answers:
                answer, took = timed_check(txlog, tx, 10)
                assert answer == UNKNOWN, (answer, took)
            assert answers == [COMMIT]
            assert txlog.check_local_transaction(checked(tx)) == COMMIT
        assert any("waited for a lock" in r.getMessage() for r in caplog.records), caplog.text
        assert all(r.levelno < logging.WARNING for r in caplog.records), caplog.text
    finally:
        engine.dispose()
