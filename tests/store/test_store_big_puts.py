"""Puts of more records than one ``pwritev`` takes (IOV_MAX, 1024 on Linux) are still one logical put."""

from __future__ import annotations

import os

import pytest

from tests.store.store_helpers import make_config, msg, run
from txmq.message import decode_message
from txmq.store import DefaultMessageStore, GetMessageStatus


@pytest.mark.parametrize("count", [1025, 2000, 5000])
def test_a_put_of_more_records_than_iov_max_is_stored_whole_and_in_order(root, count):
    assert count > os.sysconf("SC_IOV_MAX")
    # Segments large enough that the whole put lands in one: one write of `count` records.
    config = make_config(root, mapped_file_size_commit_log=4 << 20, mapped_file_size_consume_queue=20 * 8192)

    async def main():
        async with DefaultMessageStore(config) as store:
            result = await store.put_messages([msg("T", f"m-{i}".encode()) for i in range(count)])
            assert result.ok and result.append_result.msg_num == count
            return store.get_message("T", 0, 0, max_msg_nums=count, max_total_bytes=1 << 30)

    def check(got):
        assert got.status is GetMessageStatus.FOUND and got.queue_offsets == list(range(count))
        assert [decode_message(w)[0].body for w in got.messages] == [f"m-{i}".encode() for i in range(count)]

    check(run(main))

    async def reopened():
        async with DefaultMessageStore(config) as store:
            return store.get_message("T", 0, 0, max_msg_nums=count, max_total_bytes=1 << 30)

    check(run(reopened))
