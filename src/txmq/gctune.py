"""The cyclic collector tuned for a process that moves messages at a steady rate: a serving process, and a
process with a client in it.

Once started, what startup built (modules, configs, recovered tables, the application's own state) moves out of
the collector's sight (``gc.freeze``): otherwise every collection of the oldest generation scans it all again.
In the broker, under single-message sends, that took 10-18 % of its CPU (perf, docs/benchmarks.md). In a client
sending 5,000 messages/s the sends in flight reach the oldest generation often enough for a full collection
every second or two, each scanning 40-80 thousand objects for 20-100 ms with the GIL held: every send and
delivery of that moment waited, which made the client's end-to-end p99 (docs/benchmarks.md, "Latency and
scale"). The youngest generation is collected every ``YOUNG_THRESHOLD`` allocations instead of 700: a message
keeps its request, answer and futures alive while it is in flight, so at 700 nearly every young object was still
alive when scanned and was scanned again in the older generations. The older generations keep CPython's ratios
(10, 10), so a full collection still comes after the same share of young ones.

Frozen objects are still freed by reference counting; only a reference cycle among them, dropped later, stays
(``gc.freeze``'s documented cost). A tuned process counts its collections and their time (``collector_time``;
a broker shows them in its runtime info). The server tunes its process at start. A client tunes the application's
process only when asked (``$TXMQ_GC_TUNE=true``), once, at the first client's start: the collector is the
application's, and no client library is expected to change it unasked.
"""

from __future__ import annotations

import contextlib
import gc
import os
import threading
import time
from collections.abc import Iterator
from typing import Any

# Allocations between collections of the youngest generation: more than the objects of a window of 1,000
# transactions in flight (about 30 each), so most of them are freed by reference counting before a scan.
YOUNG_THRESHOLD = 50_000

_client_tuning = threading.Lock()
_client_tuned = False


class CollectorTime:
    """Collections and the seconds spent in them, per generation, since installed (a ``gc.callbacks`` entry):
    the collector's share of a process's CPU, read from the process itself (a broker's GET_BROKER_RUNTIME_INFO)."""

    def __init__(self) -> None:
        self.collections = [0, 0, 0]
        self.seconds = [0.0, 0.0, 0.0]
        self._began = 0.0

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._began = time.perf_counter()
        else:
            generation = info["generation"]
            self.collections[generation] += 1
            self.seconds[generation] += time.perf_counter() - self._began

    def runtime_info(self) -> dict[str, str]:
        """GET_BROKER_RUNTIME_INFO's figures: per generation, youngest first, space-separated."""
        return {"gcCollections": " ".join(map(str, self.collections)),
                "gcSeconds": " ".join(f"{s:.6f}" for s in self.seconds), "gcFrozen": str(gc.get_freeze_count())}


collector_time = CollectorTime()


def tune_gc() -> None:
    """Freeze what is alive now, collect the youngest generation every ``YOUNG_THRESHOLD`` allocations, and count
    the collections' time (``collector_time``)."""
    gc.collect()
    gc.freeze()
    if collector_time not in gc.callbacks:
        gc.callbacks.append(collector_time)
    _, middle, old = gc.get_threshold()
    gc.set_threshold(YOUNG_THRESHOLD, middle, old)


@contextlib.contextmanager
def paused() -> Iterator[None]:
    """The collector held off while a burst of objects that all stay alive is made (recovery's consume queues,
    80,000 at 10,000 topics): collections meanwhile scan them again and again and free nothing (7 % of recovery's
    CPU). Not around work whose garbage may hold cycles (a scan of the whole log): it would pile up until the end."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def asked(default: bool = False) -> bool:
    """``$TXMQ_GC_TUNE``: ``true``/``1``/``yes`` or ``false``/``0``/``no``; ``default`` when unset or neither."""
    setting = os.environ.get("TXMQ_GC_TUNE", "").lower()
    if setting in ("1", "true", "yes"):
        return True
    return default and setting not in ("0", "false", "no")


def tune_gc_for_client() -> bool:
    """``tune_gc`` the first time a client of this process starts (True then), when ``$TXMQ_GC_TUNE`` asks."""
    global _client_tuned
    if not asked():
        return False
    with _client_tuning:
        if _client_tuned:
            return False
        _client_tuned = True
    tune_gc()
    return True
