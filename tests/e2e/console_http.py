"""Raw HTTP to the web console as a script or an attacker sends it (``http.client``: every header exactly as
given, redirects not followed), with the console's session cookie kept like a browser keeps it."""

from __future__ import annotations

import http.client
import re
import ssl
from dataclasses import dataclass
from http.cookies import SimpleCookie
from urllib.parse import urlencode


@dataclass
class Answer:
    status: int
    headers: http.client.HTTPMessage
    text: str

    def cookies(self) -> list[str]:
        return self.headers.get_all("Set-Cookie") or []


class Http:
    def __init__(self, addr: str, https: bool = False, source: str = "") -> None:
        """``source``: the address to connect from (another loopback address is another client to the server)."""
        host, _, port = addr.rpartition(":")
        self.host, self.port, self.https = host.strip("[]"), int(port), https
        self.source = (source, 0) if source else None
        self.jar: dict[str, str] = {}

    def request(self, method: str, path: str, form: dict[str, str] | None = None, *, host: str | None = None,
                headers: dict[str, str] | None = None, keep_cookies: bool = True) -> Answer:
        """``host``: the Host header (default the address connected to); ``form``: an urlencoded body."""
        if self.https:
            ctx = ssl.create_default_context()
            ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
            conn: http.client.HTTPConnection = http.client.HTTPSConnection(
                self.host, self.port, timeout=30, source_address=self.source, context=ctx)
        else:
            conn = http.client.HTTPConnection(self.host, self.port, timeout=30, source_address=self.source)
        try:
            conn.putrequest(method, path, skip_host=True, skip_accept_encoding=True)
            conn.putheader("Host", host if host is not None else f"{self.host}:{self.port}")
            if self.jar and keep_cookies:
                conn.putheader("Cookie", "; ".join(f"{k}={v}" for k, v in self.jar.items()))
            body = urlencode(form).encode() if form is not None else b""
            if form is not None:
                conn.putheader("Content-Type", "application/x-www-form-urlencoded")
            if body or method == "POST":
                conn.putheader("Content-Length", str(len(body)))
            for k, v in (headers or {}).items():
                conn.putheader(k, v)
            conn.endheaders(body)
            resp = conn.getresponse()
            answer = Answer(resp.status, resp.headers, resp.read().decode(errors="replace"))
        finally:
            conn.close()
        if keep_cookies:
            for line in answer.cookies():
                for name, morsel in SimpleCookie(line).items():
                    if morsel.value:
                        self.jar[name] = morsel.value
                    else:
                        self.jar.pop(name, None)
        return answer

    def get(self, path: str, **kw: object) -> Answer:
        return self.request("GET", path, **kw)  # type: ignore[arg-type]

    def token(self, path: str) -> str:
        """The CSRF token of the forms on ``path`` (the page loaded as a browser would)."""
        page = self.get(path)
        found = re.search(r'name="csrf" value="([^"]+)"', page.text)
        assert found, f"no form with a CSRF token on {path} ({page.status}): {page.text[:300]}"
        return found.group(1)

    def post(self, path: str, form: dict[str, str], **kw: object) -> Answer:
        """A POST from the console's own page: its Origin, and its token unless ``form`` has one."""
        origin = f"{'https' if self.https else 'http'}://{self.host}:{self.port}"
        headers = {"Origin": origin, **kw.pop("headers", {})}  # type: ignore[dict-item]
        return self.request("POST", path, form, headers=headers, **kw)  # type: ignore[arg-type]

    def login(self, access_key: str, secret_key: str) -> Answer:
        return self.post("/login", {"csrf": self.token("/login"), "access_key": access_key, "secret_key": secret_key})
