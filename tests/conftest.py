"""Shared by every folder of the suite: ``disk_helpers`` (a real tmpfs that fills up) is importable from all."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
