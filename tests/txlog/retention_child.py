"""A producer process's ``TransactionLog`` on its own, for tests/txlog/test_txlog_clock.py: run under libfaketime,
it purges every 0.2 s with a retention of one hour and answers ``check ID`` lines on stdin with the check's state
(what the broker's check-back would get). No ``time.sleep``: it fails under libfaketime (tests/clock/faketime.py).

    python retention_child.py DB_URL
"""

from __future__ import annotations

import sys
from datetime import timedelta

from tests.txlog.databases import create_engine
from txmq import MessageConst, MessageExt, TransactionLog

RETENTION = timedelta(hours=1)


def main(url: str) -> None:
    engine = create_engine(url)
    with TransactionLog(engine, retention=RETENTION, purge_interval_s=0.2) as log:
        log.check_local_transaction(MessageExt("orders", b"", {MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX: "warm"}))
        print("READY", flush=True)
        for line in sys.stdin:
            _, tx_id = line.split()
            msg = MessageExt("orders", b"", {MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX: tx_id})
            print(log.check_local_transaction(msg).name, flush=True)
    engine.dispose()


if __name__ == "__main__":
    main(sys.argv[1])
