"""``Producer.send_async`` coalesces queued sends into batch requests: each message still gets its own
result, and that result names exactly where the message was stored."""

from txmq import Admin, Message, Producer, PullConsumer, SendStatus


def test_async_sends_are_batched_and_each_result_is_exact(cluster):
    cluster.start_broker(conf={"flushDiskType": "SYNC_FLUSH"})
    n = 3000
    with Producer("p_batching", cluster.namesrv_addr, batch_max_messages=64) as producer:
        producer.send(Message("Coalesced", b"warm-up"))
        futures = [producer.send_async(Message("Coalesced", f"m{i}".encode(), keys=f"k{i}")) for i in range(n)]
        results = [f.result(30) for f in futures]
    assert all(r.status == SendStatus.SEND_OK for r in results)
    assert len({r.msg_id for r in results}) == n
    assert len({r.offset_msg_id for r in results}) == n
    assert len({(r.queue_id, r.queue_offset) for r in results}) == n

    told = {r.msg_id: (r.queue_id, r.queue_offset, f"m{i}".encode()) for i, r in enumerate(results)}
    stored = {}
    with PullConsumer("c_batching", cluster.namesrv_addr) as consumer:
        for mq in consumer.fetch_subscribe_message_queues("Coalesced"):
            offset = 0
            while True:
                got = consumer.pull(mq, offset=offset, max_nums=256)
                if not got.msgs:
                    break
                for m in got.msgs:
                    if m.body != b"warm-up":
                        assert m.msg_id not in stored
                        stored[m.msg_id] = (m.queue_id, m.queue_offset, m.body)
                offset = got.next_begin_offset
    assert stored == told

    with Admin(cluster.namesrv_addr) as admin:
        store = next(iter(admin.stats().values()))["store"]
    assert store["put_calls"] < store["appends"] / 4, store  # the sends really went in batches


def test_coalesced_sends_over_the_brokers_max_message_size_are_split_not_refused(cluster):
    # The broker counts a batch whole against maxMessageSize; 64 sends of 4 KB coalesce into batches of up to
    # 256 KB (the producer's batch_max_bytes is 1 MB), which this broker refuses: the producer sends them in parts.
    cluster.start_broker(conf={"maxMessageSize": 16 * 1024})
    with Producer("p_split", cluster.namesrv_addr, max_message_size=8 * 1024) as producer:
        producer.send(Message("Split", b"warm-up"))
        futures = [producer.send_async(Message("Split", bytes([i]) * 4096)) for i in range(64)]
        results = [f.result(30) for f in futures]
    assert all(r.status == SendStatus.SEND_OK for r in results)
    assert len({(r.queue_id, r.queue_offset) for r in results}) == 64
