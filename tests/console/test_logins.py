"""The console's logins and request checks as units: a login ends by the monotonic clock (unused for the session
timeout, or past its longest life), the least recently used one makes way at the cap, and the ``Host`` and
``Origin`` values a browser sends are read as browsers mean them."""

from __future__ import annotations

import asyncio

from txmq.console.config import ConsoleConfig, host_name
from txmq.console.guard import _origin
from txmq.console.logins import LOGIN_MAX_S, Logins


class FakeClients:
    """Stands in for a user's clients (threads and sockets have nothing to do with this logic)."""

    def __init__(self) -> None:
        self.closed = False

    async def close(self) -> None:
        self.closed = True


def test_a_login_ends_when_unused_for_the_timeout_by_the_monotonic_clock():
    async def go() -> None:
        now = [1000.0]
        logins = Logins(60.0, clock=lambda: now[0])
        clients = FakeClients()
        ident = logins.add("ak", clients)
        now[0] += 59
        assert logins.current(ident) is not None  # used: the timeout starts again
        now[0] += 59
        assert logins.current(ident) is not None
        now[0] += 61
        assert logins.current(ident) is None
        await logins.close()
        assert clients.closed and len(logins) == 0

    asyncio.run(go())


def test_a_login_in_use_still_ends_after_its_longest_life():
    async def go() -> None:
        now = [0.0]
        logins = Logins(60.0, clock=lambda: now[0])
        ident = logins.add("ak", FakeClients())
        while now[0] < LOGIN_MAX_S - 30:
            now[0] += 30
            assert logins.current(ident) is not None
        now[0] += 60
        assert logins.current(ident) is None
        await logins.close()

    asyncio.run(go())


def test_the_least_recently_used_login_makes_way_at_the_cap():
    async def go() -> None:
        logins = Logins(600.0, limit=3)
        made = [FakeClients() for _ in range(4)]
        ids = [logins.add(f"ak{i}", c) for i, c in enumerate(made[:3])]
        assert logins.current(ids[0]) is not None  # used: now the most recent
        ids.append(logins.add("ak3", made[3]))
        assert logins.current(ids[1]) is None and len(logins) == 3
        assert all(logins.current(i) is not None for i in (ids[0], ids[2], ids[3]))
        assert logins.current("made-up") is None and logins.current(None) is None
        await logins.close()
        assert made[1].closed

    asyncio.run(go())


def test_one_account_logging_in_again_and_again_evicts_its_own_logins():
    """Any account the name server accepts may log in: one logging in 64 times made every other user's login make
    way (an operator logged out at will by another team's consumer account). At the cap, the login that makes way
    is now the least recently used of the account holding the most."""
    async def go() -> None:
        logins = Logins(600.0, limit=3)
        admin = logins.add("admin", FakeClients())
        flood = [logins.add("attacker", FakeClients()) for _ in range(10)]
        assert logins.current(admin) is not None
        assert len(logins) == 3 and [logins.current(i) is not None for i in flood] == [False] * 8 + [True] * 2
        await logins.close()

    asyncio.run(go())


def test_host_names_and_origins_as_browsers_send_them():
    assert host_name("LocalHost.:8080") == "localhost" and host_name("[::1]:80") == "::1"
    assert host_name("console.example") == "console.example" and host_name("") == ""
    config = ConsoleConfig(host="10.1.2.3", allowed_hosts=("Console.Example",))
    assert config.host_names() == {"localhost", "127.0.0.1", "::1", "10.1.2.3", "console.example"}
    assert "0.0.0.0" not in ConsoleConfig(host="0.0.0.0").host_names()
    assert _origin("http://localhost:8080") == ("http", "localhost", 8080)
    assert _origin("https://Console.Example") == ("https", "console.example", 443)
    assert _origin("http://[::1]:80") == ("http", "::1", 80)
    for bad in ("null", "", "file://", "http://", "ftp://localhost", "http://x:notaport", "http://x/path"):
        assert _origin(bad) is None, bad
