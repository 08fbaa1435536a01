"""Server-rendered pages: one layout, tables and forms, every value escaped. Every form that POSTs carries the
request's CSRF token (``CSRF``, set for each request by ``txmq.console.guard``): none can be built without it."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from contextvars import ContextVar
from html import escape
from typing import Any
from urllib.parse import quote

NAV = (("/", "Cluster"), ("/topics", "Topics"), ("/groups", "Consumer groups"), ("/messages", "Messages"),
       ("/transactions", "Transactions"), ("/charts", "Charts"))


CSRF: ContextVar[str] = ContextVar("csrf")
CSRF_FIELD = "csrf"


class Raw(str):
    """Markup already built here: not escaped again."""


def e(value: Any) -> str:
    return value if isinstance(value, Raw) else escape(str(value))


def link(href: str, text: Any, **attrs: str) -> Raw:
    extra = "".join(f' {k.rstrip("_").replace("_", "-")}="{e(v)}"' for k, v in attrs.items())
    return Raw(f'<a href="{e(href)}"{extra}>{e(text)}</a>')


def path(*parts: str) -> str:
    return "/" + "/".join(quote(p, safe="") for p in parts)


def table(headers: Sequence[str], rows: Iterable[Sequence[Any]], table_id: str = "", empty: str = "none") -> Raw:
    head = "".join(f"<th>{e(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{e(c)}</td>" for c in row) + "</tr>" for row in rows)
    if not body:
        body = f'<tr class="empty"><td colspan="{len(headers)}">{e(empty)}</td></tr>'
    ident = f' id="{e(table_id)}"' if table_id else ""
    return Raw(f"<table{ident}><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>")


def form(action: str, fields: Iterable[Raw | str], submit: str, confirm: str = "", form_id: str = "",
         method: str = "post") -> Raw:
    """A form; ``confirm``: the question the browser asks before sending it. A POST form carries the CSRF token
    (a GET form never: it would end up in URLs and logs)."""
    attrs = f' data-confirm="{e(confirm)}"' if confirm else ""
    ident = f' id="{e(form_id)}"' if form_id else ""
    token = hidden(CSRF_FIELD, CSRF.get()) if method == "post" else ""
    return Raw(f'<form method="{method}" action="{e(action)}"{attrs}{ident}>{token}{"".join(fields)}'
               f'<button type="submit">{e(submit)}</button></form>')


def field(name: str, label: str, value: Any = "", kind: str = "text", **attrs: str) -> Raw:
    extra = "".join(f' {k}="{e(v)}"' for k, v in attrs.items())
    return Raw(f'<label>{e(label)} <input type="{kind}" name="{e(name)}" value="{e(value)}"{extra}></label>')


def hidden(name: str, value: Any) -> Raw:
    return Raw(f'<input type="hidden" name="{e(name)}" value="{e(value)}">')


def select(name: str, label: str, options: Iterable[tuple[str, str]], chosen: str = "") -> Raw:
    opts = "".join(f'<option value="{e(v)}"{" selected" if v == chosen else ""}>{e(t)}</option>' for v, t in options)
    return Raw(f'<label>{e(label)} <select name="{e(name)}">{opts}</select></label>')


def page(title: str, *body: Raw | str, active: str = "/", notice: str = "", error: str = "", user: str = "",
         nav: bool = True) -> str:
    """The layout; ``user``: the account logged in (with a logout button); ``nav``: the page links (not on the
    login page)."""
    links = "".join(f'<a href="{href}"{" class=active" if href == active else ""}>{e(text)}</a>'
                    for href, text in NAV) if nav else ""
    if user:
        links += (f'<span class="user">{e(user)}</span>'
                  + form("/logout", [], "Log out", form_id="logout"))
    banner = ""
    if notice:
        banner += f'<p class="notice" id="notice">{e(notice)}</p>'
    if error:
        banner += f'<p class="error" id="error">{e(error)}</p>'
    return (f'<!doctype html><html lang="en"><head><meta charset="utf-8"><title>{e(title)} · txmq console</title>'
            '<link rel="stylesheet" href="/static/console.css"><script defer src="/static/console.js"></script>'
            f'</head><body><header><span class="brand">txmq</span><nav>{links}</nav></header>'
            f'<main><h1>{e(title)}</h1>{banner}{"".join(e(b) for b in body)}</main></body></html>')


def section(title: str, *body: Raw | str) -> Raw:
    return Raw(f"<section><h2>{e(title)}</h2>{''.join(e(b) for b in body)}</section>")
