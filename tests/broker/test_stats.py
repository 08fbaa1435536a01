"""BrokerStats' per-group pull counters keep at most ``max_entries`` entries (consumerOffsetMaxEntries): a pull may
name any group. tests/e2e/test_offsets_bound.py holds a broker to it."""

from __future__ import annotations

from txmq.broker.stats import BrokerStats


def test_pull_counters_keep_at_most_max_entries_and_kept_ones_still_move():
    stats = BrokerStats(max_entries=3)
    for i in range(5):
        stats.get("t", f"g{i}", 1, 10)
        stats.pulled_to(f"g{i}", "t", 0, 7)
    stats.get("t", "g0", 2, 5)  # an entry already kept still counts
    stats.pulled_to("g0", "t", 0, 9)  # and moves
    assert {k: (v.messages, v.bytes) for k, v in stats.gets.items()} == {
        ("t", "g0"): (3, 15), ("t", "g1"): (1, 10), ("t", "g2"): (1, 10)}
    assert stats.pulled == {("g0", "t", 0): 9, ("g1", "t", 0): 7, ("g2", "t", 0): 7}
    assert ("GROUP_GET_NUMS", "t@g3") not in stats.totals()
