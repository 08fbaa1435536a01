"""Timer messages and recall (RocketMQ 5's RIP-43 ``TimerMessageStore``, recall of 5.3.2).

A message with ``TIMER_DELIVER_MS`` (a wall-clock instant), ``TIMER_DELAY_SEC`` or ``TIMER_DELAY_MS`` is stored
in ``rmq_sys_wheel_timer`` queue 0 with ``TIMER_OUT_MS`` (its delivery time) and its real topic and queue in
properties, as RocketMQ stores it. The commit log stays the only truth; what is scheduled is an index over time
derived from it: an SQLite table ``(commit-log offset, due, real due)`` with an index on ``due`` in
``<store>/timer/timer.db``, never Python objects per timer. Each tick reads only the rows that are due (an index
range), so ten million timers cost disk, not memory, and a day's worth is not scanned every second.

**Due times follow the clock rule.** A delivery time is a wall-clock instant; at enqueue it becomes a point on the
store's elapsed-time account: the account when the record was stored plus ``TIMER_OUT_MS - store timestamp``.
From then on a step of the wall clock neither delivers it early nor holds it back: it is delivered after the
time the broker measured when it stored it. Deliveries happen on ticks of ``timerPrecisionMs``, never before due.

**Recovery (none lost, none early, none twice).** The index is a function of a prefix of the commit log, kept in
one SQLite transaction with its progress: ``enqueue`` (how far the timer topic's consume queue was read: rows
added, recall markers applied) and ``delivered`` (a commit-log offset below which every delivery and recall is
reflected in the table). A delivered message carries ``TXMQ_TIMER_FROM`` (the offset of its timer record); a
recall is a marker record in the timer topic. After a crash, or on a slave becoming master, the table is brought
up to the log: the consume queue from ``enqueue`` (adds, recalls), then the records from ``delivered`` to the
log's end (deliveries whose row deletion was not committed yet). A delivery is thus decided by the log: stored
once, it is never stored again; not stored, its row is still there. Slaves keep the same table from the
replicated log, so a new master delivers on time.
"""

from __future__ import annotations

import asyncio
import base64
import logging
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path

from txmq.broker.wake import Wake
from txmq.errors import InvalidMessageError
from txmq.failure_run import FailureRun
from txmq.message import MessageConst, MessageExt, decode_message
from txmq.store import DefaultMessageStore, GetMessageStatus
from txmq.store.clock import TOLERANCE_MS
from txmq.store.config import StoreConfig
from txmq.store.dispatcher import request_from_record
from txmq.topic import RETRY_GROUP_TOPIC_PREFIX, RMQ_SYS_WHEEL_TIMER_TOPIC

log = logging.getLogger("txmq.broker")

TIMER_DELIVER_MS = "TIMER_DELIVER_MS"
TIMER_DELAY_SEC = "TIMER_DELAY_SEC"
TIMER_DELAY_MS = "TIMER_DELAY_MS"
TIMER_OUT_MS = "TIMER_OUT_MS"
TIMER_ENQUEUE_MS = "TIMER_ENQUEUE_MS"
TIMER_DEQUEUE_MS = "TIMER_DEQUEUE_MS"
TIMER_DEL_UNIQKEY = "TIMER_DEL_UNIQKEY"
TIMER_ROLL_TIMES = "TIMER_ROLL_TIMES"
# txmq's, set by the broker only: the timer record a delivered message came from, and the one a recall cancels
TIMER_FROM = "TXMQ_TIMER_FROM"
TIMER_DEL_OFFSET = "TXMQ_TIMER_DEL_OFFSET"
TIMER_LEFT_MS = "TXMQ_TIMER_LEFT_MS"  # a rolled record's wait left, on the account
BROKER_ONLY = frozenset({TIMER_FROM, TIMER_DEL_OFFSET, TIMER_DEL_UNIQKEY, TIMER_OUT_MS, TIMER_LEFT_MS,
                         TIMER_ROLL_TIMES})
# what the gRPC surface shows in its own fields or not at all: never a user property
TIMER_PROPERTIES = BROKER_ONLY | {TIMER_DELIVER_MS, TIMER_DELAY_SEC, TIMER_DELAY_MS, TIMER_ENQUEUE_MS, TIMER_DEQUEUE_MS}
_TIMER_FROM_BYTES = TIMER_FROM.encode()
RECALL_TAG = "_RECALL_TAG_"  # RocketMQ RecallMessageProcessor's tag of a recall marker

HOLD_MARGIN_MS = 1000  # beyond the clock's tolerance, how long a put's stamp may trail the moment it was decided
IDLE_PROGRESS_BYTES = 64 << 20  # the log may grow this far past ``delivered`` before it is saved without a delivery
BATCH = 512  # rows delivered, or consume-queue entries read, per step: bounds a tick's work between awaits
ACCOUNT_SAVE_MS = 10_000  # an idle index saves the account at least this often
_FIRST_DUE = -(1 << 63)  # below every due on the account (SQLite's smallest integer)


class RecallError(Exception):
    """A recall refused; ``code`` says why in RocketMQ's terms: ``illegal`` (a bad or foreign handle), ``gone`` (due
    already, delivered or recalled)."""

    def __init__(self, code: str, text: str) -> None:
        super().__init__(text)
        self.code = code


def is_timer_message(props: dict[str, str]) -> bool:
    """RocketMQ HookUtils.checkIfTimerMessage: one of the three properties, and not a record already diverted."""
    return (TIMER_DELIVER_MS in props or TIMER_DELAY_SEC in props or TIMER_DELAY_MS in props) \
        and TIMER_OUT_MS not in props


def deliver_ms_of(props: dict[str, str], now_ms: int) -> int:
    """The delivery instant a sender asked for (wall-clock ms); ``InvalidMessageError`` when not a number."""
    try:
        if TIMER_DELAY_SEC in props:
            return now_ms + int(props[TIMER_DELAY_SEC]) * 1000
        if TIMER_DELAY_MS in props:
            return now_ms + int(props[TIMER_DELAY_MS])
        return int(props[TIMER_DELIVER_MS])
    except ValueError:
        raise InvalidMessageError("timer message illegal: TIMER_DELIVER_MS, TIMER_DELAY_SEC or TIMER_DELAY_MS is "
                                  "not an integer") from None


@dataclass(frozen=True)
class RecallHandle:
    """RocketMQ's ``RecallMessageHandle.HandleV1`` (``v1 topic brokerName timestamp messageId``, URL-safe base64),
    with the timer record's commit-log offset as a sixth field: RocketMQ reads five and ignores more."""

    topic: str
    broker_name: str
    deliver_ms: int
    message_id: str
    offset: int

    def encode(self) -> str:
        raw = " ".join(("v1", self.topic, self.broker_name, str(self.deliver_ms), self.message_id, str(self.offset)))
        return base64.urlsafe_b64encode(raw.encode()).decode()

    @classmethod
    def decode(cls, handle: str) -> RecallHandle:
        try:
            items = base64.urlsafe_b64decode(handle.encode()).decode().split(" ")
            if items[0] != "v1" or len(items) != 6:
                raise ValueError
            return cls(items[1], items[2], int(items[3]), items[4], int(items[5]))
        except (ValueError, UnicodeError):
            raise RecallError("illegal", "recall handle is invalid") from None


class TimerMessageStore:
    """The timer index of one broker, its enqueue from the timer topic, and (as master) its deliveries."""

    def __init__(self, store: DefaultMessageStore, config: StoreConfig, root: Path) -> None:
        self.store = store
        self.config = config
        path = root / "timer"
        path.mkdir(parents=True, exist_ok=True)
        self.db = sqlite3.connect(path / "timer.db", isolation_level=None)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=NORMAL")  # a commit survives the process's death; fsync at checkpoints
        self.db.execute("PRAGMA cache_size=-32768")  # 32 MiB of pages: inserts in time order stay cheap
        # due: when to look at the row (its delivery, or the roll window's end); real: its delivery (the account)
        self.db.execute("CREATE TABLE IF NOT EXISTS timer(offset INTEGER PRIMARY KEY, due INTEGER NOT NULL, "
                        "real INTEGER NOT NULL)")
        self.db.execute("CREATE INDEX IF NOT EXISTS timer_due ON timer(due)")
        self.db.execute("CREATE TABLE IF NOT EXISTS progress(name TEXT PRIMARY KEY, value INTEGER NOT NULL)")
        self.enqueue_offset = self.delivered_offset = self.count = 0
        self._in_tx = False
        self._account_saved_ms = 0
        self._load_progress()
        self._failures = FailureRun(log, logging.ERROR)  # of writes to the index
        self._recalled: set[int] = set()  # recalls answered whose marker the enqueue has not applied yet
        self._delivering: set[int] = set()  # rows being stored now: too late to recall
        self._rolling: set[int] = set()  # rows being rolled now: a recall waits for the new record
        self._wake = Wake(lambda: store.get_max_offset_in_queue(RMQ_SYS_WHEEL_TIMER_TOPIC, 0))
        store.add_truncate_listener(self._truncated)
        store.add_append_listener(self._wake.written)
        self.delivered = 0
        self.enqueued = 0
        self.rolled = 0

    # --- sending ------------------------------------------------------------------------------------------

    def checked_deliver_ms(self, props: dict[str, str]) -> int:
        """The delivery instant a timer message asks for (wall-clock ms), refused (``InvalidMessageError``) when
        timers are off, it is not a number, or it is beyond ``timerMaxDelaySec``. A half is checked when sent."""
        if not self.config.timer_wheel_enable:
            raise InvalidMessageError("timer message illegal: the timer wheel is not enabled (timerWheelEnable)")
        now = int(time.time() * 1000)
        deliver = deliver_ms_of(props, now)
        if deliver - now > self.config.timer_max_delay_sec * 1000:
            raise InvalidMessageError(
                f"timer message illegal: delivery in {deliver - now} ms is beyond the maximum delay of "
                f"{self.config.timer_max_delay_sec} s (timerMaxDelaySec)")
        return deliver

    def divert(self, msg: MessageExt) -> bool:
        """Rewrite a timer message in place to wait in the timer topic; False when it is due already (stored as
        it is, delivered at once). ``InvalidMessageError`` as ``checked_deliver_ms``, or for a retry topic."""
        props = msg.properties
        deliver = self.checked_deliver_ms(props)
        if deliver <= int(time.time() * 1000):
            return False
        if msg.topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
            raise InvalidMessageError("timer message illegal: a retry topic takes delay levels, not timers")
        props[TIMER_OUT_MS] = str(deliver)
        props[MessageConst.REAL_TOPIC] = msg.topic
        props[MessageConst.REAL_QUEUE_ID] = str(msg.queue_id)
        msg.topic = RMQ_SYS_WHEEL_TIMER_TOPIC
        msg.queue_id = 0
        self._wake.set_after_write()
        return True

    def divert_committed(self, msg: MessageExt) -> None:
        """A COMMIT's real message: to the timer topic when it carries a delivery time still ahead (checked when
        its half was sent; timers turned off since: delivered at once, said in one line)."""
        if msg.delay_time_level or not is_timer_message(msg.properties):
            return
        try:
            self.divert(msg)
        except InvalidMessageError as exc:
            log.warning("committed timer message %s delivered at once: %s", msg.msg_id, exc)

    def recall_handle(self, msg: MessageExt, broker_name: str) -> str | None:
        """The handle a stored timer message's send receipt carries (None for any other message)."""
        props = msg.properties
        if msg.topic != RMQ_SYS_WHEEL_TIMER_TOPIC or TIMER_OUT_MS not in props:
            return None
        return RecallHandle(props[MessageConst.REAL_TOPIC], broker_name, int(props[TIMER_OUT_MS]),
                            props.get(MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX, ""), msg.commit_log_offset).encode()

    def _current_record(self, handle: RecallHandle) -> int | None:
        """The offset of the timer record a handle names that is scheduled now: the one it was sent as, or the
        newest record it was rolled to (found by its message id in the index), or None."""
        has_row = "SELECT 1 FROM timer WHERE offset = ?"
        if self.db.execute(has_row, (handle.offset,)).fetchone() is not None:
            return handle.offset
        later = sorted((m.commit_log_offset for m in self.store.query_message(RMQ_SYS_WHEEL_TIMER_TOPIC,
                                                                             handle.message_id, 64)
                        if m.commit_log_offset > handle.offset), reverse=True)
        return next((o for o in later if self.db.execute(has_row, (o,)).fetchone() is not None), None)

    async def recall(self, topic: str, handle_text: str, broker_name: str, store_host: tuple[str, int]) -> str:
        """Cancel a scheduled message: its marker is stored in the timer topic (replicated, applied after a
        restart), and the row goes now. Returns the message id; ``RecallError`` when refused."""
        handle = RecallHandle.decode(handle_text)
        if handle.topic != topic:
            raise RecallError("illegal", "recall failed, topic not match")
        if handle.broker_name != broker_name:
            raise RecallError("illegal", "recall failed, the handle is of another broker")
        offset = self._current_record(handle)
        if offset is None and not self.config.timer_stop_enqueue and self._index_behind():
            self._index_now()
            offset = self._current_record(handle)
        for _ in range(100):  # a roll takes one put: wait for its new record rather than refuse
            if offset not in self._rolling:
                break
            await asyncio.sleep(0.01)
            offset = self._current_record(handle)
        if offset is None or offset in self._recalled or offset in self._delivering:
            raise RecallError("gone", "recall failed: the message is not scheduled (delivered, recalled, or unknown)")
        try:
            target = self.store.look_message_by_offset(offset)
        except Exception:
            raise RecallError("gone", "recall failed: the message is not scheduled") from None
        props = target.properties
        if (target.topic != RMQ_SYS_WHEEL_TIMER_TOPIC or props.get(MessageConst.REAL_TOPIC) != topic
                or props.get(MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX, "") != handle.message_id):
            raise RecallError("illegal", "recall failed, the handle names no message of this topic")
        self._recalled.add(offset)
        marker = MessageExt(RMQ_SYS_WHEEL_TIMER_TOPIC, b"0", {
            MessageConst.TAGS: RECALL_TAG, TIMER_DEL_UNIQKEY: f"{topic}+{handle.message_id}",
            TIMER_DEL_OFFSET: str(offset), MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX: handle.message_id,
        }, queue_id=0, born_timestamp=int(time.time() * 1000), born_host=store_host, store_host=store_host)
        self._wake.set_after_write()
        result = await self.store.put_message(marker)
        if not result.stored:
            self._recalled.discard(offset)
            raise RecallError("store", f"recall failed, execute error: {result.status.name} {result.remark}")
        return handle.message_id

    def _index_behind(self) -> bool:
        """The timer topic holds records the index has not read yet (a message just sent, a recall marker)."""
        return self.enqueue_offset < self.store.get_max_offset_in_queue(RMQ_SYS_WHEEL_TIMER_TOPIC, 0)

    def _index_now(self) -> None:
        """Read the timer topic into the index for a recall, not at the loop's next pass: a message just sent is
        stored before the loop reads it, and a pass that delivers a large batch holds the loop while its puts are
        awaited (no write of the index spans a wait, so this one cannot cut into the pass's). A failed write is
        rolled back as the loop's are, and refuses the recall."""
        try:
            self._enqueue_all()
        except sqlite3.Error as exc:
            self._rolled_back(exc)
            raise RecallError("store", f"recall failed, the timer index could not be written: {exc}") from None

    # --- the loop -----------------------------------------------------------------------------------------

    async def run(self, deliver: bool) -> None:
        """Keep the index up with the log; as master (``deliver``) also deliver what is due, tick by tick. A
        write to the index that fails (its disk full) is rolled back and the loop goes on from what the index
        holds, as after a restart."""
        precision = max(1, self.config.timer_precision_ms)
        resume = deliver  # catch up with the whole log first: at start, and after a failed write
        while True:
            wait_ms = 1000
            try:
                if resume:
                    self.catch_up()
                    resume = False
                elif deliver and not self.config.timer_stop_enqueue:
                    self._enqueue_all()
                if deliver:
                    hold = await self._deliver_due()
                    now = self.store.clock.elapsed_ms()
                    # ticks on the precision's grid of the account: never before due, at most a tick late
                    wait_ms = precision - now % precision
                    if hold is not None:
                        wait_ms = min(wait_ms, hold)
                elif not self.config.timer_stop_enqueue:  # a slave follows its master's deliveries in the log
                    self.catch_up()
                if self.store.clock.elapsed_ms() - self._account_saved_ms >= ACCOUNT_SAVE_MS:
                    self._begin()  # an idle index keeps the account it saved near now (``_account_started_again``)
                    self._commit()
            except sqlite3.Error as exc:
                self._rolled_back(exc)
                resume = deliver
            else:
                self._failures.worked("timer index written again")
            await self._wake.wait(wait_ms / 1000)

    def _load_progress(self) -> None:
        """The enqueue and delivery progress and the row count, as the index holds them."""
        progress = dict(self.db.execute("SELECT name, value FROM progress").fetchall())
        self.enqueue_offset = progress.get("enqueue", 0)
        self.delivered_offset = progress.get("delivered", self.store.min_phy_offset)
        self.count = self.db.execute("SELECT COUNT(*) FROM timer").fetchone()[0]
        self._account_started_again(progress.get("account"))

    def _account_started_again(self, saved: int | None) -> None:
        """The rows' times are values of the store's elapsed-time account; one behind what the index last saw
        started again (its file lost): every row is moved back by the difference, so each keeps the wait it had
        left (the downtime not counted, as after a reboot), not the whole old account on top of it."""
        now = self.store.clock.elapsed_ms()
        if saved is None or saved <= now:
            return
        self._begin()
        self.db.execute("UPDATE timer SET due = due - ?, real = real - ?", (saved - now, saved - now))
        self._commit()  # with the account now, in the same transaction: a crash moves no row twice
        log.warning("timer index: the store's elapsed-time account started again (%.1f s behind the index's); "
                    "%d timers keep the waits they had left", (saved - now) / 1000, self.count)

    def _rolled_back(self, exc: sqlite3.Error) -> None:
        """A write to the index failed: its transaction rolled back and the progress taken as stored. Deliveries
        stored meanwhile are past ``delivered`` in the log: the next ``catch_up`` deletes their rows (none twice)."""
        if self.db.in_transaction:
            self.db.execute("ROLLBACK")
        self._in_tx = False
        self._rolling.clear()  # the pass is over: rolled records are found by the catch-up
        self._load_progress()
        self._failures.failed("timer index not written (%s): tried again every second", exc)

    def catch_up(self) -> None:
        """Bring the index up to the whole log: the timer topic's queue, then the deliveries past ``delivered``."""
        bound = self.store.max_phy_offset
        self._enqueue_all()
        self._apply_deliveries(bound)

    def _begin(self) -> None:
        if not self._in_tx:
            self.db.execute("BEGIN")
            self._in_tx = True

    def _commit(self) -> None:
        if self._in_tx:
            self._account_saved_ms = self.store.clock.elapsed_ms()
            self.db.executemany("INSERT OR REPLACE INTO progress VALUES (?, ?)",
                                (("enqueue", self.enqueue_offset), ("delivered", self.delivered_offset),
                                 ("account", self._account_saved_ms)))
            self.db.execute("COMMIT")
            self._in_tx = False

    def _enqueue_all(self) -> None:
        """Read the timer topic's consume queue on from ``enqueue``: a timer adds a row, a recall marker deletes
        one (RocketMQ TimerEnqueueGetService / TimerEnqueuePutService)."""
        store, clock = self.store, self.store.clock
        offset = max(self.enqueue_offset, store.get_min_offset_in_queue(RMQ_SYS_WHEEL_TIMER_TOPIC, 0))
        end = store.get_max_offset_in_queue(RMQ_SYS_WHEEL_TIMER_TOPIC, 0)
        while offset < end:
            got = store.get_message(RMQ_SYS_WHEEL_TIMER_TOPIC, 0, offset, BATCH)
            if got.status != GetMessageStatus.FOUND:
                offset = max(offset + 1, got.next_begin_offset)
                continue
            rows = []
            deleted = []
            horizon = clock.elapsed_ms() + self.config.timer_roll_window_slot * self.config.timer_precision_ms
            for raw in got.messages:
                msg, _ = decode_message(raw)
                props = msg.properties
                if TIMER_DEL_OFFSET in props:
                    deleted.append((int(props[TIMER_DEL_OFFSET]),))
                    continue
                at = clock.elapsed_of(msg.commit_log_offset, msg.store_timestamp)
                if TIMER_LEFT_MS in props:  # rolled: what was left of its wait on the account when it was rolled
                    real = at + int(props[TIMER_LEFT_MS])
                else:
                    real = at + max(0, int(props.get(TIMER_OUT_MS, "0")) - msg.store_timestamp)
                rows.append((msg.commit_log_offset, min(real, horizon), real))
            self._begin()
            if rows:
                added = self.db.executemany("INSERT OR IGNORE INTO timer VALUES (?, ?, ?)", rows).rowcount
                self.enqueued += added
                self.count += added
            if deleted:
                self.count -= self.db.executemany("DELETE FROM timer WHERE offset = ?", deleted).rowcount
                self._recalled.difference_update(d[0] for d in deleted)
            offset = got.next_begin_offset
            self.enqueue_offset = offset
            self._commit()

    def _apply_deliveries(self, bound: int) -> None:
        """Delete the rows of deliveries stored from ``delivered`` up to ``bound`` (a crash's window, or what a
        slave replicated), then move ``delivered`` to ``bound``. Every timer record below ``bound`` must be in the
        table already (the consume queue read after ``bound`` was taken)."""
        begin = max(self.delivered_offset, self.store.min_phy_offset)
        if bound <= begin:
            return
        done: list[tuple[int]] = []

        def on_record(offset: int, rec: memoryview) -> None:
            if bytes(rec).find(_TIMER_FROM_BYTES) >= 0:
                value = request_from_record(rec, offset).properties.get(TIMER_FROM)
                if value is not None:
                    done.append((int(value),))

        self.store.commit_log.scan(begin, on_record, end=bound)
        self._begin()
        if done:
            self.count -= self.db.executemany("DELETE FROM timer WHERE offset = ?", done).rowcount
        self.delivered_offset = bound
        self._commit()

    async def _deliver_due(self) -> int | None:
        """Store every due message in its real topic (RocketMQ TimerDequeueGetService / PutMessageService), a
        batch at a time; a row goes once its message is stored. Returns the ms to wait for a message held back:
        due by the account but a little ahead of the wall clock (rounding, or drift within the clock's
        tolerance), it waits for the wall clock, so that its store timestamp is never before its time."""
        if self.config.timer_stop_dequeue:
            return None
        store = self.store
        if store.max_phy_offset - self.delivered_offset > IDLE_PROGRESS_BYTES:  # bounds a restart's scan
            self._begin()
            self.delivered_offset = store.max_phy_offset  # no delivery of ours is on the way now
            self._commit()
        # (due, offset) of the last row read: a recalled row stays in the table until its marker is applied, and
        # the pass reads on past it, so a batch of them does not hold back the due rows behind. It starts below
        # every due: a record stored before the account started (a new slave copying an old log) has a negative one
        after = (_FIRST_DUE, -1)
        while True:
            now = store.clock.elapsed_ms()
            batch = self.db.execute("SELECT offset, real, due FROM timer WHERE due <= ? AND (due, offset) > (?, ?) "
                                    "ORDER BY due, offset LIMIT ?", (now, *after, BATCH)).fetchall()
            if not batch:
                return None
            after = (batch[-1][2], batch[-1][0])
            rows = [(offset, real) for offset, real, _ in batch if offset not in self._recalled]
            if not rows:
                await asyncio.sleep(0)
                continue
            puts = []
            rolled: set[int] = set()
            hold: int | None = None
            wall = store.clock.wall_ms()  # the puts below are stamped as their group is written: now or later
            unreadable: list[str] = []
            for offset, real in rows:
                try:
                    msg = store.look_message_by_offset(offset)
                except Exception as exc:  # the record is gone (retention took it): nothing left to deliver
                    unreadable.append(f"{offset}: {exc}")
                    puts.append((offset, None))
                    continue
                if real > now:  # at the end of the roll window: stored again in the timer topic, to wait on
                    rolled.add(offset)
                    self._rolling.add(offset)
                    self._delivering.add(offset)
                    self._wake.set_after_write()  # every put to the timer topic is counted (Wake.set_after_write)
                    puts.append((offset, store.put_message(self._roll(msg, offset, real - now))))
                    continue
                ahead = int(msg.properties.get(TIMER_OUT_MS, "0")) - wall
                if 0 < ahead <= TOLERANCE_MS + HOLD_MARGIN_MS:
                    hold = ahead if hold is None else min(hold, ahead)
                    continue
                self._delivering.add(offset)
                puts.append((offset, store.put_message(self._restore(msg, offset))))
            if unreadable:
                log.warning("%d timer records unreadable, dropped (first %s)", len(unreadable), unreadable[0])
            done: list[tuple[int]] = []
            failed = 0
            last = ""
            for offset, fut in puts:
                if fut is None:
                    done.append((offset,))
                    continue
                try:
                    result = await fut
                finally:
                    self._delivering.discard(offset)
                if result.stored:
                    done.append((offset,))
                else:
                    failed += 1
                    last = f"{result.status.name} {result.remark}"
            self._begin()
            self.count -= self.db.executemany("DELETE FROM timer WHERE offset = ?", done).rowcount
            # every delivery so far is reflected in the table: later ones are stored past the log's end now
            self.delivered_offset = store.max_phy_offset
            self._commit()
            rolls = sum(1 for (o,) in done if o in rolled)
            self.delivered += len(done) - rolls
            self.rolled += rolls
            if rolled:  # the new records indexed at once: a recall finds them
                self._enqueue_all()
                self._rolling.difference_update(rolled)
            if failed:  # a full disk: they stay due and are tried again next tick
                log.warning("%d timer messages not delivered: %s", failed, last)
                return None
            if hold is not None:
                return hold
            await asyncio.sleep(0)

    def _roll(self, msg: MessageExt, offset: int, left_ms: int) -> MessageExt:
        """A timer record stored again at the end of the roll window (RocketMQ's roll, ``TIMER_ROLL_TIMES``): the
        commit log's retention (``fileReservedTime``) never takes a timer still waiting. It names the record it
        replaces (``TXMQ_TIMER_FROM``) and what is left of the wait on the account."""
        props = dict(msg.properties)
        props[TIMER_ROLL_TIMES] = str(int(props.get(TIMER_ROLL_TIMES, "0")) + 1)
        props[TIMER_LEFT_MS] = str(left_ms)
        props[TIMER_FROM] = str(offset)
        return MessageExt(msg.topic, msg.body, props, flag=msg.flag, queue_id=msg.queue_id, sys_flag=msg.sys_flag,
                          born_timestamp=msg.born_timestamp, born_host=msg.born_host, store_host=msg.store_host,
                          reconsume_times=msg.reconsume_times)

    def _restore(self, msg: MessageExt, offset: int) -> MessageExt:
        props = dict(msg.properties)
        topic = props.pop(MessageConst.REAL_TOPIC)
        queue_id = int(props.pop(MessageConst.REAL_QUEUE_ID, "0"))
        props.pop(TIMER_LEFT_MS, None)
        props[TIMER_ENQUEUE_MS] = str(msg.store_timestamp)
        props[TIMER_DEQUEUE_MS] = str(int(time.time() * 1000))
        props[TIMER_FROM] = str(offset)
        return MessageExt(topic, msg.body, props, flag=msg.flag, queue_id=queue_id, sys_flag=msg.sys_flag,
                          born_timestamp=msg.born_timestamp, born_host=msg.born_host, store_host=msg.store_host,
                          reconsume_times=msg.reconsume_times)

    def _truncated(self, offset: int) -> None:
        """A replica's log cut at ``offset`` (its master's ends there): the rows of timer records past it go, and
        reading goes on where the truncated consume queue now ends and the log now ends."""
        self._begin()
        self.count -= self.db.execute("DELETE FROM timer WHERE offset >= ?", (offset,)).rowcount
        self.enqueue_offset = min(self.enqueue_offset,
                                  self.store.get_max_offset_in_queue(RMQ_SYS_WHEEL_TIMER_TOPIC, 0))
        self.delivered_offset = min(self.delivered_offset, offset)
        self._commit()

    def runtime_info(self) -> dict[str, int]:
        """GET_BROKER_RUNTIME_INFO's timer figures (`txmq admin brokerStatus`): scheduled now, and since start."""
        return {"timerCount": self.count, "timerEnqueued": self.enqueued, "timerDelivered": self.delivered}

    def close(self) -> None:
        self.store.remove_append_listener(self._wake.written)
        self._commit()
        self.db.close()
