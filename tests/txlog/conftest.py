"""Fixtures for ``txmq.TransactionLog``: one real PostgreSQL server for the session (a new schema per test), a
SQLite file per test, and ``db_url``/``engine`` parametrized over both."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.txlog.databases import PostgresServer, create_engine, new_database_url

DATABASES = ["sqlite", "postgresql"]


@pytest.fixture(scope="session")
def postgres() -> Iterator[PostgresServer]:
    server = PostgresServer().start()
    try:
        yield server
    finally:
        server.close()


@pytest.fixture(params=DATABASES)
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    return new_database_url(request.param, tmp_path, request)


@pytest.fixture
def engine(db_url: str) -> Iterator[Any]:
    e = create_engine(db_url)
    try:
        yield e
    finally:
        e.dispose()


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Any]:
    """A name server already started (tests/e2e's ``Cluster``); start brokers with ``cluster.start_broker``."""
    from tests.e2e.cluster import Cluster

    c = Cluster(tmp_path)
    c.start_namesrv()
    try:
        yield c
    finally:
        c.close()
