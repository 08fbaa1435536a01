"""``bench/timer.py --short`` runs and prints its table: the bench keeps working. Never a speed: the figures are in
docs/benchmarks.md ("Timer messages")."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench" / "timer.py"


def test_the_bench_prints_its_table() -> None:
    done = subprocess.run([sys.executable, str(BENCH), "--short"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    out = done.stdout
    for figure in ("timers stored", "timers indexed", "timers delivered", "lateness at 2,000 due/s, p50",
                   "lateness at 2,000 due/s, p99", "RSS with 50,000 scheduled", "timer index on disk"):
        assert re.search(rf"^{re.escape(figure)}.*\s[\d,.]+$", out, re.M), out
    assert re.search(r"^delivered of 4,000 due\s+4,000$", out, re.M), out
    earliest = re.search(r"^lateness, earliest \(ms; never below 0\)\s+(-?[\d,]+)$", out, re.M)
    assert earliest is not None and int(earliest.group(1).replace(",", "")) >= 0, out
