"""The connector through Spark Connect: a Connect server started from pyspark's own package on a free loopback
port (connect_server.py), clients in child processes (``SparkSession.builder.remote``) that register the data
source from the client; its reader, writer and the sink's check responder run on the server (PYSPARK_PYTHON is
the project's interpreter, so the server's Python workers import txmq)."""

from __future__ import annotations

import collections
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.spark.connect_server import ConnectServer
from tests.spark.spark_helpers import create_topic, spark_env, wait_no_pending
from tests.spark.test_pipeline import CLI_TIMEOUT_S, ROOT, _interrupt, check_cli_outputs
from tests.spark.test_sink import _responder_connections, _until
from tests.spark.test_source import CHILD, CHILD_ENV, run_child, send_transactions
from txmq import Message, Producer
from txmq.spark.writer import KILL_HOOK_ENV, SinkOptions


@pytest.fixture(scope="module")
def connect_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ConnectServer]:
    """One Connect server (``local[2]``) for the module's tests that do not kill it."""
    server = ConnectServer(tmp_path_factory.mktemp("connect"))
    try:
        try:
            server.start()
        except (RuntimeError, TimeoutError, OSError) as e:
            pytest.fail(f"the Spark Connect server did not start: {e}", pytrace=False)
        yield server
    finally:
        server.stop()


def _read(server_url: str, cluster: Any, topic: str, log: Path) -> list[bytes]:
    assert not run_child({"namesrv": cluster.namesrv_addr, "source": topic, "remote": server_url, "action": "read",
                          "sink": "none"}, log)
    line = next(ln for ln in log.read_text().splitlines() if ln.startswith("rows "))
    return [body.encode() for body in json.loads(line[len("rows "):])]


def test_batch_read_through_connect_is_exactly_the_committed_messages(connect_server: ConnectServer,
                                                                        txmq_cluster: Any, tmp_path: Path) -> None:
    create_topic(txmq_cluster, "sc-batch", 2)
    expected = send_transactions(txmq_cluster, "sc-batch", 10)  # commit, rollback, unknown→commit/rollback, plain
    bodies = _read(connect_server.url, txmq_cluster, "sc-batch", tmp_path / "client.log")
    assert len(bodies) == len(set(bodies)) and set(bodies) == expected


def test_sink_responder_under_connect_stops_with_its_query(connect_server: ConnectServer, txmq_cluster: Any,
                                                          tmp_path: Path) -> None:
    """The exactly-once sink's check responder runs on the Connect server while the query runs and leaves when the
    client stops the query: the query-end listener was handed to the server by ``register``."""
    create_topic(txmq_cluster, "sc-life-in", 2)
    create_topic(txmq_cluster, "sc-life-out", 2)
    with Producer("src-sc-life", txmq_cluster.namesrv_addr) as p:
        for i in range(20):
            p.send(Message("sc-life-in", f"row-{i}".encode()))
    ckpt = str(tmp_path / "ckpt")
    group = SinkOptions.parse({"namesrv": txmq_cluster.namesrv_addr, "checkpointLocation": ckpt}, streaming=True).group
    cfg = {"namesrv": txmq_cluster.namesrv_addr, "source": "sc-life-in", "sink": "txmq", "out": "sc-life-out",
           "checkpoint": ckpt, "remote": connect_server.url, "action": "until-stop"}
    with open(tmp_path / "client.log", "w") as log, subprocess.Popen(
            [sys.executable, str(CHILD), json.dumps(cfg)], cwd=str(CHILD.parent), stdin=subprocess.PIPE,
            stdout=log, stderr=subprocess.STDOUT, text=True, start_new_session=True, env=CHILD_ENV) as child:
        try:
            _until(lambda: _responder_connections(txmq_cluster, group) > 0, 90, "a responder on the server")
            _until(lambda: _stored(txmq_cluster, "sc-life-out") >= 20, 120, "the query's output")
            conns = _responder_connections(txmq_cluster, group)
            assert child.stdin is not None
            child.stdin.write("stop\n")
            child.stdin.flush()
            _until(lambda: "query stopped" in (tmp_path / "client.log").read_text(), 60, "the query's stop")
            _until(lambda: _responder_connections(txmq_cluster, group) == 0, 15, "the responders' stop")
            child.stdin.write("exit\n")
            child.stdin.flush()
            assert child.wait(60) == 0, (tmp_path / "client.log").read_text()[-3000:]
        finally:
            if child.poll() is None:
                os.killpg(child.pid, signal.SIGKILL)
                child.wait(20)
    assert conns >= 1
    assert collections.Counter(_bodies(txmq_cluster, "sc-life-out")) == {f"row-{i}".encode(): 1 for i in range(20)}


def test_exactly_once_sink_through_connect_survives_sigkill_of_the_server(txmq_cluster: Any, tmp_path: Path) -> None:
    """A Connect client's exactly-once query; the Connect server is SIGKILLed after batch 1's halves were sent
    (before its commit point: orphans that the restarted query's responder, on the new server, answers), and
    started again, a new client session resuming the query from its checkpoint: every committed input row is in
    the output topic exactly once, nothing stays pending. (The kill just past the commit point is the local
    tests'; the code that replays it is the same on a Connect server.)"""
    create_topic(txmq_cluster, "sc-eo-in", 2)
    with Producer("src-sc-eo", txmq_cluster.namesrv_addr) as p:
        for i in range(200):
            p.send(Message("sc-eo-in", f"row-{i}".encode(), keys=str(i)))
    create_topic(txmq_cluster, "sc-eo-out", 2)
    cfg: dict[str, Any] = {"namesrv": txmq_cluster.namesrv_addr, "source": "sc-eo-in", "sink": "txmq",
                           "out": "sc-eo-out", "checkpoint": str(tmp_path / "ckpt"), "maxOffsetsPerTrigger": 40}
    log = tmp_path / "client.log"
    port = None
    for hook, batch in ((KILL_HOOK_ENV, 1), (None, None)):
        marker = tmp_path / f"hang-{batch}"
        conf_env = {hook: f"{batch}:{marker}"} if hook else {}
        server = ConnectServer(tmp_path / f"server-{batch}", port=port)
        port = server.port  # the same address each time, as a restarted server would have
        old_env = {k: os.environ.get(k) for k in conf_env}
        os.environ.update(conf_env)  # the server's environment, inherited by its Python workers
        try:
            server.start()
        finally:
            for k, v in old_env.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
        try:
            cfg["remote"] = server.url
            if hook:
                left: list[str] = []
                assert run_child(cfg, log, kill_when=lambda m=marker, s=server, out=left: _kill_at(m, s, out),
                                 timeout=240)
                assert left == [], "processes of the Connect server outlived its JVM by 10 s"
            else:
                assert not run_child(cfg, log, timeout=240)
        finally:
            server.stop()
    wait_no_pending(txmq_cluster, "sc-eo-out", 90)
    counts = collections.Counter(_bodies(txmq_cluster, "sc-eo-out"))
    assert set(counts) == {f"row-{i}".encode() for i in range(200)}
    assert max(counts.values()) == 1, [b for b, c in counts.items() if c > 1][:5]


def _stored(cluster: Any, topic: str) -> int:
    """Messages in ``topic`` (the sum of its queues' max offsets)."""
    from txmq.client.pull_consumer import PullConsumer

    with PullConsumer("sc-probe", cluster.namesrv_addr) as consumer:
        return sum(consumer.max_offset(mq) for mq in consumer.fetch_subscribe_message_queues(topic))


def _bodies(cluster: Any, topic: str) -> list[bytes]:
    """Every message body in ``topic``, pulled without Spark."""
    from txmq.client.pull_consumer import PullConsumer

    out = []
    with PullConsumer("sc-probe", cluster.namesrv_addr) as consumer:
        for mq in consumer.fetch_subscribe_message_queues(topic):
            offset, end = 0, consumer.max_offset(mq)
            while offset < end:
                got = consumer.pull(mq, "*", offset, 256)
                out += [m.body for m in got.msgs]
                offset = got.next_begin_offset
    return out


def _kill_at(marker: Path, server: ConnectServer, left: list[str]) -> bool:
    """When the server's commit worker has written ``marker`` (it hangs there), SIGKILL the server, noting in
    ``left`` what of it had to be killed after its JVM; the client is then killed by ``run_child``."""
    if not marker.exists():
        return False
    left.extend(server.kill())
    return True


def test_orders_pipeline_cli_through_connect(connect_server: ConnectServer, tmp_path: Path) -> None:
    """``python -m examples.orders --remote sc://127.0.0.1:PORT``: the order service, the streaming job (the
    exactly-once sink among its queries) and the audit through the Connect server; the same assertions as on a
    standalone master."""
    env = {**os.environ, **spark_env(), "TXMQ_ORDERS_CLEANUP": "0"}
    args = [sys.executable, "-m", "examples.orders", "--orders", "120", "--out", str(tmp_path), "--remote",
            connect_server.url]
    with subprocess.Popen(args, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          start_new_session=True) as proc:
        try:
            stdout, stderr = proc.communicate(timeout=CLI_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            stdout, stderr = _interrupt(proc, tmp_path)
            pytest.fail(f"the pipeline through {connect_server.url} did not finish in {CLI_TIMEOUT_S}s\n"
                        f"{stdout[-3000:]}\n{stderr[-3000:]}\n{connect_server.log_tail()}", pytrace=False)
    assert proc.returncode == 0, stdout[-3000:] + stderr[-3000:]
    check_cli_outputs(stdout, tmp_path)
