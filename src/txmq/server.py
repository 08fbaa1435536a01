"""Processes: ``txmq server`` (name server + broker in one process, the embedded default), ``txmq namesrv``
``txmq broker`` and ``txmq console``. Each prints its addresses once ready and stops cleanly on SIGTERM or SIGINT (the
broker flushes, persists offsets and writes its checkpoint)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from txmq.broker.config import BrokerConfig
from txmq.broker.controller import BrokerController
from txmq.controller.server import ControllerManager
from txmq.gctune import tune_gc
from txmq.malloc_tune import return_freed_blocks
from txmq.namesrv.controller import NamesrvController
from txmq.remoting.server import ServerLimits
from txmq.remoting.transport import run

if TYPE_CHECKING:
    from txmq.console import Console

log = logging.getLogger("txmq")

DEFAULT_CONSOLE_PORT = 8080


async def _until_signalled(ready: Callable[[], None]) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    ready()
    await stop.wait()
    log.info("stopping")


async def serve(namesrv: NamesrvController | None, broker: BrokerController | None,
                on_ready: Callable[[dict[str, str]], None], console: Console | None = None,
                controller: ControllerManager | None = None) -> None:
    """Start what is given, print the ready line, serve until signalled, stop in reverse order. The console's
    default port being taken leaves the process without it, with a warning. ``controller``: ``txmq controller``,
    or RocketMQ's enableControllerInNamesrv beside a name server."""
    try:
        if controller is not None:
            await controller.start()
        if namesrv is not None:
            await namesrv.start()
            if broker is not None and not broker.config.namesrv_addr:
                broker.config.namesrv_addr = namesrv.addr
        if broker is not None:
            await broker.start()
        if console is not None:
            console.namesrv = console.namesrv or (namesrv.addr if namesrv is not None else None)
            try:
                await console.start()
            except OSError as exc:
                if console.port != DEFAULT_CONSOLE_PORT:
                    raise
                log.warning("console not started: %s (set --console-port to serve it)", exc)
                console = None
        addrs = {}
        if namesrv is not None:
            addrs["namesrv"] = namesrv.addr
        if controller is not None:
            addrs["controller"] = controller.addr
        if broker is not None:
            addrs["broker"] = broker.addr
            if broker.grpc is not None:
                addrs["grpc"] = broker.grpc.addr
            if broker.metrics is not None:
                addrs["metrics"] = broker.metrics.addr
            addrs["store"] = str(broker.root)
        if console is not None:
            addrs["console"] = console.addr
        tune_gc()
        return_freed_blocks()
        await _until_signalled(lambda: on_ready(addrs))
    finally:
        if console is not None:
            await console.close()
        if broker is not None and broker.started:
            await broker.shutdown()
        if namesrv is not None:
            await namesrv.close()
        if controller is not None:
            await controller.close()


def run_process(main: Awaitable[None]) -> int:
    with contextlib.suppress(KeyboardInterrupt):
        run(main)
    return 0


def broker_config(args_conf: str | None, overrides: dict[str, object]) -> BrokerConfig:
    from txmq.broker.config import load_broker_conf

    config = load_broker_conf(args_conf) if args_conf else BrokerConfig()
    config.update({k: v for k, v in overrides.items() if v is not None})
    return config


def namesrv_limits(conf: str | None) -> ServerLimits:
    """The name server's remoting limits, from a properties file of ``ServerLimits`` keys (or the defaults),
    parsed and checked as broker.conf's."""
    from pathlib import Path

    from txmq.conf import parse_properties, set_keys

    limits = ServerLimits()
    if conf:
        unknown = set_keys(limits, parse_properties(Path(conf).read_text()))
        if unknown:
            log.warning("unknown name server config keys ignored: %s", ", ".join(sorted(unknown)))
    return limits
