"""RocketMQ's ``DataVersion`` of a broker's topic table: ``{"timestamp": ms, "counter": n}``, new at every change
of the table, which the name servers compare (both fields) to skip re-reading a registration that changed
nothing. No IO."""

from __future__ import annotations

import time
from typing import Any

DataVersion = tuple[int, int]  # (timestamp, counter)

_JAVA_LONG = range(-(2**63), 2**63)  # what RocketMQ's DataVersion fields hold


def data_version_of(doc: Any) -> DataVersion | None:
    """The version a ``dataVersion`` document names; None when it names none (absent, another shape, a field no
    Java long holds): a registration without one is always read in full, and a saved one is not adopted (the next
    version of a counter at 2**64 - 1 is one no JSON encoder here writes)."""
    if not isinstance(doc, dict):
        return None
    timestamp, counter = doc.get("timestamp"), doc.get("counter")
    if (type(timestamp) is not int or type(counter) is not int or timestamp not in _JAVA_LONG
            or counter not in _JAVA_LONG):
        return None
    return timestamp, counter


def next_version(last: DataVersion) -> DataVersion:
    """A version no earlier table had (``DataVersion.nextVersion``): the time of the change, never before the last
    version's (a clock stepped back, a restart within its millisecond), and one more change."""
    return max(int(time.time() * 1000), last[0]), last[1] + 1


def version_json(version: DataVersion) -> dict[str, int]:
    return {"timestamp": version[0], "counter": version[1]}
