"""Store settings, named after RocketMQ's ``MessageStoreConfig`` fields."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


class FlushDiskType(Enum):
    """When an append is acknowledged: at once (``ASYNC_FLUSH``) or after the fsync that covers it."""

    ASYNC_FLUSH = "ASYNC_FLUSH"
    SYNC_FLUSH = "SYNC_FLUSH"


@dataclass
class StoreConfig:
    """Where the store lives and how it sizes, flushes and ages its files.

    Defaults are RocketMQ's, except the index sizes, which are smaller because txmq reads index files with
    ``pread`` instead of mapping them (see docs/storage.md).
    """

    store_path_root_dir: str
    mapped_file_size_commit_log: int = 1 << 30  # segment size; fixed for the life of a store
    mapped_file_size_consume_queue: int = 300_000 * 20  # 300 000 entries per consume-queue file
    flush_disk_type: FlushDiskType = FlushDiskType.ASYNC_FLUSH
    flush_interval_commit_log_ms: int = 500  # ASYNC_FLUSH period
    sync_flush_timeout_ms: int = 5000  # SYNC_FLUSH: answer FLUSH_DISK_TIMEOUT after this
    checkpoint_interval_ms: int = 3000  # bounds how much log recovery reads after a crash
    file_reserved_time_hours: float = 72  # retention (fileReservedTime), by the store's elapsed-time account
    delete_when: str = "04"  # the local hours retention runs at, ";"-separated (deleteWhen), unless the disk is full
    clean_resource_interval_ms: int = 10_000  # how often retention runs after start()
    max_message_size: int = 4 * 1024 * 1024  # encoded message, in bytes
    store_host: tuple[str, int] = ("127.0.0.1", 10911)  # STOREHOSTADDRESS and offset message ids
    max_hash_slot_num: int = 500_000  # slots per index file
    max_index_num: int = 2_000_000  # entries per index file
    message_index_enable: bool = True  # build the key / UNIQ_KEY index
    # Disk usage of the store's partition, in percent (RocketMQ's keys and defaults): above the warning level puts
    # are refused (SERVICE_NOT_AVAILABLE, "the disk is full") until usage is back under the clean-forcibly level;
    # above the max-used level retention runs at once instead of on its next tick.
    disk_space_warning_level_ratio: float = 90
    disk_space_clean_forcibly_ratio: float = 85
    disk_max_used_space_ratio: float = 75
    access_message_in_memory_max_ratio: int = 40  # % of RAM: a read further behind the log's end is "cold"

    def __post_init__(self) -> None:
        if self.mapped_file_size_consume_queue % 20:
            raise ValueError("mapped_file_size_consume_queue must be a multiple of 20 (the entry size)")
        if self.mapped_file_size_commit_log < 4096:
            raise ValueError("mapped_file_size_commit_log must be at least 4096 bytes")
        delete_hours(self.delete_when)


def delete_hours(text: str) -> frozenset[int]:
    """``deleteWhen`` as hours of the day: "04", or several as "04;16" (RocketMQ's form); ValueError otherwise."""
    try:
        hours = frozenset(int(h) for h in text.split(";") if h.strip())
    except ValueError:
        hours = frozenset([-1])
    if not hours or not all(0 <= h <= 23 for h in hours):
        raise ValueError(f"deleteWhen {text!r}: hours of the day 00-23, separated by ';' (e.g. 04 or 04;16)")
    return hours
