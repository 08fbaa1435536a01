"""``txmq``'s server commands: ``server`` (name server + broker in one process), ``console``, ``namesrv``,
``broker`` and ``controller``. Each serves until SIGTERM or SIGINT; ``txmq.server`` runs them."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from txmq.cli.registry import CLIENT, TXMQ, Option, namesrv_of, opt, print_json

HOST = opt("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")


def console_options(prefix: str = "") -> tuple[Option, ...]:
    """The console's checks and limits (docs/console.md); ``prefix`` for ``txmq server``'s flags."""
    p = f"--{prefix}"
    return (
        opt(f"{p}login", action="store_true",
            help="users log in with their own ACL account (always so when ACL is on)"),
        opt(f"{p}allowed-hosts", help="Host names the console answers to, comma-separated, besides its address and "
                                      "localhost"),
        opt(f"{p}read-timeout", type=float, default=10.0,
            help="seconds a client has to send a request's headers, then its body (default 10)"),
        opt(f"{p}max-connections", type=int, default=256, help="open connections at most (default 256)"),
        opt(f"{p}session-timeout", type=float, default=1800.0,
            help="seconds after which an unused login ends (default 1800)"),
        opt(f"{p}https-cert", help="serve HTTPS with this certificate (PEM)"),
        opt(f"{p}https-key", help="the HTTPS certificate's key (PEM)"),
    )


# What ``server`` and ``broker`` both pass on to the broker's config, as text: each is parsed and checked as its
# broker.conf key (``BrokerConfig.update``).
BROKER = (
    opt("--grpc-port", help="RocketMQ 5 gRPC port (default 8081, 0: free, -1: off)"),
    opt("--flush-disk-type", metavar="{ASYNC_FLUSH,SYNC_FLUSH}",
        help="SYNC_FLUSH: a send is answered once on disk (default ASYNC_FLUSH)"),
    opt("-c", "--config", help="RocketMQ broker.conf (keys: docs/configuration.md)"),
    opt("--store", help="store directory (default ~/store)"),
)


@TXMQ.command("server", "name server + broker in one process (the embedded default)", HOST,
              opt("--port", help="broker port (default 10911)"),
              opt("--namesrv-port", type=int, default=9876, help="name server port (default 9876)"),
              opt("--console-port", type=int, default=8080,
                  help="web console port (default 8080; 0: a free port, -1: off)"),
              *console_options("console-"), *BROKER, server=True)
def cmd_server(args: argparse.Namespace) -> int:
    from txmq.acl.setup import namesrv_validator
    from txmq.broker.controller import BrokerController
    from txmq.console import Console
    from txmq.launch import print_ready
    from txmq.namesrv.controller import NamesrvController
    from txmq.server import broker_config, run_process, serve

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


@TXMQ.command("console", "the web console for a cluster (RocketMQ Dashboard's pages)", HOST,
              opt("--port", type=int, default=8080, help="port (default 8080, 0: a free port)"), *console_options(),
              *CLIENT, server=True)
def cmd_console(args: argparse.Namespace) -> int:
    from txmq.console import Console
    from txmq.launch import print_ready
    from txmq.server import run_process, serve

    console = Console(console_config(args, "", args.host, args.port, namesrv_of(args), False))

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


@TXMQ.command("namesrv", "a name server", HOST, opt("--port", type=int, default=9876, help="port (default 9876)"),
              opt("-c", "--config", help="properties file with the remoting server's limits "
                                         "(serverChannelMaxIdleTimeSeconds, serverMaxConnections, ...)"),
              opt("--acl-file", help="plain_acl.yml: switches ACL on; broker registration needs an admin account"),
              opt("--auth-store", help="with --acl-file: where users and ACLs made by the admin commands are kept "
                                       "(default ~/namesrv/auth.json; one per name server)"),
              opt("--tls-mode", choices=["disabled", "permissive", "enforcing"], default="disabled",
                  help="RocketMQ's tls.server.mode"),
              opt("--tls-cert", help="tls.server.certPath"), opt("--tls-key", help="tls.server.keyPath"),
              opt("--enable-controller-in-namesrv", action="store_true",
                  help="also run a controller (automatic failover) in this process"),
              opt("--etcd", help="the controller's etcd endpoints http://HOST:PORT[,...]"),
              opt("--controller-port", type=int, default=9878,
                  help="port of the controller run inside the name server (RocketMQ's 9878)"), server=True)
def cmd_namesrv(args: argparse.Namespace) -> int:
    from txmq.acl.setup import namesrv_auth_store_path, namesrv_validator
    from txmq.launch import print_ready
    from txmq.namesrv.controller import NamesrvController
    from txmq.remoting.tls import TlsServerConfig
    from txmq.server import namesrv_limits, run_process, serve

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


@TXMQ.command("broker", "a broker registering with name servers", *CLIENT,
              opt("--host", default=None, help="address to listen on and register (default brokerIP1)"),
              opt("--port", help="port (default listenPort, 10911)"),
              opt("--broker-name", help="broker name (default brokerName, broker-a)"), *BROKER, server=True)
def cmd_broker(args: argparse.Namespace) -> int:
    from txmq.broker.controller import BrokerController
    from txmq.launch import print_ready
    from txmq.server import broker_config, run_process, serve

    config = broker_config(args.config, {"namesrvAddr": args.namesrv, "brokerIP1": args.host, "listenPort": args.port,
                                         "storePathRootDir": args.store, "brokerName": args.broker_name,
                                         "flushDiskType": args.flush_disk_type, "grpcPort": args.grpc_port})

    async def main() -> None:
        await serve(None, BrokerController(config), print_ready)
    return run_process(main())


@TXMQ.command("controller", "run a controller over etcd (automatic failover), or ask one its state",
              opt("action", nargs="?", choices=["run", "status"], default="run",
                  help="run (default): serve as a controller; status: ask one its groups"),
              opt("--etcd", help="etcd endpoints http://HOST:PORT[,...] (to run one)"),
              opt("--host", default="127.0.0.1", help="address to listen on (to run one)"),
              opt("--port", type=int, default=9878, help="controller port (RocketMQ's 9878)"),
              opt("--lease-ttl", type=int, default=2, help="seconds of the leader key's lease in etcd"),
              opt("--controller", default="127.0.0.1:9878", help="controller to ask (status)"),
              opt("--acl-file", help="plain_acl.yml: switches ACL on; brokers' requests need an admin account"),
              opt("--json", action="store_true", help="status: print JSON"),
              opt("--access-key", help="ACL account for status (default $TXMQ_ACCESS_KEY)"),
              opt("--secret-key", help="ACL secret (default $TXMQ_SECRET_KEY)"))
def cmd_controller(args: argparse.Namespace) -> int:
    """``txmq controller --etcd URL`` runs a controller; ``txmq controller status`` asks one."""
    if args.action == "status":
        from txmq.controller.status import controller_status

        data = controller_status(args.controller)
        if args.json:
            print_json(data)
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
    from txmq.launch import print_ready
    from txmq.server import run_process, serve

    acl = controller_validator(args.acl_file) if args.acl_file else None
    manager = ControllerManager(EtcdDCS(args.etcd), args.host, args.port, lease_ttl_s=args.lease_ttl, acl=acl)
    return run_process(serve(None, None, print_ready, controller=manager))
