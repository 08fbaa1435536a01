"""``bench/txlog.py --short`` runs (its own PostgreSQL and txmq server) and prints its table: the bench keeps
working. Never a speed: the figures are in docs/benchmarks.md."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench" / "txlog.py"


def test_the_bench_prints_its_table() -> None:
    done = subprocess.run([sys.executable, str(BENCH), "--short"], capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    out = done.stdout
    assert re.search(r"^TransactionLog on PostgreSQL \d+", out, re.M), out
    for way in ("plain database transaction (no txmq)", "TransactionLog, no broker", "txmq + TransactionLog"):
        assert re.search(rf"^{re.escape(way)}\s+[\d,]+\s+[\d,]+$", out, re.M), out
    assert re.search(r"^plain / \(txmq \+ TransactionLog\): \d+\.\d\dx", out, re.M), out
