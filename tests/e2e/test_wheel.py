"""The wheel ``make wheel`` builds installs into a fresh virtualenv outside the checkout and runs there: its modules
compiled, ``txmq server`` serving, and a message sent and consumed with the installed ``txmq`` command."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.compiled import ROOT
from txmq.launch import ServerProcess, free_port


def run(*args: str | Path, cwd: Path, env: dict[str, str] | None = None,
        timeout: float = 900) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([str(a) for a in args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"{args}\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
    return done


@pytest.mark.timeout(600)
def test_the_wheel_installs_outside_the_checkout_and_serves(tmp_path: Path) -> None:
    dist = tmp_path / "dist"
    run("make", "-s", "wheel", f"DIST={dist}", cwd=ROOT)
    wheels = list(dist.glob("txmq-*.whl"))
    assert len(wheels) == 1, wheels

    outside = tmp_path / "outside"  # nothing of the checkout on any path: not the cwd, not PYTHONPATH
    outside.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update(HOME=str(outside), PYTHONUNBUFFERED="1")
    venv = tmp_path / "venv"
    run(sys.executable, "-m", "venv", venv, cwd=outside, env=env)
    py, txmq = venv / "bin" / "python", venv / "bin" / "txmq"
    run(py, "-m", "pip", "install", "-q", wheels[0], cwd=outside, env=env)

    where = run(py, "-c", "import txmq, txmq.store.group_commit as g; print(txmq.__file__); print(g.__file__)",
                cwd=outside, env=env).stdout.split()
    assert all(Path(p).is_relative_to(venv) for p in where), where
    assert where[1].endswith(".so"), f"the group commit is not compiled in the wheel: {where[1]}"

    namesrv_port = free_port()
    server = ServerProcess([str(txmq), "server", "--port", str(free_port()), "--namesrv-port", str(namesrv_port),
                            "--console-port", "-1", "--grpc-port", "-1", "--store", str(outside / "store")],
                           tmp_path / "server.log", env)
    try:
        server.start(timeout=60)
        client = dict(env, NAMESRV_ADDR=f"127.0.0.1:{namesrv_port}")
        run(txmq, "topic", "create", "wheel_t", cwd=outside, env=client, timeout=60)
        sent = run(txmq, "send", "--topic", "wheel_t", "--body", "from the wheel", cwd=outside, env=client,
                   timeout=60)
        assert sent.stdout.startswith("SEND_OK msgId="), sent.stdout
        got = run(txmq, "consume", "--topic", "wheel_t", "--group", "wheel_g", "--from-beginning", "--count", "1",
                  "--timeout", "30", cwd=outside, env=client, timeout=90)
        assert any(line.endswith(": from the wheel") for line in got.stdout.splitlines()), got.stdout
    finally:
        server.stop()
    assert not server.alive
