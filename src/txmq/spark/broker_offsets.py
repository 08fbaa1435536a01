"""The stream reader's progress on the broker, for operators: each finished batch's end offsets committed under
the reader's consumer group (option ``group``; ``commitOffsetsToBroker``, default true), so ``txmq admin
consumerProgress``, the console and ``rocketmq_consumer_lag_messages`` show a running query's lag and a stopped
query's backlog, as for any consumer.

The checkpoint stays the source of truth: these offsets are written, never read back. They are sent from a
thread of the reader's process, so a slow or absent broker never holds up a micro-batch; a failed commit is
logged and the next batch's offsets carry it. Spark calls ``latestOffset(start)`` only once every batch up to
``start`` has finished (its commit log written), and ``commit(end)`` later still: either hands its offsets here.
"""

from __future__ import annotations

import logging
import threading

from txmq.client.instance import MessageQueue
from txmq.errors import BrokerError, ClientError
from txmq.spark._common import SourceOptions, drop_client, pull_consumer, pull_key
from txmq.spark.options import Offsets, split_key

log = logging.getLogger("txmq.spark")

FLUSH_TIMEOUT_S = 5.0  # a stopping query waits this long at most for its last offsets to reach the broker
RETRY_S = 1.0


class BrokerOffsetCommitter:
    """Sends the newest offsets handed to ``submit`` (queues whose offset changed only), one commit at a time."""

    def __init__(self, opts: SourceOptions) -> None:
        self.opts = opts
        self._wanted: dict[tuple[str, str], int] = {}
        self._sent: dict[tuple[str, str], int] = {}
        self._cond = threading.Condition()
        self._busy = False
        self._failing = False  # the last send failed: logged once until one succeeds
        self._thread: threading.Thread | None = None

    def submit(self, offsets: Offsets) -> None:
        with self._cond:
            self._wanted.update({(t, k): off for t, qs in offsets.items() for k, off in qs.items() if off >= 0})
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="txmq-spark-offsets", daemon=True)
                self._thread.start()
            self._cond.notify()

    def flush(self, timeout: float = FLUSH_TIMEOUT_S) -> bool:
        """Wait until everything submitted was sent, or sending it failed; returns whether all of it was sent."""
        with self._cond:
            self._cond.wait_for(lambda: not self._busy and (self._failing or not self._changed()), timeout)
            return not self._changed()

    def _changed(self) -> dict[tuple[str, str], int]:
        return {q: off for q, off in self._wanted.items() if self._sent.get(q) != off}

    def _run(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: bool(self._changed()))
                todo = self._changed()
                self._busy = True
            ok = self._send(todo)
            with self._cond:
                self._busy = False
                self._cond.notify_all()
                if not ok:  # try again in a second, or sooner with newer offsets
                    self._cond.wait(RETRY_S)

    def _send(self, todo: dict[tuple[str, str], int]) -> bool:
        opts = self.opts
        try:
            consumer = pull_consumer(opts.namesrv, opts.group, opts.security)
            for (topic, key), offset in sorted(todo.items()):
                broker, qid = split_key(key)
                consumer.update_consume_offset(MessageQueue(topic, broker, qid), offset)
                with self._cond:
                    self._sent[(topic, key)] = offset
        except (ClientError, BrokerError) as exc:
            if not self._failing:
                log.warning("committing the query's offsets to the broker under group %s failed (%s); retried "
                            "every %.0f s (the checkpoint holds them)", opts.group, exc, RETRY_S)
            self._failing = True
            if isinstance(exc, ClientError):
                drop_client(pull_key(opts.namesrv, opts.group, opts.security))
            return False
        if self._failing:
            log.info("committing offsets to the broker under group %s works again", opts.group)
        self._failing = False
        return True
