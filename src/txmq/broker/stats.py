"""Per-topic and per-group message counters (RocketMQ's ``BrokerStatsManager``): plain ints bumped where the
broker already handles a send or a pull, read only when something asks (the Prometheus collector, admin
requests), so counting costs a dict look-up and two additions per request."""

from __future__ import annotations

from bisect import bisect_left

# RocketMQ 5.1's rocketmq_message_size buckets: 1 KiB, 4 KiB, 512 KiB, 1 MiB, 2 MiB, 4 MiB, then overflow.
MESSAGE_SIZE_BUCKETS = (1024, 4096, 512 * 1024, 1024 * 1024, 2 * 1024 * 1024, 4 * 1024 * 1024)


class TopicPut:
    """Messages of one topic and message type accepted by sends: count, bytes, and sizes by bucket."""

    __slots__ = ("bytes", "messages", "size_buckets")

    def __init__(self) -> None:
        self.messages = 0
        self.bytes = 0
        self.size_buckets = [0] * (len(MESSAGE_SIZE_BUCKETS) + 1)


class GroupGet:
    """Messages of one topic a consumer group pulled: count and bytes."""

    __slots__ = ("bytes", "messages")

    def __init__(self) -> None:
        self.messages = 0
        self.bytes = 0


class BrokerStats:
    def __init__(self) -> None:
        self.puts: dict[tuple[str, str], TopicPut] = {}  # (topic, message type) -> counts
        self.gets: dict[tuple[str, str], GroupGet] = {}  # (topic, group) -> counts
        self.dlq: dict[tuple[str, str], int] = {}  # (original topic, group) -> messages sent to the DLQ
        # (group, topic, queue) -> the next offset the group's last pull was answered with (in-flight = it - committed)
        self.pulled: dict[tuple[str, str, int], int] = {}

    def put(self, topic: str, message_type: str, size: int, count: int = 1) -> None:
        """``count`` messages of ``size`` bytes each were stored."""
        entry = self.puts.get((topic, message_type))
        if entry is None:
            entry = self.puts[(topic, message_type)] = TopicPut()
        entry.messages += count
        entry.bytes += size * count
        entry.size_buckets[bisect_left(MESSAGE_SIZE_BUCKETS, size)] += count

    def get(self, topic: str, group: str, messages: int, size: int) -> None:
        entry = self.gets.get((topic, group))
        if entry is None:
            entry = self.gets[(topic, group)] = GroupGet()
        entry.messages += messages
        entry.bytes += size

    def to_dlq(self, topic: str, group: str) -> None:
        self.dlq[(topic, group)] = self.dlq.get((topic, group), 0) + 1
