"""``txmq``'s client commands: topics, send and consume, transactions, the cluster's members and replication,
stats, and the benchmark workloads."""

from __future__ import annotations

import argparse
import sys
import threading
import time
from typing import Any

from txmq.cli.registry import CLIENT, TXMQ, namesrv_of, one_of, opt, parse_time, print_json
from txmq.errors import TxmqError

JSON = opt("--json", action="store_true", help="print JSON")


@TXMQ.command("topic", "create, list or delete topics",
              opt("action", choices=["create", "list", "delete"], help="what to do"),
              opt("topic", nargs="?", help="topic name (create, delete)"),
              opt("--queues", type=int, default=8, help="queues on each broker (default 8); never fewer than now"),
              opt("--broker", action="append", default=[], help="only on this broker (repeatable)"),
              opt("--order", action="store_true", help="an ordered (FIFO) topic"), *CLIENT)
def cmd_topic(args: argparse.Namespace) -> int:
    from txmq.admin import MQAdminExt

    if args.action != "list" and not args.topic:
        print("txmq topic: a topic name is required", file=sys.stderr)
        return 2
    with MQAdminExt(namesrv_of(args)) as admin:
        if args.action == "create":
            for name, addr in admin.broker_addrs().items():
                cfg = admin.topic_config(addr, args.topic)
                if (not args.broker or name in args.broker) and cfg and cfg["writeQueueNums"] > args.queues:
                    raise TxmqError(f"topic {args.topic} already has {cfg['writeQueueNums']} queues on {name}; "
                                    f"create never shrinks a topic (txmq admin updateTopic -w N -r N does)")
            admin.create_topic(args.topic, args.queues, args.broker or None, order=args.order)
            print(f"topic {args.topic} created with {args.queues} queues")
        elif args.action == "delete":
            admin.delete_topic(args.topic)
            print(f"topic {args.topic} deleted")
        else:
            for t in admin.list_topics():
                print(t)
    return 0


@TXMQ.command("send", "send messages", opt("--topic", required=True, help="topic to send to"),
              opt("--body", default="hello from txmq", help="message body (with --count, ' N' is appended)"),
              opt("--tags", help="message tag"),
              opt("--keys", help="message keys, space separated (queryMsgByKey finds them)"),
              opt("--prop", action="append", default=[], help="user property k=v (repeatable)"),
              opt("--delay", type=int, default=0, metavar="LEVEL",
                  help="deliver after delay level LEVEL of messageDelayLevel (1: 1s, 2: 5s, 3: 10s, ...)"),
              one_of(opt("--deliver-after", type=float, metavar="SECONDS",
                         help="a timer message: deliver SECONDS after the broker stores it (TIMER_DELAY_MS)"),
                     opt("--deliver-at", type=parse_time, metavar="TIME",
                         help="a timer message: deliver at TIME (ms since the epoch, or yyyy-MM-dd#HH:mm:ss:SSS)")),
              opt("--count", type=int, default=1, help="messages to send (default 1)"),
              opt("--group", default="txmq_cli_producer", help="producer group (default txmq_cli_producer)"),
              *CLIENT)
def cmd_send(args: argparse.Namespace) -> int:
    from txmq.bench import Progress
    from txmq.client.producer import Producer
    from txmq.message import Message

    props = dict(p.split("=", 1) for p in args.prop)
    progress = Progress("sent", args.count)
    with Producer(args.group, namesrv_of(args)) as producer:
        for i in range(args.count):
            body = args.body if args.count == 1 else f"{args.body} {i}"
            msg = Message(args.topic, body.encode(), tags=args.tags, keys=args.keys, properties=props)
            msg.delay_time_level = args.delay
            if args.deliver_after is not None:
                msg.deliver_after(args.deliver_after)
            if args.deliver_at is not None:
                msg.deliver_at(args.deliver_at)
            r = producer.send(msg)
            if args.count == 1:
                recall = f" recallHandle={r.recall_handle}" if r.recall_handle else ""
                print(f"{r.status.value} msgId={r.msg_id} offsetMsgId={r.offset_msg_id} "
                      f"queue={r.queue_id} offset={r.queue_offset}{recall}")
            else:
                progress.add()
    if args.count > 1:
        seconds = max(progress.close(), 1e-6)
        print(f"sent {args.count} messages in {seconds:.2f} s ({args.count / seconds:,.0f}/s)", file=sys.stderr)
    return 0


@TXMQ.command("recall", "cancel a scheduled timer message by its recall handle",
              opt("--topic", required=True, help="the message's topic"),
              opt("--handle", required=True, help="the recallHandle `txmq send` printed"),
              opt("--group", default="txmq_cli_producer", help="producer group (default txmq_cli_producer)"),
              *CLIENT)
def cmd_recall(args: argparse.Namespace) -> int:
    from txmq.client.producer import Producer

    with Producer(args.group, namesrv_of(args)) as producer:
        print(f"recalled msgId={producer.recall(args.topic, args.handle)}")
    return 0


def _start_position(args: argparse.Namespace) -> None:
    """The topic must exist; ``--from-beginning``, ``--from-time`` or ``--offset`` set the group's offsets first."""
    from txmq.admin import MQAdminExt
    from txmq.errors import BrokerError
    from txmq.remoting.codes import ResponseCode

    with MQAdminExt(namesrv_of(args)) as admin:
        try:
            admin.route(args.topic)
        except BrokerError as exc:
            if exc.code == ResponseCode.TOPIC_NOT_EXIST:
                raise TxmqError(f"topic {args.topic} does not exist (txmq topic create {args.topic})") from None
            raise
        if args.from_beginning:
            admin.reset_offset(args.group, args.topic, 0)
        elif args.from_time is not None:
            admin.reset_offset(args.group, args.topic, args.from_time)
        elif args.offset is not None:
            admin.set_offsets(args.group, args.topic, args.offset)


@TXMQ.command("consume", "consume and print messages", opt("--topic", required=True, help="topic to consume"),
              opt("--group", default="txmq_cli_consumer", help="consumer group (default txmq_cli_consumer)"),
              opt("--expression", default="*", help="tag expression, e.g. 'TagA || TagB' (default *)"),
              one_of(opt("--from-beginning", action="store_true",
                         help="start from each queue's first message (moves the group's offsets)"),
                     opt("--from-time", type=parse_time, metavar="TIME",
                         help="start from the first message stored at or after TIME (ms, ISO 8601 or "
                              "yyyy-MM-dd#HH:mm:ss:SSS; moves the group's offsets)"),
                     opt("--offset", type=int, help="start each queue at this offset (moves the group's offsets)")),
              opt("--count", type=int, default=0, help="stop after this many (0: until --timeout)"),
              opt("--timeout", type=float, default=30.0, help="seconds to wait for messages (default 30)"), *CLIENT)
def cmd_consume(args: argparse.Namespace) -> int:
    from txmq.client.consumer import ConsumeFromWhere, ConsumeStatus, PushConsumer

    got = threading.Event()
    count = [0]
    lock = threading.Lock()

    def listener(msgs: list[Any]) -> ConsumeStatus:
        lines = [f"{m.topic} q{m.queue_id}@{m.queue_offset} tags={m.tags} keys={m.keys} id={m.msg_id}: "
                 f"{m.body.decode(errors='replace')}" for m in msgs]
        with lock:  # listeners run on several threads: one line at a time, never two run together
            for line in lines:
                print(line, flush=True)
            count[0] += len(msgs)
            if args.count and count[0] >= args.count:
                got.set()
        return ConsumeStatus.SUCCESS

    _start_position(args)
    consumer = PushConsumer(args.group, namesrv_of(args), consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET)
    consumer.subscribe(args.topic, args.expression)
    consumer.register_listener(listener)
    consumer.start()
    try:
        got.wait(args.timeout)
    finally:
        consumer.shutdown()
    print(f"consumed {count[0]} messages", file=sys.stderr)
    return 0 if not args.count or count[0] >= args.count else 2


@TXMQ.command("tx", "transactions: list pending and discarded, show one, resume a discarded one, commit or roll back "
                    "one as an operator",
              opt("action", choices=["list", "show", "resume", "commit", "rollback"], help="what to do"),
              opt("id", nargs="?", help="transaction id or half offset"),
              opt("--limit", type=int, default=100,
                  help="list: at most this many of each state (default 100, at most 1000)"),
              opt("--group", default="", help="only this producer group's (what a non-admin account may see)"),
              opt("--broker", default="", help="show, resume, commit, rollback: only this broker's (a half offset "
                                               "names a half of one broker: needed with several)"),
              opt("--json", action="store_true", help="list, show: print JSON"), *CLIENT)
def cmd_tx(args: argparse.Namespace) -> int:
    from txmq.client.admin import Admin

    if args.action != "list" and not args.id:
        print("txmq tx: a transaction id is required", file=sys.stderr)
        return 2
    with Admin(namesrv_of(args)) as admin:
        if args.action == "list":
            data = admin.tx_list(args.limit, args.group)
            if args.json:
                print_json(data)
                return 0
            for broker, d in data.items():
                totals = d["totals"][0]
                print(f"broker {broker}: {totals['pending']} pending, {totals['discarded']} discarded")
                for state in ("pending", "discarded"):
                    for t in d[state]:
                        print(f"  {state:9} {t['transactionId']} topic={t['topic']} group={t['group']} "
                              f"age={t['ageS']}s checks={t['checks']} halfOffset={t['halfOffset']}")
        elif args.action == "show":
            tx = admin.tx_show(args.id, args.group, args.broker)
            if args.json:
                print_json(tx)
                return 0
            for key in ("transactionId", "state", "broker", "topic", "group", "ageS", "checks", "tags", "keys",
                        "halfOffset", "commitLogOffset"):
                print(f"{key + ':':<17}{tx.get(key)}")
            for k, v in sorted((tx.get("properties") or {}).items()):
                print(f"{'property:':<17}{k}={v}")
            print(f"{'body:':<17}{tx.get('body', '')}")
        elif args.action in ("commit", "rollback"):
            broker = admin.tx_decide(args.id, args.action.upper(), args.group, args.broker)
            print(f"transaction {args.id} {'committed' if args.action == 'commit' else 'rolled back'} on {broker} "
                  "by an operator")
        else:
            broker = admin.tx_resume(args.id, args.group, args.broker)
            print(f"transaction {args.id} resumed into checking on {broker}")
    return 0


@TXMQ.command("bench", "benchmark workloads: produce, consume, tx (transactions/s)",
              opt("workload", choices=["produce", "consume", "tx"],
                  help="produce: confirmed sends through a window; consume: a push consumer with committed offsets "
                       "that checks every message arrived once (run produce first, same --topic, --count, --size, "
                       "--seed); tx: send_message_in_transaction with COMMIT"),
              opt("--topic", help="default: a new topic txmq_bench_<time> (give produce's topic to consume)"),
              opt("--count", type=int, default=50_000, help="messages or transactions (default 50000)"),
              opt("--size", type=int, default=256, help="message size in bytes, at least 8 (default 256)"),
              opt("--window", type=int, default=1000, help="produce: unanswered sends at most (default 1000)"),
              opt("--threads", type=int, default=8, help="tx: threads sending transactions (default 8)"),
              opt("--queues", type=int, default=4, help="queues of the topic produce/tx create (default 4)"),
              opt("--no-create", action="store_true", help="do not create the topic"),
              opt("--group", help="producer or consumer group (consume default: a new group)"),
              opt("--seed", type=int, default=0, help="seed of the body filler (consume checks it)"),
              opt("--broker-pid", type=int, help="report this broker process's CPU seconds (same machine)"),
              opt("--verify", action="store_true", help="tx: consume the committed messages and check them"),
              opt("--json", action="store_true", help="print the result as JSON"),
              opt("--quiet", action="store_true", help="no progress line"), *CLIENT)
def cmd_bench(args: argparse.Namespace) -> int:
    """The workloads of bench/produce_consume.py against a running name server (txmq.bench)."""
    from txmq import bench

    namesrv = namesrv_of(args)
    topic = args.topic or f"txmq_bench_{int(time.time())}"
    try:
        if args.workload in ("produce", "tx") and not args.no_create:
            bench.ensure_topic(namesrv, topic, args.queues)
        if args.workload == "produce":
            r = bench.produce(namesrv, topic, args.count, size=args.size, window=args.window, seed=args.seed,
                              group=args.group or "txmq_bench_producer", broker_pid=args.broker_pid,
                              progress=not args.quiet)
        elif args.workload == "consume":
            r = bench.consume(namesrv, topic, args.count, size=args.size, seed=args.seed,
                              group=args.group or f"txmq_bench_consumer_{int(time.time() * 1000)}",
                              broker_pid=args.broker_pid, progress=not args.quiet)
        else:
            r = bench.transactions(namesrv, topic, args.count, size=args.size, threads=args.threads,
                                   seed=args.seed, group=args.group or "txmq_bench_tx", broker_pid=args.broker_pid,
                                   progress=not args.quiet)
            if args.verify:
                bench.wait_for(lambda: bench.stored_messages(namesrv, topic) >= args.count, 30,
                               "committed transactions to reach the topic")
                bench.consume(namesrv, topic, args.count, size=args.size, seed=args.seed,
                              group=f"txmq_bench_txcheck_{int(time.time() * 1000)}", progress=False)
    except bench.BenchError as exc:
        print(f"txmq bench {args.workload}: {exc}", file=sys.stderr)
        return 1
    if args.json:
        print_json({"topic": topic, **r.to_json()})
        return 0
    unit = "transactions" if args.workload == "tx" else "messages"
    cpu = f"client CPU {r.client_cpu_s:.2f} s" if r.client_cpu_s is not None else ""
    if r.broker_cpu_s is not None:
        cpu += f", broker CPU {r.broker_cpu_s:.2f} s"
    print(f"{args.workload} {topic}: {r.n:,} {unit} of {args.size} B in {r.seconds:.2f} s: "
          f"{r.rate:,.0f} {unit}/s ({cpu})")
    if args.workload == "consume" or (args.workload == "tx" and args.verify):
        print("checked: every message arrived exactly once, intact")
    return 0


@TXMQ.command("cluster", "broker groups and their members (mqadmin clusterList)",
              opt("action", choices=["list"], help="list: every member of every broker group"), JSON, *CLIENT)
def cmd_cluster(args: argparse.Namespace) -> int:
    from txmq.client.admin import Admin

    with Admin(namesrv_of(args)) as admin:
        rows = admin.cluster_list()
    if args.json:
        print_json(rows)
        return 0
    print(f"{'#Cluster':16} {'#Broker':16} {'#BID':>4}  {'#Addr':21} {'#Role':12} {'#HAAddr':21} {'#MaxOffset':>12}")
    for r in rows:
        print(f"{r['cluster']:16} {r['brokerName']:16} {r['brokerId']:>4}  {r['addr']:21} {r['role']:12} "
              f"{r['haAddr']:21} {r['maxOffset']:>12}")
    return 0


@TXMQ.command("ha", "replication of each broker group: slaves, acknowledged offsets, lag (haStatus)",
              opt("action", choices=["status"], help="status: each group's slaves, acknowledged offsets and lag"),
              JSON, *CLIENT)
def cmd_ha(args: argparse.Namespace) -> int:
    from txmq.client.admin import Admin

    with Admin(namesrv_of(args)) as admin:
        groups = admin.ha_status()
    if args.json:
        print_json(groups)
        return 0
    for name, members in groups.items():
        master = members.get("0")
        if master is None or master.get("role") == "unreachable":
            print(f"group {name}: master not reachable")
        else:
            print(f"group {name}: master {master['addr']} ({master['role']}) log ends at {master['maxOffset']}, "
                  f"{master['inSyncSlaveNums']} slaves in sync")
            for s in master["slaves"]:
                state = "connected" if s["connected"] else f"disconnected {s['lag_seconds']}s ago"
                lag = f"lag {s['lag_bytes']} bytes, {s['lag_seconds']:.1f}s" if s["connected"] else ""
                print(f"  slave {s['broker_id']} {s['addr']:21} {state:12} ack {s['ack_offset']} {lag}"
                      f"{'' if s['in_sync'] or not s['connected'] else ' (not in sync)'}")
        for bid, st in sorted(members.items()):
            if bid != "0" and "master" in st:
                m = st["master"]
                print(f"  slave {bid} {st['addr']} sees master {m['masterAddr'] or '?'}: "
                      f"{'connected' if m['connected'] else 'not connected'}, log ends at {st['maxOffset']}")
        _print_controller_mode(members)
    return 0


def readable_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


WITHDRAWN = " WITHDRAWN (its store lost durability: it left its group and is no candidate; restart the broker)"


def _print_controller_mode(members: dict[str, Any]) -> None:
    for bid, st in sorted(members.items()):
        c = st.get("controller") if isinstance(st, dict) else None
        if c:
            print(f"  replica {c['replicaId']} (as {bid}) epoch {c['epoch']} epochs {c['epochs']} master "
                  f"{c['masterId']} SyncStateSet {c['syncStateSet']} (set epoch {c['syncStateSetEpoch']})"
                  f"{' lease valid' if c['leaseValid'] else ''}"
                  f"{WITHDRAWN if c.get('withdrawn') else ''}")


def _put_refusals(store: dict[str, Any]) -> list[str]:
    """Why the store refuses puts now, as its runtime figures say (docs/storage.md): the state an operator must
    act on, shown in the text and not only in --json."""
    reasons = []
    if store.get("disk_full"):
        reasons.append("the disk is full (diskSpaceWarningLevelRatio): free space or let retention delete files")
    if store.get("durability_lost"):
        reasons.append("durability lost (an fsync of the store failed): restart the broker")
    return reasons


@TXMQ.command("stats", "topics, consumer lag, rates and transaction metrics", JSON, *CLIENT)
def cmd_stats(args: argparse.Namespace) -> int:
    from txmq.client.admin import Admin

    with Admin(namesrv_of(args)) as admin:
        data = admin.stats()
    if args.json:
        print_json(data)
        return 0
    for broker, s in data.items():
        store, rates = s["store"], s.get("rates", {})
        print(f"broker {broker} {s['broker']['addr']} ({s['broker']['flushDiskType']})")
        print(f"  in {rates.get('putTps', 0):,.1f} msg/s, out {rates.get('getTps', 0):,.1f} msg/s (last minute); "
              f"commit log {readable_bytes(store['max_offset'] - store['min_offset'])}, "
              f"disk {store['disk_used_percent']:.1f} % used, {s['remoting']['connections']} connections")
        for refusal in _put_refusals(store):
            print(f"  puts refused: {refusal}")
        print("  topics:")
        for name, t in s["topics"].items():
            print(f"    {name:40} messages={t['messages']:,}")
        print("  consumer groups:")
        for g in s["consumerGroups"].values():
            print(f"    {g['group']:30} topic={g['topic']:30} lag={g['lag']:,}")
        tx = s["transactions"]
        latency = ", ".join(f"{k} {v:,.0f} ms" for k, v in tx["commitLatencyMs"].items()) or "none yet"
        print(f"  transactions: pending={tx['pending']} commits={tx['commits']:,} rollbacks={tx['rollbacks']:,} "
              f"checks={tx['checks']:,} discards={tx['discards']} (orphans={tx['orphans']}) resumes={tx['resumes']} "
              f"duplicates={tx['duplicates']} conflicts={tx['conflicts']}; commit latency {latency}")
        for topic, n in tx["pendingPerTopic"].items():
            print(f"    pending on {topic}: {n}")
    return 0
