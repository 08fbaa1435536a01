"""Free TCP ports: the kernel's choice for a listener bound at once, and one below the kernel's ephemeral range for a
process started later (``free_port``: the launcher's, the tests' and the benches')."""

from __future__ import annotations

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


def free_port(host: str = "127.0.0.1") -> int:
    """A port free now for a process started later, chosen below the kernel's ephemeral range: every outgoing
    connection and port-0 listener draws its port from that range, so a port picked there and bound seconds later
    could be taken meanwhile (two fresh-clone CI runs lost a controller's and an HA port so). Never the same port
    twice in one process."""
    low = _ephemeral_low()
    for _ in range(1000):
        port = random.randrange(max(1024, low - 20_000), low)
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
