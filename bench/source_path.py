"""The Spark source's per-message costs outside Spark, in one process (CPU time, medians of --reps):

* client: a pull body of 256 messages as bench/spark.py stores them (200 B bodies, KEYS, UNIQ_KEY, WAIT) decoded by
  ``decode_messages`` + ``prepare_for_user`` (what ``PullConsumer.pull`` returns), against
  ``txmq.message_columns.add_pulled`` compiled and interpreted, and the Arrow record batch built from its columns;
* store: ``get_message`` of 256 at a time over one queue written in batches of 100 (the broker's pull handling
  without the network), on a real file store.

    .venv/bin/python bench/source_path.py [--messages 40000] [--reps 5]

The store half runs on any tree (``--store-only`` where ``txmq.message_columns`` does not exist yet).
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from txmq.message import MessageExt, decode_messages, encode_message

sys.path.insert(0, str(Path(__file__).parent.parent / "tests" / "store"))

from store_helpers import make_config, msg


def per_message(fn: Callable[[], object], n: int, reps: int) -> float:
    """Median CPU µs per message of ``fn`` (which handles ``n`` messages)."""
    times = []
    for _ in range(reps):
        t = time.process_time()
        fn()
        times.append((time.process_time() - t) / n * 1e6)
    return statistics.median(times)


def pull_body() -> bytes:
    return b"".join(encode_message(MessageExt(
        "bench-in", b"x" * 200, {"KEYS": str(i), "UNIQ_KEY": f"7F0000010A1B2C3D4E5F{i:012X}", "WAIT": "true"},
        queue_id=1, queue_offset=i, commit_log_offset=400 * i, born_timestamp=1_700_000_000_000,
        store_timestamp=1_700_000_000_001)) for i in range(256))


def client(reps: int) -> None:
    from txmq.client.consumer import prepare_for_user
    from txmq.message_columns import SourceRows
    from txmq.spark.reader import _record_batch

    body, pulls = pull_body(), 40
    n = 256 * pulls
    source = Path(__file__).parent.parent / "src" / "txmq" / "message_columns.py"
    spec = importlib.util.spec_from_file_location("message_columns_interpreted", source)
    assert spec is not None and spec.loader is not None
    interpreted = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(interpreted)
    import txmq.message_columns as compiled

    def decode() -> None:
        for _ in range(pulls):
            [prepare_for_user(m) for m in decode_messages(body)]

    def columns(module: object) -> Callable[[], object]:
        def run() -> object:
            rows = module.SourceRows()  # type: ignore[attr-defined]
            for _ in range(pulls):
                module.add_pulled(rows, body, 1 << 62, None, False)  # type: ignore[attr-defined]
            return rows
        return run

    rows = columns(compiled)()
    assert isinstance(rows, SourceRows) and len(rows) == n
    print(f"client, per message ({'compiled' if compiled.__file__.endswith('.so') else 'NOT COMPILED'}):")
    old = per_message(decode, n, reps)
    new = per_message(columns(compiled), n, reps)
    print(f"  decode_messages + prepare_for_user   {old:6.2f} µs")
    print(f"  add_pulled, compiled                 {new:6.2f} µs  ({old / new:.1f}x less)")
    print(f"  add_pulled, interpreted              {per_message(columns(interpreted), n, reps):6.2f} µs")
    print(f"  Arrow record batch from the columns  {per_message(lambda: _record_batch(rows), n, reps):6.2f} µs")


def store(messages: int, reps: int) -> None:
    from txmq.store import DefaultMessageStore

    async def main() -> None:
        with tempfile.TemporaryDirectory() as root:
            config = make_config(root, mapped_file_size_commit_log=1 << 28,
                                 mapped_file_size_consume_queue=(messages + 1) * 20)
            store = DefaultMessageStore(config)
            await store.start()
            for i in range(0, messages, 100):
                await store.put_messages([msg("T", b"x" * 200, KEYS=str(i + j)) for j in range(100)])
            while store.get_max_offset_in_queue("T", 0) < messages:  # the dispatcher is behind
                await asyncio.sleep(0.05)

            def pull_all() -> None:
                offset = 0
                while offset < messages:
                    r = store.get_message("T", 0, offset, 256)
                    assert r.messages, r.status
                    b"".join(r.messages)
                    offset = r.next_begin_offset

            pull_all()
            print(f"store get_message, 256 a pull: {per_message(pull_all, messages, reps):.2f} µs per message")
            await store.shutdown()

    asyncio.run(main())


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--messages", type=int, default=40_000)
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--store-only", action="store_true")
    args = p.parse_args()
    if not args.store_only:
        client(args.reps)
    store(args.messages, args.reps)
    return 0


if __name__ == "__main__":
    sys.exit(main())
