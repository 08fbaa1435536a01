"""A writer process killed at a moment of the test's choosing: the crash tests' writers
(tests/store/crash_writer.py, tests/broker/topic_writer.py) print ``ready``, then a line per acknowledged write,
until SIGKILL."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

REPOSITORY = Path(__file__).resolve().parent.parent


def lines_until_killed(script: str | os.PathLike[str], args: Sequence[str], delay_s: float,
                       min_lines: int = 0) -> list[str]:
    """Run ``script`` with ``args`` (the repository on its path, for the writers' imports of tests' helpers),
    SIGKILL it ``delay_s`` after its ``ready`` and its first ``min_lines`` lines (so a slow disk or a busy machine
    shortens no run below what the test counts on), and return the lines it finished printing: a line the kill
    cut short is dropped."""
    env = dict(os.environ, PYTHONPATH=str(REPOSITORY) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    child = subprocess.Popen([sys.executable, str(script), *args], stdout=subprocess.PIPE, env=env)
    first: list[bytes] = []
    try:
        assert child.stdout is not None
        assert child.stdout.readline() == b"ready\n"
        while len(first) < min_lines:
            line = child.stdout.readline()
            assert line.endswith(b"\n"), f"the child stopped after {len(first)} lines"
            first.append(line)
        time.sleep(delay_s)
    finally:
        child.send_signal(signal.SIGKILL)
        out, _ = child.communicate()
    assert child.returncode == -signal.SIGKILL
    lines = (b"".join(first) + out).decode().split("\n")
    lines.pop()  # after the last newline: empty, or the line the kill cut short
    return lines
