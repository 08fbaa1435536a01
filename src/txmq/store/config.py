"""Store settings: RocketMQ's ``MessageStoreConfig`` keys, each declared once (``txmq.conf.key``). The broker's
config embeds this one, so broker.conf, the flags and ``updateBrokerConfig`` set these fields, and the broker hands
the same object to its store."""

from __future__ import annotations

import resource
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

from txmq.conf import check_declared, key


class FlushDiskType(Enum):
    """When an append is acknowledged: at once (``ASYNC_FLUSH``) or after the fsync that covers it."""

    ASYNC_FLUSH = "ASYNC_FLUSH"
    SYNC_FLUSH = "SYNC_FLUSH"


_HOURS = "is not hours of the day 00-23, separated by ';' (e.g. 04 or 04;16)"


def _hours(text: str) -> frozenset[int] | None:
    try:
        hours = frozenset(int(h) for h in text.split(";") if h.strip())
    except ValueError:
        return None
    return hours if hours and all(0 <= h <= 23 for h in hours) else None


def delete_hours(text: str) -> frozenset[int]:
    """``deleteWhen`` as hours of the day: "04", or several as "04;16" (RocketMQ's form); ValueError otherwise."""
    hours = _hours(text)
    if hours is None:
        raise ValueError(f"config deleteWhen: {text!r} {_HOURS}")
    return hours


def _delete_when(text: str) -> str:
    if _hours(text) is None:
        raise ValueError(_HOURS)
    return text


def _whole_entries(size: int) -> int:
    if size % 20:
        raise ValueError("is not a multiple of 20 (the size of a consume-queue entry)")
    return size


def _a_page_or_more(size: int) -> int:
    if size < 4096:
        raise ValueError("is under 4096 bytes")
    return size


def _percent(ratio: float) -> float:
    """A disk ratio in percent, whether given as 90 or, as RocketMQ 4.x's system properties give it, 0.90."""
    return ratio * 100 if ratio <= 1 else ratio


@dataclass
class StoreConfig:
    """Where the store lives and how it sizes, flushes and ages its files.

    Defaults are RocketMQ's, except the index sizes, which are smaller because txmq reads index files with
    ``pread`` instead of mapping them (see docs/storage.md).
    """

    store_path_root_dir: str = key(factory=lambda: str(Path.home() / "store"), shown="`~/store`",
                                   doc="the store's directory")
    mapped_file_size_commit_log: int = key(1 << 30, unit="bytes", range=(64 * 1024, None), check=_a_page_or_more,
                                           doc="one commit-log segment; fixed for the life of a store")
    mapped_file_size_consume_queue: int = key(300_000 * 20, unit="bytes", range=(20, None), check=_whole_entries,
                                              doc="one consume-queue file (300 000 entries); a multiple of 20, "
                                                  "the size of an entry")
    flush_disk_type: FlushDiskType = key(FlushDiskType.ASYNC_FLUSH,
                                         doc="`SYNC_FLUSH`: a send is answered once its record is on disk")
    flush_interval_commit_log_ms: int = key(500, name="flushIntervalCommitLog", unit="ms", range=(1, None),
                                            doc="between flushes in `ASYNC_FLUSH`")
    sync_flush_timeout_ms: int = key(5000, name="syncFlushTimeout", unit="ms", range=(1, None),
                                     doc="a `SYNC_FLUSH` send waits this long for its flush, then answers "
                                         "`FLUSH_DISK_TIMEOUT` (a `SYNC_MASTER` send for its slaves: "
                                         "`FLUSH_SLAVE_TIMEOUT`)")
    file_reserved_time_hours: float = key(72, name="fileReservedTime", unit="hours", range=(0, None),
                                          doc="a full commit-log segment is kept this long after its newest record "
                                              "was written, on the broker's elapsed-time account (a step of the "
                                              "wall clock does not age it: "
                                              "[the clock rule](reliability.md#the-clock-rule))")
    delete_when: str = key("04", check=_delete_when,
                           doc="the local hours at which retention deletes (`04;16`: several), at any hour when "
                               "the disk is over `diskMaxUsedSpaceRatio`")
    clean_resource_interval_ms: int = key(10_000, name="cleanResourceInterval", unit="ms", range=(1, None),
                                          doc="between retention's looks at the hour and the disk")
    max_message_size: int = key(4 * 1024 * 1024, unit="bytes", range=(1, None), runtime=True,
                                doc="the largest message body (a batch: all of its bodies)")
    max_hash_slot_num: int = key(500_000, range=(1, None),
                                 doc="hash slots of one index file (RocketMQ: 5 000 000)")
    max_index_num: int = key(2_000_000, range=(1, None), doc="entries of one index file (RocketMQ: 20 000 000)")
    # Disk usage of the store's partition (RocketMQ's keys and defaults): above the warning level puts are refused
    # until usage is back under the clean-forcibly level; above the max-used level retention runs at once.
    disk_space_warning_level_ratio: float = key(90, unit="%", range=(0, 100), check=_percent,
                                                doc="of the store's disk (or a fraction up to 1) above which puts "
                                                    "are refused (`SERVICE_NOT_AVAILABLE`, \"the disk is full\")")
    disk_space_clean_forcibly_ratio: float = key(85, unit="%", range=(0, 100), check=_percent,
                                                 doc="puts refused for a full disk are taken again once usage is "
                                                     "under this")
    disk_max_used_space_ratio: float = key(75, unit="%", range=(0, 100), check=_percent,
                                           doc="above this, retention runs at once instead of at `deleteWhen`")
    access_message_in_memory_max_ratio: int = key(40, unit="% of RAM", range=(0, 100),
                                                  doc="a read further behind the log's end is cold: the consumer "
                                                      "is sent to a slave (with `slaveReadEnable`)")
    flush_consume_queue_least_pages: int = key(2, unit="pages of 4 KiB", range=(0, None),
                                               doc="a checkpoint fsyncs a consume queue only once this much of it "
                                                   "was written since its last fsync (0: every written queue, each "
                                                   "checkpoint then a thorough one); the "
                                                   "recovery point stays at the oldest entry left unflushed, and "
                                                   "recovery rebuilds what follows it from the commit log")
    flush_consume_queue_thorough_interval_ms: int = key(60_000, name="flushConsumeQueueThoroughInterval",
                                                        unit="ms", range=(0, None),
                                                        doc="at least this often a checkpoint makes every written "
                                                            "consume queue durable, however little was written (the "
                                                            "entries still in memory go to one tails journal, "
                                                            "`cqtails/`), so the tail recovery rebuilds after a crash "
                                                            "covers at most about this much time")
    consume_queue_write_behind_bytes: int = key(16 << 20, unit="bytes", range=(0, None),
                                                doc="consume-queue entries kept in memory at most, over all queues, "
                                                    "before they are written to their files (each queue writes its "
                                                    "own once they fill a page, and at a checkpoint that flushes "
                                                    "it, but the periodic thorough one, which copies them into its "
                                                    "tails journal and leaves them here); past it the oldest are "
                                                    "written until half is left (0: every entry written at once)")
    max_open_consume_queue_files: int = key(0, range=(0, None),
                                            doc="consume-queue files kept open at most, the least recently used "
                                                "closed first and opened again when used (0: half the process's "
                                                "open-file limit)")
    # Timer messages (RocketMQ 5's RIP-43 keys that apply to txmq's timer index: docs/timers.md)
    timer_wheel_enable: bool = key(True, doc="timer messages (`TIMER_DELIVER_MS`, `TIMER_DELAY_SEC`, "
                                             "`TIMER_DELAY_MS`, gRPC `delivery_timestamp`) are taken; off: refused")
    timer_precision_ms: int = key(1000, unit="ms", range=(10, 60_000),
                                  doc="the tick of timer deliveries: a timer message is delivered at the first "
                                      "tick at or after its time, never before")
    timer_max_delay_sec: int = key(40 * 24 * 3600, unit="s", range=(1, 366 * 24 * 3600), runtime=True,
                                   doc="the furthest delivery time taken (RocketMQ: 3 days); beyond it a send is "
                                       "refused `MESSAGE_ILLEGAL`")
    timer_roll_window_slot: int = key(2 * 24 * 3600, range=(1, None),
                                      doc="ticks of `timerPrecisionMs` a timer waits in one timer record: one due "
                                          "later is stored again then (rolled), so that its record is never older "
                                          "than this; keep it well under `fileReservedTime`")
    timer_stop_enqueue: bool = key(False, runtime=True,
                                   doc="timer messages are stored but not added to the timer index until it is "
                                       "turned off again (they are then added and delivered, late)")
    timer_stop_dequeue: bool = key(False, runtime=True,
                                   doc="due timer messages are held, not delivered, until it is turned off again")
    # set by the broker, not read from broker.conf
    store_host: tuple[str, int] = ("127.0.0.1", 10911)  # STOREHOSTADDRESS and offset message ids
    checkpoint_interval_ms: int = 3000  # bounds how much log recovery reads after a crash
    message_index_enable: bool = True  # build the key / UNIQ_KEY index

    def __post_init__(self) -> None:
        check_declared(self)

    def open_consume_queue_files_limit(self) -> int:
        """``maxOpenConsumeQueueFiles``, or half the open-file limit in force now: the other half stays for
        connections, the commit log and index files."""
        if self.max_open_consume_queue_files:
            return self.max_open_consume_queue_files
        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
        return max(64, (soft if soft != resource.RLIM_INFINITY else 1 << 20) // 2)
