"""The slave's side: ``HAClient`` connects to the master's HA port, says who it is and where its log ends,
then writes what the master streams, record by record, byte for byte, and reports its new end. It keeps the
master's confirm offset, sent with every frame, as its own store's read bound (RocketMQ's AutoSwitchHAClient)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

from txmq.cancel import cancel_and_wait
from txmq.errors import StoreError
from txmq.store.ha.auth import authenticate_master
from txmq.store.ha.config import HAConfig
from txmq.store.ha.protocol import (
    REPORT,
    VERSION,
    HandshakeError,
    Hello,
    OlderMaster,
    Transfer,
    read_transfer,
    read_welcome,
)
from txmq.store.message_store import DefaultMessageStore

log = logging.getLogger("txmq.ha")

CONNECT_TIMEOUT_S = 3.0
RETRY_S = 1.0
MAX_TRANSFER_FRAME = 64 << 20  # bytes in one frame; the master sends haTransferBatchSize
DIFFERENCE_WINDOW_MS = 60_000  # the account difference is the smallest seen over the last minute or two


class ReplicationError(Exception):
    """The master's stream cannot be applied to this log (a reconnect starts over from the handshake)."""


class AccountDifference:
    """This slave's elapsed-time account minus its master's, from the master's account in each frame: what the
    frame shows (this account as its header is read, minus the master's as it was sent) exceeds the true difference
    by the frame's one-way delay, so the smallest recent one is kept (too large by the fastest frame's delay: the
    master's records then look that much younger, never older). Recent: the two monotonic clocks may run at
    slightly different rates, so a minimum kept for a whole session would drift below the truth."""

    def __init__(self) -> None:
        self._window_start = 0
        self._current: int | None = None
        self._previous: int | None = None

    def observe(self, mine: int, masters: int) -> int:
        """A frame the master sent at ``masters`` on its account, read at ``mine`` on this one: the difference."""
        seen = mine - masters
        if self._current is None or mine - self._window_start >= DIFFERENCE_WINDOW_MS:
            self._previous, self._current, self._window_start = self._current, seen, mine
        else:
            self._current = min(self._current, seen)
        return self._current if self._previous is None else min(self._previous, self._current)


class HAClient:
    """Keeps a slave's commit log a copy of its master's; ``master_address`` may change at any time (the
    name server tells a slave where its master is). With ``session_per_check`` (controller mode) a session that
    ends clears the address, so the client does not reconnect on its own: whoever set it checks the master (and
    truncates where their logs agree) before it gives the address back."""

    def __init__(self, store: DefaultMessageStore, config: HAConfig, session_per_check: bool = False) -> None:
        self.store = store
        self.config = config
        self.session_per_check = session_per_check
        self.master_address = config.master_address
        self.connected = False
        self.master_max_offset = 0  # the master's end as last seen (handshake, then the frames' offsets)
        self.last_transfer = 0.0  # time.time() of the last frame from the master
        self._pending = b""  # the start of a record whose end has not arrived yet
        self._task: asyncio.Task[None] | None = None
        self._last_problem = ""

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="ha client")

    async def shutdown(self) -> None:
        await cancel_and_wait(self._task)
        self._task = None

    def status(self) -> dict[str, object]:
        """What the slave knows of its replication (RocketMQ HAClientRuntimeInfo)."""
        return {"masterAddr": self.master_address, "connected": self.connected,
                "maxOffset": self.store.max_phy_offset, "masterMaxOffset": self.master_max_offset,
                "lastTransferTimestamp": int(self.last_transfer * 1000)}

    def set_master_address(self, addr: str) -> None:
        if addr and addr != self.master_address:
            log.info("HA master address is now %s", addr)
            self.master_address = addr

    def _problem(self, text: str) -> None:
        """One log line per new problem, not one per retry."""
        if text != self._last_problem:
            self._last_problem = text
            log.warning("%s", text)

    async def _run(self) -> None:
        version = VERSION
        while True:
            addr = self.master_address
            if not addr:
                await asyncio.sleep(RETRY_S)
                continue
            speak, version = version, VERSION  # each session first offers this member's version
            try:
                await self._session(addr, speak)
            except OlderMaster as exc:
                version = exc.version
                self._problem(f"HA master {addr} speaks protocol version {exc.version}: following it in that "
                              "version (its records aged from their arrival here, not from their writing)")
            except (ReplicationError, HandshakeError) as exc:
                self._problem(f"HA replication from {addr} stopped: {exc}")
            except (OSError, asyncio.IncompleteReadError, TimeoutError) as exc:
                if self.connected:
                    log.warning("HA connection to master %s lost: %s", addr, str(exc) or type(exc).__name__)
                else:
                    self._problem(f"HA master {addr} not reachable: {str(exc) or type(exc).__name__}")
            except Exception:  # a bug must not stop the copying for good (nor fail a promotion at shutdown)
                log.exception("HA replication from %s failed; reconnecting", addr)
            finally:
                self.connected = False
                self._pending = b""
                if self.session_per_check and self.master_address == addr:
                    self.master_address = ""
            await asyncio.sleep(RETRY_S)

    async def _session(self, addr: str, version: int) -> None:
        host, _, port = addr.rpartition(":")
        tls = self.config.tls_client
        async with asyncio.timeout(CONNECT_TIMEOUT_S):
            reader, writer = await asyncio.open_connection(
                host, int(port), ssl=tls, server_hostname=host if tls is not None else None)
        try:
            start = await self._handshake(reader, writer, version)
            writer.write(REPORT.pack(start))
            self.connected = True
            self._last_problem = ""
            log.info("HA connected to master %s, replicating from offset %d (master at %d)", addr, start,
                     self.master_max_offset)
            reporter = asyncio.create_task(self._report_loop(writer))
            try:
                await self._transfer_loop(reader, writer, version)
            finally:
                with contextlib.suppress(OSError):
                    await cancel_and_wait(reporter)
        finally:
            writer.close()

    async def _handshake(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, version: int) -> int:
        """Authenticate both ends (with aclEnable), then say who we are, speaking ``version``; on the master's
        answer, make this log a prefix of the master's (truncating bytes the master no longer has) and return where
        the stream starts."""
        cfg, store = self.config, self.store
        async with asyncio.timeout(CONNECT_TIMEOUT_S):
            await authenticate_master(cfg, reader, writer, version)
        cl = store.commit_log
        mine = store.max_phy_offset
        writer.write(Hello(cfg.broker_id, cl.segment_size, mine, cl.tail_bytes(mine), cfg.cluster_name,
                           cfg.broker_name, version).encode())
        async with asyncio.timeout(CONNECT_TIMEOUT_S):
            welcome = await read_welcome(reader)
        if not welcome.accepted:
            raise HandshakeError(f"the master refused this slave: {welcome.remark}")
        self.master_max_offset = welcome.max_offset
        empty = not cl.queue.files
        if empty and mine < welcome.min_offset:
            store.start_replica_at(welcome.min_offset)  # the master's oldest segments are gone: start at its first
            return welcome.min_offset
        if mine < welcome.min_offset:
            raise ReplicationError(f"this log ends at {mine}, before the master's oldest byte {welcome.min_offset}: "
                                   "clear this slave's store to copy the master again")
        at = min(mine, welcome.max_offset)
        # Compared only where both logs hold the bytes before ``at``: a log holding none there has no tail to show
        # (a master whose retention deleted the segment before it answers zeros, where this log's full segment
        # shows its last record and marker)
        both_hold = at > max(welcome.min_offset, store.min_phy_offset)
        if both_hold and cl.tail_bytes(at) != welcome.tail:
            # The logs differ before `at`: drop this log's segment holding the difference, then ask again.
            cut = max(store.min_phy_offset, (at - 1) - (at - 1) % cl.segment_size) if at else 0
            log.warning("HA: this log and the master's differ before offset %d; truncating at %d", at, cut)
            _truncate(store, cut)
            raise ReplicationError(f"log diverged from the master's before {at}: truncated at {cut}, reconnecting")
        if mine > welcome.max_offset:
            _truncate(store, welcome.max_offset)
        return store.max_phy_offset

    async def _transfer_loop(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, version: int) -> None:
        store = self.store
        idle_s = self.config.housekeeping_interval_ms / 1000
        store.clock.following = False  # until this master's anchors arrive (a master of version 3 sends none)
        difference = AccountDifference()
        while True:
            async with asyncio.timeout(idle_s):
                transfer = await read_transfer(reader, version)
            offset, size, confirm = transfer.offset, transfer.size, transfer.confirm
            expected = store.max_phy_offset + len(self._pending)
            if offset != expected or not 0 <= size <= MAX_TRANSFER_FRAME:
                raise ReplicationError(f"master sent {size} bytes at {offset}, this slave expects offset {expected}")
            self.last_transfer = time.time()
            _follow(store, transfer, difference)
            if size == 0:
                self.master_max_offset = max(self.master_max_offset, offset)
                store.set_confirm_offset(None if confirm < 0 else confirm)
                continue
            chunk = await reader.readexactly(size)
            buf = self._pending + chunk if self._pending else chunk
            self.master_max_offset = max(self.master_max_offset, offset + size)
            start = store.max_phy_offset
            try:
                taken = store.append_replicated(start, buf)
            except StoreError as exc:
                raise ReplicationError(f"master's bytes at {start} are not valid records ({exc}); nothing written") \
                    from None
            except OSError as exc:  # this slave's disk, not the connection
                raise ReplicationError(f"writing the master's bytes at {start} failed: {exc}") from None
            self._pending = buf[taken:]
            store.set_confirm_offset(None if confirm < 0 else confirm)  # capped at this log's end
            if len(self._pending) > store.commit_log.segment_size:
                raise ReplicationError(f"{len(self._pending)} bytes at {store.max_phy_offset} without a whole record")
            if taken:
                writer.write(REPORT.pack(store.max_phy_offset))

    async def _report_loop(self, writer: asyncio.StreamWriter) -> None:
        """RocketMQ's heartbeat: the max offset every ``haSendHeartbeatInterval`` even when nothing arrives."""
        while True:
            await asyncio.sleep(self.config.send_heartbeat_interval_ms / 1000)
            if writer.is_closing():  # the master is gone (uvloop raises RuntimeError on a write after a reset)
                return
            writer.write(REPORT.pack(self.store.max_phy_offset))
            await writer.drain()


def _follow(store: DefaultMessageStore, transfer: Transfer, difference: AccountDifference) -> None:
    """A frame of a master of version 4: its records mapped on this store's account by the master's anchors."""
    if transfer.account is not None:
        clock = store.clock
        clock.follow(transfer.offset, list(transfer.anchors), difference.observe(clock.elapsed_ms(), transfer.account))


def _truncate(store: DefaultMessageStore, offset: int) -> None:
    """Cut this log back to ``offset``; its disk's ``OSError`` raised as what it is (a ``ReplicationError``, logged
    once and tried again at the next handshake), not as a lost connection."""
    try:
        store.truncate_replicated(offset)
    except OSError as exc:
        raise ReplicationError(f"truncating this log at {offset} failed: {exc}") from None
