"""A fake wall clock for real processes: libfaketime (Debian's ``faketime`` package; ``make test`` installs it)
preloaded into the brokers, name servers, controllers and client drivers a test starts, all reading one offset
from the real clock out of a file, so a test moves their wall clock together (``step``, ``at``) while the
monotonic clock stays real.

What it takes under libfaketime 0.9.10 with CPython 3.11 (measured here):

* ``FAKETIME_DONT_FAKE_MONOTONIC=1``: a faked CLOCK_MONOTONIC hangs ``threading.Event.wait``;
* with it, ``time.sleep`` fails with EINVAL (its ``clock_nanosleep`` on an absolute monotonic deadline): no
  process under the fake clock may call it on the paths a test runs (the servers do not; the driver waits with
  ``threading.Event``);
* ``NO_FAKE_STAT=1`` keeps file times real;
* ``FAKETIME_CACHE_DURATION=1``: each process reads the file again once its cached reading is a second old (in
  whole seconds), so a step takes effect within two seconds (``step`` waits ``SETTLE_S``);
* offsets are whole seconds ("+3600", "-120"); each process leaves an 8-byte shared-memory file and a semaphore in
  /dev/shm named by its pid, removed here (``forget``) once it has exited.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import time
from collections.abc import Iterable
from pathlib import Path

LIBFAKETIME = next(iter(sorted(Path("/usr/lib").glob("*/faketime/libfaketime.so.1"))),
                   Path("/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1"))  # Debian's multiarch path
SETTLE_S = 2.1  # FAKETIME_CACHE_DURATION=1: measured here, a process saw a new offset 1.3-2 s after it was written


def require_libfaketime() -> None:
    assert LIBFAKETIME.exists(), f"{LIBFAKETIME} is missing: install Debian's faketime package (make test does)"


class FakeClock:
    """The offset file and the environment that puts a process on it."""

    def __init__(self, path: Path) -> None:
        require_libfaketime()
        self.path = path
        self.offset: float = 0
        self._write(0)

    def env(self, tz: str | None = None) -> dict[str, str]:
        """What a process needs in its environment to run on this clock (``tz``: its TZ)."""
        env = {"LD_PRELOAD": str(LIBFAKETIME), "FAKETIME_TIMESTAMP_FILE": str(self.path),
               "FAKETIME_DONT_FAKE_MONOTONIC": "1", "NO_FAKE_STAT": "1", "FAKETIME_CACHE_DURATION": "1"}
        if tz is not None:
            env["TZ"] = tz
        return env

    def _write(self, offset: float) -> None:
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(f"{offset:+.3f}\n" if offset % 1 else f"{int(offset):+d}\n")  # libfaketime takes fractions
        os.replace(tmp, self.path)  # a reader never sees half a line
        self.offset = offset

    def set_offset(self, seconds: float, settle: bool = True) -> None:
        self._write(round(seconds, 3))
        if settle:
            time.sleep(SETTLE_S)

    def step(self, seconds: float, settle: bool = True) -> None:
        """Step every process's wall clock by ``seconds``, to the ms (NTP correcting it, a VM restored, an
        operator)."""
        self.set_offset(self.offset + seconds, settle)

    def at(self, when: dt.datetime, settle: bool = True) -> None:
        """Set every process's wall clock to ``when`` (aware), running on from there."""
        self.set_offset(round(when.timestamp() - time.time()), settle)

    def now(self) -> float:
        """The fake wall clock, in seconds since the epoch."""
        return time.time() + self.offset


def forget(pids: Iterable[int | None]) -> None:
    """Remove the shared-memory file and semaphore libfaketime made for each of ``pids`` (exited processes)."""
    for pid in pids:
        if pid is None:
            continue
        for name in (f"faketime_shm_{pid}", f"sem.faketime_sem_{pid}"):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(f"/dev/shm/{name}")
