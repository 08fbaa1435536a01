"""The databases of the transaction log's tests and ``bench/txlog.py``: ``create_engine`` for a SQLite file or a
PostgreSQL URL, and a real PostgreSQL server: Debian's ``postgresql`` binaries, ``initdb`` into a new temporary
directory, ``postgres`` on a free port of 127.0.0.1 (no Unix socket), run as an unprivileged user when this
process is root (PostgreSQL refuses to run as root), stopped by pid."""

from __future__ import annotations

import contextlib
import itertools
import os
import pwd
import re
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any, Self

from txmq.launch import free_port

SUPERUSER = "postgres"  # the database's superuser (initdb -U), whatever the system user running the server
# SQLite has one writer at a time: a check waits for a local transaction in flight as long as this.
SQLITE_CONNECT_ARGS = {"timeout": 60}


def create_engine(url: str) -> Any:
    """A SQLAlchemy engine; SQLite's waits for the write lock up to a minute."""
    import sqlalchemy as sa

    return sa.create_engine(url, connect_args=SQLITE_CONNECT_ARGS if url.startswith("sqlite") else {})


_names = itertools.count()


def new_database_url(kind: str, tmp_path: Path, request: Any) -> str:
    """A new empty database for a test: a SQLite file under ``tmp_path``, or a new schema on the session's
    PostgreSQL server (the ``postgres`` fixture, started at its first use)."""
    if kind == "sqlite":
        return f"sqlite:///{tmp_path / f'app{next(_names)}.db'}"
    server: PostgresServer = request.getfixturevalue("postgres")
    return server.create_schema(f"t{next(_names)}")


def bin_dir() -> Path:
    """The newest PostgreSQL's binaries under Debian's /usr/lib/postgresql/<version>/bin."""
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/postgres"),
                   key=lambda p: [int(x) for x in re.findall(r"\d+", p.parent.parent.name)])
    if found:
        return found[-1].parent
    on_path = shutil.which("postgres")
    if on_path is None:
        raise RuntimeError("PostgreSQL is not installed: `make test` installs Debian's postgresql package")
    return Path(on_path).resolve().parent


def _run_as() -> dict[str, Any]:
    """Popen arguments that drop root for the server: Debian's ``postgres`` system user, else ``nobody``."""
    if os.geteuid() != 0:
        return {}
    for name in ("postgres", "nobody"):
        with contextlib.suppress(KeyError):
            pw = pwd.getpwnam(name)
            return {"user": pw.pw_uid, "group": pw.pw_gid, "extra_groups": []}
    raise RuntimeError("running as root and no unprivileged user (postgres, nobody) to run PostgreSQL as")


class PostgresServer:
    """One PostgreSQL cluster in its own temporary directory; ``stop`` and ``start`` again keep its data."""

    def __init__(self) -> None:
        self.bin = bin_dir()
        self.root = Path(tempfile.mkdtemp(prefix="txmq-pg-"))
        self.data = self.root / "data"
        self.log_path = self.root / "postgres.log"
        self.port = free_port()
        self.popen: subprocess.Popen[bytes] | None = None
        self._as = _run_as()
        if self._as:
            os.chown(self.root, self._as["user"], self._as["group"])
        self._env = dict(os.environ, HOME=str(self.root), LC_ALL="C")
        subprocess.run([str(self.bin / "initdb"), "-D", str(self.data), "-U", SUPERUSER, "-A", "trust", "-E", "UTF8",
                        "--no-locale", "--no-sync", "--no-instructions"],
                       check=True, capture_output=True, env=self._env, **self._as)

    def url(self, database: str = "postgres") -> str:
        """A SQLAlchemy URL (psycopg 3) for ``database``."""
        return f"postgresql+psycopg://{SUPERUSER}@127.0.0.1:{self.port}/{database}"

    def start(self, timeout: float = 30.0) -> Self:
        with open(self.log_path, "ab") as log:
            self.popen = subprocess.Popen(
                [str(self.bin / "postgres"), "-D", str(self.data), "-h", "127.0.0.1", "-p", str(self.port),
                 "-c", "unix_socket_directories=", "-c", "max_connections=200"],
                stdout=log, stderr=log, env=self._env, start_new_session=True, **self._as)
        deadline = time.monotonic() + timeout
        while not self.accepting():
            if self.popen.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"PostgreSQL did not start:\n{self.log_path.read_text()[-3000:]}")
            time.sleep(0.05)
        return self

    def accepting(self) -> bool:
        import psycopg

        try:
            with psycopg.connect(host="127.0.0.1", port=self.port, user=SUPERUSER, dbname="postgres",
                                 connect_timeout=2):
                return True
        except psycopg.OperationalError:
            return False

    def stop(self, timeout: float = 30.0, sig: int = signal.SIGINT) -> None:
        """Fast shutdown by default (SIGINT: sessions are ended, the server checkpoints); SIGQUIT is immediate
        (no checkpoint: for a cluster about to be deleted). SIGKILL after ``timeout``."""
        if self.popen is None:
            return
        if self.popen.poll() is None:
            self.popen.send_signal(sig)
            try:
                self.popen.wait(timeout)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait(10)
        self.popen = None

    def create_schema(self, name: str) -> str:
        """A new empty schema of database ``postgres`` (far cheaper than a database); returns a URL whose
        connections have it as their ``search_path``."""
        import psycopg

        with psycopg.connect(host="127.0.0.1", port=self.port, user=SUPERUSER, dbname="postgres",
                             autocommit=True) as conn:
            conn.execute(f'CREATE SCHEMA "{name}"')
        return f"{self.url()}?options=-csearch_path%3D{name}"

    def close(self) -> None:
        self.stop(sig=signal.SIGQUIT)
        shutil.rmtree(self.root, ignore_errors=True)
