"""Free TCP ports: the kernel's choice for a listener bound at once, and one below the kernel's ephemeral range for a
process started later (``free_port``: the launcher's, the tests' and the benches')."""

from __future__ import annotations

import os
import random
import socket
from pathlib import Path

_EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")
_handed_out: set[int] = set()


def _ephemeral_low() -> int:
    try:
        return int(_EPHEMERAL_RANGE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768  # Linux's default


def free_range() -> tuple[int, int]:
    """The ports ``free_port`` picks from: the 20,000 below the kernel's ephemeral range."""
    ephemeral = _ephemeral_low()
    return max(1024, ephemeral - 20_000), ephemeral


def _share(low: int, high: int) -> tuple[int, int]:
    """``TXMQ_PORT_SLICE=k/n``: the k-th of n equal parts of [low, high), so that n processes picking ports at the
    same moment (a test run's parallel workers, and the servers each of them starts) never pick the same one."""
    k, _, n = os.environ.get("TXMQ_PORT_SLICE", "0/1").partition("/")
    try:
        index, count = int(k), int(n)
    except ValueError:
        return low, high
    if not 0 <= index < count:
        return low, high
    width = (high - low) // count
    return low + index * width, low + (index + 1) * width


def free_port(host: str = "127.0.0.1") -> int:
    """A port free now for a process started later, chosen below the kernel's ephemeral range: every outgoing
    connection and port-0 listener draws its port from that range, so a port picked there and bound seconds later
    could be taken meanwhile (two fresh-clone CI runs lost a controller's and an HA port so). Never the same port
    twice in one process; within this process's share of the range when ``TXMQ_PORT_SLICE`` names one."""
    low, high = _share(*free_range())
    for _ in range(1000):
        port = random.randrange(low, high)
        if port in _handed_out:
            continue
        with socket.socket() as s:
            try:
                s.bind((host, port))
            except OSError:
                continue
        _handed_out.add(port)
        return port
    return pick_free_port(host)  # a range below the ephemeral one with nothing free: the kernel's choice


def pick_free_port(host: str = "127.0.0.1") -> int:
    """A port the kernel says is free now (its ephemeral range): for a listener bound at once."""
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])
