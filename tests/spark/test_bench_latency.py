"""``bench/spark_latency.py``, short (its own txmq server and local session, a few seconds at a low rate), runs
and prints its table: the bench keeps working. Never a speed: the figures are in docs/benchmarks.md."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench" / "spark_latency.py"
NUM = r"\d+\.\d{3}"


def test_the_latency_bench_prints_its_table() -> None:
    done = subprocess.run([sys.executable, str(BENCH), "--rate", "50", "--seconds", "3", "--warmup", "1"],
                          capture_output=True, text=True, timeout=280)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    out = done.stdout
    assert re.search(r"^latency, send → visible, 50 msg/s", out, re.M), out
    for sink in ("exactly-once", "parquet"):
        # every message sent was seen; the percentiles are numbers
        m = re.search(rf"^{sink}\s+150\s+(\d+)\s+{NUM}\s+{NUM}\s+{NUM}\s+{NUM}\s+\d+\s+\d+$", out, re.M)
        assert m and int(m.group(1)) > 0, out
        assert re.search(rf"^{sink}(\s+\d+){{6}}$", out, re.M), out
