"""A standalone Spark cluster (one master, one worker) on 127.0.0.1, started from the pip package of pyspark:
``$SPARK_HOME/sbin/spark-daemon.sh start org.apache.spark.deploy.master.Master 1 --host 127.0.0.1 ...`` and the
worker likewise, where ``SPARK_HOME`` is pyspark's own directory (the wheel ships ``bin/``, ``sbin/`` and
``jars/``). Everything it writes (logs, pid files, the worker's work directory, an empty conf directory so no
``spark-defaults.conf`` of the machine applies) lives under one root directory; every port is a free one.

``stop()`` always leaves nothing behind: ``spark-daemon.sh stop`` (SIGTERM), a wait for both JVMs, SIGKILL after
a timeout, then any process still running in (or naming) the root directory — executors and their Python
workers, which run in the worker's work directory — is killed too."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

from txmq.launch import free_port

MASTER = "org.apache.spark.deploy.master.Master"
WORKER = "org.apache.spark.deploy.worker.Worker"


class StandaloneError(RuntimeError):
    pass


def spark_home() -> Path:
    """pyspark's package directory: in the pip package it holds ``bin/spark-class``, ``sbin/spark-daemon.sh``
    and ``jars/``."""
    import pyspark

    home = Path(pyspark.__file__).resolve().parent
    for needed in ("sbin/spark-daemon.sh", "bin/spark-class", "jars"):
        if not (home / needed).exists():
            raise StandaloneError(f"pyspark at {home} has no {needed}: cannot start a standalone cluster")
    return home


def kill_processes_under(marker: Path, sig: int = signal.SIGKILL) -> list[int]:
    """Send ``sig`` to every process whose working directory is under ``marker`` or whose command line names it
    (never this process). Returns their pids."""
    marker_s = str(marker)
    hit = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            try:
                cwd = os.readlink(entry / "cwd")
            except OSError:
                cwd = ""
        except OSError:
            continue
        if marker_s in cmdline or cwd == marker_s or cwd.startswith(marker_s + "/"):
            try:
                os.kill(int(entry.name), sig)
                hit.append(int(entry.name))
            except ProcessLookupError:
                pass
    return hit


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ", 1)[1][0] != "Z"
    except OSError:
        return False


class StandaloneSpark:
    def __init__(self, root: Path, cores: int = 2, memory: str = "1g") -> None:
        self.root = root.resolve()
        self.home = spark_home()
        self.cores, self.memory = cores, memory
        self.port, self.webui_port, self.worker_webui_port = free_port(), free_port(), free_port()
        self.url = f"spark://127.0.0.1:{self.port}"
        self.pids: dict[str, int] = {}
        for d in ("conf", "logs", "pids", "work"):
            (self.root / d).mkdir(parents=True, exist_ok=True)
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("SPARK_", "PYSPARK_")) and k not in ("HADOOP_CONF_DIR", "YARN_CONF_DIR")}
        env.update({
            "SPARK_HOME": str(self.home), "SPARK_CONF_DIR": str(self.root / "conf"),
            "SPARK_LOG_DIR": str(self.root / "logs"), "SPARK_PID_DIR": str(self.root / "pids"),
            "SPARK_WORKER_DIR": str(self.root / "work"), "SPARK_IDENT_STRING": "txmq-test",
            "SPARK_LOCAL_IP": "127.0.0.1", "SPARK_MASTER_HOST": "127.0.0.1", "SPARK_DAEMON_MEMORY": "512m",
            "PYSPARK_PYTHON": sys.executable,
        })
        self.env = env

    # -- lifecycle ---------------------------------------------------------------------------------------------

    def start(self, timeout: float = 90.0) -> str:
        deadline = time.monotonic() + timeout
        self._daemon("start", MASTER, "--host", "127.0.0.1", "--port", str(self.port),
                     "--webui-port", str(self.webui_port))
        self._wait(deadline, "the master to be ALIVE", lambda s: s.get("status") == "ALIVE")
        self._daemon("start", WORKER, self.url, "--host", "127.0.0.1", "--cores", str(self.cores),
                     "--memory", self.memory, "--webui-port", str(self.worker_webui_port),
                     "--work-dir", str(self.root / "work"))
        self._wait(deadline, "the worker to register",
                   lambda s: any(w.get("state") == "ALIVE" for w in s.get("workers", [])))
        return self.url

    def stop(self, timeout: float = 30.0) -> None:
        for cls in (WORKER, MASTER):
            if cls in self.pids:
                with contextlib.suppress(subprocess.SubprocessError, OSError):
                    self._run_daemon_sh("stop", cls, timeout=20)
        deadline = time.monotonic() + timeout
        while any(_alive(p) for p in self.pids.values()) and time.monotonic() < deadline:
            time.sleep(0.2)
        for pid in self.pids.values():
            if _alive(pid):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        # Executors (children of the worker, in its work directory) and anything else of this cluster.
        kill_processes_under(self.root)
        # The daemons were nohup'd by spark-daemon.sh, so init reaps them: wait until they are gone from /proc.
        deadline = time.monotonic() + 10
        while any(Path(f"/proc/{p}").exists() for p in self.pids.values()) and time.monotonic() < deadline:
            time.sleep(0.1)

    # -- inspection --------------------------------------------------------------------------------------------

    def state(self) -> dict[str, Any]:
        """The master's ``/json`` document (status, workers, activeapps, completedapps, ...)."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.webui_port}/json/", timeout=5) as r:
            doc: dict[str, Any] = json.load(r)
        return doc

    def log(self, cls: str) -> Path | None:
        logs = sorted((self.root / "logs").glob(f"spark-*-{cls}-1-*.out"))
        return logs[-1] if logs else None

    def log_tail(self, lines: int = 30) -> str:
        parts = []
        for cls in (MASTER, WORKER):
            path = self.log(cls)
            if path is not None:
                tail = path.read_text(errors="replace").splitlines()[-lines:]
                parts.append(f"--- {path}\n" + "\n".join(tail))
        return "\n".join(parts) or f"(no logs in {self.root / 'logs'})"

    # -- internals ---------------------------------------------------------------------------------------------

    def _run_daemon_sh(self, action: str, cls: str, *args: str, timeout: float = 60) -> str:
        out = subprocess.run(["bash", str(self.home / "sbin" / "spark-daemon.sh"), action, cls, "1", *args],
                             env=self.env, cwd=self.root, capture_output=True, text=True, timeout=timeout,
                             stdin=subprocess.DEVNULL)
        return out.stdout + out.stderr

    def _daemon(self, action: str, cls: str, *args: str) -> None:
        out = self._run_daemon_sh(action, cls, *args)
        pid_file = self.root / "pids" / f"spark-txmq-test-{cls}-1.pid"
        try:
            pid = int(pid_file.read_text().strip())
        except (OSError, ValueError):
            raise StandaloneError(f"spark-daemon.sh {action} {cls} wrote no pid file:\n{out}\n"
                                  + self.log_tail()) from None
        self.pids[cls] = pid
        if "failed to launch" in out or not _alive(pid):
            raise StandaloneError(f"{cls} did not start:\n{out}\n{self.log_tail()}")

    def _wait(self, deadline: float, what: str, ok: Any) -> None:
        last: object = None
        while time.monotonic() < deadline:
            dead = [cls for cls, pid in self.pids.items() if not _alive(pid)]
            if dead:
                raise StandaloneError(f"{', '.join(dead)} exited while waiting for {what}:\n{self.log_tail()}")
            try:
                doc = self.state()
                if ok(doc):
                    return
                last = doc
            except OSError as e:  # UI not up yet
                last = e
            time.sleep(0.3)
        raise StandaloneError(f"timed out waiting for {what} (last answer: {last!r}):\n{self.log_tail()}")
