"""The checks every request to the console passes, outermost first.

1. ``check_host``: the ``Host`` header names this console (``ConsoleConfig.host_names``), so a page that a foreign
   site's DNS pointed at this address (DNS rebinding) gets nothing. Every refusal, here or further in, and every
   error a client's input causes is answered with a clear status and logged as one line, throttled per client
   and kind (``RefusalLog``), never a traceback.
2. aiohttp-session's middleware: the session lives in a cookie encrypted and authenticated (Fernet, aiohttp-session's
   ``EncryptedCookieStorage``) with a key made at start: ``HttpOnly``, ``SameSite=Strict``, ``Secure`` over HTTPS.
3. ``protect``: a request that may change anything (any method but GET, HEAD, OPTIONS) must come from this
   console's own origin (``Origin``, else ``Sec-Fetch-Site``), have its body within the read timeout and carry the
   session's CSRF token. Under login, every page but the login page needs a login that has not ended, and acts
   through that login's clients.

Every response carries a Content-Security-Policy, X-Frame-Options and X-Content-Type-Options (``secure_headers``)."""

from __future__ import annotations

import asyncio
import hmac
import logging
import secrets
from collections.abc import Awaitable, Callable
from http import HTTPStatus
from typing import Any

from aiohttp import hdrs, web
from aiohttp_session import Session, get_session
from yarl import URL

from txmq.console.config import ConsoleConfig, host_name
from txmq.console.html import CSRF, CSRF_FIELD, Raw, e, page
from txmq.console.logins import Logins
from txmq.refusals import RefusalLog

log = logging.getLogger("txmq.console")
# A cookie the console cannot read (one from before a restart, or made up) just starts a new session: the
# library's warning line for each would let any client write to the log at will.
logging.getLogger("aiohttp_session").setLevel(logging.ERROR)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

CONFIG = web.AppKey("config", ConsoleConfig)
LOGINS = web.AppKey("logins", Logins)
SHARED = web.AppKey("shared", list)  # [Clients] without login: the one set every visitor acts through
REFUSALS = web.AppKey("refusals", RefusalLog)
SESSION = web.RequestKey("session", Session)
CLIENTS = web.RequestKey("clients", list)  # [Clients] acting for this request; empty on the login page
USER = web.RequestKey("user", str)  # the account logged in, "" without login

SAFE_METHODS = ("GET", "HEAD", "OPTIONS")
OPEN_PATHS = ("/login",)  # served without a login (and /static/)
CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; "
       "form-action 'self'; frame-ancestors 'none'; base-uri 'none'")


class Refusal(Exception):
    """A request refused for what its client sent: the status, what the page tells the client, and the kind of
    refusal logged (fixed text, never the client's bytes: a flood of variants folds into one line)."""

    def __init__(self, status: int, message: str, kind: str, close: bool = False) -> None:
        super().__init__(message)
        self.status, self.message, self.kind, self.close = status, message, kind, close


def bad_query(message: str) -> Refusal:
    return Refusal(400, message, "bad query string")


def error_page(status: int, message: str, user: str = "") -> web.Response:
    return web.Response(text=page(HTTPStatus(status).phrase, error_banner(message), user=user), status=status,
                        content_type="text/html")


def error_banner(text: str, ident: str = "error") -> Raw:
    return Raw(f'<p class="error" id="{ident}">{e(text)}</p>')


def _where(request: web.Request) -> str:
    """The route, as a fixed text for the log (``GET /topics/{topic}``), whatever path was asked."""
    resource = request.match_info.route.resource
    return f"{request.method} {resource.canonical if resource is not None else '(no such page)'}"[:100]


def _refused(request: web.Request, status: int, kind: str) -> None:
    request.app[REFUSALS].refused(request.remote or "?", f"{status} {_where(request)}: {kind}")


@web.middleware
async def check_host(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        if host_name(request.headers.get(hdrs.HOST, "")) not in request.app[CONFIG].host_names():
            raise Refusal(421, "This console does not answer to that host name (set its allowed hosts to add one).",
                          "foreign Host header")
        resp = await handler(request)
        if resp.status >= 400:
            _refused(request, resp.status, resp.reason)
        return resp
    except Refusal as refusal:
        _refused(request, refusal.status, refusal.kind)
        resp = error_page(refusal.status, refusal.message, request.get(USER, ""))
        if refusal.close:
            resp.force_close()
        return resp
    except web.HTTPException as exc:
        if exc.status >= 400:
            _refused(request, exc.status, exc.reason)
        raise
    except Exception as exc:  # the console's own fault: one line, the traceback only at DEBUG
        _refused(request, 500, f"{type(exc).__name__}: {str(exc)[:200]}")
        log.debug("console request failed", exc_info=True)
        return error_page(500, "The console failed to answer this request; its log says why.")


@web.middleware
async def protect(request: web.Request, handler: Handler) -> web.StreamResponse:
    session = await get_session(request)
    token = session.get("csrf")
    if not isinstance(token, str):
        token = session["csrf"] = secrets.token_urlsafe(32)
    if request.method not in SAFE_METHODS:
        _check_origin(request)
        given = (await _read_form(request)).get(CSRF_FIELD)
        if not isinstance(given, str) or not hmac.compare_digest(given.encode(), token.encode()):
            raise Refusal(403, "This form is out of date or was sent from another site: reload the page and try "
                               "again.", "no valid CSRF token")
    request[SESSION] = session
    request[CLIENTS] = request.app[SHARED]
    request[USER] = ""
    if request.app[CONFIG].login:
        login = request.app[LOGINS].current(session.get("login"))
        if login is not None:
            request[CLIENTS], request[USER] = [login.clients], login.access_key
        else:
            request[CLIENTS] = []
            if "login" in session:
                del session["login"]
                flash(request, error="Your session has ended: log in again.")
            if request.path not in OPEN_PATHS and not request.path.startswith("/static/"):
                if request.path.startswith("/api/"):
                    raise Refusal(401, "Log in first.", "not logged in")
                raise web.HTTPSeeOther("/login")
    CSRF.set(token)
    return await handler(request)


def _check_origin(request: web.Request) -> None:
    """A state-changing request comes from this console's own pages: browsers name the page's origin in
    ``Origin`` (and ``Sec-Fetch-Site``); a client that sends neither still needs the CSRF token."""
    origin = request.headers.get(hdrs.ORIGIN)
    if origin is None:
        if request.headers.get("Sec-Fetch-Site", "same-origin") not in ("same-origin", "none"):
            raise Refusal(403, "Cross-site requests are refused.", "cross-site request")
        return
    scheme = "https" if request.app[CONFIG].https else "http"
    if _origin(origin) != _origin(f"{scheme}://{request.headers.get(hdrs.HOST, '')}"):
        raise Refusal(403, "Requests from another site are refused.", "foreign Origin")


def _origin(url: str) -> tuple[str, str, int | None] | None:
    """(scheme, host, port) of an origin, the default port filled in; None for ``null`` or anything else."""
    try:
        u = URL(url)
    except ValueError:
        return None
    if u.scheme not in ("http", "https") or not u.host or u.path not in ("", "/") or u.query_string:
        return None
    return u.scheme, u.host.rstrip(".").lower(), u.port


async def _read_form(request: web.Request) -> Any:
    """The request's form, read within the read timeout (a body sent slowly would hold its connection)."""
    try:
        async with asyncio.timeout(request.app[CONFIG].read_timeout_s):
            return await request.post()
    except TimeoutError:
        raise Refusal(408, "The request's body did not arrive in time.", "request body too slow",
                      close=True) from None
    except (ValueError, UnicodeDecodeError):
        raise Refusal(400, "The form could not be read.", "unreadable form") from None


def flash(request: web.Request, notice: str = "", error: str = "") -> None:
    """What happened, for the next page to show (kept in the session, so no link can make a page say it)."""
    session = request.get(SESSION)
    if session is not None:
        session["flash"] = [notice[:500], error[:500]]


def take_flash(request: web.Request) -> tuple[str, str]:
    session = request.get(SESSION)
    shown = session.pop("flash", None) if session is not None else None
    if isinstance(shown, list) and len(shown) == 2:
        return str(shown[0]), str(shown[1])
    return "", ""


async def secure_headers(request: web.Request, response: web.StreamResponse) -> None:
    """``on_response_prepare``: on every response, pages, errors and static files alike."""
    h = response.headers
    h["Content-Security-Policy"] = CSP
    h["X-Frame-Options"] = "DENY"
    h["X-Content-Type-Options"] = "nosniff"
    h["Referrer-Policy"] = "same-origin"
    if not request.path.startswith("/static/"):
        h["Cache-Control"] = "no-store"  # what a user saw stays out of shared and back-button caches


class HttpLog(logging.LoggerAdapter[logging.Logger]):
    """aiohttp's server log for the console: a request that aiohttp cannot even parse is the client's doing,
    so it is one throttled line, not a traceback each."""

    def __init__(self, refusals: RefusalLog) -> None:
        super().__init__(logging.getLogger("txmq.console.http"), {})
        self.refusals = refusals

    def exception(self, msg: object, *args: object, exc_info: Any = True, **kwargs: Any) -> None:
        host = str(args[0]) if args else "?"
        self.refusals.refused(host, f"unreadable HTTP request ({type(exc_info).__name__})")
