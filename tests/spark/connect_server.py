"""A Spark Connect server on 127.0.0.1, started from pyspark's own package (its ``jars/`` ship
``spark-connect_2.13-<version>.jar``): ``$SPARK_HOME/bin/spark-submit --class
org.apache.spark.sql.connect.service.SparkConnectServer`` with ``spark.connect.grpc.binding.address/port`` on a
free port, ``--master local[2]``, in a session of its own. ``spark-class`` ends by exec'ing the JVM, so the pid
of the child is the server's JVM: ``kill()`` SIGKILLs it (its Python workers, children of the JVM's pyspark
daemon, leave with it: the daemon exits when the JVM's end of its pipe closes), ``stop()`` SIGTERMs it and waits,
and both kill whatever is left in its process group.

The server's Python workers must import ``txmq``: ``PYSPARK_PYTHON`` is this interpreter (the project's venv).
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from standalone import spark_home

from txmq.launch import free_port

SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"


class ConnectServer:
    def __init__(self, root: Path, port: int | None = None, master: str = "local[2]",
                 conf: dict[str, str] | None = None) -> None:
        self.root = root
        self.port = port or free_port()
        self.master = master
        self.conf = conf or {}
        self.proc: subprocess.Popen[bytes] | None = None
        self.log = root / "connect-server.log"

    @property
    def url(self) -> str:
        return f"sc://127.0.0.1:{self.port}"

    def start(self, timeout: float = 120) -> str:
        """Start the server and wait until its gRPC port accepts connections; returns ``sc://127.0.0.1:PORT``."""
        home = spark_home()
        self.root.mkdir(parents=True, exist_ok=True)
        (self.root / "conf").mkdir(exist_ok=True)  # no spark-defaults.conf of the machine applies
        conf = {"spark.connect.grpc.binding.address": "127.0.0.1", "spark.connect.grpc.binding.port": str(self.port),
                "spark.ui.enabled": "false", "spark.driver.host": "127.0.0.1", "spark.sql.shuffle.partitions": "2",
                **self.conf}
        args = [str(home / "bin" / "spark-submit"), "--class", SERVER_CLASS, "--name", "txmq-tests-connect",
                "--master", self.master]
        for key, value in conf.items():
            args += ["--conf", f"{key}={value}"]
        env = {**os.environ, "SPARK_HOME": str(home), "SPARK_CONF_DIR": str(self.root / "conf"),
               "SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": sys.executable,
               "PYSPARK_DRIVER_PYTHON": sys.executable, "SPARK_CONNECT_MODE": "0"}
        env.pop("SPARK_REMOTE", None)
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen(args, cwd=self.root, env=env, stdout=out, stderr=subprocess.STDOUT,
                                         start_new_session=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the Spark Connect server exited ({self.proc.returncode}): {self.log_tail()}")
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", self.port), 0.5):
                return self.url
            time.sleep(0.3)
        self.stop()
        raise TimeoutError(f"the Spark Connect server did not listen on {self.port} in {timeout}s: {self.log_tail()}")

    def kill(self) -> None:
        """SIGKILL the server's JVM (a crash), then anything left in its process group."""
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(30)
        self._reap_group()

    def stop(self, timeout: float = 30) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
        self._reap_group()

    def _reap_group(self, wait_s: float = 10) -> None:
        """The server's Python workers leave on their own once its JVM is gone; whatever has not after ``wait_s``
        is killed (by the process group, which is the server's pid)."""
        assert self.proc is not None
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline and _group_alive(self.proc.pid):
            time.sleep(0.2)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)

    def group_pids(self) -> list[int]:
        assert self.proc is not None
        return _group_pids(self.proc.pid)

    def log_tail(self, n: int = 3000) -> str:
        try:
            return self.log.read_text(errors="replace")[-n:]
        except OSError:
            return ""


def _group_pids(pgid: int) -> list[int]:
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError, IndexError, ValueError):
                fields = (entry / "stat").read_text().rsplit(") ", 1)[1].split()
                if fields[0] != "Z" and int(fields[2]) == pgid:
                    pids.append(int(entry.name))
    return pids


def _group_alive(pgid: int) -> bool:
    return bool(_group_pids(pgid))
