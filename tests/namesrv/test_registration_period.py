"""A change scheduled for registration just as the registration period runs out is registered by that period's full
registration, and told as registered all the same: the gRPC endpoint drops the route answers it makes stale."""

from __future__ import annotations

import asyncio
import time

from txmq.broker.config import BrokerConfig
from txmq.broker.registration import NamesrvRegistration
from txmq.remoting.transport import RemotingClient
from txmq.topic import TopicConfig

PERIOD_S = 1.0  # registerNameServerPeriod's least


def test_a_change_scheduled_as_the_period_runs_out_is_told_as_registered():
    async def go() -> list[list[str] | None]:
        told: list[list[str] | None] = []
        config = BrokerConfig(register_name_server_period=int(PERIOD_S * 1000))  # no name server: none to ask
        async with RemotingClient() as client:
            registration = NamesrvRegistration(
                config, client, lambda: {"topicConfigTable": {}}, lambda: "", lambda answer: None,
                lambda topic: TopicConfig(topic), lambda: 6, told.append)
            task = asyncio.create_task(registration.run())
            await asyncio.sleep(0)  # the loop waits for its period now
            loop = asyncio.get_running_loop()
            # the loop held up past the period's end and the change's: both run in one iteration, the period first
            loop.call_later(PERIOD_S - 0.1, time.sleep, 0.4)
            loop.call_later(PERIOD_S + 0.1, registration.schedule, ["Orders"])
            await asyncio.sleep(PERIOD_S + 0.6)
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        return told

    assert asyncio.run(go()) != []
