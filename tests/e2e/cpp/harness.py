"""Launch ``cpp_driver.py`` (the real RocketMQ C++ client) from pytest and collect its JSON lines.

Each run is a child process in its own session, with its own ``HOME`` (the C++ client writes
``$HOME/logs/rocketmq-cpp/``), killed with SIGTERM then SIGKILL if it outlives its deadline, so a hung client
never outlives the test. Typical use::

    from tests.e2e.cpp.harness import run_produce, start_consume

    sent = run_produce(namesrv, "T", 10, mode="sync", tags="TagA", keys_prefix="k", props={"color": "red"})
    handle = start_consume(namesrv, "T", "G", expect=10, timeout=30, props=["color"])
    result = handle.wait()            # ConsumeResult(messages=[...], summary={...}, returncode=0, ...)

``run_produce`` returns the ``sent`` lines (one per message, or one per batch) and raises ``DriverError``
when a send failed, unless ``check=False``. Messages are dicts as documented in ``cpp_driver.py``.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

DRIVER = Path(__file__).with_name("cpp_driver.py")
KILL_GRACE = 3.0  # seconds between SIGTERM and SIGKILL
_live: set[subprocess.Popen] = set()
_live_lock = threading.Lock()


class DriverError(RuntimeError):
    def __init__(self, message: str, lines: list[dict], stderr: str, returncode: int | None) -> None:
        super().__init__(f"{message} (rc={returncode}); stderr tail:\n{stderr[-2000:]}")
        self.lines = lines
        self.stderr = stderr
        self.returncode = returncode


def cpp_client_available() -> bool:
    """True when the ``rocketmq`` wrapper and its librocketmq load in this interpreter's environment."""
    probe = subprocess.run([sys.executable, "-c", "import rocketmq.client"], capture_output=True, timeout=60)
    return probe.returncode == 0


def _kill_group(proc: subprocess.Popen, grace: float = KILL_GRACE) -> None:
    """SIGTERM the driver's process group, SIGKILL it after ``grace`` seconds, reap it. Only while the leader is
    unreaped: once reaped, its pid (the group's id) may belong to another test's new session, and the driver starts
    no processes of its own that could outlive it."""
    if proc.poll() is None:
        for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 10.0)):
            try:
                os.killpg(proc.pid, sig)
            except ProcessLookupError:
                break
            try:
                proc.wait(timeout=wait)
                break
            except subprocess.TimeoutExpired:
                continue
    with _live_lock:
        _live.discard(proc)


def kill_all() -> None:
    """Kill every driver this module started and that still runs (for a session-end fixture)."""
    with _live_lock:
        procs = list(_live)
    for p in procs:
        _kill_group(p, grace=0.5)


class DriverProcess:
    """One running driver: its stdout parsed line by line on a thread, its stderr kept."""

    def __init__(
        self,
        args: list[str],
        home: str | os.PathLike | None = None,
        env: Mapping[str, str] | None = None,
        deadline: float = 120.0,
    ) -> None:
        self._own_home = None
        if home is None:
            self._own_home = tempfile.TemporaryDirectory(prefix="txmq-cpp-home-")
            home = self._own_home.name
        self.home = str(home)
        child_env = dict(os.environ)
        child_env.update(env or {})
        child_env["HOME"] = self.home
        child_env.setdefault("PYTHONUNBUFFERED", "1")
        self.args = [sys.executable, str(DRIVER), *args]
        self.lines: list[dict] = []
        self.raw_noise: list[str] = []  # stdout lines that were not JSON (should stay empty)
        self._stderr_chunks: list[str] = []
        self._cond = threading.Condition()
        self.deadline = time.monotonic() + deadline
        self.proc = subprocess.Popen(
            self.args,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=child_env,
            cwd=self.home,
            start_new_session=True,
            text=True,
            bufsize=1,
        )
        with _live_lock:
            _live.add(self.proc)
        self._out = threading.Thread(target=self._read_stdout, daemon=True)
        self._err = threading.Thread(target=self._read_stderr, daemon=True)
        self._out.start()
        self._err.start()

    def _read_stdout(self) -> None:
        assert self.proc.stdout is not None
        try:
            for raw in self.proc.stdout:
                raw = raw.strip()
                if not raw:
                    continue
                try:
                    obj = json.loads(raw)
                except ValueError:
                    self.raw_noise.append(raw)
                    continue
                with self._cond:
                    self.lines.append(obj)
                    self._cond.notify_all()
        finally:
            self.proc.stdout.close()
            with self._cond:
                self._cond.notify_all()

    def _read_stderr(self) -> None:
        assert self.proc.stderr is not None
        try:
            for raw in self.proc.stderr:
                self._stderr_chunks.append(raw)
        finally:
            self.proc.stderr.close()

    @property
    def stderr(self) -> str:
        return "".join(self._stderr_chunks)

    def events(self, kind: str) -> list[dict]:
        with self._cond:
            return [ln for ln in self.lines if ln.get("event") == kind]

    def wait_for(self, predicate, timeout: float) -> bool:
        """Wait until ``predicate(lines)`` holds (True) or the timeout passes or the process ends (False)."""
        end = time.monotonic() + timeout
        with self._cond:
            while not predicate(self.lines):
                left = end - time.monotonic()
                if left <= 0 or (self.proc.poll() is not None and not self._out.is_alive()):
                    return predicate(self.lines)
                self._cond.wait(min(left, 0.2))
            return True

    def wait(self, timeout: float | None = None) -> int | None:
        """Wait for exit until ``timeout`` (default: the deadline); then kill whatever still runs."""
        left = self.deadline - time.monotonic() if timeout is None else timeout
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=max(0.0, left))
        self.kill()
        self._out.join(5)
        self._err.join(5)
        return self.proc.returncode

    def kill(self) -> None:
        _kill_group(self.proc)

    def close(self) -> None:
        self.kill()
        if self._own_home is not None:
            self._own_home.cleanup()
            self._own_home = None

    def __enter__(self) -> DriverProcess:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self) -> None:  # last resort; tests should call wait()/close()
        try:
            if self.proc.poll() is None:
                _kill_group(self.proc, grace=0.5)
        except Exception:
            pass


def _common(namesrv: str, topic: str) -> list[str]:
    return ["--namesrv", namesrv, "--topic", topic]


def produce_args(
    namesrv: str,
    topic: str,
    count: int,
    mode: str = "sync",
    *,
    tags: str | None = None,
    keys_prefix: str | None = None,
    props: Mapping[str, str] | None = None,
    body_prefix: str | None = None,
    body_size: int = 0,
    body_b64: str | None = None,
    group: str | None = None,
    shard: int | None = None,
    shards: int | None = None,
    batch_size: int | None = None,
    delay_level: int = 0,
    send_timeout_ms: int | None = None,
    extra: Iterable[str] = (),
) -> list[str]:
    a = ["produce", *_common(namesrv, topic), "--count", str(count), "--mode", mode]
    if tags is not None:
        a += ["--tags", tags]
    if keys_prefix is not None:
        a += ["--keys-prefix", keys_prefix]
    for k, v in (props or {}).items():
        a += ["--prop", f"{k}={v}"]
    if body_prefix is not None:
        a += ["--body-prefix", body_prefix]
    if body_size:
        a += ["--body-size", str(body_size)]
    if body_b64 is not None:
        a += ["--body-b64", body_b64]
    if group is not None:
        a += ["--group", group]
    if shard is not None:
        a += ["--shard", str(shard)]
    if shards is not None:
        a += ["--shards", str(shards)]
    if batch_size is not None:
        a += ["--batch-size", str(batch_size)]
    if delay_level:
        a += ["--delay-level", str(delay_level)]
    if send_timeout_ms is not None:
        a += ["--send-timeout", str(send_timeout_ms)]
    return a + list(extra)


@dataclass
class ProduceResult:
    sent: list[dict]
    errors: list[dict]
    summary: dict | None
    returncode: int | None
    stderr: str = ""
    lines: list[dict] = field(default_factory=list)


def produce(
    namesrv: str,
    topic: str,
    count: int,
    mode: str = "sync",
    *,
    timeout: float = 120.0,
    home: str | os.PathLike | None = None,
    **kw,
) -> ProduceResult:
    """Run a producer to completion (killed at ``timeout``) and return everything it printed."""
    with DriverProcess(produce_args(namesrv, topic, count, mode, **kw), home=home, deadline=timeout) as p:
        rc = p.wait()
        return ProduceResult(
            p.events("sent"),
            p.events("error"),
            (p.events("summary") or [None])[-1],
            rc,
            p.stderr,
            list(p.lines),
        )


def run_produce(
    namesrv: str, topic: str, count: int, mode: str = "sync", *, check: bool = True, **kw
) -> list[dict]:
    """Produce ``count`` messages and return the ``sent`` lines; raise ``DriverError`` on any failure."""
    r = produce(namesrv, topic, count, mode, **kw)
    if check and (r.returncode != 0 or r.errors or r.summary is None):
        raise DriverError(f"produce failed: {r.errors[:3]}", r.lines, r.stderr, r.returncode)
    return r.sent


def consume_args(
    namesrv: str,
    topic: str,
    group: str,
    expect: int = 0,
    *,
    expression: str = "*",
    orderly: bool = False,
    broadcast: bool = False,
    timeout: float = 30.0,
    props: Iterable[str] = (),
    fail_first: int = 0,
    sleep: float = 0.0,
    settle: float = 0.0,
    threads: int | None = None,
    batch_max: int | None = None,
    instance: str | None = None,
    fast_exit: bool = False,
    extra: Iterable[str] = (),
) -> list[str]:
    a = [
        "consume",
        *_common(namesrv, topic),
        "--group",
        group,
        "--expression",
        expression,
        "--expect",
        str(expect),
        "--timeout",
        str(timeout),
    ]
    if orderly:
        a.append("--orderly")
    if broadcast:
        a.append("--broadcast")
    props = list(props)
    if props:
        a += ["--props", ",".join(props)]
    if fail_first:
        a += ["--fail-first", str(fail_first)]
    if sleep:
        a += ["--sleep", str(sleep)]
    if settle:
        a += ["--settle", str(settle)]
    if threads:
        a += ["--threads", str(threads)]
    if batch_max:
        a += ["--batch-max", str(batch_max)]
    if instance:
        a += ["--instance", instance]
    if fast_exit:
        a.append("--fast-exit")
    return a + list(extra)


@dataclass
class ConsumeResult:
    messages: list[dict]
    summary: dict | None
    returncode: int | None
    stderr: str = ""
    lines: list[dict] = field(default_factory=list)

    @property
    def timed_out(self) -> bool:
        return self.summary is None or bool(self.summary.get("timed_out"))

    def bodies(self) -> list[str]:
        return [m["body"] for m in self.messages]


class ConsumeHandle:
    """A running push consumer. ``wait()`` returns when it has seen ``expect`` deliveries or timed out."""

    def __init__(self, proc: DriverProcess) -> None:
        self.proc = proc

    @property
    def messages(self) -> list[dict]:
        return self.proc.events("message")

    def wait_started(self, timeout: float = 30.0) -> bool:
        return self.proc.wait_for(
            lambda ls: any(x.get("event") in ("started", "message") for x in ls), timeout
        )

    def wait_messages(self, n: int, timeout: float) -> list[dict]:
        """Wait until ``n`` deliveries were printed (or timeout); return what arrived so far."""
        self.proc.wait_for(lambda ls: sum(1 for x in ls if x.get("event") == "message") >= n, timeout)
        return self.messages

    def wait(self, timeout: float | None = None) -> ConsumeResult:
        rc = self.proc.wait(timeout)
        r = ConsumeResult(
            self.messages,
            (self.proc.events("summary") or [None])[-1],
            rc,
            self.proc.stderr,
            list(self.proc.lines),
        )
        self.proc.close()
        return r

    def kill(self) -> None:
        self.proc.close()

    def __enter__(self) -> ConsumeHandle:
        return self

    def __exit__(self, *exc) -> None:
        self.proc.close()


def start_consume(
    namesrv: str,
    topic: str,
    group: str,
    expect: int = 0,
    *,
    timeout: float = 30.0,
    home: str | os.PathLike | None = None,
    kill_after: float = 30.0,
    **kw,
) -> ConsumeHandle:
    """Start a push consumer; it exits by itself after ``expect`` deliveries or ``timeout`` seconds.

    The process is killed ``kill_after`` seconds past ``timeout`` if it has not exited (a hung shutdown).
    """
    args = consume_args(namesrv, topic, group, expect, timeout=timeout, **kw)
    return ConsumeHandle(
        DriverProcess(args, home=home, deadline=timeout + kw.get("settle", 0.0) + kill_after)
    )


def run_consume(namesrv: str, topic: str, group: str, expect: int, **kw) -> ConsumeResult:
    return start_consume(namesrv, topic, group, expect, **kw).wait()
