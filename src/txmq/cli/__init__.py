"""The ``txmq`` command: servers, admin, send and consume, transactions, stats. Each command is declared beside
its handler with its flags (``txmq.cli.registry``): the servers in ``servers.py``, the clients in ``clients.py``,
mqadmin's commands in ``txmq.admin.commands``."""

from __future__ import annotations

import argparse
import errno
import importlib
import os
import re
import sys
from pathlib import Path

from txmq.conf import parse_properties
from txmq.errors import TxmqError

# The modules that declare commands, in the order ``txmq --help`` lists them.
COMMAND_MODULES = ("txmq.cli.servers", "txmq.cli.clients", "txmq.admin.commands", "txmq.admin.auth_commands")


def build_parser() -> argparse.ArgumentParser:
    from txmq.cli.registry import NAMESRV_HELP, TXMQ
    from txmq.version import VERSION

    p = argparse.ArgumentParser(prog="txmq", description="txmq: a transactional message broker (RocketMQ's design)")
    p.add_argument("-n", "--namesrv", help=NAMESRV_HELP)
    p.add_argument("--version", action="version", version=f"txmq {VERSION}", help="print txmq's version and exit")
    p.add_argument("--log-level", choices=["DEBUG", "INFO", "WARNING", "ERROR"],
                   help="log level on stderr (default INFO for servers, WARNING for the other commands)")
    for module in COMMAND_MODULES:
        importlib.import_module(module)
    TXMQ.add_to(p)
    return p


def main(argv: list[str] | None = None) -> int:
    import logging

    from txmq.cli.registry import TXMQ

    args = build_parser().parse_args(argv)
    server = args.command in TXMQ.servers
    # Every client this command makes reads its account and TLS settings from the environment (txmq.client.base).
    for flag, var in (("access_key", "TXMQ_ACCESS_KEY"), ("secret_key", "TXMQ_SECRET_KEY"),
                      ("tls_trust_cert", "TXMQ_TLS_TRUST_CERT_PATH")):
        if getattr(args, flag, None):
            os.environ[var] = getattr(args, flag)
    if getattr(args, "tls", False):
        os.environ["TXMQ_TLS"] = "true"
    level = args.log_level or ("INFO" if server else "WARNING")
    logging.basicConfig(level=getattr(logging, level), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        return int(args.fn(args) or 0)
    except TxmqError as exc:
        print(f"txmq {args.command}: {exc}", file=sys.stderr)
        return 1
    except (OSError, ValueError) as exc:  # servers: a busy port, a missing or bad config file
        if not server:
            raise
        print(f"txmq {args.command}: {server_error(exc, args)}", file=sys.stderr)
        return 1


def server_error(exc: Exception, args: argparse.Namespace) -> str:
    if isinstance(exc, FileNotFoundError):
        return f"no such file: {exc.filename}"
    if isinstance(exc, OSError) and exc.errno == errno.EADDRINUSE:
        flag = port_flag(exc, args)
        return f"{exc.strerror or exc}: another process listens on that port (choose another with {flag})"
    return str(exc)


def port_flag(exc: OSError, args: argparse.Namespace) -> str:
    """The flag or config key that set the port a bind found taken: ``txmq server`` has one flag per listener
    (--port is the broker's) and broker.conf several ports, so naming --port for another sent people to change the
    wrong one."""
    taken = re.findall(r"(\d+)\)", str(exc.strerror or exc))
    if not taken:
        return "--port"
    flags = [f"--{dest.replace('_', '-')}" for dest, value in vars(args).items()
             if dest.endswith("port") and value is not None and str(value) == taken[-1]]
    if len(flags) == 1:
        return flags[0]
    config = getattr(args, "config", None)
    conf = _config_file(config)
    keys = [k for k, v in conf.items() if k.lower().endswith("port") and v.strip() == taken[-1]]
    if len(keys) == 1:
        return f"{keys[0]} in {config}"
    if config and "haListenPort" not in conf and conf.get("listenPort", "").strip() == str(int(taken[-1]) - 1):
        return f"haListenPort in {config}, listenPort + 1 while unset"
    return "--port"


def _config_file(path: str | None) -> dict[str, str]:
    """The keys of a server's ``-c`` file (none when there is none or it cannot be read: the error is about a
    port)."""
    if not path:
        return {}
    try:
        return parse_properties(Path(path).read_text())
    except (OSError, ValueError):
        return {}

