"""Helpers for the store suite and crash_writer.py: small segments so files roll, real files, real fsync."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable, Collection, Iterator
from contextlib import contextmanager
from typing import Any

from txmq.message import HEAD_SIZE, MessageExt, decode_message
from txmq.store import DefaultMessageStore, StoreConfig
from txmq.store.clock import StoreClock
from txmq.store.ha import HAConfig
from txmq.store.mapped_file import offset_to_name
from txmq.store.record import TRAILER_SIZE, seal
from txmq.store.recovery import RecoveryReport

SEGMENT = 64 * 1024


def make_config(root: str | os.PathLike[str], **overrides: Any) -> StoreConfig:
    kw: dict[str, Any] = dict(
        store_path_root_dir=str(root),
        mapped_file_size_commit_log=SEGMENT,
        mapped_file_size_consume_queue=20 * 64,
        max_hash_slot_num=64,
        max_index_num=128,
        flush_interval_commit_log_ms=20,
        checkpoint_interval_ms=60_000,  # tests checkpoint explicitly
        clean_resource_interval_ms=60_000,
    )
    kw.update(overrides)
    return StoreConfig(**kw)


def msg(topic: str = "T", body: bytes = b"x" * 100, queue_id: int = 0, **props: str) -> MessageExt:
    return MessageExt(topic, body, props, queue_id=queue_id, born_timestamp=1, born_host=("10.0.0.2", 4321))


def run(fn: Callable[[], Awaitable[Any]]) -> Any:
    return asyncio.run(fn())  # type: ignore[arg-type]


def ha_config(broker_id: int, port: int) -> HAConfig:
    """Broker ``broker_id`` of group broker-a replicating through 127.0.0.1:``port``, with short intervals."""
    return HAConfig("C", "broker-a", broker_id, listen_port=port, master_address=f"127.0.0.1:{port}",
                    send_heartbeat_interval_ms=200, housekeeping_interval_ms=2000)


def stepping_back(clock: StoreClock) -> Callable[[int], None]:
    """A master's clock that the returned function moves before its put number ``n``: 10 ms of elapsed time and of
    wall clock, the wall clock stepped back every seventh put (by 50 ms, or by a second every third time)."""
    mono, wall = clock.monotonic_ns, clock.wall_ns
    shift = {"mono": 0, "wall": 0}  # (not a lambda over the last one: thousands of puts)
    clock.monotonic_ns = lambda: mono() + shift["mono"]  # type: ignore[method-assign]
    clock.wall_ns = lambda: wall() + shift["wall"]  # type: ignore[method-assign]

    def before_put(n: int) -> None:
        shift["mono"] += 10_000_000
        shift["wall"] += 10_000_000 - (0 if n % 7 else 50_000_000 if n % 3 else 1_000_000_000)

    return before_put


def flip_byte(path: str | os.PathLike[str], pos: int) -> None:
    with open(path, "r+b") as f:
        f.seek(pos)
        b = f.read(1)
        f.seek(pos)
        f.write(bytes([b[0] ^ 0xFF]))


def spoil_record(rec: bytearray, field: str) -> None:
    """Make a stored record one only a broken or hostile master sends, its trailer CRC right: its topic
    (``"topic"``) or its last property (``"properties"``) not UTF-8, or its properties' length one short of the
    record (``"layout"``: they decode, cut short)."""
    topic_at = HEAD_SIZE + int.from_bytes(rec[HEAD_SIZE - 4 : HEAD_SIZE], "big")
    props_at = topic_at + 1 + rec[topic_at]
    props_len = int.from_bytes(rec[props_at : props_at + 2], "big")
    assert rec[topic_at] > 0 and props_at + 2 + props_len == len(rec) - TRAILER_SIZE
    if field == "topic":
        rec[topic_at + 1] = 0xFF
    elif field == "properties":
        assert props_len > 0
        rec[-TRAILER_SIZE - 1] = 0xFF
    else:
        assert field == "layout" and props_len > 0, field
        rec[props_at : props_at + 2] = (props_len - 1).to_bytes(2, "big")
    seal(rec)


def segment_path(config: StoreConfig, offset: int) -> str:
    start = offset - offset % config.mapped_file_size_commit_log
    return os.path.join(config.store_path_root_dir, "commitlog", offset_to_name(start))



@contextmanager
def reopened_store(config: StoreConfig) -> Iterator[DefaultMessageStore]:
    """The store opened (recovered) outside a loop, for a test to read, then closed as a crash would close it."""
    store = DefaultMessageStore(config)
    try:
        yield store
    finally:
        store.close_without_shutdown()


def reopened_bodies(config: StoreConfig) -> dict[int, list[bytes]]:
    """Reopen the store and read every message of topic T, by queue (queues holding none left out), checking that
    no queue has a hole."""

    async def main() -> dict[int, list[bytes]]:
        async with DefaultMessageStore(config) as store:
            out = {}
            for qid in store.queue_ids("T"):
                got = store.get_message("T", qid, 0, 10_000, 1 << 30)
                assert got.queue_offsets == list(range(store.get_max_offset_in_queue("T", qid))), "a hole"
                out[qid] = [decode_message(w)[0].body for w in got.messages]
            return {q: b for q, b in out.items() if b}

    return run(main)


def assert_killed_cleanly(report: RecoveryReport, acked: Collection[int]) -> None:
    """Recovery after a SIGKILL: not a clean stop, and no invalid record but, at most, the one the kill cut short at
    the log's end, never acknowledged (the kernel ends a write short at a page boundary once a fatal signal is
    pending, so the last record can reach the page cache in part)."""
    assert not report.clean_shutdown
    assert report.corrupt_offsets in ([], [report.end_offset]), report.events
    assert not report.corrupt_offsets or report.end_offset not in acked, report.events
