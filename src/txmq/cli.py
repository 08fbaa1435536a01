"""The ``txmq`` command: servers, admin, send and consume, transactions, stats."""

from __future__ import annotations

import argparse
import errno
import json
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

from txmq.admin.commands import add_parser as add_admin_parser
from txmq.errors import TxmqError


def _namesrv(args: argparse.Namespace) -> str | None:
    return getattr(args, "namesrv", None)


def cmd_server(args: argparse.Namespace) -> int:
    from txmq.acl.setup import namesrv_validator
    from txmq.broker.controller import BrokerController
    from txmq.console import Console
    from txmq.namesrv.controller import NamesrvController
    from txmq.server import broker_config, print_ready, run_process, serve

    config = broker_config(args.config, {"brokerIP1": args.host, "listenPort": args.port,
                                         "storePathRootDir": args.store, "flushDiskType": args.flush_disk_type,
                                         "grpcPort": args.grpc_port})
    # the embedded name server keeps its users beside the broker's (each server has its own store)
    acl = namesrv_validator(config.acl_file or None, Path(config.store.store_path_root_dir) / "config" /
                            "namesrv-auth.json") if config.acl_enable else None
    namesrv = NamesrvController(args.host, args.namesrv_port, limits=config.server_limits, acl=acl,
                                tls=config.tls_server())
    console = (Console(console_config(args, "console_", args.host, args.console_port, None, config.acl_enable))
               if args.console_port >= 0 else None)

    async def main() -> None:
        await serve(namesrv, BrokerController(config), print_ready, console)
    return run_process(main())


def cmd_console(args: argparse.Namespace) -> int:
    from txmq.console import Console
    from txmq.server import print_ready, run_process, serve

    console = Console(console_config(args, "", args.host, args.port, _namesrv(args), False))

    async def main() -> None:
        await serve(None, None, print_ready, console)
    return run_process(main())


def console_config(args: argparse.Namespace, prefix: str, host: str, port: int, namesrv: str | None,
                   acl: bool) -> Any:
    """The console's settings from its flags (``prefix``: ``console_`` for ``txmq server``'s). Users log in
    whenever ACL is on: the broker's ``aclEnable``, ``--login``, or an account given to the process."""
    from txmq.client.base import default_credentials
    from txmq.console import ConsoleConfig

    def opt(name: str) -> Any:
        return getattr(args, prefix + name)

    return ConsoleConfig(host, port, namesrv, login=bool(opt("login") or acl or default_credentials()),
                         allowed_hosts=tuple(h.strip() for h in (opt("allowed_hosts") or "").split(",") if h.strip()),
                         read_timeout_s=opt("read_timeout"), max_connections=opt("max_connections"),
                         session_timeout_s=opt("session_timeout"), https_cert=opt("https_cert") or "",
                         https_key=opt("https_key") or "")


def cmd_namesrv(args: argparse.Namespace) -> int:
    from txmq.acl.setup import namesrv_auth_store_path, namesrv_validator
    from txmq.namesrv.controller import NamesrvController
    from txmq.remoting.tls import TlsServerConfig
    from txmq.server import namesrv_limits, print_ready, run_process, serve

    limits = namesrv_limits(args.config)

    acl = namesrv_validator(args.acl_file, namesrv_auth_store_path(args.auth_store)) if args.acl_file else None
    tls = TlsServerConfig(args.tls_mode, args.tls_cert or "", args.tls_key or "")

    controller = None
    if args.enable_controller_in_namesrv:  # RocketMQ 5's enableControllerInNamesrv
        from txmq.controller.dcs import EtcdDCS
        from txmq.controller.server import ControllerManager

        if not args.etcd:
            print("txmq namesrv: --enable-controller-in-namesrv needs --etcd", file=sys.stderr)
            return 2
        from txmq.acl.setup import controller_validator

        controller = ControllerManager(EtcdDCS(args.etcd), args.host, args.controller_port,
                                       acl=controller_validator(args.acl_file) if args.acl_file else None)

    async def main() -> None:
        await serve(NamesrvController(args.host, args.port, limits=limits, acl=acl, tls=tls), None, print_ready,
                    controller=controller)
    return run_process(main())


def cmd_broker(args: argparse.Namespace) -> int:
    from txmq.broker.controller import BrokerController
    from txmq.server import broker_config, print_ready, run_process, serve

    config = broker_config(args.config, {"namesrvAddr": args.namesrv, "brokerIP1": args.host, "listenPort": args.port,
                                         "storePathRootDir": args.store, "brokerName": args.broker_name,
                                         "flushDiskType": args.flush_disk_type, "grpcPort": args.grpc_port})

    async def main() -> None:
        await serve(None, BrokerController(config), print_ready)
    return run_process(main())


def _print_json(data: Any) -> None:
    print(json.dumps(data, indent=2, sort_keys=True, default=str))


def cmd_topic(args: argparse.Namespace) -> int:
    from txmq.admin import MQAdminExt

    with MQAdminExt(_namesrv(args)) as admin:
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


def cmd_send(args: argparse.Namespace) -> int:
    from txmq.bench import Progress
    from txmq.client.producer import Producer
    from txmq.message import Message

    props = dict(p.split("=", 1) for p in args.prop)
    progress = Progress("sent", args.count)
    with Producer(args.group, _namesrv(args)) as producer:
        for i in range(args.count):
            body = args.body if args.count == 1 else f"{args.body} {i}"
            msg = Message(args.topic, body.encode(), tags=args.tags, keys=args.keys, properties=props)
            msg.delay_time_level = args.delay
            r = producer.send(msg)
            if args.count == 1:
                print(f"{r.status.value} msgId={r.msg_id} offsetMsgId={r.offset_msg_id} "
                      f"queue={r.queue_id} offset={r.queue_offset}")
            else:
                progress.add()
    if args.count > 1:
        seconds = max(progress.close(), 1e-6)
        print(f"sent {args.count} messages in {seconds:.2f} s ({args.count / seconds:,.0f}/s)", file=sys.stderr)
    return 0


def _start_position(args: argparse.Namespace) -> None:
    """The topic must exist; ``--from-beginning``, ``--from-time`` or ``--offset`` set the group's offsets first."""
    from txmq.admin import MQAdminExt
    from txmq.errors import BrokerError
    from txmq.remoting.codes import ResponseCode

    with MQAdminExt(_namesrv(args)) as admin:
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
    consumer = PushConsumer(args.group, _namesrv(args), consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET)
    consumer.subscribe(args.topic, args.expression)
    consumer.register_listener(listener)
    consumer.start()
    try:
        got.wait(args.timeout)
    finally:
        consumer.shutdown()
    print(f"consumed {count[0]} messages", file=sys.stderr)
    return 0 if not args.count or count[0] >= args.count else 2


def cmd_tx(args: argparse.Namespace) -> int:
    from txmq.client.admin import Admin

    with Admin(_namesrv(args)) as admin:
        if args.action == "list":
            data = admin.tx_list(args.limit, args.group)
            if args.json:
                _print_json(data)
                return 0
            for broker, d in data.items():
                totals = d["totals"][0]
                print(f"broker {broker}: {totals['pending']} pending, {totals['discarded']} discarded")
                for state in ("pending", "discarded"):
                    for t in d[state]:
                        print(f"  {state:9} {t['transactionId']} topic={t['topic']} group={t['group']} "
                              f"age={t['ageS']}s checks={t['checks']} halfOffset={t['halfOffset']}")
        elif args.action == "show":
            tx = admin.tx_show(args.id, args.group)
            if args.json:
                _print_json(tx)
                return 0
            for key in ("transactionId", "state", "broker", "topic", "group", "ageS", "checks", "tags", "keys",
                        "halfOffset", "commitLogOffset"):
                print(f"{key + ':':<17}{tx.get(key)}")
            for k, v in sorted((tx.get("properties") or {}).items()):
                print(f"{'property:':<17}{k}={v}")
            print(f"{'body:':<17}{tx.get('body', '')}")
        elif args.action in ("commit", "rollback"):
            broker = admin.tx_decide(args.id, args.action.upper())
            print(f"transaction {args.id} {'committed' if args.action == 'commit' else 'rolled back'} on {broker} "
                  "by an operator")
        else:
            broker = admin.tx_resume(args.id, args.group)
            print(f"transaction {args.id} resumed into checking on {broker}")
    return 0


def cmd_cluster(args: argparse.Namespace) -> int:
    from txmq.client.admin import Admin

    with Admin(_namesrv(args)) as admin:
        rows = admin.cluster_list()
    if args.json:
        _print_json(rows)
        return 0
    print(f"{'#Cluster':16} {'#Broker':16} {'#BID':>4}  {'#Addr':21} {'#Role':12} {'#HAAddr':21} {'#MaxOffset':>12}")
    for r in rows:
        print(f"{r['cluster']:16} {r['brokerName']:16} {r['brokerId']:>4}  {r['addr']:21} {r['role']:12} "
              f"{r['haAddr']:21} {r['maxOffset']:>12}")
    return 0


def cmd_ha(args: argparse.Namespace) -> int:
    from txmq.client.admin import Admin

    with Admin(_namesrv(args)) as admin:
        groups = admin.ha_status()
    if args.json:
        _print_json(groups)
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


def _print_controller_mode(members: dict[str, Any]) -> None:
    for bid, st in sorted(members.items()):
        c = st.get("controller") if isinstance(st, dict) else None
        if c:
            print(f"  replica {c['replicaId']} (as {bid}) epoch {c['epoch']} epochs {c['epochs']} master "
                  f"{c['masterId']} SyncStateSet {c['syncStateSet']} (set epoch {c['syncStateSetEpoch']})"
                  f"{' lease valid' if c['leaseValid'] else ''}")


def cmd_controller(args: argparse.Namespace) -> int:
    """``txmq controller --etcd URL`` runs a controller; ``txmq controller status`` asks one."""
    if args.action == "status":
        from txmq.controller.status import controller_status

        data = controller_status(args.controller)
        if args.json:
            _print_json(data)
            return 0
        meta = data["metadata"]
        print(f"controller {meta['controller']}: leader {meta['leader'] or 'none'}"
              f"{' (this one acts)' if meta['isLeader'] else ''}")
        for name, g in sorted(data["groups"].items()):
            print(f"group {name} ({g['cluster_name']}): master {g['master_id']} {g['master_addr'] or '-'} epoch "
                  f"{g['epoch']} SyncStateSet {g['sync_state_set']} (set epoch {g['sync_state_set_epoch']}) "
                  f"alive {g['alive']}")
            for rid, r in sorted(g["replicas"].items()):
                print(f"  replica {rid} {r['addr']} HA {r['haAddr']}")
        return 0
    if not args.etcd:
        print("txmq controller: --etcd is required to run a controller", file=sys.stderr)
        return 2
    from txmq.acl.setup import controller_validator
    from txmq.controller.dcs import EtcdDCS
    from txmq.controller.server import ControllerManager
    from txmq.server import print_ready, run_process, serve

    acl = controller_validator(args.acl_file) if args.acl_file else None
    manager = ControllerManager(EtcdDCS(args.etcd), args.host, args.port, lease_ttl_s=args.lease_ttl, acl=acl)
    return run_process(serve(None, None, print_ready, controller=manager))


def cmd_stats(args: argparse.Namespace) -> int:
    from txmq.client.admin import Admin

    with Admin(_namesrv(args)) as admin:
        data = admin.stats()
    if args.json:
        _print_json(data)
        return 0
    for broker, s in data.items():
        store, rates = s["store"], s.get("rates", {})
        print(f"broker {broker} {s['broker']['addr']} ({s['broker']['flushDiskType']})")
        print(f"  in {rates.get('putTps', 0):,.1f} msg/s, out {rates.get('getTps', 0):,.1f} msg/s (last minute); "
              f"commit log {readable_bytes(store['max_offset'] - store['min_offset'])}, "
              f"{s['remoting']['connections']} connections")
        print("  topics:")
        for name, t in s["topics"].items():
            print(f"    {name:40} messages={t['messages']:,}")
        print("  consumer groups:")
        for g in s["consumerGroups"].values():
            print(f"    {g['group']:30} topic={g['topic']:30} lag={g['lag']:,}")
        tx = s["transactions"]
        latency = ", ".join(f"{k} {v:,.0f} ms" for k, v in tx["commitLatencyMs"].items()) or "none yet"
        print(f"  transactions: pending={tx['pending']} commits={tx['commits']:,} rollbacks={tx['rollbacks']:,} "
              f"checks={tx['checks']:,} discards={tx['discards']} (orphans={tx['orphans']}) "
              f"duplicates={tx['duplicates']} conflicts={tx['conflicts']}; commit latency {latency}")
        for topic, n in tx["pendingPerTopic"].items():
            print(f"    pending on {topic}: {n}")
    return 0


def cmd_bench(args: argparse.Namespace) -> int:
    """The workloads of bench/produce_consume.py against a running name server (txmq.bench)."""
    from txmq import bench

    namesrv = _namesrv(args)
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
        _print_json({"topic": topic, **r.to_json()})
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


SERVER_COMMANDS = ("server", "namesrv", "broker", "console")


def build_parser() -> argparse.ArgumentParser:
    from txmq.version import VERSION

    p = argparse.ArgumentParser(prog="txmq", description="txmq: a transactional message broker (RocketMQ's design)")
    namesrv_help = "name server HOST:PORT (default $NAMESRV_ADDR or 127.0.0.1:9876)"
    p.add_argument("-n", "--namesrv", help=namesrv_help)
    p.add_argument("--version", action="version", version=f"txmq {VERSION}", help="print txmq's version and exit")
    p.add_argument("--log-level", choices=["DEBUG", "INFO", "WARNING", "ERROR"],
                   help="log level on stderr (default INFO for servers, WARNING for the other commands)")
    sub = p.add_subparsers(dest="command", required=True)

    def namesrv_opt(sp: argparse.ArgumentParser) -> None:
        """``-n`` also after the subcommand; SUPPRESS keeps one given before it from being reset."""
        sp.add_argument("-n", "--namesrv", default=argparse.SUPPRESS, help=namesrv_help)
        sp.add_argument("--access-key", help="ACL account (default $TXMQ_ACCESS_KEY)")
        sp.add_argument("--secret-key", help="ACL secret (default $TXMQ_SECRET_KEY)")
        sp.add_argument("--tls", action="store_true", help="TLS to name servers and brokers (default $TXMQ_TLS)")
        sp.add_argument("--tls-trust-cert", help="CA bundle the servers' certificates are checked against "
                                                 "(default $TXMQ_TLS_TRUST_CERT_PATH, else the system's CAs)")

    def console_opts(sp: argparse.ArgumentParser, prefix: str = "") -> None:
        """The console's checks and limits (docs/console.md); ``prefix`` for ``txmq server``'s flags."""
        p = f"--{prefix}"
        sp.add_argument(f"{p}login", action="store_true",
                        help="users log in with their own ACL account (always so when ACL is on)")
        sp.add_argument(f"{p}allowed-hosts", help="Host names the console answers to, comma-separated, besides "
                                                  "its address and localhost")
        sp.add_argument(f"{p}read-timeout", type=float, default=10.0,
                        help="seconds a client has to send a request's headers, then its body (default 10)")
        sp.add_argument(f"{p}max-connections", type=int, default=256, help="open connections at most (default 256)")
        sp.add_argument(f"{p}session-timeout", type=float, default=1800.0,
                        help="seconds after which an unused login ends (default 1800)")
        sp.add_argument(f"{p}https-cert", help="serve HTTPS with this certificate (PEM)")
        sp.add_argument(f"{p}https-key", help="the HTTPS certificate's key (PEM)")

    def broker_opts(sp: argparse.ArgumentParser) -> None:
        """What ``server`` and ``broker`` both pass on to the broker's config, as text: each is parsed and checked
        as its broker.conf key (``BrokerConfig.update``)."""
        sp.add_argument("--grpc-port", help="RocketMQ 5 gRPC port (default 8081, 0: free, -1: off)")
        sp.add_argument("--flush-disk-type", metavar="{ASYNC_FLUSH,SYNC_FLUSH}",
                        help="SYNC_FLUSH: a send is answered once on disk (default ASYNC_FLUSH)")
        sp.add_argument("-c", "--config", help="RocketMQ broker.conf (keys: docs/configuration.md)")
        sp.add_argument("--store", help="store directory (default ~/store)")

    s = sub.add_parser("server", help="name server + broker in one process (the embedded default)")
    s.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    s.add_argument("--port", help="broker port (default 10911)")
    s.add_argument("--namesrv-port", type=int, default=9876, help="name server port (default 9876)")
    s.add_argument("--console-port", type=int, default=8080,
                   help="web console port (default 8080; 0: a free port, -1: off)")
    console_opts(s, "console-")
    broker_opts(s)
    s.set_defaults(fn=cmd_server)

    s = sub.add_parser("console", help="the web console for a cluster (RocketMQ Dashboard's pages)")
    s.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    s.add_argument("--port", type=int, default=8080, help="port (default 8080, 0: a free port)")
    console_opts(s)
    namesrv_opt(s)
    s.set_defaults(fn=cmd_console)

    s = sub.add_parser("namesrv", help="a name server")
    s.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    s.add_argument("--port", type=int, default=9876, help="port (default 9876)")
    s.add_argument("-c", "--config", help="properties file with the remoting server's limits "
                                          "(serverChannelMaxIdleTimeSeconds, serverMaxConnections, ...)")
    s.add_argument("--acl-file", help="plain_acl.yml: switches ACL on; broker registration needs an admin account")
    s.add_argument("--auth-store", help="with --acl-file: where users and ACLs made by the admin commands are kept "
                                        "(default ~/namesrv/auth.json; one per name server)")
    s.add_argument("--tls-mode", choices=["disabled", "permissive", "enforcing"], default="disabled",
                   help="RocketMQ's tls.server.mode")
    s.add_argument("--tls-cert", help="tls.server.certPath")
    s.add_argument("--tls-key", help="tls.server.keyPath")
    s.add_argument("--enable-controller-in-namesrv", action="store_true",
                   help="also run a controller (automatic failover) in this process")
    s.add_argument("--etcd", help="the controller's etcd endpoints http://HOST:PORT[,...]")
    s.add_argument("--controller-port", type=int, default=9878,
                   help="port of the controller run inside the name server (RocketMQ's 9878)")
    s.set_defaults(fn=cmd_namesrv)

    s = sub.add_parser("broker", help="a broker registering with name servers")
    namesrv_opt(s)
    s.add_argument("--host", default=None, help="address to listen on and register (default brokerIP1)")
    s.add_argument("--port", help="port (default listenPort, 10911)")
    s.add_argument("--broker-name", help="broker name (default brokerName, broker-a)")
    broker_opts(s)
    s.set_defaults(fn=cmd_broker)

    s = sub.add_parser("topic", help="create, list or delete topics")
    s.add_argument("action", choices=["create", "list", "delete"], help="what to do")
    s.add_argument("topic", nargs="?", help="topic name (create, delete)")
    s.add_argument("--queues", type=int, default=8, help="queues on each broker (default 8); never fewer than now")
    s.add_argument("--broker", action="append", default=[], help="only on this broker (repeatable)")
    s.add_argument("--order", action="store_true", help="an ordered (FIFO) topic")
    namesrv_opt(s)
    s.set_defaults(fn=cmd_topic)

    s = sub.add_parser("send", help="send messages")
    s.add_argument("--topic", required=True, help="topic to send to")
    s.add_argument("--body", default="hello from txmq", help="message body (with --count, ' N' is appended)")
    s.add_argument("--tags", help="message tag")
    s.add_argument("--keys", help="message keys, space separated (queryMsgByKey finds them)")
    s.add_argument("--prop", action="append", default=[], help="user property k=v (repeatable)")
    s.add_argument("--delay", type=int, default=0, metavar="LEVEL",
                   help="deliver after delay level LEVEL of messageDelayLevel (1: 1s, 2: 5s, 3: 10s, ...)")
    s.add_argument("--count", type=int, default=1, help="messages to send (default 1)")
    s.add_argument("--group", default="txmq_cli_producer", help="producer group (default txmq_cli_producer)")
    namesrv_opt(s)
    s.set_defaults(fn=cmd_send)

    from txmq.admin.commands import parse_time

    s = sub.add_parser("consume", help="consume and print messages")
    s.add_argument("--topic", required=True, help="topic to consume")
    s.add_argument("--group", default="txmq_cli_consumer", help="consumer group (default txmq_cli_consumer)")
    s.add_argument("--expression", default="*", help="tag expression, e.g. 'TagA || TagB' (default *)")
    start = s.add_mutually_exclusive_group()
    start.add_argument("--from-beginning", action="store_true",
                       help="start from each queue's first message (moves the group's offsets)")
    start.add_argument("--from-time", type=parse_time, metavar="TIME",
                       help="start from the first message stored at or after TIME (ms, ISO 8601 or "
                            "yyyy-MM-dd#HH:mm:ss:SSS; moves the group's offsets)")
    start.add_argument("--offset", type=int, help="start each queue at this offset (moves the group's offsets)")
    s.add_argument("--count", type=int, default=0, help="stop after this many (0: until --timeout)")
    s.add_argument("--timeout", type=float, default=30.0, help="seconds to wait for messages (default 30)")
    namesrv_opt(s)
    s.set_defaults(fn=cmd_consume)

    s = sub.add_parser("tx", help="transactions: list pending and discarded, show one, resume a discarded one, "
                                  "commit or roll back one as an operator")
    s.add_argument("action", choices=["list", "show", "resume", "commit", "rollback"], help="what to do")
    s.add_argument("id", nargs="?", help="transaction id or half offset")
    s.add_argument("--limit", type=int, default=100, help="list: at most this many of each state (default 100)")
    s.add_argument("--group", default="", help="only this producer group's (what a non-admin account may see)")
    s.add_argument("--json", action="store_true", help="list, show: print JSON")
    namesrv_opt(s)
    s.set_defaults(fn=cmd_tx)

    s = sub.add_parser("bench", help="benchmark workloads: produce, consume, tx (transactions/s)")
    s.add_argument("workload", choices=["produce", "consume", "tx"],
                   help="produce: confirmed sends through a window; consume: a push consumer with committed "
                        "offsets that checks every message arrived once (run produce first, same --topic, "
                        "--count, --size, --seed); tx: send_message_in_transaction with COMMIT")
    s.add_argument("--topic", help="default: a new topic txmq_bench_<time> (give produce's topic to consume)")
    s.add_argument("--count", type=int, default=50_000, help="messages or transactions (default 50000)")
    s.add_argument("--size", type=int, default=256, help="message size in bytes, at least 8 (default 256)")
    s.add_argument("--window", type=int, default=1000, help="produce: unanswered sends at most (default 1000)")
    s.add_argument("--threads", type=int, default=8, help="tx: threads sending transactions (default 8)")
    s.add_argument("--queues", type=int, default=4, help="queues of the topic produce/tx create (default 4)")
    s.add_argument("--no-create", action="store_true", help="do not create the topic")
    s.add_argument("--group", help="producer or consumer group (consume default: a new group)")
    s.add_argument("--seed", type=int, default=0, help="seed of the body filler (consume checks it)")
    s.add_argument("--broker-pid", type=int, help="report this broker process's CPU seconds (same machine)")
    s.add_argument("--verify", action="store_true", help="tx: consume the committed messages and check them")
    s.add_argument("--json", action="store_true", help="print the result as JSON")
    s.add_argument("--quiet", action="store_true", help="no progress line")
    namesrv_opt(s)
    s.set_defaults(fn=cmd_bench)

    s = sub.add_parser("cluster", help="broker groups and their members (mqadmin clusterList)")
    s.add_argument("action", choices=["list"], help="list: every member of every broker group")
    s.add_argument("--json", action="store_true", help="print JSON")
    namesrv_opt(s)
    s.set_defaults(fn=cmd_cluster)

    s = sub.add_parser("ha", help="replication of each broker group: slaves, acknowledged offsets, lag (haStatus)")
    s.add_argument("action", choices=["status"], help="status: each group's slaves, acknowledged offsets and lag")
    s.add_argument("--json", action="store_true", help="print JSON")
    namesrv_opt(s)
    s.set_defaults(fn=cmd_ha)

    s = sub.add_parser("controller", help="run a controller over etcd (automatic failover), or ask one its state")
    s.add_argument("action", nargs="?", choices=["run", "status"], default="run",
                   help="run (default): serve as a controller; status: ask one its groups")
    s.add_argument("--etcd", help="etcd endpoints http://HOST:PORT[,...] (to run one)")
    s.add_argument("--host", default="127.0.0.1", help="address to listen on (to run one)")
    s.add_argument("--port", type=int, default=9878, help="controller port (RocketMQ's 9878)")
    s.add_argument("--lease-ttl", type=int, default=2, help="seconds of the leader key's lease in etcd")
    s.add_argument("--controller", default="127.0.0.1:9878", help="controller to ask (status)")
    s.add_argument("--acl-file", help="plain_acl.yml: switches ACL on; brokers' requests need an admin account")
    s.add_argument("--json", action="store_true", help="status: print JSON")
    s.add_argument("--access-key", help="ACL account for status (default $TXMQ_ACCESS_KEY)")
    s.add_argument("--secret-key", help="ACL secret (default $TXMQ_SECRET_KEY)")
    s.set_defaults(fn=cmd_controller)

    add_admin_parser(sub, namesrv_opt)

    s = sub.add_parser("stats", help="topics, consumer lag, rates and transaction metrics")
    s.add_argument("--json", action="store_true", help="print JSON")
    namesrv_opt(s)
    s.set_defaults(fn=cmd_stats)
    return p


def main(argv: list[str] | None = None) -> int:
    import logging

    args = build_parser().parse_args(argv)
    # Every client this command makes reads its account and TLS settings from the environment (txmq.client.base).
    for flag, var in (("access_key", "TXMQ_ACCESS_KEY"), ("secret_key", "TXMQ_SECRET_KEY"),
                      ("tls_trust_cert", "TXMQ_TLS_TRUST_CERT_PATH")):
        if getattr(args, flag, None):
            os.environ[var] = getattr(args, flag)
    if getattr(args, "tls", False):
        os.environ["TXMQ_TLS"] = "true"
    level = args.log_level or ("INFO" if args.command in SERVER_COMMANDS else "WARNING")
    logging.basicConfig(level=getattr(logging, level), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if args.command == "topic" and args.action != "list" and not args.topic:
        print("txmq topic: a topic name is required", file=sys.stderr)
        return 2
    if args.command == "tx" and args.action != "list" and not args.id:
        print("txmq tx: a transaction id is required", file=sys.stderr)
        return 2
    try:
        return int(args.fn(args) or 0)
    except TxmqError as exc:
        print(f"txmq {args.command}: {exc}", file=sys.stderr)
        return 1
    except (OSError, ValueError) as exc:  # servers: a busy port, a missing or bad config file
        if args.command not in SERVER_COMMANDS:
            raise
        print(f"txmq {args.command}: {server_error(exc)}", file=sys.stderr)
        return 1


def server_error(exc: Exception) -> str:
    if isinstance(exc, FileNotFoundError):
        return f"no such file: {exc.filename}"
    if isinstance(exc, OSError) and exc.errno == errno.EADDRINUSE:
        return f"{exc.strerror or exc}: another process listens on that port (choose another with --port)"
    return str(exc)


if __name__ == "__main__":
    sys.exit(main())
