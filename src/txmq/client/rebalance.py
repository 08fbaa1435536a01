"""Queue allocation within a consumer group (RocketMQ's ``AllocateMessageQueueAveragely``). No IO."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

T = TypeVar("T")


def allocate_averagely(queues: Sequence[T], client_ids: Sequence[str], me: str) -> list[T]:
    """Split sorted ``queues`` into contiguous runs over sorted ``client_ids``; the first ``n % k`` clients take
    one more. Every client computes the same split, so each queue has exactly one owner."""
    cids = sorted(client_ids)
    if me not in cids or not queues:
        return []
    ordered = sorted(queues)  # type: ignore[type-var]
    index = cids.index(me)
    n, k = len(ordered), len(cids)
    mod = n % k
    size = n // k + (1 if index < mod else 0) if n > k else 1
    start = index * size if index < mod or n <= k else index * size + mod
    return [ordered[(start + i) % n] for i in range(min(size, n - start))] if start < n else []
