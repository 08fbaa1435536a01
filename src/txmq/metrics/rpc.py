"""``RpcLatency``: the time from a request's arrival to its answer, by request and response code (RocketMQ 5's
``rocketmq_rpc_latency``). It wraps the last step of the broker's dispatch (the declared handler) only when metrics
are on, so a broker without them times nothing, and only requests that passed the ACL with a code the broker
declares are timed: the series are bounded by the broker's own codes, whatever a peer sends."""

from __future__ import annotations

import time
from bisect import bisect_left
from collections.abc import Callable
from typing import Any

from txmq.futures import then
from txmq.remoting.codec import EncodedResponse
from txmq.remoting.command import RemotingCommand
from txmq.remoting.transport import Answer, Connection, Reply

BUCKETS_MS = (1, 3, 5, 10, 20, 50, 100, 200, 500, 1000, 3000)

Execute = Callable[[Connection, RemotingCommand, Any, Any], Any]


class RpcLatency:
    def __init__(self) -> None:
        # (request code, response code) -> [count per bucket..., +Inf], and the sum of milliseconds
        self.buckets: dict[tuple[int, int], list[int]] = {}
        self.sums: dict[tuple[int, int], float] = {}

    def observe(self, code: int, response_code: int, started: float) -> None:
        ms = (time.perf_counter() - started) * 1000
        key = (code, response_code)
        counts = self.buckets.get(key)
        if counts is None:
            counts = self.buckets[key] = [0] * (len(BUCKETS_MS) + 1)
            self.sums[key] = 0.0
        counts[bisect_left(BUCKETS_MS, ms)] += 1
        self.sums[key] += ms

    def wrap(self, execute: Execute) -> Execute:
        """``execute`` (``RequestDispatcher.execute``) timed: an answer given at once is observed at once, a later
        one when it comes (a ``Reply`` tells when it writes it); a oneway request (no answer) is not observed."""
        def timed(conn: Connection, cmd: RemotingCommand, spec: Any, parsed: Any) -> Any:
            started = time.perf_counter()
            out = execute(conn, cmd, spec, parsed)
            if isinstance(out, RemotingCommand | EncodedResponse):
                self.observe(cmd.code, out.code, started)
                return out
            if isinstance(out, Reply):
                if out.done():  # answered while dispatched (a refusal)
                    if out.code >= 0:
                        self.observe(cmd.code, out.code, started)
                else:
                    out.observer = lambda answer: self._later(cmd.code, started, answer)
                return out
            return out if out is None else then(out, lambda answer: self._later(cmd.code, started, answer))
        return timed

    def _later(self, code: int, started: float, answer: Answer | None) -> Answer | None:
        if answer is not None:
            self.observe(code, answer.code, started)
        return answer
