"""What every producer, consumer and admin object shares: a loop thread (``ClientRuntime``) and an
``MQClientInstance`` on it, made by ``start()`` and closed by ``shutdown()``, a context manager, and
``_call`` to run a coroutine there and wait for it. Subclasses fill in the hooks. The first client started in a
process tunes its collector (``txmq.gctune``): full collections of the whole heap were the tail of its latency."""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
from collections.abc import Coroutine
from typing import Any, Self

from txmq.acl.signer import AclClientRPCHook, SessionCredentials
from txmq.client.instance import MQClientInstance
from txmq.client.runtime import ClientRuntime
from txmq.errors import ClientError
from txmq.gctune import tune_gc_for_client
from txmq.remoting.command import RemotingCommand
from txmq.remoting.tls import client_context
from txmq.remoting.transport import Connection

DEFAULT_NAMESRV = "127.0.0.1:9876"


def default_credentials() -> SessionCredentials | None:
    """``$TXMQ_ACCESS_KEY`` and ``$TXMQ_SECRET_KEY`` (and ``$TXMQ_SECURITY_TOKEN``) when both keys are set."""
    ak, sk = os.environ.get("TXMQ_ACCESS_KEY"), os.environ.get("TXMQ_SECRET_KEY")
    return SessionCredentials(ak, sk, os.environ.get("TXMQ_SECURITY_TOKEN", "")) if ak and sk else None


def default_tls() -> str | None:
    """``$TXMQ_TLS_TRUST_CERT_PATH`` when ``$TXMQ_TLS`` is true ("" for the system's CAs), else None (plaintext)."""
    if os.environ.get("TXMQ_TLS", "").lower() not in ("1", "true", "yes"):
        return None
    return os.environ.get("TXMQ_TLS_TRUST_CERT_PATH", "")


def default_namesrv(namesrv: str | None) -> str:
    """The name server to use: the argument, else ``$NAMESRV_ADDR`` (as in RocketMQ), else the local default."""
    return namesrv or os.environ.get("NAMESRV_ADDR") or DEFAULT_NAMESRV


class ClientBase:
    def __init__(self, namesrv: str | None, instance_name: str | None, name_prefix: str) -> None:
        """``instance_name`` defaults to ``<name_prefix>-<pid>-<id>``: unique per object, so two clients of one
        group in one process are two members of the group (RocketMQ's instanceName)."""
        self.namesrv = default_namesrv(namesrv)
        self.instance_name = instance_name or f"{name_prefix}-{os.getpid()}-{id(self):x}"
        self._runtime: ClientRuntime | None = None
        # RocketMQ's service state RUNNING: from the end of start() to the beginning of shutdown()
        self._running = False
        # one start() or shutdown() at a time: two starts made two loops and instances, a second shutdown found
        # the runtime closing under it
        self._lifecycle_lock = threading.Lock()
        self._shutting_down_by: threading.Thread | None = None  # the thread running shutdown(), while it runs
        self.instance: MQClientInstance | None = None
        self.credentials = default_credentials()
        self.tls_trust_cert_path = default_tls()  # None: plaintext

    def set_session_credentials(self, access_key: str, secret_key: str, security_token: str = "") -> Self:
        """Sign every request with this account (RocketMQ's ACL); call before ``start``."""
        self.credentials = SessionCredentials(access_key, secret_key, security_token)
        return self

    def use_tls(self, trust_cert_path: str = "") -> Self:
        """Talk TLS to name servers and brokers, checking their certificates against ``trust_cert_path`` (a CA
        bundle; "" for the system's CAs); call before ``start``."""
        self.tls_trust_cert_path = trust_cert_path
        return self

    @property
    def started(self) -> bool:
        return self._runtime is not None

    # --- hooks ----------------------------------------------------------------------------------------

    async def _on_start(self) -> None:
        """Runs on the loop once the instance exists."""

    async def _on_shutdown(self) -> None:
        """Runs on the loop before the runtime stops; the default closes the instance's connections."""
        assert self.instance is not None
        await self.instance.close()

    def _before_runtime_close(self) -> None:
        """Runs on the caller's thread after ``_on_shutdown``, while the loop still runs."""

    def _request_handler(self, conn: Connection, cmd: RemotingCommand) -> Any:
        """Requests a broker sends this client (check-back, consumer ids changed); none by default."""
        return None

    def _heartbeat_data(self) -> dict[str, Any]:
        return {"producerDataSet": [], "consumerDataSet": []}

    # --- lifecycle ------------------------------------------------------------------------------------

    def _new_instance(self) -> MQClientInstance:
        hook = AclClientRPCHook(self.credentials) if self.credentials else None
        ssl_context = client_context(self.tls_trust_cert_path) if self.tls_trust_cert_path is not None else None
        self.instance = MQClientInstance(self.namesrv, self.instance_name, self._request_handler, rpc_hook=hook,
                                         ssl_context=ssl_context)
        self.instance.heartbeat_data = self._heartbeat_data
        return self.instance

    def start(self) -> Self:
        """Start the client; a start from another thread meanwhile waits for this one and returns, the client
        running. A client running (or shutting down) is left as it is, without the lock: a send's callback on the
        loop thread may call this while a shutdown holding the lock waits for that loop."""
        if self._starts_here():
            with self._lifecycle_lock:
                self._start()
        return self

    def _starts_here(self) -> bool:
        """Whether ``start`` takes the lifecycle lock: the client is not started, or another thread's start is under
        way (its runtime made, its ``_on_start`` not done: returning then, a call right after was refused as not
        running). Not on the loop's own thread, which that start waits for."""
        runtime = self._runtime
        if runtime is None:
            return True
        return not self._running and self._shutting_down_by is None and not runtime.on_loop_thread()

    def _start(self) -> None:
        if self._runtime is None:  # again, under the lock
            # the instance first: one that cannot be made (no name server address, a CA file not there) then
            # leaves no loop thread behind, and no runtime that would make the next start() a no-op
            instance = self._new_instance()
            self._runtime = self._new_runtime()
            try:
                self._runtime.call(self._on_start(), 30)
            except BaseException:
                # its connections first: a loop closed with sockets open refuses to close (EBUSY), which would
                # hide why the start failed
                with contextlib.suppress(Exception):
                    self._runtime.call(instance.close(), 10)
                self._close_runtime()
                raise
            self._running = True
            tune_gc_for_client()

    def shutdown(self) -> None:
        """Stop the client; a shutdown from another thread meanwhile waits for this one and returns, and so does one
        from a callback this shutdown runs on its own thread (a send it ends)."""
        runtime = self._runtime
        if runtime is None or self.instance is None:
            return
        if runtime.on_loop_thread():
            # checked before anything closes: closing the runtime from its own thread would stall the loop
            raise ClientError("shutdown() cannot run on the client's own loop thread (a listener or a send's "
                              "callback running there): call it from another thread")
        if runtime.borrowed:
            raise ClientError("a client started on an application's loop is shut down by awaiting its shutdown() "
                              "on that loop")
        if self._shutting_down_by is threading.current_thread():
            return  # from a callback of a send this shutdown ends, on its thread: the shutdown under way ends it all
        with self._lifecycle_lock:
            if self._runtime is not runtime:
                return
            self._shutting_down_by = threading.current_thread()  # first: a start() seeing it stopped returns at once
            self._running = False
            try:
                runtime.call(self._on_shutdown(), 30)
            finally:
                try:
                    self._before_runtime_close()
                    self._close_runtime()
                finally:
                    self._shutting_down_by = None

    async def _start_on_running_loop(self) -> None:
        """``start`` on the caller's running loop, borrowed (``ClientRuntime(borrow=True)``): no thread of its own."""
        if self._runtime is not None:
            return
        instance = self._new_instance()  # first, as in ``start``
        self._runtime = self._new_runtime(borrow=True)
        try:
            await self._on_start()
        except BaseException:
            with contextlib.suppress(Exception):
                await instance.close()
            await self._runtime.aclose()
            self._runtime, self.instance = None, None
            raise
        self._running = True
        tune_gc_for_client()

    async def _shutdown_on_running_loop(self) -> None:
        """``shutdown`` of a client started by ``_start_on_running_loop``, awaited on that loop."""
        runtime, instance = self._runtime, self.instance
        if runtime is None or instance is None:
            return
        self._running = False
        try:
            await self._on_shutdown()
        except BaseException:
            # cut short, most often cancelled by the application's own timeout while a broker does not answer the
            # unregister: the connections close all the same (the loop is the application's, and goes on)
            with contextlib.suppress(Exception):
                await instance.close()
            raise
        finally:
            self._before_runtime_close()
            await runtime.aclose()
            self._runtime, self.instance = None, None

    def _new_runtime(self, borrow: bool = False) -> ClientRuntime:
        """The client's runtime, made at each start (a subclass makes what lives as long as it here: its hand-offs
        to the new runtime, its thread pools, which shutdown() ends)."""
        return ClientRuntime(self.instance_name, borrow=borrow)

    def _close_runtime(self) -> None:
        if self._runtime is not None:
            self._runtime.close()
        self._runtime = None
        self.instance = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    def _call(self, coro: Coroutine[Any, Any, Any], timeout: float | None = 60.0, *, stopping: bool = False) -> Any:
        """Run ``coro`` on the client's loop and wait (at most ``timeout``: every call has its own, shorter
        deadline inside; this bound only keeps a caller from waiting forever). ``stopping``: also once
        ``shutdown()`` began, while the loop still runs (the end of a local transaction that already ran: sent,
        rather than left to a check-back)."""
        return self._runtime_for(coro, stopping).call(coro, timeout)

    async def _call_async(self, coro: Coroutine[Any, Any, Any]) -> Any:
        """``_call`` for a caller on another event loop (the console's): awaits the client's loop without holding
        a thread of the caller's while the coroutine runs; cancelling the caller cancels the coroutine."""
        return await asyncio.wrap_future(self._runtime_for(coro).post(coro))

    def _runtime_for(self, coro: Coroutine[Any, Any, Any], stopping: bool = False) -> ClientRuntime:
        """The runtime to run ``coro`` on; ``ClientError`` (``coro`` closed) when the client is not running."""
        runtime = self._runtime  # read once: a shutdown may clear it meanwhile
        if runtime is None:
            coro.close()
            raise ClientError(f"{type(self).__name__} is not started")
        if not self._running and not stopping:  # refused up front, as RocketMQ's makeSureStateOK
            coro.close()
            raise ClientError(f"{type(self).__name__} is not running (its start() has not returned yet, or its "
                              "shutdown() began)")
        return runtime
