"""A delayed message is never delivered before its delay has passed since it was sent, by the sender's own monotonic
clock, even when the broker's loop was held up (a slow callback, the process descheduled on a busy machine) between
another put and the moment the send was made: a real broker on 127.0.0.1, a client on its own thread and loop."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path

from tests.broker.test_journal_off_loop import _send, serving
from tests.store.store_helpers import msg
from txmq.message import MessageConst, properties_to_string
from txmq.remoting.codes import ResponseCode
from txmq.remoting.transport import RemotingClient, run
from txmq.topic import TopicConfig

DELAY_S = 1.0  # level 1 of the broker's messageDelayLevel below
HELD_S = 0.15  # how long the broker's loop is held up before, and again after, the client is told to send


class DelayedSender(threading.Thread):
    """Sends one plain message to ``topic`` (the connection made, the route warm), then, once ``go`` is set, one
    delayed at level 1, noting ``time.monotonic()`` just before that send."""

    def __init__(self, addr: str, topic: str) -> None:
        super().__init__(name="delayed-sender", daemon=True)
        self.addr, self.topic = addr, topic
        self.ready = threading.Event()
        self.go = threading.Event()
        self.sent_at = 0.0
        self.codes: list[int] = []

    def run(self) -> None:
        run(self._main())

    async def _main(self) -> None:
        async with RemotingClient() as client:
            self.codes.append((await client.invoke(self.addr, _send(self.topic), 10)).code)
            self.ready.set()
            await asyncio.to_thread(self.go.wait, 10)
            self.sent_at = time.monotonic()
            delayed = _send(self.topic, properties=properties_to_string({MessageConst.DELAY_TIME_LEVEL: "1"}))
            self.codes.append((await client.invoke(self.addr, delayed, 10)).code)


def test_a_delayed_message_sent_while_the_loop_was_held_up_is_not_delivered_early(tmp_path: Path) -> None:
    async def main() -> None:
        async with serving(tmp_path, message_delay_level="1s") as (broker, addr):
            store = broker.store
            await broker.topic_config_manager.update(TopicConfig("Later", 1, 1))
            sender = DelayedSender(addr, "Later")
            sender.start()
            assert await asyncio.to_thread(sender.ready.wait, 10)
            first = store.put_message(msg("Other"))  # a group of puts opens in this loop iteration
            time.sleep(HELD_S)  # the loop held up; then the client sends, its request read in this same iteration
            sender.go.set()
            time.sleep(HELD_S)
            assert (await first).ok
            await asyncio.to_thread(sender.join, 10)
            assert sender.codes == [ResponseCode.SUCCESS, ResponseCode.SUCCESS]
            deadline = time.monotonic() + DELAY_S + 5
            while store.get_max_offset_in_queue("Later", 0) < 2 and time.monotonic() < deadline:
                await asyncio.sleep(0.002)
            delivered_at = time.monotonic()
            assert store.get_max_offset_in_queue("Later", 0) == 2
            assert delivered_at >= sender.sent_at + DELAY_S, f"{sender.sent_at + DELAY_S - delivered_at:.3f} s early"

    run(main())
