"""The exactly-once sink's check responder lives as long as its query runs.

Spark gives a Python sink no call when its query ends. The sink's responder (a ``TransactionProducer`` of the
sink's group) lives in Python workers of the driver: the planner worker that makes the writer for a run's first
micro-batch, and the workers that run its commits. Spark pools those workers for every query of the session and
closes them only after a minute with no use of their pool (``PythonWorkerFactory``), so a stopped query's
responder stayed connected while any other Python data source kept the pool busy.

So the query's end is told to them through a file. ``txmq.spark.register(spark)`` adds ``QueryEndListener`` to
the session: when a run starts it writes ``<marks>/<query id>`` = ``{"run", "stopped": false}``, when that run
terminates ``{"run", "stopped": true, "monotonic"}``, the host's monotonic clock (an end arriving after the next
run's start is ignored: Spark delivers starts synchronously, ends on its asynchronous listener bus). A responder
knows its query's id (Spark's ``<checkpointLocation>/metadata``, written before the query's first run) and when
it started; ``Responders`` stops one whose query was marked stopped after it started, within ``WATCH_INTERVAL_S``,
and never hands it out again: a restarted query (same id) gets a new one. The marks are on the driver's host (its
temporary directory), where the listener, the planner and the commit runner all run: under Spark Connect the driver
is the Connect server, and the listener is handed to it (``add_driver_listener``).
"""

from __future__ import annotations

import atexit
import contextlib
import json
import logging
import os
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pyspark.sql.streaming.listener import (
    QueryIdleEvent,
    QueryProgressEvent,
    QueryStartedEvent,
    QueryTerminatedEvent,
    StreamingQueryListener,
)

from txmq.client.transaction import TransactionProducer
from txmq.fileio import write_atomic

log = logging.getLogger("txmq.spark")

WATCH_INTERVAL_S = 1.0
MARK_RETENTION_S = 7 * 24 * 3600  # marks of queries that ended this long ago are deleted when another ends


def marks_dir() -> Path:
    return Path(tempfile.gettempdir()) / f"txmq-spark-queries-{os.getuid()}"


def query_id(checkpoint_dir: str | None) -> str | None:
    """The query's id from Spark's ``<checkpoint>/metadata`` (``{"id": ...}``), None when there is none yet."""
    if not checkpoint_dir:
        return None
    try:
        return str(json.loads((Path(checkpoint_dir) / "metadata").read_text().splitlines()[0])["id"])
    except (OSError, ValueError, IndexError, KeyError):
        return None


def _read_mark(query: str) -> dict[str, Any] | None:
    try:
        mark = json.loads((marks_dir() / query).read_bytes())
    except (OSError, ValueError):
        return None
    return mark if isinstance(mark, dict) else None


def stopped_after(query: str, started_s: float) -> bool:
    """Whether the query's latest run was marked stopped after ``started_s`` (a responder's start, on the host's
    monotonic clock: the marks and the responders are on the driver's host, and a step of the wall clock between
    the two must not keep a stopped query's responder running)."""
    mark = _read_mark(query)
    return bool(mark and mark.get("stopped") and float(mark.get("monotonic", -1)) > started_s)


_marking = threading.Lock()  # the listener's calls come on several threads (a start on the query's, ends on the bus)


def mark_run(query: str, run: str, stopped: bool) -> None:
    """Record that ``run`` of ``query`` started or stopped; a stop of a run that is no longer the latest is
    ignored. One at a time: a next run's start written between an end's check and its write would be lost, and
    the next run's responders stopped."""
    with _marking:
        if stopped:
            mark = _read_mark(query)
            if mark is not None and mark.get("run") != run:
                return
            _prune_marks()
        mark = {"run": run, "stopped": stopped, "monotonic": time.monotonic()}
        write_atomic(marks_dir() / query, json.dumps(mark).encode())


def _prune_marks() -> None:
    old = time.time() - MARK_RETENTION_S
    with contextlib.suppress(OSError):
        for path in marks_dir().iterdir():
            with contextlib.suppress(OSError):
                if path.stat().st_mtime < old:
                    path.unlink()


_parent_watch: threading.Thread | None = None


def _leave_with_parent() -> None:
    global _parent_watch
    if _parent_watch is not None:
        return
    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(WATCH_INTERVAL_S)
        os._exit(0)

    _parent_watch = threading.Thread(target=watch, name="txmq-spark-parent-watch", daemon=True)
    _parent_watch.start()


def add_driver_listener(spark: Any, listener: StreamingQueryListener) -> None:
    """Add ``listener`` where the session's queries run. In a local or cluster session that is this process (the
    driver). Through Spark Connect the driver is the Connect server, and pyspark 4's ``spark.streams.addListener``
    runs a listener in the client, whose host is not the server's: the listener is handed to the server instead
    with Connect's ``add_listener`` command and its Python payload (the protocol's server-side listener, which the
    server runs in a Python worker of its own, ``pyspark.sql.connect.streaming.worker.listener_worker``)."""
    if not type(spark).__module__.startswith("pyspark.sql.connect"):
        spark.streams.addListener(listener)
        return
    from pyspark.serializers import CloudPickleSerializer
    from pyspark.sql.connect import proto
    from pyspark.sql.connect.utils import get_python_ver

    cmd = proto.StreamingQueryManagerCommand()
    cmd.add_listener.python_listener_payload.command = CloudPickleSerializer().dumps(listener)
    cmd.add_listener.python_listener_payload.python_ver = get_python_ver()
    cmd.add_listener.id = f"txmq-query-end-{uuid.uuid4().hex}"
    spark.streams._execute_streaming_query_manager_cmd(cmd)


class QueryEndListener(StreamingQueryListener):
    """Marks each query run's start and end for the responders of its sink (registered by ``register``)."""

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "pickled": True}  # never empty: pickle skips __setstate__ for an empty state

    def __setstate__(self, state: dict[str, Any]) -> None:
        """Unpickled on a Spark Connect server, in the listener's own worker process: that worker outlives a
        SIGKILLed server (its Connect client's threads keep it up), so it leaves when its parent is gone."""
        self.__dict__.update(state)
        _leave_with_parent()

    def onQueryStarted(self, event: QueryStartedEvent) -> None:
        mark_run(str(event.id), str(event.runId), stopped=False)

    def onQueryProgress(self, event: QueryProgressEvent) -> None:
        pass

    def onQueryIdle(self, event: QueryIdleEvent) -> None:
        pass

    def onQueryTerminated(self, event: QueryTerminatedEvent) -> None:
        mark_run(str(event.id), str(event.runId), stopped=True)


@dataclass
class _Held:
    producer: TransactionProducer
    query: str | None  # None: no checkpoint metadata to name it by; it lives as long as its worker
    started_s: float


class Responders:
    """The started responders of this process, one per key, each stopped once its query is marked stopped."""

    def __init__(self) -> None:
        self._held: dict[tuple[str, ...], _Held] = {}
        self._lock = threading.Lock()
        self._watcher: threading.Thread | None = None

    def get(self, key: tuple[str, ...], query: str | None,
            factory: Callable[[], TransactionProducer]) -> TransactionProducer:
        with self._lock:
            held = self._held.get(key)
            if held is not None and held.query is not None and stopped_after(held.query, held.started_s):
                self._stop(key)
                held = None
            if held is None:
                started = time.monotonic()
                held = _Held(factory().start(), query, started)
                self._held[key] = held
                log.info("check responder of group %s started (query %s)", held.producer.group, query)
            if self._watcher is None:
                self._watcher = threading.Thread(target=self._watch, name="txmq-spark-responders", daemon=True)
                self._watcher.start()
            return held.producer

    def stop_ended(self) -> int:
        """Stop the responders whose query was marked stopped after they started; returns how many."""
        with self._lock:
            ended = [k for k, h in self._held.items() if h.query is not None and stopped_after(h.query, h.started_s)]
            for key in ended:
                self._stop(key)
            return len(ended)

    def stop_all(self) -> None:
        with self._lock:
            for key in list(self._held):
                self._stop(key)

    def _stop(self, key: tuple[str, ...]) -> None:
        # A commit of the query cannot be running: its run has ended (Spark destroys a worker interrupted mid-commit).
        held = self._held.pop(key)
        with contextlib.suppress(Exception):  # it is being thrown away: a failing shutdown changes nothing
            held.producer.shutdown()
        log.info("check responder of group %s stopped: query %s ended", held.producer.group, held.query)

    def _watch(self) -> None:
        while True:
            time.sleep(WATCH_INTERVAL_S)
            try:
                self.stop_ended()
            except Exception:  # the watcher must outlive one bad read
                log.exception("checking the queries' stop marks failed")


responders = Responders()
atexit.register(responders.stop_all)
