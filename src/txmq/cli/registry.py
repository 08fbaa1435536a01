"""How a ``txmq`` command is declared: beside its handler, with its flags, in a table that builds the argparse
subcommands::

    @TXMQ.command("send", "send messages", opt("--topic", required=True, help="topic to send to"), *CLIENT)
    def cmd_send(args: argparse.Namespace) -> int: ...

``TXMQ`` holds txmq's own commands; ``txmq admin`` is one of them, with a table of its own (mqadmin's commands,
``txmq.admin.commands``)."""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, TypeVar

F = TypeVar("F", bound=Callable[..., int])


@dataclass(frozen=True)
class Option:
    """One flag or positional argument: ``ArgumentParser.add_argument``'s arguments."""

    flags: tuple[str, ...]
    kw: dict[str, Any]

    def add_to(self, parser: Any) -> None:
        parser.add_argument(*self.flags, **self.kw)


@dataclass(frozen=True)
class OneOf:
    """Options of which at most one may be given."""

    options: tuple[Option, ...]

    def add_to(self, parser: argparse.ArgumentParser) -> None:
        group = parser.add_mutually_exclusive_group()
        for option in self.options:
            option.add_to(group)


def opt(*flags: str, **kw: Any) -> Option:
    return Option(flags, kw)


def one_of(*options: Option) -> OneOf:
    return OneOf(options)


@dataclass
class Command:
    name: str
    help: str
    options: Sequence[Option | OneOf]
    handler: Callable[..., int]
    sub: Commands | None = None  # the command's own subcommands


@dataclass
class Commands:
    """A table of subcommands. ``dest`` names the chosen one in the parsed arguments and ``handler_key`` its
    handler; ``trailing`` options follow each command's own (mqadmin's ``-n``); ``describe``: a command's help is
    also its ``--help`` description."""

    dest: str
    handler_key: str = "fn"
    metavar: str | None = None
    trailing: Sequence[Option] = ()
    describe: bool = False
    commands: dict[str, Command] = field(default_factory=dict)
    servers: set[str] = field(default_factory=set)  # commands that run a server until signalled

    def command(self, name: str, help: str, *options: Option | OneOf, sub: Commands | None = None,
                server: bool = False) -> Callable[[F], F]:
        """Declare the decorated function as the handler of ``name``."""
        def register(fn: F) -> F:
            if name in self.commands:
                raise ValueError(f"command {name} is declared twice")
            self.commands[name] = Command(name, help, options, fn, sub)
            if server:
                self.servers.add(name)
            return fn
        return register

    def add_to(self, parser: argparse.ArgumentParser) -> None:
        """One subcommand of ``parser`` per declared command, in the order they were declared."""
        subparsers = parser.add_subparsers(dest=self.dest, required=True, metavar=self.metavar)
        for c in self.commands.values():
            p = subparsers.add_parser(c.name, help=c.help, description=c.help if self.describe else None)
            for option in (*c.options, *self.trailing):
                option.add_to(p)
            if c.sub is not None:
                c.sub.add_to(p)
            p.set_defaults(**{self.handler_key: c.handler})


NAMESRV_HELP = "name server HOST:PORT (default $NAMESRV_ADDR or 127.0.0.1:9876)"

# A client's connection: the name server and the account and TLS every client this command makes uses (``main``
# puts them in the environment). ``-n`` is also taken after the subcommand; SUPPRESS keeps one given before it.
CLIENT = (
    opt("-n", "--namesrv", default=argparse.SUPPRESS, help=NAMESRV_HELP),
    opt("--access-key", help="ACL account (default $TXMQ_ACCESS_KEY)"),
    opt("--secret-key", help="ACL secret (default $TXMQ_SECRET_KEY)"),
    opt("--tls", action="store_true", help="TLS to name servers and brokers (default $TXMQ_TLS)"),
    opt("--tls-trust-cert", help="CA bundle the servers' certificates are checked against "
                                 "(default $TXMQ_TLS_TRUST_CERT_PATH, else the system's CAs)"),
)



def parse_time(text: str) -> int:
    """mqadmin's timestamps: milliseconds, ``now``, ``yyyy-MM-dd#HH:mm:ss:SSS``, or ISO 8601 (local time)."""
    if text == "now":
        return int(time.time() * 1000)
    if text.lstrip("-").isdigit():
        return int(text)
    for parse in (lambda t: datetime.strptime(t, "%Y-%m-%d#%H:%M:%S:%f"), datetime.fromisoformat):
        try:
            when = parse(text)
        except ValueError:
            continue
        # Whole seconds then the milliseconds: the float of ``timestamp() * 1000`` falls just below many
        # millisecond values, and truncated they came out a millisecond early
        return int(when.replace(microsecond=0).timestamp()) * 1000 + when.microsecond // 1000
    raise argparse.ArgumentTypeError(f"{text!r}: give milliseconds, 'now', yyyy-MM-dd#HH:mm:ss:SSS or "
                                     "2024-05-01T12:00:00")


def print_json(data: Any) -> None:
    print(json.dumps(data, indent=2, sort_keys=True, default=str))


def namesrv_of(args: argparse.Namespace) -> str | None:
    """The name server a client command was given (``-n``, before or after the subcommand), or None: the client's
    default."""
    return getattr(args, "namesrv", None)


TXMQ = Commands("command")
