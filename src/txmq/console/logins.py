"""Who acts through the console. Each login holds its own clients, signing as the user's account, so the brokers'
ACL decides what the user may do; the console has no account of its own. A login ends when its user logs out,
when unused for the session timeout, after ``LOGIN_MAX_S`` in any case, or when ``MAX_LOGINS`` newer ones need its
place (the least recently used of the account holding the most goes): all measured on the monotonic clock.
Secrets stay in the clients' signing hooks: never in a page, a cookie or a log line."""

from __future__ import annotations

import asyncio
import secrets
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from txmq.acl.signer import SessionCredentials
from txmq.admin import MQAdminExt
from txmq.client.producer import Producer
from txmq.errors import ClientError
from txmq.remoting.codes import RequestCode, ResponseCode

MAX_LOGINS = 64  # each holds a client thread (two once it resent a dead letter)
LOGIN_MAX_S = 12 * 3600.0
PRODUCER_GROUP = "TXMQ_CONSOLE_PRODUCER"  # the group dead letters are resent in


async def call(fn: Callable[..., Any], *args: Any) -> Any:
    """A blocking client call, off the loop."""
    return await asyncio.to_thread(fn, *args)


class Clients:
    """The admin client, and once a dead letter is resent the producer, acting for one user: signing as
    ``credentials``, or unsigned when None (a console without login, for a cluster without ACL)."""

    def __init__(self, namesrv: str | None, credentials: SessionCredentials | None) -> None:
        self.admin = MQAdminExt(namesrv)
        self.admin.credentials = credentials  # never the process's own account ($TXMQ_ACCESS_KEY)
        self._producer: Producer | None = None
        self._lock = asyncio.Lock()

    async def start(self) -> None:
        await call(self.admin.start)

    async def producer(self) -> Producer:
        async with self._lock:
            if self._producer is None:
                producer = Producer(PRODUCER_GROUP, self.admin.namesrv)
                producer.credentials = self.admin.credentials
                self._producer = await call(producer.start)
            return self._producer

    async def close(self) -> None:
        if self._producer is not None:
            await call(self._producer.shutdown)
        await call(self.admin.shutdown)


async def log_in(namesrv: str | None, access_key: str, secret_key: str) -> Clients:
    """Clients for the account, once the name server accepted a request signed with it (its cluster table) and
    every server refuses one signed with another secret; ``TxmqError`` with the refusal otherwise."""
    clients = Clients(namesrv, SessionCredentials(access_key, secret_key))
    try:
        await clients.start()
        info = await call(clients.admin.cluster_info)
        await _check_signatures_are_checked(clients.admin.namesrv, info, access_key)
    except BaseException:
        await clients.close()
        raise
    return clients


async def _check_signatures_are_checked(namesrv: str, info: dict[str, Any], access_key: str) -> None:
    """The servers see the console's address, not the user's: where that address is a white address for the account
    (its ``whiteRemoteAddress``, ``globalWhiteRemoteAddresses``) or ACL is off, they accept the account without its
    secret, and a login there would let anyone act as the account. ``TxmqError`` naming the first server that
    accepts a request signed with a wrong secret; a broker that cannot be reached is not asked."""
    probe = Clients(namesrv, SessionCredentials(access_key, secrets.token_urlsafe(24)))
    try:
        await probe.start()
        brokers = [addr for data in (info.get("brokerAddrTable") or {}).values()
                   for addr in (data.get("brokerAddrs") or {}).values()]
        for addr in [a.strip() for a in namesrv.split(";") if a.strip()] + brokers:
            try:
                code = await call(probe.admin.answer_code, addr, RequestCode.GET_BROKER_CLUSTER_INFO)
            except ClientError:
                if addr in brokers:
                    continue
                raise
            if code != ResponseCode.NO_PERMISSION:
                raise ClientError(f"{addr} does not check the signature of {access_key} from the console's "
                                  "address (ACL is off there, or the address is a white address for it): the "
                                  "console cannot tell who logs in as that account")
    finally:
        await probe.close()


@dataclass(eq=False)
class Login:
    access_key: str
    clients: Clients = field(repr=False)
    started: float
    seen: float


class Logins:
    """The logins, by an id that only the user's (encrypted) session cookie carries."""

    def __init__(self, timeout_s: float, limit: int = MAX_LOGINS,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.timeout_s = timeout_s
        self.limit = limit
        self._clock = clock
        self._by_id: dict[str, Login] = {}  # least recently used first
        self._closing: set[asyncio.Task[None]] = set()

    def __len__(self) -> int:
        return len(self._by_id)

    def add(self, access_key: str, clients: Clients) -> str:
        while len(self._by_id) >= self.limit:
            self.drop(self._making_way())
        ident = secrets.token_urlsafe(32)
        now = self._clock()
        self._by_id[ident] = Login(access_key, clients, now, now)
        return ident

    def _making_way(self) -> str:
        """The login that goes at the cap: the least recently used of the account holding the most, so that an
        account logging in again and again ends its own logins, never every other user's."""
        held = Counter(login.access_key for login in self._by_id.values())
        most = max(held.values())
        return next(ident for ident, login in self._by_id.items() if held[login.access_key] == most)

    def current(self, ident: str | None) -> Login | None:
        """The login of ``ident`` if it has not ended (then it counts as used now); ended ones are closed."""
        now = self._clock()
        for old in [i for i, lg in self._by_id.items()
                    if now - lg.seen > self.timeout_s or now - lg.started > LOGIN_MAX_S]:
            self.drop(old)
        login = self._by_id.pop(ident, None) if ident else None
        if ident and login is not None:
            login.seen = now
            self._by_id[ident] = login  # most recently used last
        return login

    def drop(self, ident: str) -> None:
        """End a login; its clients close in the background."""
        login = self._by_id.pop(ident, None)
        if login is not None:
            task = asyncio.get_running_loop().create_task(login.clients.close())
            self._closing.add(task)
            task.add_done_callback(self._closing.discard)

    async def close(self) -> None:
        for ident in list(self._by_id):
            self.drop(ident)
        if self._closing:
            await asyncio.gather(*self._closing, return_exceptions=True)
