from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from cluster import Cluster


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    """A name server already started; start brokers with ``cluster.start_broker(name, conf)``."""
    c = Cluster(tmp_path)
    c.start_namesrv()
    try:
        yield c
    finally:
        c.close()
