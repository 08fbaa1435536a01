"""``return_freed_blocks``: after a block of tens of MB was freed, a later one of that size no longer stays
resident once freed (glibc's adjusted thresholds had it served from the heap and kept)."""

from __future__ import annotations

import subprocess
import sys

_CHILD = """
import sys
from txmq.malloc_tune import return_freed_blocks

def rss_kb():
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))

first = bytes(bytearray(30 << 20))  # mapped, and its free raises glibc's thresholds to 30 MiB / 60 MiB
del first
if sys.argv[1] == "tuned":
    assert return_freed_blocks()
before = rss_kb()
blocks = [bytearray(b"x" * (1 << 20)) * 20 for _ in range(2)]  # written: resident
del blocks
print(rss_kb() - before)
"""


def _left_resident_kb(mode: str) -> int:
    out = subprocess.run([sys.executable, "-c", _CHILD, mode], check=True, capture_output=True, text=True)
    return int(out.stdout)


def test_large_freed_blocks_go_back_to_the_system() -> None:
    assert _left_resident_kb("untuned") > 20_000  # the case: about 40 MB kept by the heap
    assert _left_resident_kb("tuned") < 5_000
