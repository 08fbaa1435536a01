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
