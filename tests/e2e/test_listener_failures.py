"""A push consumer's listener that misbehaves (raises what ``except Exception`` does not catch), on consume threads
and on the client's loop: the failure is the listener's, the consumer goes on."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from tests.e2e.helpers import push_consumer, wait_until
from txmq import Admin, ConsumeStatus, Message, Producer
from txmq.client.consumer import MessageExt

pytestmark = pytest.mark.dated  # run again at a fixed month end by make test (Makefile, DATED_AT)


class RaiseOnce:
    """Raises ``exc`` at the first delivery of ``b"boom"``, records every other delivery."""

    def __init__(self, exc: BaseException) -> None:
        self.exc = exc
        self.raised = False
        self.bodies: list[bytes] = []
        self._lock = threading.Lock()

    def __call__(self, msgs: list[MessageExt]) -> ConsumeStatus:
        with self._lock:
            if not self.raised and any(m.body == b"boom" for m in msgs):
                self.raised = True
                raise self.exc
            self.bodies.extend(m.body for m in msgs)
        return ConsumeStatus.SUCCESS


@pytest.mark.parametrize("exc", [KeyboardInterrupt(), SystemExit(3), asyncio.CancelledError()],
                         ids=["KeyboardInterrupt", "SystemExit", "CancelledError"])
def test_listener_raising_a_base_exception_is_consumed_again_and_the_queue_goes_on(cluster, listener_on_loop, exc):
    """Not an ``Exception``: on the loop it would end the queue's pull task (or the loop itself), on a consume
    thread leave the batch unconsumed below the committed offset for good."""
    cluster.start_broker(conf={"messageDelayLevel": "1s 1s 1s 1s 1s"})
    with Admin(cluster.namesrv_addr) as admin:
        admin.create_topic("raise_t", queue_nums=1)
    listener = RaiseOnce(exc)
    consumer = push_consumer(cluster.namesrv_addr, "g_raise", "raise_t", listener,  # type: ignore[arg-type]
                             listener_on_loop=listener_on_loop)
    try:
        with Producer("p_raise", cluster.namesrv_addr) as producer:
            producer.send(Message("raise_t", b"boom"))
            assert wait_until(lambda: listener.raised, 15)
            producer.send(Message("raise_t", b"after"))
        assert wait_until(lambda: {b"after", b"boom"} <= set(listener.bodies), 20), listener.bodies
    finally:
        t0 = time.monotonic()
        consumer.shutdown()
    assert time.monotonic() - t0 < 10

