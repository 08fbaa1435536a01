"""asyncio transport around the sans-IO codec: ``Connection`` and ``RemotingClient`` (``RemotingServer`` and its
limits are in ``server.py``).

One ``Connection`` (an ``asyncio.Protocol``) per TCP connection, used the same way on both sides:

- bytes in go through a ``FrameDecoder``; a ``RemoteProtocolError`` closes that connection (one log line).
- a response resolves the pending ``invoke`` with its opaque; unknown responses are dropped.
- a request goes to the handler: ``handler(conn, cmd)`` may return a ``RemotingCommand`` (written at once,
  no task: the hot path), ``None`` (nothing to write), a ``Reply`` (the answer its owner writes when it has it:
  no future and no callback either; single sends), an ``asyncio.Future`` (its result written when done, by a
  callback: no task either), or another awaitable (run as a task, its result written when done).
  A handler exception becomes a SYSTEM_ERROR response naming it (MESSAGE_ILLEGAL for an
  ``InvalidMessageError``; the peer's faults are logged in one line, without a traceback); the connection goes on.
- replies produced while handling one chunk of input are written with one ``writelines``; the writes made
  inside a ``write_batch()`` (a store group's answers) go to each socket together when the batch ends; any other
  write (a request, an answer that came later) goes to the socket at once, not after the loop's next poll and
  whatever it brings in first (on a busy broker, other requests).
- backpressure: ``invoke``/``invoke_oneway`` wait while the transport is above its high-water mark; a
  server connection whose peer does not read its responses stops reading requests until it does.
"""

from __future__ import annotations

import asyncio
import collections
import inspect
import logging
import ssl
import threading
from collections.abc import Awaitable, Callable
from typing import Any, TypeAlias

import cython

from txmq.errors import ClientError, InvalidMessageError, LocalProtocolError, RemoteProtocolError
from txmq.refusals import RefusalLog
from txmq.remoting.codec import DEFAULT_MAX_FRAME_SIZE, EncodedResponse, FrameDecoder, encode_command
from txmq.remoting.codes import ResponseCode
from txmq.remoting.command import FLAG_ONEWAY, FLAG_RESPONSE, RemotingCommand

log = logging.getLogger("txmq.remoting")
_PEER_FAULTS = RefusalLog(log, "remoting server could not serve a request")
# A server's connections opened, closed and cut off: any peer opens and closes them at will, before any ACL.
CONNECTION_EVENTS = RefusalLog(log, "connection", logging.INFO)

RPCHook: TypeAlias = Callable[[RemotingCommand], None]  # changes a request before it is encoded (signing)
# A handler answers with a command, or with one already encoded (``codec.encode_response``: sends).
Answer: TypeAlias = RemotingCommand | EncodedResponse
HandlerResult: TypeAlias = "Answer | Reply | Awaitable[Answer | None] | None"
Handler: TypeAlias = Callable[["Connection", RemotingCommand], HandlerResult]

_ANSWERS = (RemotingCommand, EncodedResponse)  # a tuple built once: ``A | B`` would make a union object per request
DEFAULT_MAX_PENDING_INVOKES = 65536
_FLUSH_NOW_BYTES = 64 * 1024


class _OpenBatch(threading.local):
    """The write batch open on this thread's loop, if any (a loop runs on one thread)."""

    batch: WriteBatch | None = None


_open = _OpenBatch()


class WriteBatch:
    """A burst of writes made outside a socket read, such as the answers of one store group to many sends: each
    connection's writes are kept until the batch ends, then handed to its socket in one ``writelines``. Nested
    batches are one batch (the outermost ends it). Use ``with write_batch():``."""

    __slots__ = ("conns", "outer")

    def __init__(self) -> None:
        self.conns: list[Connection] = []
        self.outer = True

    def __enter__(self) -> WriteBatch:
        self.outer = _open.batch is None
        if self.outer:
            _open.batch = self
        return self

    def __exit__(self, *exc: object) -> None:
        if not self.outer:
            return
        _open.batch = None
        conns, self.conns = self.conns, []
        for conn in conns:
            conn._batched = False
            conn._flush()


def write_batch() -> WriteBatch:
    """A ``WriteBatch`` to write a burst in (the store's ``answer_batch``)."""
    return WriteBatch()


class RemotingTimeoutError(ClientError):
    """No response arrived within the timeout of an ``invoke``."""


class RemotingConnectError(ClientError):
    """The connection could not be made, was lost while a call was pending, or is closed."""


# --- event loop ------------------------------------------------------------------------------------


def new_event_loop() -> asyncio.AbstractEventLoop:
    """A uvloop loop when uvloop is importable, else asyncio's default loop."""
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency off Windows
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


def install_event_loop_policy() -> bool:
    """Make uvloop the policy for ``asyncio.run`` and friends; True if it was installed."""
    try:
        import uvloop
    except ImportError:  # pragma: no cover
        return False
    asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    return True


def run(main: Awaitable[Any]) -> Any:
    """``asyncio.run`` on ``new_event_loop()``."""
    with asyncio.Runner(loop_factory=new_event_loop) as runner:
        return runner.run(main)  # type: ignore[arg-type]


def parse_address(addr: str) -> tuple[str, int]:
    """``"host:port"`` (RocketMQ's form) into a (host, port) pair; ``[v6]:port`` works too."""
    host, sep, port = addr.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise LocalProtocolError(f"not a host:port address: {addr!r}")
    return host.strip("[]"), int(port)


def _format_peer(peer: Any) -> str:
    if isinstance(peer, tuple) and len(peer) >= 2:
        return f"{peer[0]}:{peer[1]}"
    return str(peer)


# --- connection ------------------------------------------------------------------------------------


class Connection(asyncio.Protocol):
    """One remoting connection, server or client side.

    Attributes: ``remote_address`` ("host:port"), ``closed``, ``on_close`` (callbacks taking the
    connection, called once when it closes), ``attrs`` (free for the broker: client id, group, ...),
    ``rpc_hook`` (applied to every request this side sends: RocketMQ's client RPCHook, e.g. signing).
    """

    def __init__(
        self,
        handler: Handler | None,
        *,
        max_frame_size: int = DEFAULT_MAX_FRAME_SIZE,
        max_pending_invokes: int = DEFAULT_MAX_PENDING_INVOKES,
        server_side: bool = False,
        on_made: Callable[[Connection], object] | None = None,
        on_read: Callable[[Connection, int], object] | None = None,
        rpc_hook: RPCHook | None = None,
    ) -> None:
        self._handler = handler
        self.rpc_hook = rpc_hook
        self._on_made = on_made
        self._on_read = on_read  # after each read with the bytes still buffered: the server's budget
        self.max_frame_size = max_frame_size
        self._server_side = server_side
        self._decoder = FrameDecoder(max_frame_size)
        self._transport: asyncio.Transport | None = None
        self._loop = asyncio.get_running_loop()
        self._pending: dict[int, asyncio.Future[RemotingCommand]] = {}
        self._max_pending = max_pending_invokes
        self._slot_waiters: collections.deque[asyncio.Future[None]] = collections.deque()
        self._out: list[bytes] = []
        self._out_bytes = 0
        self._batched = False  # in the open write batch's connections
        self._in_receive = False
        self._paused = False
        self._writable: asyncio.Future[None] | None = None
        self._closed_future: asyncio.Future[None] = self._loop.create_future()
        self.tasks: set[asyncio.Task[None]] = set()
        self.remote_address = "?"
        self.closed = False
        self.on_close: list[Callable[[Connection], object]] = []
        self.attrs: dict[str, Any] = {}
        self.last_activity = self._loop.time()  # of the last read or write: the server closes idle connections
        self.partial_since: float | None = None  # since when the frame not yet whole has been arriving
        self.log_close = True  # False for a connection refused at once: its refusal was the one line

    def __repr__(self) -> str:
        state = "closed" if self.closed else "open"
        return f"<Connection {self.remote_address} {state} pending={len(self._pending)}>"

    # asyncio.Protocol ------------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]  # uvloop's are not asyncio.Transport
        self.remote_address = _format_peer(transport.get_extra_info("peername"))
        if self._on_made is not None:
            self._on_made(self)

    def data_received(self, data: bytes) -> None:
        self.last_activity = self._loop.time()
        try:
            self._decoder.receive_data(data)
        except RemoteProtocolError as exc:
            self._protocol_error(exc)
            return
        self._process()

    @cython.locals(decoder=FrameDecoder, cmd=RemotingCommand)
    def _process(self) -> None:
        """Handle every whole frame buffered; a server side stops while its peer is not reading. A request goes to
        the handler from here (compiled: ``next_command`` a C call, no method call per request before the handler);
        an answer that is not a ``Reply`` or None goes on to ``_answer``."""
        decoder = self._decoder
        pending = self._pending
        handler = self._handler
        stop_when_paused = self._server_side
        self._in_receive = True
        whole = False
        try:
            while not (stop_when_paused and self._paused) and not self.closed:
                cmd = decoder.next_command()
                if cmd is None:
                    break
                whole = True
                if cmd.flag & FLAG_RESPONSE:
                    future = pending.pop(cmd.opaque, None)
                    if future is not None and not future.done():
                        future.set_result(cmd)
                elif handler is None:
                    self._reply(cmd, self._not_supported(cmd))
                else:
                    try:
                        result = handler(self, cmd)
                    except Exception as exc:
                        self._reply(cmd, self._failed(cmd, exc))
                        continue
                    if result is not None and not isinstance(result, Reply):  # a Reply writes itself
                        self._answer(cmd, result)
        except RemoteProtocolError as exc:
            self._in_receive = False
            self._protocol_error(exc)
            return
        self._in_receive = False
        if self._out:
            self._flush()
        buffered = decoder.buffered
        if not buffered:
            self.partial_since = None
        elif whole or self.partial_since is None:
            self.partial_since = self.last_activity
        if self._on_read is not None:
            self._on_read(self, buffered)

    @property
    def write_paused(self) -> bool:
        """The peer is not reading what we write (the transport is over its high-water mark)."""
        return self._paused

    def _protocol_error(self, exc: RemoteProtocolError) -> None:
        if self._server_side:
            _PEER_FAULTS.refused(self.remote_address.rpartition(":")[0],
                                 f"protocol error from {self.remote_address}, closing the connection: {exc}")
        else:
            log.warning("protocol error from %s, closing the connection: %s", self.remote_address, exc)
        self.close()

    def eof_received(self) -> bool | None:
        return None  # close the transport

    def pause_writing(self) -> None:
        self._paused = True
        if self._server_side and self._transport is not None:
            # The peer is not reading our responses: stop reading its requests until it does. Only on the
            # server side: a client always reads, so the two ends can never wait on each other.
            self._transport.pause_reading()

    def resume_writing(self) -> None:
        self._paused = False
        if self._server_side and self._transport is not None and not self.closed:
            self._transport.resume_reading()
            if self._decoder.buffered:
                self._loop.call_soon(self._process)
        waiter, self._writable = self._writable, None
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def connection_lost(self, exc: Exception | None) -> None:
        if self.closed and self._closed_future.done():
            return
        self.closed = True
        self._out.clear()
        self._decoder = FrameDecoder(self.max_frame_size)  # a partial frame's bytes go now, not with the object
        if self.log_close:
            what = "closed" if exc is None else f"lost: {exc}"
            if self._server_side:
                CONNECTION_EVENTS.refused(self.remote_address.rpartition(":")[0], f"{self.remote_address} {what}")
            else:
                log.info("connection %s %s", self.remote_address, what)
        error = RemotingConnectError(f"connection to {self.remote_address} closed")
        pending, self._pending = self._pending, {}
        for future in pending.values():
            if not future.done():
                future.set_exception(error)
        waiter, self._writable = self._writable, None
        if waiter is not None and not waiter.done():
            waiter.set_result(None)  # the waiters see ``closed`` and raise RemotingConnectError
        while self._slot_waiters:
            slot = self._slot_waiters.popleft()
            if not slot.done():
                slot.set_result(None)
        for callback in self.on_close:
            try:
                callback(self)
            except Exception:
                log.exception("on_close callback of %s failed", self.remote_address)
        if not self._closed_future.done():
            self._closed_future.set_result(None)

    # requests from the peer --------------------------------------------------------------------------

    def _answer(self, cmd: RemotingCommand, result: HandlerResult) -> None:
        """What the handler returned for ``cmd`` (neither None nor a ``Reply``): written now or when it is done."""
        if isinstance(result, _ANSWERS):
            self._reply(cmd, result)
        elif isinstance(result, asyncio.Future):  # an answer still to come: a callback, no task
            result.add_done_callback(_FinishFuture(self, cmd))
        elif inspect.isawaitable(result):
            task = self._loop.create_task(self._finish(cmd, result))
            self.tasks.add(task)
            task.add_done_callback(self.tasks.discard)
        else:
            self._reply(cmd, self._failed(cmd, TypeError(f"handler returned {type(result).__name__}")))

    async def _finish(self, cmd: RemotingCommand, awaitable: Awaitable[Answer | None]) -> None:
        try:
            result = await awaitable
        except Exception as exc:
            result = self._failed(cmd, exc)
        if result is not None:
            self._reply(cmd, result)

    def _finish_future(self, cmd: RemotingCommand, future: asyncio.Future[Answer | None]) -> None:
        if future.cancelled():
            return
        exc = future.exception()
        result = self._failed(cmd, exc) if exc is not None else future.result()
        if result is not None:
            self._reply(cmd, result)

    @staticmethod
    def _not_supported(cmd: RemotingCommand) -> RemotingCommand:
        return RemotingCommand.response_to(
            cmd, ResponseCode.REQUEST_CODE_NOT_SUPPORTED, f"request code {cmd.code} not supported"
        )

    def _failed(self, cmd: RemotingCommand, exc: BaseException) -> RemotingCommand:
        """The answer to a request whose handler raised. The peer's faults are folded per host (``RefusalLog``): a
        peer repeating a bad request at will must not write a line each."""
        host = self.remote_address.rpartition(":")[0]
        if isinstance(exc, InvalidMessageError):  # a message or name the peer sent breaks a rule
            _PEER_FAULTS.refused(host, f"bad message in request code {cmd.code}: {exc}")
            return RemotingCommand.response_to(cmd, ResponseCode.MESSAGE_ILLEGAL, str(exc))
        if isinstance(exc, RemoteProtocolError):  # the peer's request was bad: no traceback needed
            _PEER_FAULTS.refused(host, f"bad request code {cmd.code}: {exc}")
        else:
            log.error("handler for code %d from %s failed: %r", cmd.code, self.remote_address, exc,
                      exc_info=exc)  # fmt: skip
        return RemotingCommand.response_to(cmd, ResponseCode.SYSTEM_ERROR, f"{type(exc).__name__}: {exc}")

    def _reply(self, request: RemotingCommand, response: Answer) -> None:
        if self.closed or request.flag & FLAG_ONEWAY:
            return
        if isinstance(response, EncodedResponse):  # a whole frame already
            self._write(response.frame)
            return
        try:
            data = encode_command(response, self.max_frame_size)
        except LocalProtocolError as exc:
            log.error("cannot encode the response to code %d from %s: %s", request.code,
                      self.remote_address, exc)  # fmt: skip
            data = encode_command(
                RemotingCommand.response_to(request, ResponseCode.SYSTEM_ERROR, f"LocalProtocolError: {exc}")
            )
        self._write(data)

    # writing ------------------------------------------------------------------------------------------

    def _write(self, data: bytes) -> None:
        self._out.append(data)
        self._out_bytes += len(data)
        if self._out_bytes >= _FLUSH_NOW_BYTES:
            # Hand big writes to the transport now, so that its high-water mark (pause_writing) sees them.
            self._flush()
        elif not self._in_receive:  # a socket read's writes go when its requests are handled (``_process``)
            batch = _open.batch
            if batch is None:
                self._flush()
            elif not self._batched:
                self._batched = True
                batch.conns.append(self)

    def _flush(self) -> None:
        out = self._out
        self._out_bytes = 0
        if not out or self._transport is None or self.closed:
            out.clear()
            return
        self.last_activity = self._loop.time()
        if len(out) == 1:
            self._transport.write(out[0])
        else:
            self._transport.writelines(out)
        out.clear()

    async def _wait_writable(self) -> None:
        while self._paused and not self.closed:
            if self._writable is None:
                self._writable = self._loop.create_future()
            await asyncio.shield(self._writable)

    def send(self, cmd: RemotingCommand) -> None:
        """Write ``cmd`` now (no waiting for the peer to read). Raises ``RemotingConnectError`` if closed,
        ``LocalProtocolError`` if ``cmd`` cannot be encoded."""
        if self.closed:
            raise RemotingConnectError(f"connection to {self.remote_address} is closed")
        if self.rpc_hook is not None and not cmd.is_response:
            self.rpc_hook(cmd)
        self._write(encode_command(cmd, self.max_frame_size))

    async def invoke(self, cmd: RemotingCommand, timeout: float = 3.0) -> RemotingCommand:
        """Send request ``cmd`` and return the response with its opaque.

        Raises ``RemotingTimeoutError`` after ``timeout`` seconds (waiting for buffer space or a free
        pending slot included), ``RemotingConnectError`` if the connection is or becomes closed,
        ``LocalProtocolError`` if ``cmd`` cannot be encoded or its opaque is already pending here.
        """
        if self.rpc_hook is not None:
            self.rpc_hook(cmd)
        data = encode_command(cmd, self.max_frame_size)
        loop = self._loop
        deadline = loop.time() + timeout
        pending = self._pending
        if self._paused or len(pending) >= self._max_pending:
            try:
                async with asyncio.timeout_at(deadline):
                    while not self.closed and (self._paused or len(pending) >= self._max_pending):
                        if self._paused:
                            await self._wait_writable()
                        else:
                            waiter = loop.create_future()
                            self._slot_waiters.append(waiter)
                            try:
                                await waiter
                            finally:
                                if waiter in self._slot_waiters:
                                    self._slot_waiters.remove(waiter)
            except BaseException as exc:
                # Woken for a freed slot but timed out or cancelled before it ran: the slot goes to the next.
                if len(pending) < self._max_pending:
                    self._wake_slot_waiter()
                if isinstance(exc, TimeoutError):
                    raise self._timeout_error(cmd, timeout) from None
                raise
        if self.closed:
            raise RemotingConnectError(f"connection to {self.remote_address} is closed")
        opaque = cmd.opaque
        if opaque in pending:
            raise LocalProtocolError(f"opaque {opaque} already pending on {self.remote_address}")
        future: asyncio.Future[RemotingCommand] = loop.create_future()
        pending[opaque] = future
        timer = loop.call_at(deadline, self._expire, future, cmd, timeout)
        try:
            self._write(data)
            return await future
        finally:
            timer.cancel()
            if pending.get(opaque) is future:
                del pending[opaque]
            self._wake_slot_waiter()

    def _wake_slot_waiter(self) -> None:
        """A pending slot is free: the first invoke waiting for one (not given up already) may take it."""
        waiters = self._slot_waiters
        while waiters:
            waiter = waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return

    def _expire(self, future: asyncio.Future[RemotingCommand], cmd: RemotingCommand, timeout: float) -> None:
        if not future.done():
            future.set_exception(self._timeout_error(cmd, timeout))

    def _timeout_error(self, cmd: RemotingCommand, timeout: float) -> RemotingTimeoutError:
        return RemotingTimeoutError(
            f"no response to request code {cmd.code} (opaque {cmd.opaque}) from {self.remote_address} "
            f"within {timeout}s"
        )

    async def invoke_oneway(self, cmd: RemotingCommand) -> None:
        """Send ``cmd`` with the oneway flag; waits only while the write buffer is full."""
        cmd.flag |= FLAG_ONEWAY
        if self.rpc_hook is not None:
            self.rpc_hook(cmd)
        data = encode_command(cmd, self.max_frame_size)
        if self._paused:
            await self._wait_writable()
        if self.closed:
            raise RemotingConnectError(f"connection to {self.remote_address} is closed")
        self._write(data)

    def close(self) -> None:
        """Flush what is queued and close. ``on_close`` callbacks run when the transport is gone."""
        if self.closed:
            return
        self._flush()
        self.closed = True
        if self._transport is not None:
            self._transport.close()
        else:  # pragma: no cover - never connected
            self.connection_lost(None)

    def abort(self) -> None:
        """Close at once, dropping whatever is buffered."""
        self.closed = True
        self._out.clear()
        if self._transport is not None:
            self._transport.abort()

    async def wait_closed(self) -> None:
        await asyncio.shield(self._closed_future)

    async def aclose(self, timeout: float = 1.0) -> None:
        """Close, give buffered writes ``timeout`` seconds to leave, then abort; return once closed."""
        self.close()
        try:
            async with asyncio.timeout(timeout):
                await self.wait_closed()
        except TimeoutError:
            self.abort()
            await self.wait_closed()


class _FinishFuture:
    """The done callback writing a request's answer once its future has it: one object per request, where a
    ``functools.partial`` of a bound method was two (both live until the answer, and the collector walks them)."""

    __slots__ = ("cmd", "conn")

    def __init__(self, conn: Connection, cmd: RemotingCommand) -> None:
        self.conn = conn
        self.cmd = cmd

    def __call__(self, future: asyncio.Future[Answer | None]) -> None:
        self.conn._finish_future(self.cmd, future)


class Reply:
    """A request's answer to come, written by this object when it has it: a future's ``done``, ``cancelled``,
    ``cancel``, ``set_result`` (the answer, or None for none) and ``set_exception`` (answered as a handler's
    exception is), so that whoever resolves a future (the store's put) resolves this instead. A handler returns it
    and the transport leaves it be: no future, no done callback and no loop callback per request, where a returned
    future costs all three (every single send waiting for its group's flush). ``observer`` (the metrics' request
    timing) hears of the answer once it is written; ``code`` is the answer's (-1 before). Compiled, an extension
    type (transport.pxd)."""

    __slots__ = ("_state", "cmd", "code", "conn", "observer")

    def __init__(self, conn: Connection, cmd: RemotingCommand) -> None:
        self.conn = conn
        self.cmd = cmd
        self.observer: Callable[[Answer | None], object] | None = None
        self.code = -1
        self._state = 0  # 0 waiting, 1 answered, 2 cancelled

    def done(self) -> bool:
        return self._state != 0

    def cancelled(self) -> bool:
        return self._state == 2

    def cancel(self) -> bool:
        """Give up: no answer is written (as for a cancelled future)."""
        if self._state:
            return False
        self._state = 2
        return True

    def set_result(self, answer: Answer | None) -> None:
        if self._state:
            raise asyncio.InvalidStateError(f"{self!r} is already done")
        self._state = 1
        if answer is not None:
            self.code = answer.code
            self.conn._reply(self.cmd, answer)
        if self.observer is not None:
            self.observer(answer)

    def set_exception(self, exc: BaseException) -> None:
        self.set_result(self.conn._failed(self.cmd, exc))


# --- client ----------------------------------------------------------------------------------------


class RemotingClient:
    """Calls remoting servers by ``"host:port"``: one connection per address, made lazily, remade after
    a loss. Requests the servers send (e.g. CHECK_TRANSACTION_STATE) go to ``request_handler``."""

    def __init__(
        self,
        request_handler: Handler | None = None,
        *,
        max_frame_size: int = DEFAULT_MAX_FRAME_SIZE,
        connect_timeout: float = 3.0,
        max_pending_invokes: int = DEFAULT_MAX_PENDING_INVOKES,
        on_connect: Callable[[str, Connection], None] | None = None,
        rpc_hook: RPCHook | None = None,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        self.request_handler = request_handler
        self.ssl_context = ssl_context  # TLS to every server (txmq.remoting.tls.client_context)
        self.rpc_hook = rpc_hook  # e.g. txmq.acl.AclClientRPCHook: signs every request
        self.on_connect = on_connect  # called on the loop with each new connection, once it is usable
        self.max_frame_size = max_frame_size
        self.connect_timeout = connect_timeout
        self.max_pending_invokes = max_pending_invokes
        self._connections: dict[str, Connection] = {}
        self._connecting: dict[str, asyncio.Task[Connection]] = {}
        self._closed = False

    async def get_connection(self, addr: str) -> Connection:
        """The open connection to ``addr``, made now if needed. Raises ``RemotingConnectError``."""
        conn = self._connections.get(addr)
        if conn is not None and not conn.closed:
            return conn
        if self._closed:
            raise RemotingConnectError("client is closed")
        task = self._connecting.get(addr)
        if task is None:
            task = asyncio.get_running_loop().create_task(self._connect(addr))
            self._connecting[addr] = task
            task.add_done_callback(lambda t: self._connect_done(addr, t))
        return await asyncio.shield(task)

    def _connect_done(self, addr: str, task: asyncio.Task[Connection]) -> None:
        if self._connecting.get(addr) is task:
            del self._connecting[addr]
        if not task.cancelled():
            task.exception()  # retrieved here, so a caller that gave up leaves no warning behind

    async def _connect(self, addr: str) -> Connection:
        host, port = parse_address(addr)
        loop = asyncio.get_running_loop()

        def factory() -> Connection:
            return Connection(
                self.request_handler,
                max_frame_size=self.max_frame_size,
                max_pending_invokes=self.max_pending_invokes,
                rpc_hook=self.rpc_hook,
            )

        try:
            async with asyncio.timeout(self.connect_timeout):
                _, conn = await loop.create_connection(factory, host, port, ssl=self.ssl_context,
                                                       server_hostname=host if self.ssl_context else None)
        except (OSError, TimeoutError) as exc:
            raise RemotingConnectError(f"cannot connect to {addr}: {exc or type(exc).__name__}") from None
        if self._closed:
            conn.close()
            raise RemotingConnectError("client is closed")
        log.info("connected to %s", addr)
        self._connections[addr] = conn
        conn.on_close.append(lambda c: self._forget(addr, c))
        if self.on_connect is not None:
            try:
                self.on_connect(addr, conn)
            except Exception:
                log.exception("on_connect callback failed for %s", addr)
        return conn

    def _forget(self, addr: str, conn: Connection) -> None:
        if self._connections.get(addr) is conn:
            del self._connections[addr]

    async def invoke(self, addr: str, cmd: RemotingCommand, timeout_s: float = 3.0) -> RemotingCommand:
        """Send ``cmd`` to ``addr`` and return the response. Raises ``RemotingConnectError``,
        ``RemotingTimeoutError``, ``LocalProtocolError``."""
        conn = await self.get_connection(addr)
        return await conn.invoke(cmd, timeout_s)

    async def invoke_oneway(self, addr: str, cmd: RemotingCommand) -> None:
        """Send ``cmd`` to ``addr`` with the oneway flag; no response is awaited."""
        conn = await self.get_connection(addr)
        await conn.invoke_oneway(cmd)

    def close_connection(self, addr: str) -> None:
        conn = self._connections.pop(addr, None)
        if conn is not None:
            conn.close()

    async def close(self) -> None:
        """Close every connection; pending invokes fail with ``RemotingConnectError``."""
        self._closed = True
        for task in list(self._connecting.values()):
            task.cancel()
        if self._connecting:
            await asyncio.wait(list(self._connecting.values()))
        conns = list(self._connections.values())
        self._connections.clear()
        if conns:
            await asyncio.gather(*(conn.aclose() for conn in conns))
        handler_tasks = {task for conn in conns for task in conn.tasks}
        for handler_task in handler_tasks:
            handler_task.cancel()
        if handler_tasks:
            await asyncio.wait(handler_tasks)

    async def __aenter__(self) -> RemotingClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()
