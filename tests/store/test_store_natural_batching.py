"""Natural batching in the store: the puts asked for in one loop iteration are written together (one append, one
flush wait), and each is still answered alone. Real files, real fsync; every hidden assumption of the shared
write has a case: a refused neighbour, a failed shared write, a caller gone before the write, a flush timeout
for one group only, order within a queue."""

from __future__ import annotations

import asyncio
import threading

import pytest

from tests.store.store_helpers import make_config, msg, run
from txmq.store import DefaultMessageStore, FlushDiskType, PutMessageStatus


def _bodies(store: DefaultMessageStore, topic: str, queue_id: int = 0) -> list[bytes]:
    from txmq.message import decode_message

    got = store.get_message(topic, queue_id, 0, 1000)
    return [decode_message(m)[0].body for m in got.messages]


def test_puts_of_one_iteration_share_one_write_and_each_gets_its_own_answer(root):
    async def go() -> None:
        async with DefaultMessageStore(make_config(root, flush_disk_type=FlushDiskType.SYNC_FLUSH)) as store:
            before = store.runtime_info()
            futs = [store.put_message(msg("T", f"m{i}".encode())) for i in range(10)]  # no await in between
            results = await asyncio.gather(*futs)
            info = store.runtime_info()
            assert [r.status for r in results] == [PutMessageStatus.PUT_OK] * 10
            assert [r.append_result.logics_offset for r in results] == list(range(10))  # type: ignore[union-attr]
            offsets = [r.append_result.wrote_offset for r in results]  # type: ignore[union-attr]
            assert offsets == sorted(set(offsets))  # each its own record, in call order
            assert info["put_groups"] - before["put_groups"] == 1
            assert info["put_calls"] - before["put_calls"] == 10
            assert store.flushed_offset >= store.max_phy_offset  # answered after the one fsync covered them
            assert _bodies(store, "T") == [f"m{i}".encode() for i in range(10)]

    run(go)


def test_a_refused_put_never_fails_its_neighbours(root):
    async def go() -> None:
        config = make_config(root, flush_disk_type=FlushDiskType.SYNC_FLUSH, max_message_size=4096)
        async with DefaultMessageStore(config) as store:
            futs = [
                store.put_message(msg("T", b"a")),
                store.put_message(msg("T", b"x" * 5000)),  # oversized
                store.put_messages([msg("T", b"b"), msg("T", b"p", BIG="v" * 40_000)]),  # properties too long
                store.put_message(msg("T", b"c")),
            ]
            a, big, props, c = await asyncio.gather(*futs)
            assert a.ok and c.ok
            assert big.status == PutMessageStatus.MESSAGE_ILLEGAL and not big.stored
            assert props.status == PutMessageStatus.PROPERTIES_SIZE_EXCEEDED and not props.stored
            # The refused puts took no queue offsets: the two stored are consecutive, in call order.
            assert (a.append_result.logics_offset, c.append_result.logics_offset) == (0, 1)  # type: ignore[union-attr]
            assert _bodies(store, "T") == [b"a", b"c"]  # nothing of the refused batch (b"b" went with it)

    run(go)


def test_a_failed_shared_write_fails_every_put_of_the_group_and_stores_nothing(root):
    async def go() -> None:
        async with DefaultMessageStore(make_config(root, flush_disk_type=FlushDiskType.SYNC_FLUSH)) as store:
            assert (await store.put_message(msg("T", b"before"))).ok
            end = store.max_phy_offset
            real_append = store.commit_log.append

            def failing(records):  # type: ignore[no-untyped-def]
                raise OSError(5, "Input/output error")

            store.commit_log.append = failing  # type: ignore[method-assign]
            results = await asyncio.gather(*(store.put_message(msg("T", f"f{i}".encode(), queue_id=i % 2))
                                             for i in range(4)))
            store.commit_log.append = real_append  # type: ignore[method-assign]
            assert {r.status for r in results} == {PutMessageStatus.UNKNOWN_ERROR}
            assert all(not r.stored and "nothing was stored" in r.remark for r in results)
            assert store.max_phy_offset == end
            assert store.get_max_offset_in_queue("T", 0) == 1 and store.get_max_offset_in_queue("T", 1) == 0
            # The next group gives the same queue offsets again: the failed one took none.
            after = await asyncio.gather(store.put_message(msg("T", b"g0")), store.put_message(msg("T", b"g1")))
            assert [r.append_result.logics_offset for r in after] == [1, 2]  # type: ignore[union-attr]
            assert _bodies(store, "T") == [b"before", b"g0", b"g1"]

    run(go)


def test_a_put_whose_caller_is_gone_is_stored_whole_and_its_neighbours_answered(root):
    async def go() -> None:
        async with DefaultMessageStore(make_config(root, flush_disk_type=FlushDiskType.SYNC_FLUSH)) as store:
            first = store.put_message(msg("T", b"1"))
            gone = store.put_messages([msg("T", b"2"), msg("T", b"3")])
            last = store.put_message(msg("T", b"4"))
            gone.cancel()  # a connection closed mid-batch: nobody waits for this answer any more
            assert (await first).ok and (await last).ok
            assert (await last).append_result.logics_offset == 3  # type: ignore[union-attr]
            assert _bodies(store, "T") == [b"1", b"2", b"3", b"4"]

    run(go)


def test_a_flush_timeout_answers_its_own_group_only(root):
    async def go() -> None:
        # 1 s: the later group's real fsync must finish within it, also on a loaded machine
        config = make_config(root, flush_disk_type=FlushDiskType.SYNC_FLUSH, sync_flush_timeout_ms=1000)
        async with DefaultMessageStore(config) as store:
            stall, release = threading.Event(), threading.Event()
            real_flush = store.commit_log.flush

            def slow_flush() -> int:
                if stall.is_set():
                    release.wait(10)  # the flush thread is stuck until the group was answered
                return real_flush()

            store.commit_log.flush = slow_flush  # type: ignore[method-assign]
            stall.set()
            slow = await asyncio.gather(*(store.put_message(msg("T", f"s{i}".encode())) for i in range(3)))
            stall.clear()
            release.set()  # the stuck fsync ends
            fast = await asyncio.gather(*(store.put_message(msg("T", f"f{i}".encode())) for i in range(3)))
            assert [r.status for r in slow] == [PutMessageStatus.FLUSH_DISK_TIMEOUT] * 3
            assert all(r.stored for r in slow)  # stored and dispatched: only the fsync was late
            assert [r.status for r in fast] == [PutMessageStatus.PUT_OK] * 3
            assert store.runtime_info()["flush_timeouts"] == 1  # one group, one timeout
            assert len(_bodies(store, "T")) == 6

    run(go)


def test_order_within_each_queue_is_the_order_of_the_calls_across_groups(root):
    async def go() -> None:
        async with DefaultMessageStore(make_config(root, flush_disk_type=FlushDiskType.ASYNC_FLUSH)) as store:
            futs = []
            for i in range(60):
                futs.append(store.put_message(msg("T", f"{i}".encode(), queue_id=i % 3)))
                if i % 7 == 6:
                    await asyncio.sleep(0)  # groups end at arbitrary points
            results = await asyncio.gather(*futs)
            assert all(r.ok for r in results)
            assert store.runtime_info()["put_groups"] > 1
            for q in range(3):
                assert _bodies(store, "T", q) == [f"{i}".encode() for i in range(q, 60, 3)]

    run(go)


def test_each_put_gets_its_own_answer_made_from_its_result_and_a_failing_answer_fails_only_its_own(root):
    """``put_messages(msgs, answer)``: the future holds ``answer(result)`` (the send path's response, with no second
    future); a refused put is answered the same way, an answer that raises fails its own put only, and a put
    whose caller is gone is stored and its answer made (a half's is its tracking), though nobody gets it."""
    async def go() -> None:
        config = make_config(root, flush_disk_type=FlushDiskType.SYNC_FLUSH, max_message_size=4096)
        async with DefaultMessageStore(config) as store:
            seen: list[str] = []

            def answer(name: str):  # type: ignore[no-untyped-def]
                def made(result):  # type: ignore[no-untyped-def]
                    seen.append(name)
                    if name == "bad":
                        raise ValueError("the caller's answer failed")
                    return name, result.status, result.append_result and result.append_result.logics_offset
                return made

            waiters = [_Waiter(), _Waiter(), _Waiter()]
            futs = [
                store.put_message(msg("T", b"a"), answer("a")),
                store.put_message(msg("T", b"x" * 5000), answer("big")),  # refused at once, answered at once
                store.put_messages([msg("T", b"b1"), msg("T", b"b2")], answer("bad")),
                store.put_message(msg("T", b"gone"), answer("gone")),
                store.put_message(msg("T", b"c"), answer("c")),
            ]
            # A caller's own waiter (the transport's Reply) is resolved instead of a new future, and returned.
            assert store.put_message(msg("T", b"w"), answer("w"), waiters[0]) is waiters[0]
            assert store.put_messages([msg("T", b"wbad")], answer("bad"), waiters[1]) is waiters[1]
            assert store.put_message(msg("T", b"x" * 5000), answer("wbig"), waiters[2]) is waiters[2]
            assert seen == ["big", "wbig"]  # the others wait for their group's write and flush
            futs[3].cancel()
            done = await asyncio.gather(*futs, return_exceptions=True)
            assert done[0] == ("a", PutMessageStatus.PUT_OK, 0)
            assert done[1] == ("big", PutMessageStatus.MESSAGE_ILLEGAL, None)
            assert isinstance(done[2], ValueError)
            assert isinstance(done[3], asyncio.CancelledError)
            assert done[4] == ("c", PutMessageStatus.PUT_OK, 4)  # after b1, b2 and gone, all stored
            assert waiters[0].outcome == ("result", ("w", PutMessageStatus.PUT_OK, 5))
            assert waiters[1].outcome[0] == "exception" and isinstance(waiters[1].outcome[1], ValueError)
            assert waiters[2].outcome == ("result", ("wbig", PutMessageStatus.MESSAGE_ILLEGAL, None))
            assert seen == ["big", "wbig", "a", "bad", "gone", "c", "w", "bad"]  # once each, in call order
            assert _bodies(store, "T") == [b"a", b"b1", b"b2", b"gone", b"c", b"w", b"wbad"]

    run(go)


class _Waiter:
    """A caller's own waiter (``put_messages``' ``waiter``): a future's methods, recording the one outcome."""

    def __init__(self) -> None:
        self.outcome: tuple[str, object] | None = None

    def done(self) -> bool:
        return self.outcome is not None

    def cancelled(self) -> bool:
        return False

    def cancel(self) -> bool:
        raise AssertionError("nobody cancels these puts")

    def set_result(self, value: object) -> None:
        assert self.outcome is None, "resolved twice"
        self.outcome = ("result", value)

    def set_exception(self, exc: BaseException) -> None:
        assert self.outcome is None, "resolved twice"
        self.outcome = ("exception", exc)


def test_a_put_whose_topic_is_deleted_before_its_group_is_written_goes_to_the_queue_made_again(root):
    """The group commit writes a group's entries to the queues its puts found, unless a queue was dropped since:
    then the entry goes where it went when every group looked its queues up again, a queue made anew."""

    async def go() -> None:
        async with DefaultMessageStore(make_config(root)) as store:
            assert (await store.put_message(msg("T", b"a"))).ok
            pending = store.put_message(msg("T", b"b"))  # numbered 1 now, written in the next loop iteration
            store.delete_topic("T")
            assert (await pending).ok
            assert store.topics() == {"T"}
            assert store.get_max_offset_in_queue("T", 0) == 2

    run(go)


class _Batch:
    """A recording ``answer_batch``: how many batches were opened, and whether one is open now."""

    def __init__(self) -> None:
        self.opened = 0
        self.open = False

    def __call__(self) -> _Batch:
        return self

    def __enter__(self) -> None:
        assert not self.open
        self.open, self.opened = True, self.opened + 1

    def __exit__(self, *exc: object) -> None:
        self.open = False


@pytest.mark.parametrize("mode", ["ASYNC_FLUSH", "SYNC_FLUSH", "replicated"])
def test_a_group_s_answers_are_given_inside_one_answer_batch(root, mode: str):
    """``answer_batch`` (the broker's: its transport's write batch) is open while every put of a group is answered,
    once per group, whether the answers follow the write (``ASYNC_FLUSH``), the fsync (``SYNC_FLUSH``) or the
    replication (a SYNC_MASTER's wait): a group's answers to one connection then leave together, and at once. It is
    opened once more, at the write, for the arrival notices (the held pulls they wake answer inside it)."""
    async def go() -> None:
        flush = FlushDiskType.ASYNC_FLUSH if mode == "ASYNC_FLUSH" else FlushDiskType.SYNC_FLUSH
        async with DefaultMessageStore(make_config(root, flush_disk_type=flush)) as store:
            batch = _Batch()
            store.answer_batch = batch
            replicated: list[asyncio.Future[PutMessageStatus]] = []
            if mode == "replicated":
                def replicate(end: int) -> asyncio.Future[PutMessageStatus]:
                    replicated.append(asyncio.get_running_loop().create_future())
                    return replicated[-1]

                store.replicate = replicate
            inside: list[bool] = []

            def answer(result):  # type: ignore[no-untyped-def]
                inside.append(batch.open)
                return result.status

            futs = [store.put_message(msg("T", f"m{i}".encode(), queue_id=i % 2), answer) for i in range(6)]
            if mode == "replicated":
                while not replicated:
                    await asyncio.sleep(0.01)
                await asyncio.sleep(0.05)
                assert inside == [] and batch.opened == 1  # the arrival notices only: not answered yet
                replicated[0].set_result(PutMessageStatus.PUT_OK)
            assert await asyncio.gather(*futs) == [PutMessageStatus.PUT_OK] * 6
            assert inside == [True] * 6 and batch.opened == 2 and not batch.open

    run(go)


@pytest.mark.parametrize("bounded", [False, True])
def test_a_slave_s_arrival_notices_are_given_inside_one_answer_batch(tmp_path, bounded: bool):
    """On a slave the records its master streams (``append_replicated``), and a rise of the confirm offset that
    makes them readable (controller mode), wake the held pulls of their queues: the notices are given inside one
    answer batch per call, so a consumer's pulls woken together are answered in one write."""
    async def go() -> None:
        async with DefaultMessageStore(make_config(tmp_path / "master")) as master:
            slave = DefaultMessageStore(make_config(tmp_path / "slave"))
            slave.replica = True
            await slave.start()
            try:
                batch = _Batch()
                slave.answer_batch = batch
                woken: list[tuple[str, int, bool]] = []
                slave.add_arrival_listener(lambda topic, qid, _: woken.append((topic, qid, batch.open)))
                if bounded:
                    slave.set_confirm_offset(0)
                for i in range(4):
                    assert (await master.put_message(msg("T", b"m%d" % i, queue_id=i))).ok
                end = master.max_phy_offset
                slave.append_replicated(0, master.commit_log.read_raw(0, end))
                if bounded:
                    assert woken == []  # past the confirm offset: not readable yet
                    slave.set_confirm_offset(end)
                assert sorted(woken) == [("T", q, True) for q in range(4)]
                assert batch.opened == (3 if bounded else 1) and not batch.open
            finally:
                await slave.shutdown()

    run(go)
