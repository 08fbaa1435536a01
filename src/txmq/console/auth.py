"""Logging in and out of a console under ACL: the user gives their own account (access key and secret key), the
name server must accept a request signed with it, and from then on every request the console makes for them is
signed so (``txmq.console.logins``). The secret key is never shown again, stored in a cookie or logged."""

from __future__ import annotations

import asyncio
import logging

from aiohttp import web
from aiohttp_session import new_session

from txmq.console.guard import CONFIG, LOGINS, SESSION, USER, flash, take_flash
from txmq.console.html import field, form, page, section
from txmq.console.logins import log_in
from txmq.errors import TxmqError

log = logging.getLogger("txmq.console")

KEY_MAX = 256  # characters of an access or secret key
LOGIN_CHECKS = web.AppKey("login_checks", asyncio.Semaphore)  # logins checked at once (each starts a client)
REFUSED_PAUSE_S = 1.0  # a refused login holds its check that long: guessing is slow


def login_form(access_key: str = "") -> str:
    return form("/login", [field("access_key", "Access key", access_key, required="required",
                                 autocomplete="username"),
                           field("secret_key", "Secret key", "", "password", required="required",
                                 autocomplete="current-password")], "Log in", form_id="login")


async def login_page(request: web.Request) -> web.StreamResponse:
    if request[USER]:
        raise web.HTTPSeeOther("/")
    return _login_response(request)


def _login_response(request: web.Request, access_key: str = "", error: str = "", status: int = 200) -> web.Response:
    notice, flashed = take_flash(request)
    return web.Response(text=page("Log in", section("Your ACL account", login_form(access_key)), notice=notice,
                                  error=error or flashed, nav=False), status=status, content_type="text/html")


async def login(request: web.Request) -> web.StreamResponse:
    data = await request.post()
    access_key, secret_key = str(data.get("access_key", "")).strip(), str(data.get("secret_key", ""))
    if not access_key or not secret_key or len(access_key) > KEY_MAX or len(secret_key) > KEY_MAX:
        return _login_response(request, access_key[:KEY_MAX], "Give your access key and secret key.", 400)
    async with request.app[LOGIN_CHECKS]:
        try:
            clients = await log_in(request.app[CONFIG].namesrv, access_key, secret_key)
        except TxmqError as exc:
            await asyncio.sleep(REFUSED_PAUSE_S)
            return _login_response(request, access_key, f"Login refused: {exc}", 403)
    old = request[SESSION].get("login")
    if isinstance(old, str):
        request.app[LOGINS].drop(old)
    session = await new_session(request)  # a new cookie: none set before the login carries it
    session["login"] = request.app[LOGINS].add(access_key, clients)
    request[SESSION] = session
    log.info("console: %s logged in from %s", access_key, request.remote)
    flash(request, notice=f"logged in as {access_key}")
    raise web.HTTPSeeOther("/")


async def logout(request: web.Request) -> web.StreamResponse:
    session = request[SESSION]
    ident = session.get("login")
    if isinstance(ident, str):
        request.app[LOGINS].drop(ident)
        log.info("console: %s logged out", request[USER])
    session.invalidate()
    raise web.HTTPSeeOther("/login")


def add_routes(app: web.Application) -> None:
    app[LOGIN_CHECKS] = asyncio.Semaphore(4)
    app.add_routes([web.get("/login", login_page), web.post("/login", login), web.post("/logout", logout)])
