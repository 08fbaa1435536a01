"""Waiting for the next message without polling the brokers.

With a micro-batch trigger of zero, Spark asks the stream reader for the queues' latest offsets again and again;
with nothing new it sleeps ``spark.sql.streaming.pollingDelay`` (10 ms) and asks again: hundreds of offset
requests per second per idle query, and a message that arrives waits for the next ask. Instead, finding
nothing new, ``latestOffset`` holds a pull (RocketMQ's long polling, ``FLAG_SUSPEND``) at the end of every queue
for up to ``brokerSuspendMaxTimeMillis``: the broker answers the first one as soon as a message is stored in its
queue, and the reader plans the batch at once. A pull still held when ``wait`` returns is reused by the next
``wait`` (its queue's answer then comes at once, or when a message arrives).
"""

from __future__ import annotations

import logging
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait

from txmq.client.instance import MessageQueue
from txmq.client.pull_consumer import PullResult, PullStatus
from txmq.errors import BrokerError, ClientError
from txmq.spark._common import SourceOptions, pull_consumer
from txmq.spark.options import Offsets, split_key

log = logging.getLogger("txmq.spark")

MAX_HELD = 64  # pulls held at once; queues beyond this many wait their turn


class ArrivalWatch:
    """Held pulls at the queues' ends, one per queue, in threads of this process (the stream reader's)."""

    def __init__(self, opts: SourceOptions) -> None:
        self.opts = opts
        self._pool: ThreadPoolExecutor | None = None
        self._held: dict[tuple[str, str], Future[PullResult]] = {}

    def wait(self, ends: Offsets, timeout_s: float) -> bool:
        """Hold a pull at each queue's offset in ``ends`` for up to ``timeout_s``; True as soon as one answers with
        something other than "no new message" (a message, or an error: the caller looks at the offsets again)."""
        if self._pool is None:
            self._pool = ThreadPoolExecutor(MAX_HELD, thread_name_prefix="txmq-long-poll")
        for topic, queues in ends.items():
            for key, offset in queues.items():
                held = self._held.get((topic, key))
                if held is None or held.done():
                    self._held[(topic, key)] = self._pool.submit(self._hold, topic, key, offset, timeout_s)
        done, _ = wait(list(self._held.values()), timeout_s + 1.0, return_when=FIRST_COMPLETED)
        arrived = False
        for where, fut in list(self._held.items()):
            if fut in done:
                del self._held[where]
                exc = fut.exception()
                arrived = arrived or exc is not None or fut.result().status != PullStatus.NO_NEW_MSG
        return arrived

    def _hold(self, topic: str, key: str, offset: int, timeout_s: float) -> PullResult:
        broker, qid = split_key(key)
        consumer = pull_consumer(self.opts.namesrv, self.opts.group, self.opts.security)
        try:
            return consumer.pull(MessageQueue(topic, broker, qid), self.opts.tags, offset, 1, block_s=timeout_s,
                                 decode=False)
        except (ClientError, BrokerError) as exc:
            log.debug("held pull of %s %s failed: %s", topic, key, exc)
            raise

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None
        self._held.clear()
