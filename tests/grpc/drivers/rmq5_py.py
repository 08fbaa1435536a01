"""Driver for the official RocketMQ 5 Python client (``rocketmq-python-client==5.1.2``), run in its own venv
(``.venv-rmq5``: its top-level ``rocketmq`` package clashes with the C++ client's) by tests/grpc.

    python rmq5_py.py '{"cmd": "send", "endpoint": "127.0.0.1:8081", "topic": "t", ...}'

Prints one JSON object per line: ``{"event": ...}``; the last line is ``{"event": "done", ...}``.
"""

from __future__ import annotations

import json
import sys
import threading
import time

from rocketmq import (
    ClientConfiguration,
    ConsumeResult,
    Credentials,
    FilterExpression,
    Message,
    MessageListener,
    Producer,
    PushConsumer,
    SimpleConsumer,
    TransactionChecker,
    TransactionResolution,
)
from rocketmq.grpc_protocol import FilterType


def out(event: str, **kw) -> None:
    print(json.dumps({"event": event, **kw}), flush=True)


def view(m) -> dict:
    return {"id": m.message_id, "topic": m.topic, "body": m.body.decode(errors="replace"), "tag": m.tag,
            "keys": list(m.keys or []), "props": dict(m.properties or {}), "attempt": m.delivery_attempt,
            "group": m.message_group, "delivery": m.delivery_timestamp, "t": time.time()}


def config(a: dict) -> ClientConfiguration:
    """``ak``/``sk``: the session credentials (RocketMQ ACL)."""
    return ClientConfiguration(a["endpoint"], Credentials(a.get("ak", ""), a.get("sk", "")),
                               request_timeout=a.get("timeout", 5))


def message(a: dict, i: int) -> Message:
    m = Message()
    m.topic = a["topic"]
    m.body = f"{a.get('body', 'py')}-{i}".encode()
    if a.get("tag"):
        m.tag = a["tag"]
    if a.get("keys"):
        m.keys = a["keys"][0]
    if a.get("message_group"):
        m.message_group = a["message_group"]
    if a.get("delay_ms"):
        m.delivery_timestamp = int(time.time() * 1000) + a["delay_ms"]
    if a.get("deliver_at_ms"):
        m.delivery_timestamp = a["deliver_at_ms"]
    for k, v in (a.get("props") or {}).items():
        m.add_property(k, v)
    return m


def cmd_send(a: dict) -> None:
    """``keys_prefix``: message i has the key prefix + i. ``failover``: a broker may die meanwhile: a failed
    send is reported (``error``) and the loop goes on; ``interval``: seconds between sends."""
    # tls: trusts the CA in $GRPC_DEFAULT_SSL_ROOTS_FILE_PATH (the client passes no roots of its own)
    p = Producer(config(a), (a["topic"],), tls_enable=a.get("tls", False))
    p.startup()
    try:
        for i in range(a.get("count", 1)):
            m = message(a, i)
            if a.get("keys_prefix"):
                m.keys = f"{a['keys_prefix']}{i}"
            try:
                r = p.send(m)
            except Exception as exc:
                if not a.get("failover"):
                    raise
                out("error", i=i, error=f"{type(exc).__name__}: {exc}"[:300], t=time.time())
                time.sleep(a.get("interval", 0) or 0.05)
                continue
            out("sent", id=r.message_id, i=i, t=time.time(), recall_handle=r.recall_handle)
            time.sleep(a.get("interval", 0))
    finally:
        p.shutdown()


def cmd_recall(a: dict) -> None:
    """Recall ``handle`` of ``topic``: prints ``recalled`` with the message id, or ``refused`` with the error."""
    p = Producer(config(a), (a["topic"],))
    p.startup()
    try:
        try:
            out("recalled", id=p.recall_message(a["topic"], a["handle"]))
        except Exception as exc:
            out("refused", error=f"{type(exc).__name__}: {exc}"[:300])
    finally:
        p.shutdown()


def cmd_send_async(a: dict) -> None:
    """``count`` messages of ``size`` bytes with ``send_async``, at most ``window`` unanswered (bench/grpc.py
    --official): started, it prints ``ready`` and waits for a line on stdin; then prints the seconds from the
    first send to the last receipt."""
    p = Producer(config(a), (a["topic"],))
    p.startup()
    try:
        count, body = a["count"], b"x" * a.get("size", 256)
        slots, finished, failures = threading.Semaphore(a.get("window", 1000)), threading.Event(), []
        left = [count]
        lock = threading.Lock()

        def receipt(fut) -> None:
            if fut.exception() is not None:
                failures.append(repr(fut.exception()))
            slots.release()
            with lock:
                left[0] -= 1
                if not left[0]:
                    finished.set()

        p.send(message(a, -1))  # routes and the session before the clock starts
        out("ready")
        sys.stdin.readline()  # the bench's go: its meter of the broker starts now
        started = time.perf_counter()
        for _ in range(count):
            slots.acquire()
            m = Message()
            m.topic, m.body = a["topic"], body
            p.send_async(m).add_done_callback(receipt)
        finished.wait()
        out("sent", seconds=time.perf_counter() - started, failures=len(failures), first_failure=failures[:1])
    finally:
        p.shutdown()


class Checker(TransactionChecker):
    def __init__(self, answer: str) -> None:
        self.answer = answer
        self.checked = threading.Event()

    def check(self, message: Message) -> TransactionResolution:
        out("checked", id=message.message_id, body=message.body.decode(), t=time.time())
        self.checked.set()
        return TransactionResolution.COMMIT if self.answer == "commit" else TransactionResolution.ROLLBACK


def cmd_tx(a: dict) -> None:
    checker = Checker(a.get("check_answer", "commit"))
    p = Producer(config(a), (a["topic"],), checker)
    p.startup()
    try:
        tx = p.begin_transaction()
        r = p.send(message(a, 0), tx)
        out("sent", id=r.message_id, t=time.time(), recall_handle=r.recall_handle)
        mode = a["mode"]
        if mode == "commit":
            tx.commit()
        elif mode == "rollback":
            tx.rollback()
        else:  # no decision: the broker must ask the checker
            if not checker.checked.wait(a.get("wait_check", 30)):
                out("no-check")
            time.sleep(1.0)  # let the check's EndTransaction reach the broker
        out("decided", mode=mode)
    finally:
        p.shutdown()


def subscription(a: dict) -> FilterExpression:
    """``filter``: a tag expression, or with ``sql`` a SQL92 one."""
    return FilterExpression(a.get("filter", "*"), FilterType.SQL if a.get("sql") else FilterType.TAG)


def cmd_simple(a: dict) -> None:
    """Receive until ``expect`` messages or ``wait`` seconds; ``ack``: ack them. ``lifecycle``: the invisible
    duration story (receive, change invisible duration, no ack, redelivery, ack). ``pace``: seconds spent on each
    message (a slow consumer, so that a backlog builds up). ``failover``: a broker may die
    meanwhile: a failed receive or ack is reported and the loop goes on, and ``expect`` counts distinct ids."""
    sub = {a["topic"]: subscription(a)}
    c = SimpleConsumer(config(a), a["group"], sub, await_duration=a.get("await", 2))
    c.startup()
    try:
        if a.get("lifecycle"):
            lifecycle(c, a)
            return
        seen: set[str] = set()
        got = 0
        end = time.time() + a.get("wait", 20)
        while (len(seen) if a.get("failover") else got) < a.get("expect", 1) and time.time() < end:
            try:
                for m in c.receive(a.get("batch", 16), a.get("invisible", 10)) or []:
                    got += 1
                    seen.add(m.message_id)
                    out("received", **view(m))
                    time.sleep(a.get("pace", 0))
                    if a.get("ack", True):
                        c.ack(m)
            except Exception as exc:
                if not a.get("failover"):
                    raise
                out("error", error=f"{type(exc).__name__}: {exc}"[:300], t=time.time())
                time.sleep(0.2)
    finally:
        c.shutdown()


def lifecycle(c: SimpleConsumer, a: dict) -> None:
    def first() -> Message | None:
        end = time.time() + a.get("wait", 20)
        while time.time() < end:
            got = c.receive(1, a.get("invisible", 2)) or []
            if got:
                return got[0]
        return None

    m = first()
    if m is None:
        out("timeout")
        return
    out("received", **view(m))
    asked = time.monotonic()  # before the request: the broker counts the new duration from a later moment
    c.change_invisible_duration(m, a.get("extend", 4))
    out("extended", t=time.time())
    again = first()  # not acked: comes back after the changed invisible duration
    if again is None:
        out("timeout")
        return
    out("redelivered", **view(again), since_asked=time.monotonic() - asked)
    c.ack(again)
    out("acked", t=time.time())
    end = time.time() + a.get("quiet", 4)
    while time.time() < end:
        for extra in c.receive(1, 2) or []:
            out("extra", **view(extra))


def cmd_push(a: dict) -> None:
    seen: dict[str, int] = {}
    done = threading.Event()
    lock = threading.Lock()

    class Listener(MessageListener):
        def consume(self, m) -> ConsumeResult:
            time.sleep(a.get("pace", 0))
            with lock:
                n = seen.get(m.message_id, 0) + 1
                seen[m.message_id] = n
                out("received", **view(m))
                if a.get("fail_first") and n == 1:
                    return ConsumeResult.FAILURE
                if sum(1 for v in seen.values() if v >= (2 if a.get("fail_first") else 1)) >= a.get("expect", 1):
                    done.set()
            return ConsumeResult.SUCCESS

    sub = {a["topic"]: subscription(a)}
    c = PushConsumer(config(a), a["group"], Listener(), sub, consumption_thread_count=2)
    c.startup()
    try:
        if not done.wait(a.get("wait", 30)):
            out("timeout")
        time.sleep(0.5)  # let the last ack go out
    finally:
        c.shutdown()


def main() -> None:
    a = json.loads(sys.argv[1])
    try:
        commands = {"send": cmd_send, "send_async": cmd_send_async, "tx": cmd_tx, "simple": cmd_simple,
                    "push": cmd_push, "recall": cmd_recall}
        commands[a["cmd"]](a)
        out("done", ok=True)
    except Exception as exc:
        out("done", ok=False, error=f"{type(exc).__name__}: {exc}")
        raise SystemExit(1) from None


if __name__ == "__main__":
    main()
