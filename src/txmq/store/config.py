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
    mapped_file_size_commit_log: int = 1 << 30
    mapped_file_size_consume_queue: int = 300_000 * 20
    flush_disk_type: FlushDiskType = FlushDiskType.ASYNC_FLUSH
    flush_interval_commit_log_ms: int = 500
    flush_interval_consume_queue_ms: int = 1000
    sync_flush_timeout_ms: int = 5000
    checkpoint_interval_ms: int = 3000
    file_reserved_time_hours: float = 72
    clean_resource_interval_ms: int = 10_000
    max_message_size: int = 4 * 1024 * 1024
    store_host: tuple[str, int] = ("127.0.0.1", 10911)
    max_hash_slot_num: int = 500_000
    max_index_num: int = 2_000_000
    message_index_enable: bool = True

    def __post_init__(self) -> None:
        if self.mapped_file_size_consume_queue % 20:
            raise ValueError("mapped_file_size_consume_queue must be a multiple of 20 (the entry size)")
        if self.mapped_file_size_commit_log < 4096:
            raise ValueError("mapped_file_size_commit_log must be at least 4096 bytes")
