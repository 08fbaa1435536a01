"""The compact transaction state table: outcomes, pending entries, check counts and the check wheel."""

from txmq.broker.transaction.state import Outcome, TransactionStateTable


def table_with(*offsets: int, store_s: int = 100, first_check_s: int = 106) -> TransactionStateTable:
    t = TransactionStateTable()
    for off in offsets:
        t.add_pending(off, "orders", "g1", store_s, first_check_s)
    return t


def test_pending_info_round_trips_through_the_packed_int():
    t = TransactionStateTable()
    t.add_pending(7, "orders", "group-a", 1_700_000_000, 1_700_000_006, checks=3)
    t.add_pending(8, "payments", "group-b", 1_700_000_001, 1_700_000_007)
    a, b = t.info(7), t.info(8)
    assert a is not None and b is not None
    assert (a.half_offset, a.store_time_s, a.checks, a.topic, a.group) == (7, 1_700_000_000, 3, "orders", "group-a")
    assert (b.store_time_s, b.checks, b.topic, b.group) == (1_700_000_001, 0, "payments", "group-b")
    assert not a.recovered
    assert t.outcome(7) == Outcome.PENDING and len(t) == 2
    assert t.pending_per_topic == {"orders": 1, "payments": 1}
    assert t.info(9) is None


def test_unknown_offsets_are_pending_and_the_outcome_array_grows():
    t = TransactionStateTable()
    assert t.outcome(5) == Outcome.PENDING
    assert t.outcome(-1) == Outcome.EXPIRED  # below the base: no half message is there
    t.decide(100_000, Outcome.ROLLBACK)
    assert t.outcome(100_000) == Outcome.ROLLBACK
    assert t.outcome(99_999) == Outcome.PENDING
    assert len(t.outcomes) > 100_000


def test_decide_removes_the_pending_entry_and_counts_per_topic():
    t = table_with(1, 2, 3)
    t.decide(1, Outcome.COMMIT)
    t.decide(2, Outcome.ROLLBACK)
    assert t.outcome(1) == Outcome.COMMIT and t.outcome(2) == Outcome.ROLLBACK
    assert t.info(1) is None and t.info(2) is None
    assert len(t) == 1 and t.pending_per_topic == {"orders": 1}
    t.decide(3, Outcome.COMMIT)
    assert len(t) == 0 and "orders" not in t.pending_per_topic


def test_a_decided_transaction_is_never_pending_again():
    t = table_with(1, 2)
    t.decide(1, Outcome.COMMIT)
    t.decide(2, Outcome.ROLLBACK)
    t.add_pending(1, "orders", "g1", 100, 106)  # e.g. recovery replaying the half message after the op
    t.add_pending(2, "orders", "g1", 100, 106)
    assert t.outcome(1) == Outcome.COMMIT and t.outcome(2) == Outcome.ROLLBACK
    assert len(t) == 0 and list(t.pop_due(10**9)) == []


def test_adding_a_pending_transaction_twice_keeps_one_entry():
    t = table_with(4)
    t.count_check(4)
    t.add_pending(4, "orders", "g1", 100, 106)
    assert len(t) == 1 and t.pending_per_topic == {"orders": 1}
    info = t.info(4)
    assert info is not None and info.checks == 1


def test_checks_are_counted_and_saturate():
    t = table_with(1)
    assert [t.count_check(1) for _ in range(3)] == [1, 2, 3]
    info = t.info(1)
    assert info is not None and info.checks == 3 and info.store_time_s == 100 and info.topic == "orders"
    for _ in range(300):
        t.count_check(1)
    info = t.info(1)
    assert info is not None and info.checks == 255 and info.group == "g1"
    assert t.count_check(99) == 0  # not pending: nothing counted


def test_discard_keeps_checks_and_resume_puts_it_back_into_checking():
    t = table_with(1)
    t.count_check(1)
    t.count_check(1)
    t.decide(1, Outcome.DISCARD)
    assert t.outcome(1) == Outcome.DISCARD and t.discarded == {1: 2} and len(t) == 0
    assert list(t.pop_due(10**9)) == []
    t.add_pending(1, "orders", "g1", 100, 200)  # resume
    assert t.outcome(1) == Outcome.PENDING and 1 not in t.discarded
    info = t.info(1)
    assert info is not None and info.checks == 0
    assert list(t.pop_due(199)) == [] and list(t.pop_due(200)) == [1]


def test_a_discarded_transaction_can_still_be_committed():
    t = table_with(1)
    t.decide(1, Outcome.DISCARD)
    t.decide(1, Outcome.COMMIT)  # a late answer of the producer
    assert t.outcome(1) == Outcome.COMMIT and t.discarded == {}


def test_the_wheel_yields_only_due_pending_transactions_in_time_order():
    t = TransactionStateTable()
    t.add_pending(1, "orders", "g1", 100, 110)
    t.add_pending(2, "orders", "g1", 100, 105)
    t.add_pending(3, "orders", "g1", 100, 105)
    t.add_pending(4, "orders", "g1", 100, 120)
    assert t.next_due_s() == 105
    assert list(t.pop_due(104)) == []
    t.decide(3, Outcome.COMMIT)
    assert list(t.pop_due(110)) == [2, 1]
    assert list(t.pop_due(110)) == []  # popped buckets are gone
    assert t.next_due_s() == 120
    t.schedule(2, 111)
    assert list(t.pop_due(200)) == [2, 4]
    assert t.next_due_s() is None


def test_recovered_flag_is_cleared_by_a_decision():
    t = table_with(1, 2)
    t.recovered = {1, 2}
    info = t.info(1)
    assert info is not None and info.recovered
    t.decide(1, Outcome.ROLLBACK)
    assert 1 not in t.recovered and 2 in t.recovered


def test_many_names_and_large_offsets():
    t = TransactionStateTable()
    for i in range(2000):
        t.add_pending(10**7 + i, f"topic-{i % 300}", f"group-{i % 70}", 1_700_000_000 + i, 1_700_000_010 + i)
    for i in (0, 299, 1999):
        info = t.info(10**7 + i)
        assert info is not None
        assert (info.topic, info.group, info.store_time_s) == (f"topic-{i % 300}", f"group-{i % 70}",
                                                               1_700_000_000 + i)
    assert len(t) == 2000 and sum(t.pending_per_topic.values()) == 2000


def test_an_undone_decision_reopens_from_the_packed_entry_it_kept():
    t = table_with(1, 2)
    t.count_check(1)
    t.count_check(1)
    packed = t.pending[1]  # what a decision keeps to go back to (state.Before)
    t.decide(1, Outcome.COMMIT)
    assert t.pending_per_topic == {"orders": 1} and list(t.pop_due(10**9)) == [2]
    t.reopen(1, packed, 300)
    assert t.outcome(1) == Outcome.PENDING and t.pending[1] == packed  # checks, store second, names as before
    info = t.info(1)
    assert info is not None and (info.checks, info.store_time_s, info.topic, info.group) == (2, 100, "orders", "g1")
    assert t.pending_per_topic == {"orders": 2}
    assert list(t.pop_due(299)) == [] and list(t.pop_due(300)) == [1]  # scheduled again, once


def test_names_past_the_first_65536_keep_their_topic_and_group():
    """Topics and producer groups share one name list, and a peer chooses both (each half message's REAL_TOPIC and
    PRODUCER_GROUP): once it holds 65,536 names, a new half's entry must still read back its own topic and group, or
    its check-back goes to another producer group and the per-topic count to another topic."""
    t = TransactionStateTable()
    for i in range(1 << 16):
        t.add_pending(i, "orders", f"g{i}", 100, 106)
        t.decide(i, Outcome.COMMIT)
    t.add_pending(1 << 16, "payments", "late-group", 100, 106, checks=2)
    t.count_check(1 << 16)
    info = t.info(1 << 16)
    assert info is not None and (info.topic, info.group, info.checks) == ("payments", "late-group", 3)
    loaded, _, _ = TransactionStateTable.from_snapshot(t.to_snapshot(0, 0, {}), lambda s: s, int)
    info = loaded.info(1 << 16)
    assert info is not None and (info.topic, info.group, info.checks) == ("payments", "late-group", 3)
    t.decide(1 << 16, Outcome.ROLLBACK)
    assert not t.pending_per_topic  # counted off the topic it was counted on


def test_compacting_names_keeps_each_pending_entry_and_drops_the_unused():
    """Names of decided transactions go when the list is rebuilt; every pending entry reads back its own topic,
    group, store second and checks, in the table and through a snapshot, and its per-topic count still comes off."""
    t = TransactionStateTable()
    for i in range(100):
        t.add_pending(i, f"t{i % 3}", f"g{i}", 1000 + i, 1006 + i, checks=i % 5)
        if i % 10:
            t.decide(i, Outcome.COMMIT if i % 2 else Outcome.DISCARD)
    assert t.names_to_compact() is False  # below COMPACT_AT_NAMES
    t.compact_names()
    kept = sorted(t.names)
    assert kept == sorted({f"t{i % 3}" for i in range(0, 100, 10)} | {f"g{i}" for i in range(0, 100, 10)})
    snap = TransactionStateTable.from_snapshot(t.to_snapshot(0, 0, {}), lambda s: s, int)[0]
    for table in (t, snap):
        assert sorted(table.pending) == list(range(0, 100, 10))
        for i in range(0, 100, 10):
            info = table.info(i)
            assert info is not None and (info.topic, info.group, info.store_time_s, info.checks) == \
                (f"t{i % 3}", f"g{i}", 1000 + i, i % 5)
    t.count_check(10)
    assert t.info(10).checks == 1  # type: ignore[union-attr]
    t.add_pending(200, "t1", "new-group", 2000, 2006)  # an existing name and a new one after the rebuild
    assert t.info(200)[3:5] == ("t1", "new-group")  # type: ignore[index]
    for i in [*range(0, 100, 10), 200]:
        t.decide(i, Outcome.ROLLBACK)
    assert not t.pending_per_topic


def test_the_name_list_is_rebuilt_once_it_reaches_its_mark_then_at_twice_what_it_kept():
    t = TransactionStateTable()
    t.COMPACT_AT_NAMES = t._compact_at = 8
    for i in range(4):
        t.add_pending(i, "orders", f"g{i}", 100, 106)
    t.decide(0, Outcome.COMMIT)
    for i in range(4, 8):
        t.add_pending(i, "orders", f"g{i}", 100, 106)
        t.decide(i, Outcome.COMMIT)
    assert len(t.names) == 9 and t.names_to_compact()
    t.compact_names()
    assert sorted(t.names) == ["g1", "g2", "g3", "orders"] and not t.names_to_compact()
    assert t._compact_at == 8  # max(COMPACT_AT_NAMES, twice the 4 kept)


def test_trim_forgets_what_lies_below_the_half_queues_start_and_keeps_the_rest():
    """Retention deleted the halves below 600: their outcomes go, pending and discarded ones among them are
    dropped (counts per topic and the recovered flag with them), and every transaction from 600 on answers as
    before; below the base the answer is EXPIRED, and nothing is recorded there any more."""
    t = table_with(*range(1000))
    for off in range(1000):
        if off % 4 == 1:
            t.decide(off, Outcome.COMMIT)
        elif off % 4 == 2:
            t.decide(off, Outcome.ROLLBACK)
        elif off % 4 == 3:
            t.decide(off, Outcome.DISCARD)
    t.recovered = set(t.pending) | set(t.discarded)
    expected = {off: t.outcome(off) for off in range(600, 1000)}
    assert len(t.outcomes) >= 1000

    assert t.trim(600) == (150, 150)  # 600 // 4 pending and as many discarded below 600
    assert t.outcomes_base == 600 and len(t.outcomes) <= 1024 - 600
    assert {off: t.outcome(off) for off in range(600, 1000)} == expected
    assert all(t.outcome(off) == Outcome.EXPIRED for off in (0, 1, 2, 3, 599))
    assert sorted(t.pending) == list(range(600, 1000, 4)) and t.pending_per_topic == {"orders": 100}
    assert sorted(t.discarded) == list(range(603, 1000, 4))
    assert t.recovered == set(t.pending) | set(t.discarded)
    assert sorted(t.pop_due(10**9)) == list(range(600, 1000, 4))  # the dropped ones' wheel entries are skipped

    t.decide(5, Outcome.ROLLBACK)  # an op record naming a deleted half, replayed: nothing recorded
    t.add_pending(4, "orders", "g1", 100, 106)
    t.decide(7, Outcome.DISCARD)
    assert t.outcome(4) == t.outcome(5) == Outcome.EXPIRED and 4 not in t.pending and 7 not in t.discarded
    assert t.outcomes_base == 600 and t.trim(500) == (0, 0) and t.outcomes_base == 600  # never backwards
    t.decide(1500, Outcome.COMMIT)  # grows past the end as before, from the base
    assert t.outcome(1500) == Outcome.COMMIT and t.outcome(1499) == Outcome.PENDING


def test_a_trim_is_due_once_it_frees_enough_of_the_array():
    t = TransactionStateTable()
    t.TRIM_AT_LEAST = 100
    t.decide(999, Outcome.COMMIT)
    size = len(t.outcomes)
    assert size >= 1000
    assert not t.due_for_trim(99) and not t.due_for_trim(size // 4 - 1)  # under a quarter of the array
    assert t.due_for_trim(size // 4)
    t.trim(size // 4)
    assert not t.due_for_trim(size // 4 + 99) and t.due_for_trim(size // 4 + max(100, len(t.outcomes) // 4))
