from txmq.client.rebalance import allocate_averagely


def test_every_queue_has_exactly_one_owner():
    for n in range(0, 13):
        for k in range(1, 6):
            queues = list(range(n))
            cids = [f"c{i}" for i in range(k)]
            owned = [q for c in cids for q in allocate_averagely(queues, cids, c)]
            assert sorted(owned) == queues, (n, k)
            sizes = [len(allocate_averagely(queues, cids, c)) for c in cids]
            assert max(sizes) - min(sizes) <= 1


def test_unknown_client_gets_nothing():
    assert allocate_averagely([1, 2, 3], ["a", "b"], "z") == []


def test_a_drop_cancelled_while_its_pull_winds_down_is_cancelled():
    """A shutdown cancels the rebalance loop; if that loop is in a drop, waiting for the queue's pull to end, the
    cancellation must reach it (suppressing CancelledError around that wait swallowed it: the loop went on after
    the shutdown and could take queues again)."""
    import asyncio

    from txmq import MessageQueue, PushConsumer

    async def go() -> None:
        consumer = PushConsumer("g_drop_cancel", "127.0.0.1:1")
        mq = MessageQueue("T", "broker-a", 0)
        winding, wound = asyncio.Event(), asyncio.Event()

        async def pull_loop() -> None:
            try:
                await asyncio.sleep(60)
            except asyncio.CancelledError:
                winding.set()
                await wound.wait()  # its clean-up takes a while
                raise

        consumer._pull_tasks[mq] = asyncio.create_task(pull_loop())
        await asyncio.sleep(0)
        drop = asyncio.create_task(consumer._drop_queues([mq]))
        await winding.wait()
        drop.cancel()  # the shutdown cancels the task that drops
        await asyncio.sleep(0)
        wound.set()
        await asyncio.wait([drop])
        assert drop.cancelled()

    asyncio.run(go())
