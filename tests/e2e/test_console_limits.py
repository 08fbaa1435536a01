"""The console under a pile of unfinished requests (slowloris), inside ``txmq server`` whose process may open 512
descriptors: the console holds at most its connection cap, cuts off requests whose headers or body do not arrive
within the read timeout, and the broker sharing the process keeps serving throughout."""

from __future__ import annotations

import os
import select
import socket
import sys
import threading
import time
from pathlib import Path

from tests.e2e.console_http import Http
from txmq import Message, Producer
from txmq.admin import MQAdminExt
from txmq.launch import ServerProcess, free_port

NOFILE = 512
PILE = 700  # unfinished requests: more than the process could hold
CAP, READ_TIMEOUT_S = 256, 10.0  # the console's defaults
LIMITED = (f"import os, resource, sys; resource.setrlimit(resource.RLIMIT_NOFILE, ({NOFILE}, {NOFILE})); "
           "os.execv(sys.executable, [sys.executable, '-m', 'txmq.cli', *sys.argv[1:]])")


def open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def closed_by_server(s: socket.socket) -> bool:
    """Whether the server has closed ``s`` (EOF or reset waiting), without blocking; a 503 first counts too."""
    if not select.select([s], [], [], 0)[0]:
        return False
    try:
        data = s.recv(4096)
        while data and not data.endswith(b"\r\n\r\n"):  # the 503 over the cap, then the close
            data = s.recv(4096)
        return data == b"" or data.startswith(b"HTTP/1.1 503") or data.startswith(b"HTTP/1.1 408")
    except OSError:
        return True


def trickle(addr: tuple[str, int], first: bytes, stop: threading.Event, closed: list[float]) -> None:
    """A request sent one byte every 0.5 s after ``first``, never finished; when the server closed it."""
    start = time.monotonic()
    with socket.create_connection(addr, timeout=5) as s:
        s.sendall(first)
        while not stop.is_set():
            try:
                s.sendall(b"x")
            except OSError:
                break
            if closed_by_server(s):
                break
            time.sleep(0.5)
        closed.append(time.monotonic() - start)


def test_a_pile_of_unfinished_requests_is_cut_off_and_the_broker_keeps_serving(tmp_path: Path):
    proc = ServerProcess([sys.executable, "-c", LIMITED, "server", "--port", str(free_port()), "--namesrv-port",
                          str(free_port()), "--grpc-port", "-1", "--console-port", "0", "--store",
                          str(tmp_path / "store")], tmp_path / "server.log")
    pile: list[socket.socket] = []
    stop = threading.Event()
    try:
        proc.start()
        assert proc.pid is not None
        host, _, port = proc.addrs["console"].rpartition(":")
        addr = (host, int(port))
        with MQAdminExt(proc.namesrv) as admin:
            admin.create_topic("limits_t", 1)
        assert Http(proc.addrs["console"]).get("/").status == 200
        baseline = open_fds(proc.pid)

        slow: list[float] = []
        tricklers = [threading.Thread(target=trickle, args=(addr, first, stop, slow)) for first in (
            b"GET / HTTP/1.1\r\nHost: localhost\r\nX-Slow: ",  # headers that never end
            b"POST /topics HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/x-www-form-urlencoded\r\n"
            b"Content-Length: 100000\r\n\r\ntopic=")]  # a body that never ends
        for t in tricklers:
            t.start()
        time.sleep(0.5)
        for _ in range(PILE):
            s = socket.socket()
            s.settimeout(2)
            try:
                s.connect(addr)
                s.sendall(b"GET / HTTP/1.1\r\nHost: localhost\r\n")
            except OSError:
                pass
            pile.append(s)
        time.sleep(1)
        held = open_fds(proc.pid)
        assert held <= baseline + CAP + 8, f"the console holds {held - baseline} descriptors (cap {CAP})"

        with Producer("limits_p", proc.namesrv, send_timeout_s=5) as producer:  # the broker, meanwhile
            assert producer.send(Message("limits_t", b"still serving")).msg_id

        deadline = time.monotonic() + READ_TIMEOUT_S + 5
        while time.monotonic() < deadline and not all(closed_by_server(s) for s in pile):
            time.sleep(0.5)
        assert all(closed_by_server(s) for s in pile), "unfinished requests still open after the read timeout"
        for t in tricklers:
            t.join(READ_TIMEOUT_S + 5)
        assert len(slow) == 2 and all(s < READ_TIMEOUT_S + 5 for s in slow), slow  # not held open
        assert open_fds(proc.pid) <= baseline + 4
        assert Http(proc.addrs["console"]).get("/").status == 200
        log = (tmp_path / "server.log").read_text()
        assert "Too many open files" not in log
        assert log.count("(the cap)") <= 3  # one line per client and 10 s, however many were closed
    finally:
        stop.set()
        for s in pile:
            s.close()
        proc.kill()
