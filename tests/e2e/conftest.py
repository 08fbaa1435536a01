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


@pytest.fixture(params=[False, True], ids=["consume-threads", "listener-on-loop"])
def listener_on_loop(request: pytest.FixtureRequest) -> bool:
    """A push consumer's ``listener_on_loop``: the consume tests run with the listener on consume threads and on
    the client's loop, whose behaviour must be the same."""
    return bool(request.param)
