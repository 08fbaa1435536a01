"""``TransactionLog``: a ``TransactionListener`` that keeps the producer's transaction log in the producer's own
database, so that check-backs answer themselves and the user writes no check code.

The log is one table keyed by transaction id. ``execute_local_transaction`` writes the id **first**, then runs the
user's writes, in one database transaction: a row saying COMMIT exists if and only if that transaction committed.
A check reads the row; when there is none it writes one saying ROLLBACK (the *fence*). A local transaction still
in flight then either committed first (the fence fails on the key and the check reads COMMIT) or meets the fence
on its own first write and rolls back. Either way the answer is final and every later check repeats it. A check
answers UNKNOWN while the database cannot be reached, and on PostgreSQL when it waited ``check_timeout_s`` (for a
local transaction still open, a lock, a database gone silent): never a guess. docs/transactions.md has the
argument, the DDL and the isolation each database needs.

Needs the ``db`` extra (``pip install 'txmq[db]'``): SQLAlchemy, and psycopg 3 for PostgreSQL.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import DBAPIError, IntegrityError, SQLAlchemyError

from txmq.client.transaction import LocalTransactionState
from txmq.message import Message, MessageExt
from txmq.wallclock import WallClockBounds

log = logging.getLogger("txmq.client")

COMMIT, ROLLBACK, UNKNOWN = LocalTransactionState.COMMIT, LocalTransactionState.ROLLBACK, LocalTransactionState.UNKNOWN
_OUTCOMES: dict[str | None, LocalTransactionState] = {COMMIT.name: COMMIT, ROLLBACK.name: ROLLBACK}

# A check can come as long as the broker keeps the half message: RocketMQ's and txmq's fileReservedTime defaults
# to 72 h, and an operator may resume a discarded transaction until then. A week is past that with room to spare.
DEFAULT_RETENTION = timedelta(days=7)
# How long a check waits on PostgreSQL (for a local transaction in flight, a lock, an answer) before it answers
# UNKNOWN: the check threads are few, and one that waits for good holds back the checks of every other transaction.
DEFAULT_CHECK_TIMEOUT_S = 10.0
# Past ``check_timeout_s``, a lock wait is reported first (lock_timeout), then a statement slow for another reason
# (statement_timeout, this much later: at the same value it would always report first), and this much later still
# the check's connection is cut: the server has reported nothing, so nothing is coming back on it.
_STATEMENT_AFTER_S = 1.0
_CUT_AFTER_S = 2.0
_CLOSE_WAIT_S = 5.0  # how long ``close`` waits for a purge in progress
_LOCK_NOT_AVAILABLE = "55P03"  # PostgreSQL's SQLSTATE for lock_timeout
_SQLITE_BUSY = 5  # SQLite's "database is locked": its busy timeout ran out

LocalWork = Callable[[Connection], Any]


def log_table(name: str = "txmq_transaction_log", metadata: sa.MetaData | None = None) -> sa.Table:
    """The log table: the primary key makes a check one indexed read and is the fence's unique key; the index on
    ``created_at_ms`` keeps retention's deletes off a full scan."""
    return sa.Table(
        name, metadata if metadata is not None else sa.MetaData(),
        sa.Column("transaction_id", sa.String(128), primary_key=True),
        sa.Column("outcome", sa.String(8), nullable=False),  # COMMIT (the local transaction) or ROLLBACK (a fence)
        sa.Column("created_at_ms", sa.BigInteger, nullable=False),  # wall clock, epoch ms (see ``purge``)
        sa.Index(f"{name}_created_at_ms", "created_at_ms"),
    )


class TransactionLog:
    """A ``TransactionListener`` over a SQLAlchemy ``Engine`` (SQLite and PostgreSQL are tested).

    ``arg`` of ``send_message_in_transaction`` is the local transaction's work: a callable taking the SQLAlchemy
    ``Connection`` of the database transaction that also writes the log row (or ``None`` for no work). It
    commits by returning and rolls back by raising. The message is committed if and only if the work commits.

    ``create`` makes the table and its index when missing; pass ``False`` when migrations own the schema.
    Rows older than ``retention`` are deleted every ``purge_interval_s`` seconds (0: never), ``purge_batch`` rows
    per database transaction, by a daemon thread started at the first transaction or check and stopped by
    ``close``. ``retention`` must be longer than the brokers keep half messages (``fileReservedTime``): a check of
    a committed transaction whose row was deleted would be fenced and answered ROLLBACK. ``clock`` (tests inject
    one) stamps rows with its latest bound and takes retention's cutoff from its earliest, so that no step of the
    wall clock deletes a row sooner than ``retention`` after it was written.

    On PostgreSQL a check waits ``check_timeout_s`` at most, for a local transaction in flight, a lock another
    session holds, or a server that does not answer, and then answers UNKNOWN (the broker asks again)."""

    def __init__(self, engine: Engine, table: str = "txmq_transaction_log", *, create: bool = True,
                 retention: timedelta = DEFAULT_RETENTION, purge_interval_s: float = 60.0,
                 purge_batch: int = 1000, clock: WallClockBounds | None = None,
                 check_timeout_s: float = DEFAULT_CHECK_TIMEOUT_S) -> None:
        if engine.dialect.name == "sqlite" and engine.url.database in (None, "", ":memory:"):
            raise ValueError("an in-memory SQLite database is private to each connection, and a check runs on a "
                             "connection of its own: use a database file")
        if retention <= timedelta(0) or purge_interval_s < 0 or purge_batch < 1 or check_timeout_s <= 0:
            raise ValueError("retention and check_timeout_s must be positive, purge_interval_s at least 0, "
                             "purge_batch at least 1")
        self.engine = engine
        self.table = log_table(table)
        # Built once: a statement built per call costs more Python time than the database's insert.
        self._insert_row = self.table.insert().values(
            transaction_id=sa.bindparam("tx_id"), outcome=sa.bindparam("outcome_name"),
            created_at_ms=_server_stamp(engine, sa.bindparam("stamp_ms", type_=sa.BigInteger)))
        self._read_row = sa.select(self.table.c.outcome).where(self.table.c.transaction_id == sa.bindparam("tx"))
        self.retention = retention
        self.purge_interval_s = purge_interval_s
        self.purge_batch = purge_batch
        self.clock = clock if clock is not None else WallClockBounds()
        # SQLite's clock is this machine's; a database server's is a second opinion on the cutoff.
        self._server_clock = engine.dialect.name != "sqlite"
        # A fence must wait for a local transaction in flight and then fail on its key, not on its snapshot
        # (REPEATABLE READ and SERIALIZABLE report a serialization failure there). SQLite serializes all writers.
        self._check_options = {} if engine.dialect.name == "sqlite" else {"isolation_level": "READ COMMITTED"}
        self.check_timeout_s = check_timeout_s
        # On PostgreSQL each of the check's transactions waits that long at most (SET LOCAL: the connection is the
        # pool's, shared with the local transactions). SQLite's wait is the engine's busy timeout.
        self._bound_wait = (None if engine.dialect.name != "postgresql" else sa.select(
            sa.func.set_config("lock_timeout", _ms(check_timeout_s), True),
            sa.func.set_config("statement_timeout", _ms(check_timeout_s + _STATEMENT_AFTER_S), True)))
        self._outage = _Outage(table)
        self._closed = threading.Event()
        self._purger: threading.Thread | None = None
        self._purger_lock = threading.Lock()
        if create:
            self._create()

    def _create(self) -> None:
        try:
            self.table.metadata.create_all(self.engine, checkfirst=True)
        except SQLAlchemyError:
            # Another process of the group created it between our look and our CREATE.
            if not sa.inspect(self.engine).has_table(self.table.name):
                raise

    # --- TransactionListener ------------------------------------------------------------------------------

    def execute_local_transaction(self, msg: Message, arg: LocalWork | None) -> LocalTransactionState:
        """The log row, then ``arg(conn)``, in one database transaction: COMMIT when it commits, ROLLBACK when
        ``arg`` raises, a check fenced the transaction first, or the database refused. When the answer to the
        COMMIT itself is lost, or ``arg`` ended the database transaction itself (``conn.commit()`` or
        ``conn.rollback()``: the log row went with it either way), the log decides, as a check would."""
        tx_id = _transaction_id(msg)
        if arg is not None and not callable(arg):
            raise TypeError(f"arg must be a callable taking a SQLAlchemy Connection, not {type(arg).__name__}")
        self._start_purger()
        step = "log"
        try:
            with self.engine.connect() as conn, conn.begin() as db_tx:
                conn.execute(self._insert_row, self._row(tx_id, COMMIT))
                step = "work"
                try:
                    if arg is not None:
                        arg(conn)
                finally:
                    if not db_tx.is_active:
                        step = "ended"
                if step == "work":
                    step = "commit"
        except IntegrityError as exc:
            if step != "log":
                return self._rolled_back(tx_id, step, exc)
            log.info("local transaction %s was fenced by a check before it began: ROLLBACK", tx_id)
            return ROLLBACK
        except Exception as exc:  # the user's work, or the database, refused: nothing was committed
            return self._rolled_back(tx_id, step, exc)
        if step == "ended":
            log.info("the work of local transaction %s ended it itself: the log decides", tx_id)
            return self._decide(tx_id)
        self._outage.up()
        return COMMIT

    def _rolled_back(self, tx_id: str, step: str, exc: Exception) -> LocalTransactionState:
        if step == "commit":  # COMMIT was sent: refused, or its answer lost. The log knows which.
            log.info("commit of local transaction %s failed (%s): the log decides", tx_id, _first_line(exc))
            return self._decide(tx_id)
        if step == "ended":  # the work committed or rolled back, then raised: the log knows which
            log.info("local transaction %s raised after its work ended it (%s): the log decides", tx_id,
                     _first_line(exc))
            return self._decide(tx_id)
        if step == "log" and isinstance(exc, SQLAlchemyError):
            self._outage.down(exc)
        log.info("local transaction %s rolled back: %s", tx_id, _first_line(exc))
        return ROLLBACK

    def check_local_transaction(self, msg: MessageExt) -> LocalTransactionState:
        """COMMIT if the log holds the transaction's COMMIT row; otherwise the fence, and ROLLBACK. UNKNOWN only
        while the database cannot be reached (logged once per outage) or, on PostgreSQL, after ``check_timeout_s``."""
        self._start_purger()
        return self._decide(_transaction_id(msg))

    # --- the fence ------------------------------------------------------------------------------------------

    def _decide(self, tx_id: str) -> LocalTransactionState:
        try:
            try:
                state = self._read_or_fence(tx_id)
            except DBAPIError as exc:
                if not exc.connection_invalidated:
                    raise
                # A pooled connection opened before an outage fails once, and the pool is renewed: ask again.
                state = self._read_or_fence(tx_id)
        except SQLAlchemyError as exc:
            if isinstance(exc, DBAPIError) and _waited_for_lock(exc):
                log.info("check of %s waited for a lock as long as it may (its local transaction still open, or "
                         "another session's): UNKNOWN, asked again later", tx_id)
            else:
                self._outage.down(exc, unknown=True)
            return UNKNOWN
        self._outage.up()
        return state

    def _read_or_fence(self, tx_id: str) -> LocalTransactionState:
        by_id = {"tx": tx_id}
        with (self.engine.connect().execution_options(**self._check_options) as conn,
              _Deadline(conn, self.check_timeout_s + _CUT_AFTER_S)):
            outcome = self._read(conn, by_id)
            conn.rollback()  # the read ends here: SQLite's write lock must be taken by the fence's first statement
            if outcome is None:
                try:
                    with conn.begin():
                        self._bound(conn)
                        conn.execute(self._insert_row, self._row(tx_id, ROLLBACK))
                    return ROLLBACK
                except IntegrityError:  # a local transaction wrote its row first; it has ended now
                    outcome = self._read(conn, by_id)
        # None: the row was there a moment ago and is gone, which only retention does: no answer is safe.
        return _OUTCOMES.get(outcome, UNKNOWN)

    def _read(self, conn: Connection, by_id: dict[str, str]) -> str | None:
        self._bound(conn)
        return conn.execute(self._read_row, by_id).scalar()

    def _bound(self, conn: Connection) -> None:
        """On PostgreSQL: this transaction of the check waits ``check_timeout_s`` at most, for a lock or a
        statement."""
        if self._bound_wait is not None:
            conn.execute(self._bound_wait)

    # --- retention ------------------------------------------------------------------------------------------

    def _row(self, tx_id: str, outcome: LocalTransactionState) -> dict[str, Any]:
        """A log row, stamped with the clock's latest bound (and no earlier than PostgreSQL's clock): a backward
        step of the wall clock does not make it look older than it is to any producer's retention."""
        return {"tx_id": tx_id, "outcome_name": outcome.name, "stamp_ms": self.clock.latest_ms()}

    def purge(self, now: float | None = None) -> int:
        """Delete the rows written more than ``retention`` before ``now`` (epoch seconds, taken as given), or by
        default before the earliest of the clock's earliest bound and the database server's clock (PostgreSQL's):
        a forward step of the wall clock moves the cutoff no faster than time really passes. ``purge_batch`` rows
        per database transaction so that no lock is held long; stops early once ``close`` is called. Returns the
        count."""
        t = self.table
        cutoff = (int(now * 1000) if now is not None else self._now_ms()) - int(self.retention.total_seconds() * 1000)
        oldest = (sa.select(t.c.transaction_id).where(t.c.created_at_ms < cutoff)
                  .order_by(t.c.created_at_ms).limit(self.purge_batch))
        deleted = 0
        while not self._closed.is_set():
            with self.engine.connect() as conn:
                ids = list(conn.execute(oldest).scalars())
                conn.rollback()  # the read apart from the delete, as for the fence
                if ids:
                    with conn.begin():
                        conn.execute(t.delete().where(t.c.transaction_id.in_(ids), t.c.created_at_ms < cutoff))
            deleted += len(ids)
            if len(ids) < self.purge_batch:
                break
        return deleted

    def _now_ms(self) -> int:
        now = self.clock.earliest_ms()
        if self._server_clock:
            with self.engine.connect() as conn:
                server = conn.execute(sa.select(sa.func.current_timestamp())).scalar()
                conn.rollback()
            if isinstance(server, datetime) and server.tzinfo is not None:
                now = min(now, int(server.timestamp() * 1000))
        return now

    def _start_purger(self) -> None:
        if self._purger is not None or self.purge_interval_s == 0:
            return
        with self._purger_lock:
            if self._purger is None and not self._closed.is_set():
                self._purger = threading.Thread(target=self._purge_loop, name=f"txmq-purge-{self.table.name}",
                                                daemon=True)
                self._purger.start()

    def _purge_loop(self) -> None:
        while not self._closed.wait(self.purge_interval_s):
            try:
                deleted = self.purge()
            except SQLAlchemyError as exc:
                self._outage.down(exc)
                continue
            self._outage.up()
            if deleted:
                log.info("transaction log %s: %d rows older than %s deleted", self.table.name, deleted,
                         self.retention)

    def close(self) -> None:
        """Stop the purge thread (the engine is the caller's). A purge waiting on the database (a lock another
        session holds, a server that stopped answering) is waited for ``_CLOSE_WAIT_S`` at most, then left to end
        on its own: it is a daemon thread, and it stops at its next batch."""
        self._closed.set()
        if self._purger is None:
            return
        self._purger.join(_CLOSE_WAIT_S)
        if self._purger.is_alive():
            log.warning("transaction log %s closed while its purge still waits on the database: left to end on its "
                        "own", self.table.name)

    def __enter__(self) -> TransactionLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _Outage:
    """One log line when the database stops answering and one when it answers again, not one per check."""

    def __init__(self, table: str) -> None:
        self.table = table
        self._lock = threading.Lock()
        self._since: float | None = None
        self._unknown = 0

    def down(self, exc: Exception, *, unknown: bool = False) -> None:
        with self._lock:
            self._unknown += unknown
            if self._since is None:
                self._since = time.monotonic()
                log.warning("transaction log %s unreachable (%s): checks answer UNKNOWN until it answers",
                            self.table, _first_line(exc))

    def up(self) -> None:
        if self._since is None:
            return
        with self._lock:
            if self._since is not None:
                log.warning("transaction log %s answers again after %.1f s; %d checks answered UNKNOWN meanwhile",
                            self.table, time.monotonic() - self._since, self._unknown)
                self._since, self._unknown = None, 0


class _NoAnswer(SQLAlchemyError):
    """A check's connection was cut by its deadline."""


class _Deadline:
    """Cuts a check's PostgreSQL connection if the check still runs ``seconds`` after it began. The server's
    own timeouts end a wait it knows of; a server that stopped answering, or a link that stopped carrying, reports
    nothing, and the check would wait on its socket for good, holding one of the producer's few check threads. The
    cut makes the waiting call fail, the check ends with ``_NoAnswer`` (answered UNKNOWN, not asked again on a
    fresh connection: it would wait as long), and the connection is thrown away, not given back to the pool."""

    def __init__(self, conn: Connection, seconds: float) -> None:
        self._conn = conn
        self._seconds = seconds
        self._fd = _socket_fd(conn)
        self._lock = threading.Lock()
        self._done = False
        self.cut = False
        self._timer = threading.Timer(seconds, self._cut)
        self._timer.daemon = True

    def __enter__(self) -> _Deadline:
        if self._fd is not None:
            self._timer.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: object) -> None:
        self._timer.cancel()
        with self._lock:
            self._done = True
        if self.cut:
            self._conn.invalidate()
            raise _NoAnswer(f"no answer from the database within {self._seconds:.1f} s") from exc

    def _cut(self) -> None:
        with self._lock:  # never after the check ended: the connection may be another's by then
            if self._done or self._fd is None:
                return
            self.cut = True
            # On a duplicate of the descriptor, closed at once: shutdown acts on the socket, so the call blocked
            # on the original wakes up to an ended connection.
            with socket.socket(fileno=os.dup(self._fd)) as sock:
                sock.shutdown(socket.SHUT_RDWR)


def _socket_fd(conn: Connection) -> int | None:
    """The descriptor of a psycopg connection's socket; None for other drivers (SQLite's is a file)."""
    pgconn = getattr(conn.connection.dbapi_connection, "pgconn", None)
    return pgconn.socket if pgconn is not None else None


def _ms(seconds: float) -> str:
    return str(int(seconds * 1000))


def _waited_for_lock(exc: DBAPIError) -> bool:
    """The database answered that a lock was not granted in time: PostgreSQL's lock_timeout, SQLite's busy
    timeout ("database is locked"). Not an outage."""
    sqlite_code = getattr(exc.orig, "sqlite_errorcode", None)
    return (getattr(exc.orig, "sqlstate", None) == _LOCK_NOT_AVAILABLE
            or (isinstance(sqlite_code, int) and sqlite_code & 0xFF == _SQLITE_BUSY))  # extended codes included


def _server_stamp(engine: Engine, local_ms: Any) -> Any:
    """A row's stamp: on PostgreSQL the later of ``local_ms`` and the server's clock, so that a producer whose
    clock (and anchor) is behind does not write rows that another producer's retention reads as old already."""
    if engine.dialect.name != "postgresql":
        return local_ms
    server_ms = sa.cast(sa.extract("epoch", sa.func.clock_timestamp()) * 1000, sa.BigInteger)
    return sa.func.greatest(local_ms, server_ms)


def _transaction_id(msg: Message) -> str:
    if not msg.transaction_id:
        raise ValueError("the message has no transaction id (TransactionProducer sets it)")
    return msg.transaction_id


def _first_line(exc: BaseException) -> str:
    """An exception in one line: SQLAlchemy's carry the statement and a link on lines of their own."""
    orig = exc.orig if isinstance(exc, DBAPIError) and exc.orig is not None else exc
    text = str(orig).strip().splitlines()
    return f"{type(orig).__name__}: {text[0] if text else ''}"
