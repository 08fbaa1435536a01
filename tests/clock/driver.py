"""A txmq client process for the clock campaign, run under a fake clock (faketime.py) and a time zone of the test's
choosing: what an application does on a given date. Reads commands from stdin, one per line:

    run <label>    send 3 plain, 2 transactional (UNKNOWN, then COMMIT when checked) and 1 delayed message
                   (level 1) to <topic>, consume until all 6 have come back, print one JSON line of what happened
    quit

The JSON: ``bodies`` (body -> times consumed), ``checks`` (transactional body -> seconds from its send to each
check), ``delayed`` (seconds from send to delivery), ``ids`` (the UNIQ_KEY of every message sent), ``born`` and
``wall`` (this process's born timestamps and wall clock, ms), ``error``. Never ``time.sleep``: under libfaketime
with the monotonic clock real it fails with EINVAL; waits use ``threading.Event``.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections import Counter, defaultdict
from typing import Any

from txmq import (
    LocalTransactionState,
    Message,
    MessageConst,
    MessageExt,
    Producer,
    PullConsumer,
    PullStatus,
    TransactionProducer,
)

WAIT_S = 30.0


class Checks:
    def __init__(self) -> None:
        self.at: dict[str, list[float]] = defaultdict(list)

    def execute_local_transaction(self, msg: Message, arg: Any) -> LocalTransactionState:
        return LocalTransactionState.UNKNOWN

    def check_local_transaction(self, msg: MessageExt) -> LocalTransactionState:
        self.at[msg.body.decode()].append(time.monotonic())
        return LocalTransactionState.COMMIT


def run(label: str, topic: str, tx: TransactionProducer, plain: Producer, pull: PullConsumer, checks: Checks,
        offsets: dict[Any, int]) -> dict[str, Any]:
    sent: dict[str, float] = {}
    ids: list[str] = []
    born: list[int] = []
    for i in range(3):
        msg = Message(topic, f"{label}-plain-{i}".encode())
        sent[f"{label}-plain-{i}"] = time.monotonic()
        plain.send(msg)
        ids.append(msg.properties[MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX])
    for i in range(2):
        msg = Message(topic, f"{label}-tx-{i}".encode())
        sent[f"{label}-tx-{i}"] = time.monotonic()
        result = tx.send_message_in_transaction(msg)
        assert result.local_transaction_state == LocalTransactionState.UNKNOWN, result
        ids.append(msg.properties[MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX])
    msg = Message(topic, f"{label}-delay-0".encode())
    msg.delay_time_level = 1
    sent[f"{label}-delay-0"] = time.monotonic()
    plain.send(msg)
    ids.append(msg.properties[MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX])
    bodies: Counter[str] = Counter()
    delayed: list[float] = []
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline and not all(bodies[b] for b in sent):
        for mq in pull.fetch_subscribe_message_queues(topic):
            got = pull.pull(mq, "*", offsets.get(mq, 0), 32)
            if got.status == PullStatus.FOUND:
                for m in got.msgs:
                    body = m.body.decode()
                    bodies[body] += 1
                    if body.startswith(f"{label}-"):
                        born.append(m.born_timestamp)
                    if body in sent and "-delay-" in body:
                        delayed.append(time.monotonic() - sent[body])
                offsets[mq] = got.next_begin_offset
        threading.Event().wait(0.1)
    return {"label": label, "bodies": dict(bodies), "ids": ids, "born": born, "wall": int(time.time() * 1000),
            "checks": {b: [round(t - sent[b], 3) for t in checks.at[b]] for b in sent if "-tx-" in b},
            "delayed": delayed}


def main() -> None:
    namesrv, topic, group = sys.argv[1:4]
    checks = Checks()
    tx = TransactionProducer(f"p_{group}_tx", checks, namesrv).start()
    plain = Producer(f"p_{group}", namesrv).start()
    pull = PullConsumer(f"c_{group}", namesrv).start()
    offsets: dict[Any, int] = {}
    print(json.dumps({"ready": True}), flush=True)
    try:
        for line in sys.stdin:
            command = line.split()
            if not command or command[0] == "quit":
                break
            try:
                out = run(command[1], topic, tx, plain, pull, checks, offsets)
            except Exception as exc:
                out = {"label": command[1], "error": f"{type(exc).__name__}: {exc}"}
            print(json.dumps(out), flush=True)
    finally:
        pull.shutdown()
        plain.shutdown()
        tx.shutdown()


if __name__ == "__main__":
    main()
