"""WallClockBounds: wall-clock readings that a step of the wall clock cannot move past the time that really passed.

A wall clock can be stepped (a bad NTP source, a VM resumed with a stale clock, an operator) and then corrected.
Whatever compares a stored wall-clock stamp with "now" to decide that something is old enough to delete must not
believe a forward step, and whatever writes such a stamp must not believe a backward one. The *anchor* is the wall
clock when the object is made, advanced by the elapsed time of a monotonic clock (CLOCK_BOOTTIME where there is
one: it also counts a suspend, as the wall clock does). Against it:

* ``earliest_ms``, the earlier of the wall clock and the anchor, is never ahead of the anchor: a forward step does
  not move it; a backward step pulls it back (deleting later, never earlier) until the clock is corrected;
* ``latest_ms``, the later of the two, is never behind the anchor: a backward step does not move it back (what is
  stamped does not look older than it is); a forward step pushes it ahead (kept longer) until corrected.

The anchor itself is only as right as the wall clock was when it was taken. Taken ahead, it stops protecting only
while the clock is still that far ahead; taken behind, ``earliest_ms`` stays that far behind for the life of the
object (later, never earlier). A second clock (a database server's) is the reader's to take the earlier of.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

_BOOT_ID = Path("/proc/sys/kernel/random/boot_id")


def boot_id() -> str:
    """The kernel's id of this boot: CLOCK_MONOTONIC and CLOCK_BOOTTIME are comparable between processes of one boot
    only ("": not known)."""
    try:
        return _BOOT_ID.read_text().strip()
    except OSError:
        return ""


def elapsed_ns() -> int:
    """A monotonic clock that also counts a suspend (CLOCK_BOOTTIME on Linux; CLOCK_MONOTONIC elsewhere)."""
    boottime = getattr(time, "CLOCK_BOOTTIME", None)
    return time.clock_gettime_ns(boottime) if boottime is not None else time.monotonic_ns()


class WallClockBounds:
    """The bounds of one process (stateless after the anchor: thread-safe). ``wall_ns`` and ``elapsed_ns`` are
    injectable for tests."""

    def __init__(self, wall_ns: Callable[[], int] = time.time_ns,
                 elapsed_ns: Callable[[], int] = elapsed_ns) -> None:
        self._wall_ns = wall_ns
        self._elapsed_ns = elapsed_ns
        self._skew = wall_ns() - elapsed_ns()  # the anchor: wall = elapsed + skew when taken

    def earliest_ms(self) -> int:
        """Now, never ahead of the wall clock nor of the anchor."""
        return min(self._wall_ns(), self._elapsed_ns() + self._skew) // 1_000_000

    def latest_ms(self) -> int:
        """Now, never behind the wall clock nor the anchor."""
        return max(self._wall_ns(), self._elapsed_ns() + self._skew) // 1_000_000
