"""Log lines for events a peer can provoke at will (ACL refusals, failed TLS handshakes, connections opened and
closed): one line per kind of event per host and ``LOG_EVERY_S``, so that a flood cannot flood the log."""

from __future__ import annotations

import logging
import time

LOG_EVERY_S = 10.0
LINES_PER_HOST = 20  # distinct refusals logged per host and LOG_EVERY_S (random access keys must not flood)
# A refusal's text names what the peer sent (an access key, a topic), which may be megabytes: cut to this many
# characters before it is logged or kept to fold its repeats (texts alike up to here fold into one line).
MAX_REASON_CHARS = 300


class RefusalLog:
    """One log line per kind of refusal per host and ``LOG_EVERY_S``, with the count of those not logged; at
    most ``LINES_PER_HOST`` lines per host in that time, the rest counted into the host's next line."""

    def __init__(self, log: logging.Logger, what: str, level: int = logging.WARNING) -> None:
        self.log = log
        self.what = what  # e.g. "broker refused a request"
        self.level = level
        self._last: dict[tuple[str, str], tuple[float, int]] = {}
        self._hosts: dict[str, tuple[float, int, int]] = {}  # host -> (window start, lines, not logged)

    def refused(self, host: str, reason: str) -> None:
        reason = bounded(reason)
        now = time.monotonic()
        key = (host, reason)
        last = self._last.get(key)
        if last is not None and now - last[0] < LOG_EVERY_S:
            self._last[key] = (last[0], last[1] + 1)
            return
        if len(self._last) > 10_000 or len(self._hosts) > 10_000:  # bounded, whatever a flood sends
            self._last.clear()
            self._hosts.clear()
        start, lines, hidden = self._hosts.get(host, (now, 0, 0))
        if now - start >= LOG_EVERY_S:
            start, lines = now, 0
        if lines >= LINES_PER_HOST:
            self._hosts[host] = (start, lines, hidden + 1)
            return
        more = f" (+{last[1]} like it since the last line)" if last and last[1] else ""
        more += f" (+{hidden} other refusals from this host not logged)" if hidden else ""
        self.log.log(self.level, "%s from %s: %s%s", self.what, host, reason, more)
        self._last[key] = (now, 0)
        self._hosts[host] = (start, lines + 1, 0)


def bounded(reason: str) -> str:
    """``reason`` cut to ``MAX_REASON_CHARS``, saying how long it was."""
    if len(reason) <= MAX_REASON_CHARS:
        return reason
    return f"{reason[:MAX_REASON_CHARS]}... ({len(reason)} characters)"
