"""``PromExporter``: serves ``GET /metrics`` in Prometheus's text format from the broker's own event loop, so a
scrape reads the broker's tables between two of its steps (never while one is changing them) and needs no thread."""

from __future__ import annotations

import asyncio
import contextlib
import logging

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.registry import Collector, CollectorRegistry

log = logging.getLogger("txmq.metrics")

_REQUEST_MAX = 16 * 1024  # a scrape's request line and headers; anything longer is not Prometheus


class PromExporter:
    def __init__(self, collector: Collector, host: str, port: int) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(collector)
        self.host, self.port = host, port
        self._server: asyncio.Server | None = None

    @property
    def addr(self) -> str:
        return f"{self.host}:{self.port}"

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, self.host, self.port, limit=_REQUEST_MAX)
        self.port = self._server.sockets[0].getsockname()[1]
        log.info("Prometheus metrics on http://%s/metrics", self.addr)

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            async with asyncio.timeout(10):
                head = await reader.readuntil(b"\r\n\r\n")
            method, path = [*head.split(b" ", 2), b"", b""][:2]
            if method != b"GET":
                status, body, ctype = "405 Method Not Allowed", b"GET only\n", "text/plain"
            elif path.split(b"?")[0] not in (b"/metrics", b"/"):
                status, body, ctype = "404 Not Found", b"see /metrics\n", "text/plain"
            else:
                status, body, ctype = "200 OK", generate_latest(self.registry), CONTENT_TYPE_LATEST
            writer.write(f"HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {len(body)}\r\n"
                         "Connection: close\r\n\r\n".encode() + body)
            await writer.drain()
        except (TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
            pass
        except Exception:
            log.exception("metrics scrape failed")
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()
