"""The master's side: ``HAService`` accepts slaves, an ``HAConnection`` streams the log to each, and the
group-transfer waiters answer SYNC_MASTER puts once enough slaves acknowledged them. In controller mode it also
keeps the store's confirm offset (RocketMQ's computeConfirmOffset) and sends it to the slaves with the log."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from dataclasses import dataclass

from txmq.cancel import cancel_and_wait
from txmq.errors import StoreError
from txmq.refusals import RefusalLog
from txmq.store.ha.auth import Refused, authenticate_slave
from txmq.store.ha.config import HAConfig
from txmq.store.ha.port import HAPort
from txmq.store.ha.protocol import (
    CLOCK_VERSION,
    HANDSHAKE_TIMEOUT_S,
    REPORT,
    VERSION,
    HandshakeError,
    Hello,
    Open,
    Transfer,
    VersionMismatch,
    Welcome,
    read_hello,
    read_open,
    refusal,
)
from txmq.store.message_store import DefaultMessageStore
from txmq.store.record import BLANK_MAGIC_CODE, read_prefix
from txmq.store.results import PutMessageStatus

log = logging.getLogger("txmq.ha")


@dataclass
class SlaveStatus:
    """What ``txmq ha status`` shows for one slave (RocketMQ HAConnectionRuntimeInfo)."""

    addr: str
    broker_id: int
    connected: bool
    ack_offset: int
    lag_bytes: int
    lag_seconds: float
    in_sync: bool
    transferred_offset: int
    reports: int  # offset reports received: under SYNC_MASTER, one acknowledges every send waiting then


class HAConnection:
    """One slave: a reader for its offset reports and a writer that streams the log from where it asked."""

    def __init__(self, service: HAService, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                 hello: Hello, peer: str) -> None:
        self.service = service
        self.reader = reader
        self.writer = writer
        self.hello = hello
        self.peer = peer
        self.ack_offset = -1  # the slave's last reported max offset; -1 before its first report
        self.transferred = -1  # where the next transfer frame starts
        self.last_report = time.monotonic()
        self.reports = 0
        self.data_ready = asyncio.Event()
        self.closed = False

    @property
    def broker_id(self) -> int:
        return self.hello.broker_id

    async def run(self) -> None:
        writer = asyncio.create_task(self._write_loop())
        try:
            await self._read_loop()
        finally:
            self.close()  # first: whatever the writer ended with, this slave's id is free to connect again
            with contextlib.suppress(ConnectionError, OSError):
                await cancel_and_wait(writer)

    async def _read_loop(self) -> None:
        cfg = self.service.config
        store = self.service.store
        while True:
            try:
                async with asyncio.timeout(cfg.housekeeping_interval_ms / 1000):
                    raw = await self.reader.readexactly(REPORT.size)
            except TimeoutError:
                log.warning("HA slave %s (id %d) silent for %d ms: connection closed", self.peer, self.broker_id,
                            cfg.housekeeping_interval_ms)
                return
            except (asyncio.IncompleteReadError, ConnectionError, OSError):
                log.info("HA slave %s (id %d) disconnected at offset %d", self.peer, self.broker_id, self.ack_offset)
                return
            (offset,) = REPORT.unpack(raw)
            if offset < max(self.ack_offset, 0) or offset > store.max_phy_offset or offset < store.min_phy_offset:
                log.warning("HA slave %s (id %d) reported offset %d outside [%d, %d] (last %d): connection closed",
                            self.peer, self.broker_id, offset, max(self.ack_offset, store.min_phy_offset),
                            store.max_phy_offset, self.ack_offset)
                return
            if self.ack_offset < 0:
                self.transferred = offset
                self.data_ready.set()
            self.ack_offset = offset
            self.reports += 1
            self.last_report = time.monotonic()
            self.service.on_ack()

    async def _write_loop(self) -> None:
        cfg = self.service.config
        store = self.service.store
        heartbeat_s = cfg.send_heartbeat_interval_ms / 1000
        while self.transferred < 0:  # nothing is sent before the slave's first report says where it stands: a put
            self.data_ready.clear()  # waking this loop earlier would read from -1 and drop the slave
            await self.data_ready.wait()
        while True:
            self.data_ready.clear()
            if self.writer.is_closing():  # the slave is gone (uvloop raises RuntimeError on a write after a reset)
                return
            data = store.commit_log.read_raw(self.transferred, cfg.transfer_batch_size)
            if data:
                self.writer.write(self._header(len(data)) + data)
                self.transferred += len(data)
                await self.writer.drain()  # a slow slave slows its own stream, never the writers
                continue
            if self.transferred < store.min_phy_offset:
                log.warning("HA slave %s (id %d) needs offset %d, but retention deleted the log below %d: "
                            "connection closed", self.peer, self.broker_id, self.transferred, store.min_phy_offset)
                self.close()
                return
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(heartbeat_s):
                    await self.data_ready.wait()
            if not self.data_ready.is_set() and not self.writer.is_closing():
                self.writer.write(self._header(0))  # keep-alive
                await self.writer.drain()

    def _header(self, size: int) -> bytes:
        """The header of a frame of ``size`` bytes from ``transferred``, in the slave's version: since version 4
        with this store's account now and the anchors that map those bytes' records."""
        start, confirm = self.transferred, self.service.confirm_offset
        if self.hello.version < CLOCK_VERSION:
            return Transfer(start, size, confirm).encode()
        clock = self.service.store.clock
        anchors = tuple(clock.anchors_for(start, start + size))
        return Transfer(start, size, confirm, clock.elapsed_ms(), anchors).encode()

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.writer.close()
            self.service.remove(self)


class HAService:
    """The master's replication: accepts slaves on ``haListenPort`` and answers SYNC_MASTER waits."""

    def __init__(self, store: DefaultMessageStore, config: HAConfig) -> None:
        self.store = store
        self.config = config
        self.connections: list[HAConnection] = []  # authenticated slaves past the handshake: only they count
        self._port: HAPort | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        # SYNC_MASTER puts waiting for slaves: (offset, deadline, future), in offset and deadline order.
        self._waiters: deque[tuple[int, float, asyncio.Future[PutMessageStatus]]] = deque()
        self._timer: asyncio.TimerHandle | None = None
        self.refusals = RefusalLog(log, "HA connection refused")
        self.last_disconnected: dict[int, float] = {}  # broker id -> time.monotonic() it went away
        # Controller mode: the slaves that must have a SYNC_MASTER put (the SyncStateSet, and slaves being added
        # to it); None: the count rules of HAConfig (inSyncReplicas and friends).
        self.needed_slaves: frozenset[int] | None = None
        store.add_append_listener(self._on_append)

    @property
    def confirm_offset(self) -> int:
        """What the slaves are told to bound their reads by: the store's confirm offset, -1 for none."""
        confirm = self.store.confirm_offset
        return -1 if confirm is None else confirm

    @property
    def addr(self) -> str:
        return f"{self.config.listen_host}:{self.config.listen_port}"

    async def start(self) -> None:
        self._port = HAPort(self.accept, self.config)
        await self._port.start()
        log.info("HA service listening on %s", self.addr)

    async def shutdown(self) -> None:
        self.store.remove_append_listener(self._on_append)  # a later master's service keeps the confirm offset
        if self._port is not None:
            self._port.close()
        for conn in list(self.connections):
            conn.close()
        await cancel_and_wait(*self._tasks)
        self._resolve_all(PutMessageStatus.SLAVE_NOT_AVAILABLE)

    # --- slaves ---------------------------------------------------------------------------------------

    async def accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Serve one slave's connection: from this service's own port (``start``), or from the port a broker in
        controller mode keeps for its whole life and hands to the service of its current master term. Nothing of
        this member (names, sizes, offsets, log) is sent before the peer authenticated (with aclEnable)."""
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        host, port = writer.get_extra_info("peername", ("?", 0))[:2]
        peer = f"{host}:{port}"
        try:
            try:
                async with asyncio.timeout(HANDSHAKE_TIMEOUT_S):
                    opened = await read_open(reader)
                    await authenticate_slave(self.config, opened, reader, writer)
                    hello = await read_hello(reader)
                why = self._refusal(hello, opened)
            except VersionMismatch as exc:
                self.refusals.refused(host, f"peer speaks another HA protocol version (this member: {VERSION})")
                writer.write(refusal(str(exc)))
                with contextlib.suppress(ConnectionError, OSError):
                    await writer.drain()
                return
            except Refused as exc:
                self.refusals.refused(host, str(exc))
                with contextlib.suppress(ConnectionError, OSError):
                    await writer.drain()
                return
            except (HandshakeError, asyncio.IncompleteReadError, TimeoutError, ConnectionError, OSError) as exc:
                self.refusals.refused(host, f"bad handshake ({type(exc).__name__})")
                return
            store = self.store
            if why is not None:
                self.refusals.refused(host, why)
                writer.write(refusal(why))
                with contextlib.suppress(ConnectionError, OSError):
                    await writer.drain()
                return
            at = min(hello.max_offset, store.max_phy_offset)
            writer.write(Welcome(True, store.max_phy_offset, store.min_phy_offset,
                                 store.commit_log.tail_bytes(at)).encode())
            conn = HAConnection(self, reader, writer, hello, peer)
            self.connections.append(conn)
            log.info("HA slave %s (%s/%d%s) connected, its log ends at %d, ours at %d", peer, hello.broker_name,
                     hello.broker_id, f", {opened.access_key}" if opened.access_key else "", hello.max_offset,
                     store.max_phy_offset)
            await conn.run()
        except asyncio.CancelledError:
            pass  # shutdown; asyncio would log a cancelled connection callback as an error
        finally:
            writer.close()
            self._tasks.discard(task)

    def _refusal(self, hello: Hello, opened: Open) -> str | None:
        """Why an (authenticated, with aclEnable) slave's HELLO is refused; None: it is welcome."""
        cfg = self.config
        if hello.version != opened.version or hello.broker_id != opened.broker_id:
            return (f"a HELLO of version {hello.version} for broker id {hello.broker_id} after an OPEN of version "
                    f"{opened.version} as {opened.broker_id}")
        if hello.cluster != cfg.cluster_name or hello.broker_name != cfg.broker_name:
            return (f"peer is {hello.cluster}/{hello.broker_name}, this master is {cfg.cluster_name}/"
                    f"{cfg.broker_name}")
        if hello.broker_id <= 0:
            return f"peer says it is broker id {hello.broker_id}: only slaves (id > 0) replicate"
        if hello.segment_size != self.store.commit_log.segment_size:
            return (f"peer's commit-log segments are {hello.segment_size} bytes, ours "
                    f"{self.store.commit_log.segment_size} (mappedFileSizeCommitLog must match)")
        if any(c.broker_id == hello.broker_id for c in self.connections):
            return f"broker id {hello.broker_id} is already connected"
        return None

    def remove(self, conn: HAConnection) -> None:
        if conn in self.connections:
            self.connections.remove(conn)
            self.last_disconnected[conn.broker_id] = time.monotonic()
            self.on_ack()

    def _on_append(self, end: int) -> None:
        self._advance_confirm_offset()
        for conn in self.connections:
            conn.data_ready.set()

    def _advance_confirm_offset(self) -> None:
        """Controller mode (RocketMQ's computeConfirmOffset): the store's confirm offset rises to the smallest
        acknowledged offset of the slaves that count (the SyncStateSet), or to the log's end without any. While one
        of them is not connected or has not reported yet, it stays: nothing past it is known to be on that member,
        which an election may choose. It never goes back while this replica is master."""
        needed = self.needed_slaves
        if needed is None:
            return
        store = self.store
        acks = {c.broker_id: c.ack_offset for c in self.connections}
        confirm = min((acks.get(i, -1) for i in needed), default=store.max_phy_offset)
        current = store.confirm_offset
        if current is None or confirm > current:
            store.set_confirm_offset(max(confirm, 0))

    # --- SYNC_MASTER ----------------------------------------------------------------------------------

    def in_sync(self, conn: HAConnection) -> bool:
        return conn.ack_offset >= 0 and self.store.max_phy_offset - conn.ack_offset < self.config.max_gap_not_in_sync

    def set_needed_slaves(self, ids: frozenset[int]) -> None:
        """Controller mode (RocketMQ's allAckInSyncStateSet): a SYNC_MASTER put waits for every one of ``ids``; one
        not connected makes it wait (FLUSH_SLAVE_TIMEOUT) until the SyncStateSet drops it."""
        self.needed_slaves = ids
        self.on_ack()

    def _confirmed(self) -> int:
        """The offset every needed slave has (the needed-th highest ack among in-sync slaves); -1 when fewer
        slaves than needed are in sync."""
        if self.needed_slaves is not None:
            by_id = {c.broker_id: max(c.ack_offset, 0) for c in self.connections}
            return min((by_id.get(i, 0) for i in self.needed_slaves), default=self.store.max_phy_offset)
        acks = sorted((c.ack_offset for c in self.connections if self.in_sync(c)), reverse=True)
        needed = self.config.slave_acks_needed(len(acks))
        if needed == 0:
            return self.store.max_phy_offset
        return acks[needed - 1] if len(acks) >= needed else -1

    def replicate(self, offset: int) -> asyncio.Future[PutMessageStatus]:
        """A future of the put's status: PUT_OK once enough slaves have the log up to ``offset``,
        SLAVE_NOT_AVAILABLE at once when too few are in sync, FLUSH_SLAVE_TIMEOUT after ``sync_timeout_ms``."""
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[PutMessageStatus] = loop.create_future()
        confirmed = self._confirmed()
        if confirmed >= offset:
            fut.set_result(PutMessageStatus.PUT_OK)
        elif confirmed < 0:
            fut.set_result(PutMessageStatus.SLAVE_NOT_AVAILABLE)
        else:
            deadline = loop.time() + self.config.sync_timeout_ms / 1000
            self._waiters.append((offset, deadline, fut))
            if self._timer is None:
                self._timer = loop.call_at(deadline, self._expire)
        return fut

    def on_ack(self) -> None:
        """A slave reported (or went away): answer every put the acknowledged offsets now cover."""
        self._advance_confirm_offset()
        if not self._waiters:
            return
        confirmed = self._confirmed()
        if confirmed < 0:
            self._resolve_all(PutMessageStatus.SLAVE_NOT_AVAILABLE)
            return
        while self._waiters and self._waiters[0][0] <= confirmed:
            fut = self._waiters.popleft()[2]
            if not fut.done():
                fut.set_result(PutMessageStatus.PUT_OK)

    def _expire(self) -> None:
        loop = asyncio.get_running_loop()
        self._timer = None
        now = loop.time()
        expired = 0
        while self._waiters and self._waiters[0][1] <= now:
            fut = self._waiters.popleft()[2]
            if not fut.done():
                fut.set_result(PutMessageStatus.FLUSH_SLAVE_TIMEOUT)
                expired += 1
        if expired:
            log.warning("%d SYNC_MASTER puts not acknowledged by slaves in %d ms: FLUSH_SLAVE_TIMEOUT", expired,
                        self.config.sync_timeout_ms)
        if self._waiters:
            self._timer = loop.call_at(self._waiters[0][1], self._expire)

    def _resolve_all(self, status: PutMessageStatus) -> None:
        while self._waiters:
            fut = self._waiters.popleft()[2]
            if not fut.done():
                fut.set_result(status)

    # --- status ---------------------------------------------------------------------------------------

    def status(self) -> list[SlaveStatus]:
        """Each slave's acknowledged offset and lag (bytes, and seconds of store time between the master's
        newest record and the slave's next one); slaves seen before and gone now are listed as disconnected."""
        store = self.store
        end = store.max_phy_offset
        out = []
        for c in self.connections:
            ack = max(c.ack_offset, 0)
            lag_s = 0.0
            if ack < end:
                next_record = ack
                if read_prefix(store.commit_log.read_raw(ack, 8))[1] == BLANK_MAGIC_CODE:  # the next is a segment on
                    next_record += store.commit_log.segment_size - ack % store.commit_log.segment_size
                with contextlib.suppress(StoreError):
                    behind = store.commit_log.read_store_timestamp(next_record)
                    clock = store.clock  # store time counted on the elapsed-time account: steps do not show
                    newest = clock.elapsed_of(end - 1, store.last_store_timestamp)
                    lag_s = max(0.0, (newest - clock.elapsed_of(next_record, behind)) / 1000)
            out.append(SlaveStatus(c.peer, c.broker_id, True, c.ack_offset, end - ack, lag_s, self.in_sync(c),
                                   c.transferred, c.reports))
        connected = {c.broker_id for c in self.connections}
        for broker_id, at in sorted(self.last_disconnected.items()):
            if broker_id not in connected:
                out.append(SlaveStatus("", broker_id, False, -1, -1, round(time.monotonic() - at, 1), False, -1, 0))
        return out
