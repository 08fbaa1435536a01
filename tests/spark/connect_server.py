"""A Spark Connect server on 127.0.0.1, started from pyspark's own package (its ``jars/`` ship
``spark-connect_2.13-<version>.jar``): ``$SPARK_HOME/bin/spark-submit --class
org.apache.spark.sql.connect.service.SparkConnectServer`` with ``spark.connect.grpc.binding.address/port`` on a
free port, ``--master local[2]``, in a session of its own. ``spark-class`` ends by exec'ing the JVM, so the pid
of the child is the server's JVM: ``kill()`` SIGKILLs it (a crash), ``stop()`` SIGTERMs it and waits. Its Python
workers belong to pyspark daemons that put themselves in process groups of their own but stay in the server's
session; they leave once the JVM is gone (a daemon exits when the JVM's end of its pipe closes, and SIGHUPs its
workers). Both then wait for that and SIGKILL, by pid, whatever of the session is left.

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

from tests.spark.standalone import spark_home
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

    def kill(self) -> list[str]:
        """SIGKILL the server's JVM (a crash); returns the processes of its session that had not left 10 s later
        (and were SIGKILLed then), as "pid command line"."""
        assert self.proc is not None
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(30)
        return self._reap_group()

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

    def _reap_group(self, wait_s: float = 10) -> list[str]:
        """Wait up to ``wait_s`` for the server's session (its Python workers) to end; SIGKILL what is left and
        return those ("pid command line")."""
        assert self.proc is not None
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline and self.session_pids():
            time.sleep(0.2)
        left = []
        for pid in self.session_pids():
            with contextlib.suppress(OSError):
                cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                left.append(f"{pid} {cmdline}")
                os.kill(pid, signal.SIGKILL)
        return left

    def session_pids(self) -> list[int]:
        """The live processes of the server's session (its JVM, pyspark daemons and their workers)."""
        assert self.proc is not None
        pids = []
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                with contextlib.suppress(OSError, IndexError, ValueError):
                    fields = (entry / "stat").read_text().rsplit(") ", 1)[1].split()
                    if fields[0] != "Z" and int(fields[3]) == self.proc.pid:
                        pids.append(int(entry.name))
        return pids

    def log_tail(self, n: int = 3000) -> str:
        try:
            return self.log.read_text(errors="replace")[-n:]
        except OSError:
            return ""
