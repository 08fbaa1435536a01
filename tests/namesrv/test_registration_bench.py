"""``bench/namesrv_registration.py`` with a small table runs and prints both of its lines: the bench keeps working.
Never a speed: the figures are in docs/benchmarks.md ("How cost grows")."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench" / "namesrv_registration.py"


def test_the_bench_prints_both_registrations() -> None:
    done = subprocess.run([sys.executable, str(BENCH), "--topics", "200", "--reps", "3"], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    for label in ("unchanged", "changed"):
        assert re.search(rf"^{label}: median [\d.]+ ms CPU \(min [\d.]+, max [\d.]+; 3 registrations of 200 "
                         rf"topics, [\d.]+ MB\)$", done.stdout, re.M), done.stdout
