"""A throwaway etcd on free loopback ports for the tests and benches of controller mode (Debian's
``etcd-server`` package; ``make test`` installs it when missing). Stopped by pid."""

from __future__ import annotations

import shutil
import signal
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Self

from txmq.ports import free_port


class EtcdProcess:
    def __init__(self, data_dir: Path, log_path: Path) -> None:
        self.data_dir = data_dir
        self.log_path = log_path
        self.client_port = free_port()
        self.peer_port = free_port()
        self.popen: subprocess.Popen[bytes] | None = None

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.client_port}"

    def start(self, timeout: float = 20.0) -> Self:
        exe = shutil.which("etcd")
        if exe is None:
            raise RuntimeError("etcd is not installed (Debian: apt-get install etcd-server)")
        peer = f"http://127.0.0.1:{self.peer_port}"
        args = [exe, "--data-dir", str(self.data_dir), "--listen-client-urls", self.endpoint,
                "--advertise-client-urls", self.endpoint, "--listen-peer-urls", peer,
                "--initial-advertise-peer-urls", peer, "--initial-cluster", f"default={peer}"]
        with open(self.log_path, "ab") as log:
            self.popen = subprocess.Popen(args, stdout=log, stderr=log, start_new_session=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(self.endpoint + "/health", timeout=1) as resp:
                    if b"true" in resp.read():
                        return self
            except OSError:
                pass
            if self.popen.poll() is not None:
                break
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"etcd did not start:\n{self.log_path.read_text()[-2000:]}")

    def stop(self) -> None:
        if self.popen is not None and self.popen.poll() is None:
            self.popen.send_signal(signal.SIGKILL)
            self.popen.wait(10)
