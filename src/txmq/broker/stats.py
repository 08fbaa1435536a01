"""Per-topic and per-group message counters (RocketMQ's ``BrokerStatsManager``): plain ints bumped where the
broker already handles a send or a pull, read only when something asks (the Prometheus collector, admin
requests), so counting costs a dict look-up and two additions per request. Compiled (setup.py): every send counts,
and an interpreted ``put`` was a Python call per send."""

from __future__ import annotations

import time
from collections import deque

import cython

from txmq.broker.consumer_offset_manager import DEFAULT_MAX_ENTRIES

# RocketMQ 5.1's rocketmq_message_size buckets: 1 KiB, 4 KiB, 512 KiB, 1 MiB, 2 MiB, 4 MiB, then overflow.
SAMPLE_S = 10  # how often the broker samples totals for rates (putTps, statsAll's InTPS)

MESSAGE_SIZE_BUCKETS = (1024, 4096, 512 * 1024, 1024 * 1024, 2 * 1024 * 1024, 4 * 1024 * 1024)


@cython.cclass
class TopicPut:
    """Messages of one topic and message type accepted by sends: count, bytes, and sizes by bucket."""

    __slots__ = ("bytes", "messages", "size_buckets")

    def __init__(self) -> None:
        self.messages = 0
        self.bytes = 0
        self.size_buckets = [0] * (len(MESSAGE_SIZE_BUCKETS) + 1)


@cython.cclass
class GroupGet:
    """Messages of one topic a consumer group pulled: count and bytes."""

    __slots__ = ("bytes", "messages")

    def __init__(self) -> None:
        self.messages = 0
        self.bytes = 0


@cython.cclass
class BrokerStats:
    """Compiled, an extension type whose ``put`` is a C method (stats.pxd)."""

    def __init__(self, max_entries: int = DEFAULT_MAX_ENTRIES) -> None:
        self.puts: dict[tuple[str, str], TopicPut] = {}  # (topic, message type) -> counts
        self.gets: dict[tuple[str, str], GroupGet] = {}  # (topic, group) -> counts
        self.dlq: dict[tuple[str, str], int] = {}  # (original topic, group) -> messages sent to the DLQ
        # (group, topic, queue) -> the next offset the group's last pull was answered with (in-flight = it - committed)
        self.pulled: dict[tuple[str, str, int], int] = {}
        # (time, totals) every SAMPLE_S for a minute, every minute for an hour, every hour for a day
        self._samples: tuple[deque[tuple[float, dict[tuple[str, str], int]]], ...] = (
            deque(maxlen=60 // SAMPLE_S + 1), deque(maxlen=61), deque(maxlen=25))
        self._ticks = 0
        # consumerOffsetMaxEntries: a pull may name any group, so ``gets`` and ``pulled`` keep at most this many
        # entries each, as the offset table does (unbounded, a peer pulling under ever-new group names grew them,
        # and every sample's copy of the totals, without limit); a new entry beyond it is not counted. So does
        # ``dlq``: a dead letter's origin topic is its sender's to name.
        self.max_entries = max_entries

    def put(self, topic: str, message_type: str, size: int, count: int = 1) -> None:
        """``count`` messages of ``size`` bytes each were stored."""
        key = (topic, message_type)
        entry = self.puts.get(key)
        if entry is None:
            entry = self.puts[key] = TopicPut()
        entry.messages += count
        entry.bytes += size * count
        entry.size_buckets[_size_bucket(size)] += count

    def get(self, topic: str, group: str, messages: int, size: int) -> None:
        entry = self.gets.get((topic, group))
        if entry is None:
            if len(self.gets) >= self.max_entries:
                return
            entry = self.gets[(topic, group)] = GroupGet()
        entry.messages += messages
        entry.bytes += size

    def pulled_to(self, group: str, topic: str, queue_id: int, next_offset: int) -> None:
        """The offset ``group``'s last pull of the queue was answered with (``pulled``), within ``max_entries``."""
        key = (group, topic, queue_id)
        if key in self.pulled or len(self.pulled) < self.max_entries:
            self.pulled[key] = next_offset

    def to_dlq(self, topic: str, group: str) -> None:
        """A dead letter of ``group`` first sent to ``topic`` (its ``RETRY_TOPIC``, which a sender sets at will),
        within ``max_entries``."""
        key = (topic, group)
        if key in self.dlq or len(self.dlq) < self.max_entries:
            self.dlq[key] = self.dlq.get(key, 0) + 1

    # --- rates: totals sampled every SAMPLE_S, kept at three resolutions ----------------------------------

    def totals(self) -> dict[tuple[str, str], int]:
        """RocketMQ's stats names and keys (``TOPIC_PUT_NUMS`` by topic, ``GROUP_GET_NUMS`` by topic@group, ...)
        with their totals so far; ``BROKER_*`` under the key ""."""
        out: dict[tuple[str, str], int] = {("BROKER_PUT_NUMS", ""): 0, ("BROKER_GET_NUMS", ""): 0}
        for (topic, _kind), put in self.puts.items():
            for name, n in (("TOPIC_PUT_NUMS", put.messages), ("TOPIC_PUT_SIZE", put.bytes)):
                out[(name, topic)] = out.get((name, topic), 0) + n
            out[("BROKER_PUT_NUMS", "")] += put.messages
        for (topic, group), got in self.gets.items():
            out[("GROUP_GET_NUMS", f"{topic}@{group}")] = got.messages
            out[("GROUP_GET_SIZE", f"{topic}@{group}")] = got.bytes
            out[("BROKER_GET_NUMS", "")] += got.messages
        return out

    def sample(self) -> None:
        """Called every ``SAMPLE_S`` seconds: a snapshot of the totals for rates over a minute, an hour, a day, taken
        at a monotonic time (a rate is a count over a duration: a step of the wall clock must not bend it)."""
        snap = (time.monotonic(), self.totals())
        self._samples[0].append(snap)
        self._ticks += 1
        if self._ticks % (60 // SAMPLE_S) == 1 or len(self._samples[1]) == 0:
            self._samples[1].append(snap)
        if self._ticks % (3600 // SAMPLE_S) == 1 or len(self._samples[2]) == 0:
            self._samples[2].append(snap)

    def window(self, name: str, key: str, seconds: int) -> tuple[int, float]:
        """(count, per second) of one stat over about the last ``seconds`` (60, 3600 or 86400), from the
        oldest sample that is no older than that."""
        ring = self._samples[{60: 0, 3600: 1, 86400: 2}[seconds]]
        now = time.monotonic()
        current = self.totals().get((name, key), 0)
        start_t, start_n = now, current
        for t, snap in ring:
            if now - t <= seconds + SAMPLE_S:
                start_t, start_n = t, snap.get((name, key), 0)
                break
        count = current - start_n
        return count, count / max(now - start_t, SAMPLE_S)


def _size_bucket(size: int) -> int:
    """The first bucket of ``MESSAGE_SIZE_BUCKETS`` that holds ``size`` (the last one: overflow). Most messages
    are small: counted up from the smallest, compiled a C loop (stats.pxd), where ``bisect_left`` was a call."""
    i = 0
    for limit in MESSAGE_SIZE_BUCKETS:
        if size <= limit:
            return i
        i += 1
    return i
