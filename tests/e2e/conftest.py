from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.cluster import Cluster


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    """A name server already started; start brokers with ``cluster.start_broker(name, conf)``."""
    c = Cluster(tmp_path)
    c.start_namesrv()
    try:
        yield c
    finally:
        c.close()
