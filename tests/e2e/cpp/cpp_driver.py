#!/usr/bin/env python
"""Drive the real RocketMQ C++ client (PyPI ``rocketmq==0.4.4``, librocketmq 1.2.x) from the command line.

Run it in its own process, with its own ``HOME`` (the C++ client writes ``$HOME/logs/rocketmq-cpp/``):

    python cpp_driver.py produce --namesrv 127.0.0.1:9876 --topic T --count 10 --mode sync
    python cpp_driver.py consume --namesrv 127.0.0.1:9876 --topic T --group G --expect 10 --timeout 30

Every line on stdout is one JSON object with an ``event`` key:

produce: ``{"event": "sent", "i", "mode", "status", "msg_id", "offset", "shard"?, "t"?}`` per message (oneway
modes have no result: status "ONEWAY", msg_id null), or ``{"event": "error", "i", "error"}``; a batch
prints one ``sent`` line per batch (``"batch": [first_i, last_i]``; the wrapper gives msg_id "" for a batch);
then ``{"event": "summary", "sent", "errors", "elapsed"}``. Exit code 0 when every send succeeded, else 1.

consume: ``{"event": "started"}`` once the consumer runs, then per delivery ``{"event": "message", "topic",
"tags", "keys", "properties", "sys_properties", "body", "body_b64", "msg_id", "queue_id", "queue_offset",
"reconsume_times", "born_timestamp", "store_timestamp", "commit_log_offset", "delivery", "result"}``, then
``{"event": "summary", "received", "timed_out", "elapsed"}``. Exit code 0 after ``--expect`` deliveries, 2 on
timeout. Redeliveries count as deliveries.

Limits of the wrapper (not of the broker): a received body is read as a C string, so it is cut at the first
NUL byte; properties cannot be listed, only read by name (``--props``); the client compresses bodies over
4 KiB.
"""

from __future__ import annotations

import argparse
import base64
import ctypes
import json
import os
import sys
import threading
import time

_print_lock = threading.Lock()


def emit(**obj) -> None:
    line = json.dumps(obj, separators=(",", ":"))
    with _print_lock:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


def _b(s: str | bytes) -> bytes:
    return s.encode() if isinstance(s, str) else s


def _text(v) -> str | None:
    if v is None:
        return None
    if isinstance(v, bytes):
        return v.decode("utf-8", "replace")
    return str(v)


def _parse_props(items: list[str]) -> dict[str, str]:
    out = {}
    for item in items or ():
        k, sep, v = item.partition("=")
        if not sep:
            raise SystemExit(f"--prop wants k=v, got {item!r}")
        out[k] = v
    return out


def _credentials(client, a) -> None:
    """RocketMQ ACL: the client signs every request with this account."""
    if a.access_key is not None:
        client.set_session_credentials(a.access_key, a.secret_key or "", "")


# --- produce --------------------------------------------------------------------------------


def _make_message(rmq, dll, a, i: int):
    msg = rmq.Message(a.topic)
    if a.tags:
        msg.set_tags(a.tags)
    if a.keys_prefix:
        msg.set_keys(f"{a.keys_prefix}{i}")
    for k, v in _parse_props(a.prop).items():
        msg.set_property(k, v)
    if a.delay_level:
        msg.set_delay_time_level(a.delay_level)
    if a.body_b64 is not None:
        raw = base64.b64decode(a.body_b64)
        dll.SetByteMessageBody.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int]
        dll.SetByteMessageBody(msg._handle, raw, len(raw))
    else:
        body = f"{a.body_prefix}{i}"
        if a.body_size:
            body = (body + "-" + "x" * a.body_size)[: max(a.body_size, len(body))]
        msg.set_body(body)
    return msg


def _one_attempt(dll, producer) -> None:
    """The C API has no setter for the retries of a non-orderly send (by default a send answered anything but
    SEND_OK, FLUSH_SLAVE_TIMEOUT included, is sent again, up to 3 attempts seen, so it may be stored twice). The C
    API's producer handle is the C++ ``DefaultMQProducer`` itself, whose ``setRetryTimes`` sets the turns of its
    send loop (5 by default, at least 1): 1 is one attempt."""
    attempts = 1
    for name, argtypes in (("_ZN8rocketmq17DefaultMQProducer13setRetryTimesEi", [ctypes.c_void_p, ctypes.c_int]),
                           ("_ZNK8rocketmq17DefaultMQProducer13getRetryTimesEv", [ctypes.c_void_p])):
        getattr(dll, name).argtypes = argtypes
    dll._ZNK8rocketmq17DefaultMQProducer13getRetryTimesEv.restype = ctypes.c_int
    dll._ZN8rocketmq17DefaultMQProducer13setRetryTimesEi(producer._handle, attempts)
    got = dll._ZNK8rocketmq17DefaultMQProducer13getRetryTimesEv(producer._handle)
    if got != attempts:
        raise SystemExit(f"--retry-times: the client kept {got} send turns instead of {attempts}")


def _shard(a, i: int) -> int:
    if a.shard is not None:
        return a.shard
    return i % a.shards


def cmd_produce(a) -> int:
    import rocketmq.client as rmq
    from rocketmq.ffi import dll

    producer = rmq.Producer(a.group, timeout=a.send_timeout)
    producer.set_namesrv_addr(a.namesrv)
    _credentials(producer, a)
    if a.retry_times is not None and a.mode != "orderly":
        if a.retry_times != 0:
            raise SystemExit("--retry-times: other sends than orderly take 0 only (one attempt)")
        _one_attempt(dll, producer)
    producer.start()
    t0 = time.time()
    sent = errors = 0
    async_done = threading.Semaphore(0)
    try:
        if a.mode == "batch":
            for start in range(0, a.count, a.batch_size):
                idx = list(range(start, min(start + a.batch_size, a.count)))
                msgs = [_make_message(rmq, dll, a, i) for i in idx]
                try:
                    r = producer.send_batch(msgs)
                    emit(
                        event="sent",
                        i=idx[0],
                        batch=[idx[0], idx[-1]],
                        mode=a.mode,
                        status=r.status.name,
                        msg_id=r.msg_id,
                        offset=r.offset,
                    )
                    sent += len(idx)
                except Exception as exc:
                    emit(event="error", i=idx[0], batch=[idx[0], idx[-1]], mode=a.mode, error=repr(exc))
                    errors += len(idx)
        else:
            for i in range(a.count):
                msg = _make_message(rmq, dll, a, i)
                try:
                    if a.mode == "sync":
                        r = producer.send_sync(msg)
                        emit(
                            event="sent",
                            i=i,
                            mode=a.mode,
                            status=r.status.name,
                            msg_id=r.msg_id,
                            offset=r.offset,
                            t=time.time(),
                        )
                    elif a.mode == "orderly":
                        shard = _shard(a, i)
                        r = producer.send_orderly(msg, shard, retry_times=a.retry_times or 3)
                        emit(
                            event="sent",
                            i=i,
                            mode=a.mode,
                            shard=shard,
                            status=r.status.name,
                            msg_id=r.msg_id,
                            offset=r.offset,
                        )
                    elif a.mode == "oneway":
                        producer.send_oneway(msg)
                        emit(event="sent", i=i, mode=a.mode, status="ONEWAY", msg_id=None, offset=None)
                    elif a.mode == "oneway_orderly":
                        shard = _shard(a, i)
                        producer.send_oneway_orderly(msg, shard)
                        emit(
                            event="sent",
                            i=i,
                            mode=a.mode,
                            shard=shard,
                            status="ONEWAY",
                            msg_id=None,
                            offset=None,
                        )
                    elif a.mode == "async":

                        def ok(r, i=i):
                            emit(
                                event="sent",
                                i=i,
                                mode="async",
                                status=r.status.name,
                                msg_id=r.msg_id,
                                offset=r.offset,
                            )
                            async_done.release()

                        def bad(exc, i=i):
                            emit(event="error", i=i, mode="async", error=repr(exc))
                            async_done.release()

                        producer.send_async(msg, ok, bad)
                    sent += 1
                except Exception as exc:
                    emit(event="error", i=i, mode=a.mode, error=repr(exc))
                    errors += 1
                if a.interval:
                    time.sleep(a.interval)
            if a.mode == "async":
                # every callback fires once; a lost one shows up as a missing "sent" line
                deadline = time.time() + a.send_timeout / 1000 + 5
                for _ in range(sent):
                    if not async_done.acquire(timeout=max(0.0, deadline - time.time())):
                        emit(event="error", i=-1, mode="async", error="async callback missing")
                        errors += 1
                        break
        if a.linger:
            time.sleep(a.linger)  # lets oneway frames leave before shutdown
    finally:
        emit(event="summary", sent=sent, errors=errors, elapsed=round(time.time() - t0, 3))
        if a.fast_exit:
            os._exit(0 if errors == 0 else 1)
        producer.shutdown()
    return 0 if errors == 0 else 1


# --- consume --------------------------------------------------------------------------------

SYS_PROPS = (
    "UNIQ_KEY",
    "TAGS",
    "KEYS",
    "DELAY",
    "RETRY_TOPIC",
    "REAL_TOPIC",
    "REAL_QID",
    "ORIGIN_MESSAGE_ID",
    "RECONSUME_TIME",
    "MAX_RECONSUME_TIMES",
    "PGROUP",
    "TRAN_MSG",
    "MIN_OFFSET",
    "MAX_OFFSET",
    "CONSUME_START_TIME",
    "WAIT",
    "__SHARDINGKEY",
)


def cmd_consume(a) -> int:
    import rocketmq.client as rmq
    from rocketmq.exceptions import ffi_check
    from rocketmq.ffi import MSG_CALLBACK_FUNC, dll

    consumer = rmq.PushConsumer(
        a.group,
        orderly=a.orderly,
        message_model=rmq.MessageModel.BROADCASTING if a.broadcast else rmq.MessageModel.CLUSTERING,
    )
    consumer.set_namesrv_addr(a.namesrv)
    _credentials(consumer, a)
    if a.threads:
        consumer.set_thread_count(a.threads)
    if a.batch_max:
        consumer.set_message_batch_max_size(a.batch_max)
    if a.instance:
        consumer.set_instance_name(a.instance)
    prop_names = [p for p in (a.props or "").split(",") if p]
    fail_left = {"n": a.fail_first}
    lock = threading.Lock()
    state = {"count": 0}
    done = threading.Event()

    def on_message(_consumer, cmsg) -> int:
        # Our own callback, not the wrapper's: the wrapper turns a Python exception into CONSUME_SUCCESS.
        try:
            m = rmq.RecvMessage(cmsg)
            body = m.body or b""
            props = {}
            for p in prop_names:
                v = m.get_property(p)
                if v:
                    props[p] = _text(v)
            sysp = {}
            for p in SYS_PROPS:
                v = m.get_property(p)
                if v:
                    sysp[p] = _text(v)
            with lock:  # the count and its line under one lock: deliveries print in their order
                state["count"] += 1
                n = state["count"]
                fail = fail_left["n"] > 0
                if fail:
                    fail_left["n"] -= 1
                emit(
                    event="message",
                    delivery=n,
                    topic=m.topic,
                    tags=_text(m.tags),
                    keys=_text(m.keys),
                    properties=props,
                    sys_properties=sysp,
                    body=body.decode("utf-8", "replace"),
                    body_b64=base64.b64encode(body).decode(),
                    msg_id=m.id,
                    queue_id=m.queue_id,
                    queue_offset=m.queue_offset,
                    reconsume_times=m.reconsume_times,
                    born_timestamp=m.born_timestamp,
                    store_timestamp=m.store_timestamp,
                    commit_log_offset=m.commit_log_offset,
                    result="RECONSUME_LATER" if fail else "SUCCESS",
                )
            if a.sleep:
                time.sleep(a.sleep)
            if not fail and a.expect and n >= a.expect:
                done.set()
            return 1 if fail else 0
        except Exception as exc:
            emit(event="callback_error", error=repr(exc))
            return 1

    cb = MSG_CALLBACK_FUNC(on_message)
    ffi_check(dll.Subscribe(consumer._handle, _b(a.topic), _b(a.expression)))
    register = dll.RegisterMessageCallbackOrderly if a.orderly else dll.RegisterMessageCallback
    ffi_check(register(consumer._handle, cb))
    t0 = time.time()
    consumer.start()
    emit(event="started", group=a.group, topic=a.topic, expression=a.expression, orderly=a.orderly)
    if a.expect:
        ok = done.wait(a.timeout)
    else:
        time.sleep(a.timeout)  # collect whatever arrives; "no message" checks use --expect 0
        ok = True
    if ok and a.settle:
        time.sleep(a.settle)  # lets the client commit offsets (it persists them every ~5 s)
    emit(event="summary", received=state["count"], timed_out=not ok, elapsed=round(time.time() - t0, 3))
    if a.fast_exit:
        os._exit(0 if ok else 2)
    consumer.shutdown()
    del cb  # the C++ side holds a pointer to it until shutdown
    return 0 if ok else 2


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="command", required=True)

    pp = sub.add_parser("produce")
    pp.add_argument("--namesrv", required=True)
    pp.add_argument("--access-key")
    pp.add_argument("--secret-key")
    pp.add_argument("--topic", required=True)
    pp.add_argument("--group", default="txmq_cpp_producer")
    pp.add_argument("--count", type=int, default=1)
    pp.add_argument(
        "--mode", choices=["sync", "oneway", "orderly", "oneway_orderly", "async", "batch"], default="sync"
    )
    pp.add_argument("--tags")
    pp.add_argument("--keys-prefix")
    pp.add_argument("--prop", action="append", default=[], help="user property k=v (repeatable)")
    pp.add_argument("--body-prefix", default="msg-")
    pp.add_argument("--body-size", type=int, default=0, help="pad each body to this many bytes")
    pp.add_argument("--body-b64", help="send these raw bytes as every body (binary safe)")
    pp.add_argument("--delay-level", type=int, default=0)
    pp.add_argument("--shard", type=int, help="orderly: fixed selector argument (queue = shard %% queues)")
    pp.add_argument(
        "--shards", type=int, default=1 << 30, help="orderly: shard = i %% shards when no --shard"
    )
    pp.add_argument("--retry-times", type=int,
                    help="retries after a failed attempt (default: the client's own); other sends than orderly take 0")
    pp.add_argument("--batch-size", type=int, default=10)
    pp.add_argument("--send-timeout", type=int, default=3000, help="ms")
    pp.add_argument("--interval", type=float, default=0.0, help="seconds between sends")
    pp.add_argument("--linger", type=float, default=0.5, help="seconds to wait before shutdown")
    pp.add_argument("--fast-exit", action="store_true", help="os._exit after the summary (skip shutdown)")
    pp.set_defaults(func=cmd_produce)

    cp = sub.add_parser("consume")
    cp.add_argument("--namesrv", required=True)
    cp.add_argument("--access-key")
    cp.add_argument("--secret-key")
    cp.add_argument("--topic", required=True)
    cp.add_argument("--group", required=True)
    cp.add_argument("--expression", default="*")
    cp.add_argument("--orderly", action="store_true")
    cp.add_argument("--broadcast", action="store_true")
    cp.add_argument("--expect", type=int, default=0)
    cp.add_argument("--timeout", type=float, default=30.0)
    cp.add_argument("--props", default="", help="comma-separated user property names to report")
    cp.add_argument(
        "--fail-first", type=int, default=0, help="answer RECONSUME_LATER to the first N deliveries"
    )
    cp.add_argument("--sleep", type=float, default=0.0, help="seconds to sleep in each callback")
    cp.add_argument("--threads", type=int)
    cp.add_argument("--batch-max", type=int)
    cp.add_argument("--instance")
    cp.add_argument("--settle", type=float, default=0.0, help="seconds to keep running after --expect")
    cp.add_argument("--fast-exit", action="store_true", help="os._exit after the summary (skip shutdown)")
    cp.set_defaults(func=cmd_consume)

    a = ap.parse_args(argv)
    return a.func(a)


if __name__ == "__main__":
    sys.exit(main())
