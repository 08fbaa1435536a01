"""A real Prometheus server (Debian's ``prometheus``) for tests: its own free port and data directory, scraping
the given targets every second; queried through its HTTP API."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path

from txmq.launch import free_port


class Prometheus:
    def __init__(self, root: Path, targets: list[str]) -> None:
        exe = shutil.which("prometheus")
        if exe is None:
            raise RuntimeError("the prometheus binary is missing (make test installs Debian's prometheus)")
        root.mkdir(parents=True, exist_ok=True)
        conf = root / "prometheus.yml"
        conf.write_text("global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nscrape_configs:\n"
                        "  - job_name: txmq\n    static_configs:\n"
                        f"      - targets: [{', '.join(repr(t) for t in targets)}]\n")
        self.addr = f"127.0.0.1:{free_port()}"
        self.log = open(root / "prometheus.log", "w")  # noqa: SIM115 - closed by stop()
        self.proc = subprocess.Popen([exe, f"--config.file={conf}", f"--storage.tsdb.path={root / 'data'}",
                                      f"--web.listen-address={self.addr}"], stdout=self.log, stderr=self.log,
                                     start_new_session=True)
        deadline = time.monotonic() + 30
        while not self._ready():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"prometheus did not start:\n{(root / 'prometheus.log').read_text()[-2000:]}")
            time.sleep(0.2)

    def _ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"http://{self.addr}/-/ready", timeout=2) as r:
                return bool(r.status == 200)
        except OSError:
            return False

    def query(self, promql: str) -> list[dict]:
        """The instant vector ``promql`` evaluates to now."""
        url = f"http://{self.addr}/api/v1/query?" + urllib.parse.urlencode({"query": promql})
        with urllib.request.urlopen(url, timeout=5) as r:
            data = json.load(r)
        assert data["status"] == "success", data
        return data["data"]["result"]

    def value(self, promql: str) -> float | None:
        """The single value of ``promql`` now, or None when it has no series."""
        result = self.query(promql)
        return float(result[0]["value"][1]) if result else None

    def wait_value(self, promql: str, expected: float, timeout: float = 30.0) -> float | None:
        """Poll until ``promql`` equals ``expected`` (scrapes come every second); returns the last value."""
        deadline = time.monotonic() + timeout
        got = self.value(promql)
        while got != expected and time.monotonic() < deadline:
            time.sleep(0.5)
            got = self.value(promql)
        return got

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self.log.close()
