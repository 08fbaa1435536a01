"""What the transaction service counts for metrics (RocketMQ 5's ``TransactionMetrics``): outcomes, checks and
discards per producer group, and commit latencies (from the half's store time to its commit)."""

from __future__ import annotations

from bisect import bisect_left
from collections import deque

from txmq.broker.consumer_offset_manager import DEFAULT_MAX_ENTRIES
from txmq.message import MessageConst, MessageExt

# Buckets of the commit latency histogram (ms from the half's store time to its commit): a person's check-back
# timescale as well as a producer's own commit.
COMMIT_LATENCY_BUCKETS_MS = (5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10_000, 30_000, 60_000, 300_000)


class GroupTransactions:
    """Outcomes of one producer group's transactions, and its commit latencies by bucket."""

    __slots__ = ("checks", "commits", "discards", "latency_buckets", "latency_sum_ms", "rollbacks")

    def __init__(self) -> None:
        self.commits = 0
        self.rollbacks = 0
        self.checks = 0
        self.discards = 0
        self.latency_buckets = [0] * (len(COMMIT_LATENCY_BUCKETS_MS) + 1)
        self.latency_sum_ms = 0

    def committed(self, latencies_ms: list[int]) -> None:
        """Commits stored together, each with its latency: one call per put, not per commit."""
        self.commits += len(latencies_ms)
        self.latency_sum_ms += sum(latencies_ms)
        buckets = self.latency_buckets
        for latency_ms in latencies_ms:
            buckets[bisect_left(COMMIT_LATENCY_BUCKETS_MS, latency_ms)] += 1


class TransactionMetrics:
    def __init__(self, max_groups: int = DEFAULT_MAX_ENTRIES) -> None:
        self.groups: dict[str, GroupTransactions] = {}  # by producer group
        # A half names any producer group: past this many groups a new one's outcomes count in the totals only
        # (consumerOffsetMaxEntries, as for the pull counters), or made-up names would grow the table and the
        # metrics' label sets without limit.
        self.max_groups = max_groups
        self.commits = 0
        self.rollbacks = 0
        self.checks = 0
        self.discards = 0
        self.duplicates = 0
        self.conflicts = 0
        self.resumes = 0
        self.orphans = 0  # discards of transactions with no producer of their group left to check them
        self.commit_latency_ms: deque[int] = deque(maxlen=10_000)

    def group(self, name: str) -> GroupTransactions:
        entry = self.groups.get(name)
        if entry is None:
            entry = GroupTransactions()
            if len(self.groups) < self.max_groups:
                self.groups[name] = entry
        return entry

    def of(self, half: MessageExt) -> GroupTransactions:
        return self.group(half.properties.get(MessageConst.PRODUCER_GROUP, ""))

    def latency_percentiles(self) -> dict[str, float]:
        data = sorted(self.commit_latency_ms)
        if not data:
            return {}
        return {f"p{p}": float(data[min(len(data) - 1, int(len(data) * p / 100))]) for p in (50, 90, 99)}
