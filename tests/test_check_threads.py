"""``CheckThreads``, the ``TransactionProducer``'s check pool: checks run in order on its threads; ``shutdown``
cancels the checks not begun (their done callbacks run, so their queue slots are freed), lets the one in progress
end, refuses new ones, and its threads are daemon threads (the interpreter does not wait for a hung check)."""

from __future__ import annotations

import threading

import pytest

from txmq.client.transaction import CheckThreads


def test_shutdown_cancels_the_checks_not_begun_and_lets_the_running_one_end() -> None:
    pool = CheckThreads(1, "t-check")
    entered, release = threading.Event(), threading.Event()
    ran: list[int] = []

    def check(n: int) -> None:
        if n == 0:
            entered.set()
            assert release.wait(10)
        ran.append(n)

    done: list[int] = []
    futures = [pool.submit(check, n) for n in range(4)]
    for n, f in enumerate(futures):
        f.add_done_callback(lambda _, n=n: done.append(n))
    assert entered.wait(10)
    threads = [t for t in threading.enumerate() if t.name.startswith("t-check")]
    assert len(threads) == 1 and threads[0].daemon
    pool.shutdown()
    assert [f.cancelled() for f in futures] == [False, True, True, True]
    assert sorted(done) == [1, 2, 3]  # the slots of the cancelled checks are free at once
    with pytest.raises(RuntimeError):
        pool.submit(check, 9)
    release.set()
    futures[0].result(10)
    assert ran == [0]
    threads[0].join(10)
    assert not threads[0].is_alive()
