"""A consumer whose broker goes away logs it once (one line for the run of failed pulls from that address, not
one per queue and retry) and once again when pulls from it work again. Real broker processes: one SIGKILLed and
started again on the same port."""

from __future__ import annotations

import logging
import time

import pytest

from tests.e2e.helpers import Recorder, push_consumer, wait_until
from txmq import Admin, Message, Producer


def test_a_broker_gone_is_one_line_and_its_return_another(cluster, caplog: pytest.LogCaptureFixture):
    broker = cluster.start_broker()
    with Admin(cluster.namesrv_addr) as admin:
        admin.create_topic("pull_log_t", queue_nums=4)
    rec = Recorder()
    consumer = push_consumer(cluster.namesrv_addr, "g_pull_log", "pull_log_t", rec)
    try:
        with Producer("p_pull_log", cluster.namesrv_addr) as producer:
            producer.send(Message("pull_log_t", b"before"))
            assert rec.wait_for(1), rec.bodies()
            with caplog.at_level(logging.INFO, logger="txmq.client"):
                broker.kill()
                # four queues, each pulling again every 0.2 s: 40 failed pulls or more in these two seconds
                time.sleep(2.0)
                failed = [r for r in caplog.records if r.getMessage().startswith("pulls from")]
                broker.start()
                assert wait_until(lambda: any("work again" in r.getMessage() for r in caplog.records), 30), \
                    [r.getMessage() for r in caplog.records]
            producer.send(Message("pull_log_t", b"after"))
            assert rec.wait_for(2), rec.bodies()
    finally:
        consumer.shutdown()
    assert len(failed) == 1 and failed[0].levelno == logging.WARNING, [r.getMessage() for r in failed]
    again = [r for r in caplog.records if "work again" in r.getMessage()]
    assert len(again) == 1 and again[0].levelno == logging.INFO, [r.getMessage() for r in again]
