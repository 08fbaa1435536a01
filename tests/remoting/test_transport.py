"""The asyncio transport over real sockets on 127.0.0.1, on asyncio's loop and on uvloop."""

from __future__ import annotations

import asyncio
import logging
import struct
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

import pytest
import uvloop

from txmq.errors import ClientError, LocalProtocolError
from txmq.remoting.codec import DEFAULT_MAX_FRAME_SIZE, FrameDecoder, encode_command
from txmq.remoting.codes import RequestCode, ResponseCode, SerializeType
from txmq.remoting.command import RemotingCommand
from txmq.remoting.server import RemotingServer, ServerLimits
from txmq.remoting.transport import (
    Connection,
    RemotingClient,
    RemotingConnectError,
    RemotingTimeoutError,
    Reply,
    new_event_loop,
    parse_address,
    write_batch,
)

ECHO = 9001
ASYNC_ECHO = 9002
FAIL = 9003
ASYNC_FAIL = 9004
SILENT = 9005
HANG_UP = 9006
REGISTER = 9007
PAUSE_READING = 9008
BIG = 9009

Runner = Callable[[Coroutine[Any, Any, Any]], Any]


@pytest.fixture(params=[asyncio.new_event_loop, uvloop.new_event_loop], ids=["asyncio", "uvloop"])
def run(request: pytest.FixtureRequest) -> Runner:
    def _run(coro: Coroutine[Any, Any, Any]) -> Any:
        with asyncio.Runner(loop_factory=request.param) as runner:
            return runner.run(asyncio.wait_for(coro, 30))

    return _run


class Handler:
    """A server handler covering each case the tests need."""

    def __init__(self) -> None:
        self.oneways: list[RemotingCommand] = []
        self.registered: list[Connection] = []
        self.handled = 0
        self.oneway_seen = asyncio.Event()

    def __call__(self, conn: Connection, cmd: RemotingCommand) -> Any:
        self.handled += 1
        if cmd.is_oneway:
            self.oneways.append(cmd)
            self.oneway_seen.set()
            # a response to a oneway request is skipped by the transport
            return RemotingCommand.response_to(cmd, ResponseCode.SUCCESS)
        if cmd.code == ECHO:
            return RemotingCommand.response_to(cmd, ResponseCode.SUCCESS, ext_fields=dict(cmd.ext_fields),
                                               body=cmd.body)  # fmt: skip
        if cmd.code == ASYNC_ECHO:
            return self._async_echo(cmd)
        if cmd.code == FAIL:
            raise ValueError("handler blew up")
        if cmd.code == ASYNC_FAIL:
            return self._async_fail()
        if cmd.code == SILENT:
            return None
        if cmd.code == HANG_UP:
            conn.close()
            return None
        if cmd.code == REGISTER:
            conn.attrs["client"] = cmd.ext_fields.get("clientID")
            self.registered.append(conn)
            return RemotingCommand.response_to(cmd)
        if cmd.code == PAUSE_READING:
            conn._transport.pause_reading()  # type: ignore[union-attr]
            conn.attrs["paused"] = True
            return RemotingCommand.response_to(cmd)
        if cmd.code == BIG:
            return RemotingCommand.response_to(cmd, body=b"B" * int(cmd.ext_fields["size"]))
        return RemotingCommand.response_to(cmd, ResponseCode.REQUEST_CODE_NOT_SUPPORTED)

    async def _async_echo(self, cmd: RemotingCommand) -> RemotingCommand:
        await asyncio.sleep(0.01)
        return RemotingCommand.response_to(cmd, ResponseCode.SUCCESS, body=cmd.body)

    async def _async_fail(self) -> RemotingCommand:
        await asyncio.sleep(0)
        raise KeyError("async handler blew up")


async def with_server(
    body: Callable[[RemotingServer, RemotingClient, str], Awaitable[None]],
    handler: Any = None,
    client_handler: Any = None,
    **server_kwargs: Any,
) -> None:
    server = RemotingServer(handler if handler is not None else Handler(), **server_kwargs)
    await server.start()
    client = RemotingClient(client_handler)
    try:
        await body(server, client, f"127.0.0.1:{server.port}")
    finally:
        await client.close()
        await server.close()


def test_request_response(run: Runner) -> None:
    async def body(server: RemotingServer, client: RemotingClient, addr: str) -> None:
        for serialize_type in SerializeType:
            req = RemotingCommand.request(
                ECHO, {"a": "1", "topic": "t"}, b"payload", serialize_type=serialize_type
            )
            resp = await client.invoke(addr, req, 3)
            assert resp.is_response and resp.opaque == req.opaque and resp.code == ResponseCode.SUCCESS
            assert resp.body == b"payload" and resp.ext_fields == {"a": "1", "topic": "t"}
            assert resp.serialize_type is serialize_type
        resp = await client.invoke(addr, RemotingCommand.request(ASYNC_ECHO, body=b"later"), 3)
        assert resp.body == b"later"
        resp = await client.invoke(addr, RemotingCommand.request(12345), 3)
        assert resp.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
        assert len(server.connections) == 1

    run(with_server(body))


def test_many_concurrent_invokes(run: Runner) -> None:
    async def body(server: RemotingServer, client: RemotingClient, addr: str) -> None:
        reqs = [
            RemotingCommand.request(ECHO if i % 3 else ASYNC_ECHO, body=str(i).encode()) for i in range(500)
        ]
        resps = await asyncio.gather(*(client.invoke(addr, r, 5) for r in reqs))
        assert [r.body for r in resps] == [r.body for r in reqs]

    run(with_server(body))


def test_oneway(run: Runner) -> None:
    handler = Handler()

    async def body(server: RemotingServer, client: RemotingClient, addr: str) -> None:
        cmd = RemotingCommand.request(ECHO, {"k": "v"})
        await client.invoke_oneway(addr, cmd)
        await asyncio.wait_for(handler.oneway_seen.wait(), 3)
        assert handler.oneways[0].ext_fields == {"k": "v"} and handler.oneways[0].is_oneway
        # no response came back for it: the next invoke gets its own response only
        resp = await client.invoke(addr, RemotingCommand.request(ECHO, body=b"after"), 3)
        assert resp.body == b"after"

    run(with_server(body, handler))


def test_server_initiated_invoke_reaches_client_handler(run: Runner) -> None:
    handler = Handler()
    seen: list[RemotingCommand] = []

    def client_handler(conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        seen.append(cmd)
        assert cmd.code == RequestCode.CHECK_TRANSACTION_STATE
        return RemotingCommand.response_to(cmd, ext_fields={"state": "commit"})

    async def body(server: RemotingServer, client: RemotingClient, addr: str) -> None:
        await client.invoke(addr, RemotingCommand.request(REGISTER, {"clientID": "c1"}), 3)
        (conn,) = handler.registered
        assert conn.attrs["client"] == "c1"
        check = RemotingCommand.request(RequestCode.CHECK_TRANSACTION_STATE, {"commitLogOffset": "42"})
        resp = await conn.invoke(check, 3)
        assert resp.ext_fields == {"state": "commit"} and resp.opaque == check.opaque
        await conn.invoke_oneway(RemotingCommand.request(RequestCode.CHECK_TRANSACTION_STATE))
        for _ in range(100):
            if len(seen) == 2:
                break
            await asyncio.sleep(0.01)
        assert len(seen) == 2 and seen[1].is_oneway

    run(with_server(body, handler, client_handler))


def test_client_without_handler_answers_not_supported(run: Runner) -> None:
    handler = Handler()

    async def body(server: RemotingServer, client: RemotingClient, addr: str) -> None:
        await client.invoke(addr, RemotingCommand.request(REGISTER), 3)
        resp = await handler.registered[0].invoke(
            RemotingCommand.request(RequestCode.CHECK_TRANSACTION_STATE), 3
        )
        assert resp.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED

    run(with_server(body, handler))


def test_handler_exception_gives_system_error(run: Runner, caplog: pytest.LogCaptureFixture) -> None:
    async def body(server: RemotingServer, client: RemotingClient, addr: str) -> None:
        with caplog.at_level(logging.ERROR, "txmq.remoting"):
            resp = await client.invoke(addr, RemotingCommand.request(FAIL), 3)
            assert resp.code == ResponseCode.SYSTEM_ERROR and "ValueError" in (resp.remark or "")
            assert "handler blew up" in (resp.remark or "")
            resp = await client.invoke(addr, RemotingCommand.request(ASYNC_FAIL), 3)
            assert resp.code == ResponseCode.SYSTEM_ERROR and "KeyError" in (resp.remark or "")
        assert any("failed" in r.getMessage() for r in caplog.records)
        resp = await client.invoke(addr, RemotingCommand.request(ECHO, body=b"still here"), 3)
        assert resp.body == b"still here"

    run(with_server(body))


def test_garbage_peer_is_disconnected_others_unaffected(
    run: Runner, caplog: pytest.LogCaptureFixture
) -> None:
    async def body(server: RemotingServer, client: RemotingClient, addr: str) -> None:
        assert (await client.invoke(addr, RemotingCommand.request(ECHO), 3)).code == 0
        host, port = parse_address(addr)
        with caplog.at_level(logging.WARNING, "txmq.remoting"):
            for garbage in (b"GET / HTTP/1.1\r\n\r\n", struct.pack(">II", 10, 0x05000002) + b"{}\0\0\0\0"):
                reader, writer = await asyncio.open_connection(host, port)
                sock_host, sock_port = writer.get_extra_info("sockname")[:2]
                local = f"{sock_host}:{sock_port}"
                writer.write(garbage)
                await writer.drain()
                assert await asyncio.wait_for(reader.read(), 3) == b""  # server closed it
                writer.close()
                await writer.wait_closed()
                assert any(
                    local in r.getMessage() and "protocol error" in r.getMessage() for r in caplog.records
                )
        resp = await client.invoke(addr, RemotingCommand.request(ECHO, body=b"fine"), 3)
        assert resp.body == b"fine"

    run(with_server(body))


def test_invoke_timeout(run: Runner) -> None:
    async def body(server: RemotingServer, client: RemotingClient, addr: str) -> None:
        with pytest.raises(RemotingTimeoutError, match=r"within 0\.2s") as info:
            await client.invoke(addr, RemotingCommand.request(SILENT), 0.2)
        assert isinstance(info.value, ClientError)
        conn = await client.get_connection(addr)
        assert not conn._pending  # nothing left behind
        assert (await client.invoke(addr, RemotingCommand.request(ECHO), 3)).code == 0

    run(with_server(body))


def test_connection_loss_fails_pending_and_client_reconnects(run: Runner) -> None:
    async def body(server: RemotingServer, client: RemotingClient, addr: str) -> None:
        closed: list[Connection] = []
        first = await client.get_connection(addr)
        first.on_close.append(closed.append)
        silent = asyncio.ensure_future(client.invoke(addr, RemotingCommand.request(SILENT), 10))
        await asyncio.sleep(0.05)
        with pytest.raises(RemotingConnectError):
            await client.invoke(addr, RemotingCommand.request(HANG_UP), 10)
        with pytest.raises(RemotingConnectError):
            await silent
        assert first.closed and closed == [first]
        resp = await client.invoke(addr, RemotingCommand.request(ECHO, body=b"again"), 3)
        assert resp.body == b"again"
        assert (await client.get_connection(addr)) is not first

    run(with_server(body))


def test_server_close_fails_pending_invokes(run: Runner) -> None:
    async def main() -> None:
        server = RemotingServer(Handler())
        await server.start()
        client = RemotingClient()
        try:
            addr = f"127.0.0.1:{server.port}"
            pending = asyncio.ensure_future(client.invoke(addr, RemotingCommand.request(SILENT), 10))
            await asyncio.sleep(0.05)
            await server.close()
            with pytest.raises(RemotingConnectError):
                await pending
            with pytest.raises(RemotingConnectError, match="cannot connect"):
                await client.invoke(addr, RemotingCommand.request(ECHO), 3)
        finally:
            await client.close()
            await server.close()

    run(main())


def test_server_side_on_close_and_attrs(run: Runner) -> None:
    handler = Handler()
    gone: list[Connection] = []

    async def body(server: RemotingServer, client: RemotingClient, addr: str) -> None:
        await client.invoke(addr, RemotingCommand.request(REGISTER, {"clientID": "x"}), 3)
        (conn,) = handler.registered
        conn.on_close.append(gone.append)
        assert conn.remote_address.startswith("127.0.0.1:")
        client.close_connection(addr)
        for _ in range(100):
            if gone:
                break
            await asyncio.sleep(0.01)
        assert gone == [conn] and conn.closed and conn not in server.connections
        with pytest.raises(RemotingConnectError):
            conn.send(RemotingCommand.request(ECHO))
        with pytest.raises(RemotingConnectError):
            await conn.invoke(RemotingCommand.request(ECHO), 1)

    run(with_server(body, handler))


def test_large_body_near_max_and_over_max(run: Runner) -> None:
    async def body(server: RemotingServer, client: RemotingClient, addr: str) -> None:
        near = DEFAULT_MAX_FRAME_SIZE - 4096
        resp = await client.invoke(addr, RemotingCommand.request(ECHO, body=b"x" * near), 10)
        assert len(resp.body) == near
        # the client refuses to build an oversized frame itself
        with pytest.raises(LocalProtocolError):
            await client.invoke(addr, RemotingCommand.request(ECHO, body=b"x" * DEFAULT_MAX_FRAME_SIZE), 10)
        # a peer allowed bigger frames gets its connection closed by the server
        big_client = RemotingClient(max_frame_size=4 * DEFAULT_MAX_FRAME_SIZE)
        try:
            with pytest.raises(RemotingConnectError):
                await big_client.invoke(
                    addr, RemotingCommand.request(ECHO, body=b"x" * DEFAULT_MAX_FRAME_SIZE), 10
                )
        finally:
            await big_client.close()
        assert (await client.invoke(addr, RemotingCommand.request(ECHO), 3)).code == 0

    run(with_server(body))


def test_configurable_max_frame(run: Runner) -> None:
    async def body(server: RemotingServer, client: RemotingClient, addr: str) -> None:
        assert (await client.invoke(addr, RemotingCommand.request(ECHO, body=b"x" * 900), 3)).code == 0
        with pytest.raises(RemotingConnectError):
            await client.invoke(addr, RemotingCommand.request(ECHO, body=b"x" * 1100), 3)

    run(with_server(body, max_frame_size=1024))


def test_connect_error(run: Runner) -> None:
    async def main() -> None:
        server = RemotingServer(Handler())
        await server.start()
        port = server.port
        await server.close()
        client = RemotingClient(connect_timeout=1)
        try:
            with pytest.raises(RemotingConnectError, match="cannot connect"):
                await client.invoke(f"127.0.0.1:{port}", RemotingCommand.request(ECHO), 1)
            with pytest.raises(LocalProtocolError):
                await client.invoke("no-port", RemotingCommand.request(ECHO), 1)
        finally:
            await client.close()

    run(main())


def test_client_waits_while_server_does_not_read(run: Runner) -> None:
    handler = Handler()

    async def body(server: RemotingServer, client: RemotingClient, addr: str) -> None:
        await client.invoke(addr, RemotingCommand.request(REGISTER), 3)
        await client.invoke(addr, RemotingCommand.request(PAUSE_READING), 3)
        conn = await client.get_connection(addr)
        chunk = b"y" * (1 << 20)

        async def flood() -> int:
            sent = 0
            for _ in range(64):
                await conn.invoke_oneway(RemotingCommand.request(ECHO, body=chunk))
                sent += 1
            return sent

        task = asyncio.ensure_future(flood())
        await asyncio.sleep(0.3)
        assert not task.done() and conn._paused  # held back: the server stopped reading
        server_conn = handler.registered[0]
        server_conn._transport.resume_reading()  # type: ignore[union-attr]
        assert await asyncio.wait_for(task, 10) == 64
        for _ in range(500):
            if len(handler.oneways) == 64:
                break
            await asyncio.sleep(0.01)
        assert len(handler.oneways) == 64

    run(with_server(body, handler))


def test_server_stops_reading_from_a_peer_that_does_not_read(run: Runner) -> None:
    handler = Handler()
    size = 256 * 1024
    count = 200  # 50 MiB of responses: far more than socket buffers hold

    async def body(server: RemotingServer, client: RemotingClient, addr: str) -> None:
        host, port = parse_address(addr)
        reader, writer = await asyncio.open_connection(host, port)
        try:
            # all requests in one write: the server must stop mid-buffer, not only between reads
            writer.write(b"".join(encode_command(RemotingCommand.request(BIG, {"size": str(size)}))
                                  for _ in range(count)))  # fmt: skip
            await asyncio.sleep(0.5)
            assert handler.handled < count // 2, handler.handled  # the server paused reading our requests
            dec = FrameDecoder()
            got = 0
            while got < count:
                dec.receive_data(await asyncio.wait_for(reader.read(1 << 20), 10))
                while (cmd := dec.next_command()) is not None:
                    assert len(cmd.body) == size
                    got += 1
            assert handler.handled == count
        finally:
            writer.close()
            await writer.wait_closed()

    run(with_server(body, handler))


def test_new_event_loop_is_uvloop() -> None:
    loop = new_event_loop()
    try:
        assert isinstance(loop, uvloop.Loop)
    finally:
        loop.close()


def test_bounded_pending_invokes(run: Runner) -> None:
    async def main() -> None:
        server = RemotingServer(Handler())
        await server.start()
        client = RemotingClient(max_pending_invokes=2)
        try:
            addr = f"127.0.0.1:{server.port}"
            reqs = [RemotingCommand.request(ASYNC_ECHO, body=bytes([i])) for i in range(7)]
            resps = await asyncio.gather(*(client.invoke(addr, r, 5) for r in reqs))
            assert [r.body for r in resps] == [r.body for r in reqs]
            # two silent requests hold both slots: a third times out waiting for one
            silent = [
                asyncio.ensure_future(client.invoke(addr, RemotingCommand.request(SILENT), 5)) for _ in "ab"
            ]
            await asyncio.sleep(0.05)
            with pytest.raises(RemotingTimeoutError):
                await client.invoke(addr, RemotingCommand.request(ECHO), 0.1)
            # losing the connection frees everyone
            waiting = asyncio.ensure_future(client.invoke(addr, RemotingCommand.request(ECHO), 5))
            await asyncio.sleep(0.05)
            client.close_connection(addr)
            for fut in [*silent, waiting]:
                with pytest.raises(RemotingConnectError):
                    await fut
        finally:
            await client.close()
            await server.close()

    run(main())


def test_frame_timeout_spares_a_peer_that_keeps_completing_frames(run: Runner) -> None:
    """The frame timeout is for one frame: a peer streaming frames so that every read ends mid-frame, for longer
    than the timeout, is served; one that stops mid-frame is closed."""

    async def body(server: RemotingServer, client: RemotingClient, addr: str) -> None:
        host, port = parse_address(addr)
        reader, writer = await asyncio.open_connection(host, port)
        stream = b"".join(encode_command(RemotingCommand.request(ECHO, {}, b"x" * 100)) for _ in range(40))
        step = len(stream) // 40 + 7  # never on a frame boundary
        for start in range(0, len(stream), step):  # 0.05 s apart: about 2 s in all, four timeouts
            writer.write(stream[start : start + step])
            await asyncio.sleep(0.05)
        dec = FrameDecoder()
        answered = 0
        while answered < 40:
            dec.receive_data(await asyncio.wait_for(reader.read(65536), 3))
            while dec.next_command() is not None:
                answered += 1
        writer.write(stream[:step])  # one frame and a bit of the next, then nothing
        dec.receive_data(await asyncio.wait_for(reader.read(65536), 3))
        assert dec.next_command() is not None  # the answer to the whole one
        assert await asyncio.wait_for(reader.read(65536), 3) == b""  # then closed for the stalled one
        assert server.buffered_bytes == 0
        writer.close()

    run(with_server(body, limits=ServerLimits(server_frame_timeout_seconds=0.5)))


@pytest.mark.parametrize("kind", ["future", "reply"])
def test_a_future_or_a_reply_from_the_handler_is_answered_without_a_task(run: Runner, kind: str) -> None:
    """The send path's ways: the handler returns an ``asyncio.Future`` and the transport writes its result from a
    done callback, or a ``Reply`` (a future's methods) that writes its answer itself when resolved: no future, no
    callback. An exception is a SYSTEM_ERROR answer; a cancelled one is no answer (its caller is gone); a oneway
    request's is never written; a Reply whose connection closed writes nothing."""
    pending: dict[str, tuple[RemotingCommand, Any]] = {}

    def handler(conn: Connection, cmd: RemotingCommand) -> Any:
        waiter = asyncio.get_running_loop().create_future() if kind == "future" else Reply(conn, cmd)
        pending[cmd.ext_fields["k"]] = (cmd, waiter)
        return waiter

    async def body(server: RemotingServer, client: RemotingClient, addr: str) -> None:
        calls = {k: asyncio.ensure_future(client.invoke(addr, RemotingCommand.request(ECHO, {"k": k}),
                                                        0.3 if k == "gone" else 5))
                 for k in ("ok", "bad", "gone")}
        conn = await client.get_connection(addr)
        await conn.invoke_oneway(RemotingCommand.request(ECHO, {"k": "oneway"}))
        while len(pending) < 4:
            await asyncio.sleep(0.01)
        assert not any(conn.tasks for conn in server.connections)  # no task per request
        cmd, fut = pending["ok"]
        fut.set_result(RemotingCommand.response_to(cmd, ResponseCode.SUCCESS, body=b"later"))
        pending["bad"][1].set_exception(ValueError("store blew up"))
        pending["gone"][1].cancel()
        cmd, fut = pending["oneway"]
        fut.set_result(RemotingCommand.response_to(cmd, ResponseCode.SUCCESS))  # written by nobody
        assert (await calls["ok"]).body == b"later"
        bad = await calls["bad"]
        assert bad.code == ResponseCode.SYSTEM_ERROR and "store blew up" in (bad.remark or "")
        with pytest.raises(RemotingTimeoutError):
            await calls["gone"]
        assert all(w.done() for _, w in pending.values()) and pending["gone"][1].cancelled()
        with pytest.raises(asyncio.InvalidStateError):
            pending["ok"][1].set_result(None)  # resolved once, as a future
        if kind == "reply":
            assert pending["ok"][1].code == ResponseCode.SUCCESS and pending["oneway"][1].code == ResponseCode.SUCCESS
        assert server.connections and not any(conn.closed for conn in server.connections)
        late = asyncio.ensure_future(client.invoke(addr, RemotingCommand.request(ECHO, {"k": "late"}), 5))
        while "late" not in pending:
            await asyncio.sleep(0.01)
        (server_conn,) = server.connections
        await server_conn.aclose()
        with pytest.raises(RemotingConnectError):
            await late
        cmd, fut = pending["late"]
        fut.set_result(RemotingCommand.response_to(cmd, ResponseCode.SUCCESS))  # its connection is gone: no write

    run(with_server(body, handler=handler))


class TransportSpy:
    """Stands in front of a connection's socket transport and records each hand-over (``write``, ``writelines``)
    as the number of frames handed, at the moment it happens."""

    def __init__(self, transport: Any) -> None:
        self._transport = transport
        self.handed: list[int] = []

    def write(self, data: bytes) -> None:
        self.handed.append(1)
        self._transport.write(data)

    def writelines(self, chunks: list[bytes]) -> None:
        self.handed.append(len(chunks))
        self._transport.writelines(chunks)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


def test_writes_outside_a_read_go_at_once_and_a_batch_s_go_together_at_its_end(run: Runner) -> None:
    """An answer given after its request was read (a ``Reply`` resolved later) and a request sent from a coroutine
    reach the socket before the loop turns again: deferred to the next iteration, they waited behind whatever that
    iteration's poll brought in. Inside ``write_batch()`` (a store group's answers) a connection's writes wait for
    the batch's end and leave in one ``writelines``; a batch opened inside another is part of it."""
    waiting: list[Reply] = []

    def handler(conn: Connection, cmd: RemotingCommand) -> Any:
        reply = Reply(conn, cmd)
        waiting.append(reply)
        return reply

    def answer(reply: Reply) -> None:
        reply.set_result(RemotingCommand.response_to(reply.cmd, ResponseCode.SUCCESS, body=reply.cmd.body))

    async def body(server: RemotingServer, client: RemotingClient, addr: str) -> None:
        calls = [asyncio.ensure_future(client.invoke(addr, RemotingCommand.request(ECHO, body=b"%d" % i), 5))
                 for i in range(7)]
        while len(waiting) < 7:
            await asyncio.sleep(0.01)
        (conn,) = server.connections
        spy = TransportSpy(conn._transport)
        conn._transport = spy  # type: ignore[assignment]
        answer(waiting[0])
        assert spy.handed == [1]  # at once, no turn of the loop
        with write_batch():
            answer(waiting[1])
            with write_batch():
                answer(waiting[2])
            answer(waiting[3])
            assert spy.handed == [1]  # nothing until the outermost batch ends
        assert spy.handed == [1, 3]
        with write_batch():
            pass
        assert spy.handed == [1, 3]  # an empty batch writes nothing
        with pytest.raises(KeyError), write_batch():
            answer(waiting[4])
            raise KeyError("the batch's owner failed")
        assert spy.handed == [1, 3, 1]  # what it wrote before still leaves
        answer(waiting[5])
        answer(waiting[6])
        assert spy.handed == [1, 3, 1, 1, 1]
        assert [(await c).body for c in calls] == [b"%d" % i for i in range(7)]
        client_conn = await client.get_connection(addr)
        client_spy = TransportSpy(client_conn._transport)
        client_conn._transport = client_spy  # type: ignore[assignment]
        client_conn.send(RemotingCommand.request(ECHO, body=b"x", oneway=True))
        assert client_spy.handed == [1]

    run(with_server(body, handler=handler))


def test_an_idle_time_of_zero_closes_no_connection(run: Runner) -> None:
    """serverChannelMaxIdleTimeSeconds=0 is RocketMQ's (Netty's IdleStateHandler) way to turn the idle check off;
    it must not close every connection that pauses."""

    async def body(server: RemotingServer, client: RemotingClient, addr: str) -> None:
        host, port = parse_address(addr)
        reader, writer = await asyncio.open_connection(host, port)
        try:
            await asyncio.sleep(0.5)  # ten of the watcher's periods, silent
            writer.write(encode_command(RemotingCommand.request(ECHO, {}, b"still here")))
            dec = FrameDecoder()
            dec.receive_data(await asyncio.wait_for(reader.read(65536), 3))
            assert dec.next_command() is not None
            assert len(server.connections) == 1
        finally:
            writer.close()

    run(with_server(body, limits=ServerLimits(server_channel_max_idle_time_seconds=0)))


def test_a_freed_slot_is_passed_on_when_its_waiter_is_cancelled_before_it_runs(run: Runner) -> None:
    """A request that finishes hands its pending slot to the first waiter by waking it; a waiter cancelled in the
    same turn (its caller's timeout, a handler cancelled at a broker's stop) never runs to take it. The slot must go
    on to the next waiter: it was lost, and the next waited, with nothing in flight, until its own timeout."""

    async def main() -> None:
        server = RemotingServer(Handler())
        await server.start()
        client = RemotingClient(max_pending_invokes=1)
        try:
            addr = f"127.0.0.1:{server.port}"
            conn = await client.get_connection(addr)
            holder = asyncio.ensure_future(conn.invoke(RemotingCommand.request(ASYNC_ECHO, body=b"x"), 5))
            await asyncio.sleep(0)
            first = asyncio.ensure_future(conn.invoke(RemotingCommand.request(ECHO, body=b"1"), 5))
            second = asyncio.ensure_future(conn.invoke(RemotingCommand.request(ECHO, body=b"2"), 5))
            await asyncio.sleep(0)
            assert len(conn._slot_waiters) == 2 and len(conn._pending) == 1
            # Once the holder's answer is in, cancel the first waiter in the turn its wake-up is queued.
            next(iter(conn._pending.values())).add_done_callback(lambda _: first.cancel())
            assert (await holder).body == b"x"
            with pytest.raises(asyncio.CancelledError):
                await first
            resp = await asyncio.wait_for(second, 1.0)
            assert resp.body == b"2"
        finally:
            await client.close()
            await server.close()

    run(main())


def test_close_ends_the_handlers_of_connections_closed_before(run: Runner) -> None:
    """A handler still running after its connection closed is drained (within the grace) or cancelled by the
    server's close, as those of the connections still open are: none outlives ``close``."""
    started = asyncio.Event()
    handlers: list[asyncio.Task[Any]] = []

    async def hang(cmd: RemotingCommand) -> RemotingCommand:
        task = asyncio.current_task()
        assert task is not None
        handlers.append(task)
        started.set()
        await asyncio.Event().wait()
        return RemotingCommand.response_to(cmd)

    async def main() -> None:
        server = RemotingServer(lambda conn, cmd: hang(cmd))
        await server.start()
        client = RemotingClient()
        try:
            pending = asyncio.ensure_future(
                client.invoke(f"127.0.0.1:{server.port}", RemotingCommand.request(SILENT), 10))
            await asyncio.wait_for(started.wait(), 5)
            await client.close()
            with pytest.raises(RemotingConnectError):
                await pending
            while server.connections:  # the server saw the connection close; its handler runs on
                await asyncio.sleep(0.01)
            assert not handlers[0].done()
        finally:
            await server.close(grace=0.1)
        assert handlers[0].cancelled()

    run(main())
