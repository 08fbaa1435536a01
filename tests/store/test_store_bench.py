"""``bench/store.py --queue-recovery`` runs and prints its lines (the open after a crash with many consume queues,
with and without a tails journal to write back): the bench keeps working. Never a speed: the figures are in
docs/benchmarks.md."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench" / "store.py"


def test_the_queue_recovery_bench_prints_both_lines(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, str(BENCH), "--queue-recovery", "40", "--quick", "--dir", str(tmp_path)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    for case in ("the queues fsynced", "a tails journal written back"):
        assert re.search(rf"^recovery after a crash, 40 topics x 8 queues, {case}: \d+ ms \(median of 1; 6 records "
                         r"scanned; page cache warm\)$", done.stdout, re.M), done.stdout
    assert list(tmp_path.iterdir()) == []  # its stores removed
