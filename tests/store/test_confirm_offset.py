"""The confirm offset (RocketMQ's confirmOffset, controller mode): consumers' reads stop at it, offsets past it wait
instead of moving, and long polls hear of records once it covers them. One store, real files."""

from __future__ import annotations

from tests.store.store_helpers import make_config, msg, run
from txmq.store import DefaultMessageStore
from txmq.store.results import GetMessageStatus


async def _put(store: DefaultMessageStore, n: int) -> list[int]:
    """The end of each put in the log."""
    ends = []
    for i in range(n):
        assert (await store.put_message(msg(body=b"c%d" % i * 40))).ok
        ends.append(store.max_phy_offset)
    return ends


def test_reads_stop_at_the_confirm_offset_and_long_polls_hear_of_records_once_it_covers_them(tmp_path):
    async def go() -> None:
        async with DefaultMessageStore(make_config(tmp_path)) as store:
            heard: list[int] = []
            store.add_arrival_listener(lambda topic, qid, next_offset: heard.append(next_offset))
            ends = await _put(store, 3)
            assert heard == [1, 2, 3]  # no bound: every put is heard at once
            store.set_confirm_offset(ends[1])
            ends += await _put(store, 3)
            assert heard == [1, 2, 3]  # past the bound: held

            got = store.get_message("T", 0, 0, 32, confirmed=True)
            assert got.queue_offsets == [0, 1] and got.next_begin_offset == 2 and got.max_offset == 2
            assert len(store.get_message("T", 0, 0, 32).messages) == 6  # the broker's own readers see the log
            assert store.get_max_offset_in_queue("T", 0, confirmed=True) == 2
            assert store.get_max_offset_in_queue("T", 0) == 6
            for offset in (2, 4, 6):  # not there yet for a consumer: wait, never move
                past = store.get_message("T", 0, offset, 32, confirmed=True)
                assert (past.status, past.next_begin_offset, past.messages) == \
                    (GetMessageStatus.OFFSET_OVERFLOW_ONE, offset, [])
            badly = store.get_message("T", 0, 9, 32, confirmed=True)  # past the log: moved (RocketMQ: to 0 here)
            assert (badly.status, badly.next_begin_offset) == (GetMessageStatus.OFFSET_OVERFLOW_BADLY, 0)

            store.set_confirm_offset(ends[3] + 1)  # inside the next record: it is not served
            assert heard == [1, 2, 3, 3, 4]  # 3 again: the bound had uncovered it
            assert store.get_message("T", 0, 2, 32, confirmed=True).queue_offsets == [2, 3]
            store.set_confirm_offset(ends[5] + 10**6)  # capped at the log's end
            assert store.confirm_offset == ends[5] and heard == [1, 2, 3, 3, 4, 5, 6]
            assert store.get_message("T", 0, 4, 32, confirmed=True).queue_offsets == [4, 5]

            await _put(store, 1)
            store.truncate_replicated(ends[4])  # a replica cut back: the bound never passes the log's end
            assert store.confirm_offset == ends[4]
            assert store.get_max_offset_in_queue("T", 0, confirmed=True) == 5
            store.set_confirm_offset(None)
            assert store.get_message("T", 0, 0, 32, confirmed=True).queue_offsets == [0, 1, 2, 3, 4]

    run(go)


def test_long_polls_hear_of_records_a_lowered_bound_covers_again(tmp_path):
    """A bound set below the log's end (a restarted replica starts at 0; a slave takes a new master's lower one)
    uncovers records whose arrival was told before, or never (recovered at the start): told again once the bound
    covers them, else a pull held on them waited for its whole long poll."""
    async def go() -> None:
        async with DefaultMessageStore(make_config(tmp_path)) as store:
            ends = await _put(store, 3)
        async with DefaultMessageStore(make_config(tmp_path)) as store:  # restarted
            heard: list[int] = []
            store.add_arrival_listener(lambda topic, qid, next_offset: heard.append(next_offset))
            store.set_confirm_offset(0)  # as a broker in controller mode starts
            assert store.get_max_offset_in_queue("T", 0, confirmed=True) == 0 and heard == []
            store.set_confirm_offset(ends[2])  # its set acknowledged the log
            assert heard == [3]
            store.set_confirm_offset(ends[0])  # a new master's lower bound
            store.set_confirm_offset(ends[2] - 1)
            assert heard == [3]  # not covered yet
            store.set_confirm_offset(ends[2])
            assert heard == [3, 3]

    run(go)


def test_an_offset_found_by_time_for_a_consumer_is_not_past_the_bound(tmp_path):
    """A consumer starting from a time (SEARCH_OFFSET_BY_TIMESTAMP, gRPC QueryOffset, a reset by time) is given
    an offset no further than the bound: one inside the tail past it would skip what a new master writes there
    after a failover that lost the tail (what the bound is for)."""
    async def go() -> None:
        async with DefaultMessageStore(make_config(tmp_path)) as store:
            ends = await _put(store, 4)
            store.set_confirm_offset(ends[1])
            future = 2**62
            assert store.get_offset_in_queue_by_time("T", 0, future) == 4  # the broker's own view: the log
            assert store.get_offset_in_queue_by_time("T", 0, future, confirmed=True) == 2
            assert store.get_offset_in_queue_by_time("T", 0, 0, confirmed=True) == 0
            assert store.get_offset_in_queue_by_time("none", 0, future, confirmed=True) == 0

    run(go)
