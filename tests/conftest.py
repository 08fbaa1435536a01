"""Shared by every folder of the suite: ``disk_helpers`` (a real tmpfs that fills up) and ``compiled`` are importable
from all."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from compiled import install_source_first

install_source_first()  # TXMQ_INTERPRETED=1: the compiled modules from their .py files (tests/compiled.py)
