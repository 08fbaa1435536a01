"""glibc's malloc told to give large freed blocks back to the system at once, in a serving process.

glibc serves a request above its mmap threshold (128 KiB at start) with a mapping of its own, unmapped when freed,
but raises the threshold to the size of each such block freed (up to 32 MiB), and the heap's trim threshold to
twice that. A broker with many queues makes blocks of tens of MiB now and then (a thorough checkpoint's tails
journal: about 25 MB at 80,000 queues, and its copy with the header): after the first was freed, the later ones
came from the heap, and up to twice their size of freed heap stayed resident. At 10,000 topics under sustained
sends that was about 50 MB of the broker's RSS (docs/benchmarks.md, the topics curve). Setting the threshold
(``M_MMAP_THRESHOLD``) turns the adjustment off: such blocks are mapped, and unmapped when freed; the trim
threshold is fixed too (an adjustment made before, during recovery, would stay).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging

log = logging.getLogger("txmq")

M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # glibc's mallopt parameter numbers (malloc.h)
# Fixed, for both: above glibc's starting 128 KiB, so that a group commit's buffer of a few hundred KiB still comes
# from the heap (a mapping of its own would cost it page faults at every group)
THRESHOLD_BYTES = 1 << 20


def return_freed_blocks() -> bool:
    """Fix glibc's mmap and trim thresholds (True when set; False on a C library without ``mallopt``, left as it
    is)."""
    name = ctypes.util.find_library("c")
    if name is None:
        return False
    try:
        mallopt = ctypes.CDLL(name).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    if mallopt(M_MMAP_THRESHOLD, THRESHOLD_BYTES) != 1 or mallopt(M_TRIM_THRESHOLD, THRESHOLD_BYTES) != 1:
        log.warning("mallopt(M_MMAP_THRESHOLD) refused: large freed blocks may stay resident")
        return False
    return True
