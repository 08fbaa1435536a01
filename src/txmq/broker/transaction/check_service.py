"""Check-back of transactions whose outcome never arrived: RocketMQ's ``TransactionalMessageCheckService``.

A pass takes from the state table's wheel only the transactions that are due, so its cost follows the number
due, not the size of the log or of the committed backlog. For each: discard it after
``transactionCheckMax`` checks (or when its half message is older than ``fileReservedTime``), otherwise send a
check (code 39, or the gRPC telemetry equivalent) to one live producer of its group. A check counts only
when it was handed to a live connection; with no producer online it is tried again next interval, until the half
is ``transactionTimeOut`` x ``transactionOrphanFactor`` old: then it is discarded as an orphan (listed and resumable
like any discard), whether or not a check reached a producer before its group left, so a group that never comes
back cannot grow the table forever. A transaction whose half message retention already deleted is dropped, with
every other one below the half queue's start, in one trim of the table (RocketMQ's check skips such a half).
The checks of one pass are recorded in a single op record.

Every time here (the wheel's seconds, a half's age, the next pass) is the store's elapsed-time account
(``txmq.store.clock``): a step of the wall clock neither stalls a check nor makes one early, and no half becomes an
orphan or older than ``fileReservedTime`` because the clock jumped.
"""

from __future__ import annotations

import logging
from typing import Protocol

from txmq.broker.transaction.service import TransactionalMessageService
from txmq.broker.transaction.state import Outcome
from txmq.broker.wake import Wake
from txmq.message import MessageConst, MessageExt

log = logging.getLogger("txmq.transaction")


class CheckSender(Protocol):
    """One way to reach the producers of a group (remoting connections, gRPC telemetry streams)."""

    def send_check(self, group: str, half: MessageExt, half_offset: int) -> bool:
        """Hand a check for ``half`` to a live producer of ``group``; False when none is connected."""
        ...

    def held_up(self, group: str) -> bool:
        """A producer of ``group`` took no check only because it has not read the ones before yet: its group's
        transactions are not orphans, their checks come at the next pass."""
        ...


_IMMUNITY = MessageConst.CHECK_IMMUNITY_TIME_IN_SECONDS
ON_TIME_MS = 50  # how late in its second a pass counts as on time (the next check then comes one interval later)


class TransactionalMessageCheckService:
    def __init__(self, service: TransactionalMessageService, *, check_max: int, check_interval_ms: int) -> None:
        self.service = service
        self.check_max = check_max
        self.check_interval_ms = check_interval_ms
        self.senders: list[CheckSender] = []
        self.passes = 0
        self.in_pass = False  # a snapshot of the state table waits while a pass has counts not yet in the log
        self._wake = Wake()

    def wake(self) -> None:
        self._wake.set()

    async def run(self) -> None:
        while True:
            try:
                await self.check_pass()
            except Exception:  # one bad transaction must not stop checking for the others
                log.exception("check pass failed")
            now = self.service.store.clock.elapsed_ms() / 1000
            nxt = self.service.table.next_due_s()
            wait = self.check_interval_ms / 1000 if nxt is None else max(0.05, min(nxt - now + 0.001,
                                                                                    self.check_interval_ms / 1000))
            await self._wake.wait(wait)

    async def check_pass(self, now_s: float | None = None) -> int:
        """One pass over the due transactions (``now_s``: the account's reading to judge by, in seconds); returns
        how many checks were sent."""
        self.in_pass = True
        try:
            return await self._check_pass(now_s)
        finally:
            self.in_pass = False

    def _next_check_s(self, now_f: float) -> int:
        """The wheel's second for the next check of a transaction checked at ``now_f``: one interval later, rounded
        up to whole seconds. The run loop wakes a pass just after the second it waits for: a pass within ON_TIME_MS
        of its second counts from the second's start (from its own time, rounding up would add a second to every
        interval), a later pass from its own time. Only the start is forgiven, never the interval: 1,049 ms from
        an on-time pass is two seconds, not one."""
        now_ms = int(now_f * 1000)
        start_ms = now_ms - now_ms % 1000
        from_ms = start_ms if now_ms - start_ms <= ON_TIME_MS else now_ms
        return max(start_ms // 1000 + 1, -(-(from_ms + self.check_interval_ms) // 1000))

    async def _check_pass(self, now_s: float | None) -> int:
        now_f = now_s if now_s is not None else self.service.store.clock.elapsed_ms() / 1000
        now = int(now_f)
        table = self.service.table
        next_s = self._next_check_s(now_f)
        reserved_s = self.service.file_reserved_time_h * 3600
        sent: list[int] = []
        due = list(dict.fromkeys(table.pop_due(now)))  # once each, even if scheduled twice
        if not due:
            return 0
        self.passes += 1
        for half_offset in due:
            info = table.info(half_offset)
            if info is None:
                continue
            half = self.service.half_message(half_offset)
            if half is None:
                if self.service.half_gone(half_offset):
                    # Retention deleted it: dropped with every other transaction below the half queue's start, in
                    # one trim (one log line), as RocketMQ's check skips a half it can no longer read.
                    self.service.trim(always=True)
                    continue
                log.error("half message %d is gone from the log; transaction dropped", half_offset)
                table.decide(half_offset, Outcome.DISCARD)
                continue
            if await self.service.resolve_recovered(half, half_offset):  # before the immunity: no check-back
                continue
            if not info.checks and _IMMUNITY in half.properties:
                # Its wheel entry may not know the immunity the producer asked for (entries restored from the
                # snapshot, or a slave's taken over, count transactionTimeOut): as RocketMQ's check, the half says
                first_s = self.service.first_check_s(half)
                if first_s > now:
                    table.schedule(half_offset, first_s)
                    continue
            if info.checks >= self.check_max:
                await self.service.discard(half, half_offset, info.checks, f"transactionCheckMax={self.check_max}")
                continue
            # Ages from the second after the (rounded down) store second: never older than it is.
            stored_s = info.store_time_s + 1
            if now - stored_s > reserved_s:
                await self.service.discard(half, half_offset, info.checks, "older than fileReservedTime")
                continue
            checks = info.checks + 1
            half.properties[MessageConst.TRANSACTION_CHECK_TIMES] = str(checks)
            if any(s.send_check(info.group, half, half_offset) for s in self.senders):
                table.count_check(half_offset)
                self.service.metrics.group(info.group).checks += 1
                sent.append(half_offset)
                continue  # scheduled after those not sent (below)
            if (now_f - stored_s) * 1000 >= self.service.orphan_after_ms \
                    and not any(s.held_up(info.group) for s in self.senders):
                # Checked before or not: with no producer left (or none reading), its count would never grow
                # to transactionCheckMax.
                self.service.metrics.orphans += 1
                await self.service.discard(half, half_offset, info.checks, f"no producer of group {info.group} "
                                           "connected and reading its check-backs "
                                           f"{self.service.orphan_after_ms // 1000}s after the half was stored "
                                           "(transactionTimeOut x transactionOrphanFactor)")
                continue
            table.schedule(half_offset, next_s)
        # Checked ones go behind those no producer took (none connected, or a gRPC stream with no room:
        # ``txmq.grpc.telemetry``), so that a producer taking a few checks a pass gets each in turn, not the same
        # first few every pass.
        for half_offset in sent:
            table.schedule(half_offset, next_s)
        if sent:
            self.service.metrics.checks += len(sent)
            await self.service.record_checks(sent)
        log.info("check pass: %d due, %d checks sent, %d pending", len(due), len(sent), len(table))
        return len(sent)
