"""The ``txmq`` command against a running cluster, each command its own process."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.e2e.helpers import wait_until


def txmq(cluster, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "txmq.cli", *args], capture_output=True, text=True,
                          timeout=timeout, env=dict(cluster.env, NAMESRV_ADDR=cluster.namesrv_addr))


def test_topic_send_consume_stats_delete(cluster):
    cluster.start_broker()
    r = txmq(cluster, "topic", "create", "cli_t", "--queues", "3")
    assert r.returncode == 0, r.stderr
    assert "topic cli_t created with 3 queues" in r.stdout
    assert wait_until(lambda: "cli_t" in txmq(cluster, "topic", "list").stdout.split(), 10)

    r = txmq(cluster, "send", "--topic", "cli_t", "--body", "hello", "--tags", "TagA", "--keys", "k1",
             "--prop", "color=red")
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("SEND_OK msgId=") and "offset=0" in r.stdout
    r = txmq(cluster, "send", "--topic", "cli_t", "--body", "many", "--count", "5", "--tags", "TagB")
    assert r.returncode == 0, r.stderr
    assert "sent 5 messages in" in r.stderr and "\r" not in r.stderr  # a summary; no progress line off a terminal

    r = txmq(cluster, "consume", "--topic", "cli_t", "--group", "cli_g", "--count", "6", "--timeout", "20")
    assert r.returncode == 0, r.stderr
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith("cli_t ")]
    assert len(lines) == 6, r.stdout
    assert any("tags=TagA keys=k1" in ln and ln.endswith(": hello") for ln in lines)
    assert sorted(ln.rsplit(": ", 1)[1] for ln in lines if "TagB" in ln) == [f"many {i}" for i in range(5)]
    assert "consumed 6 messages" in r.stderr

    # Tag filter, and a group that already consumed everything waits and reports too few.
    r = txmq(cluster, "consume", "--topic", "cli_t", "--group", "cli_g2", "--expression", "TagA", "--count", "1",
             "--timeout", "20")
    assert r.returncode == 0 and r.stdout.count("cli_t ") == 1 and ": hello" in r.stdout
    r = txmq(cluster, "consume", "--topic", "cli_t", "--group", "cli_g", "--count", "1", "--timeout", "2")
    assert r.returncode == 2 and "consumed 0 messages" in r.stderr

    r = txmq(cluster, "stats")
    assert r.returncode == 0, r.stderr
    assert "broker broker-a" in r.stdout
    assert any(ln.split()[:2] == ["cli_t", "messages=6"] for ln in map(str.strip, r.stdout.splitlines()))
    assert any("cli_g" in ln and "topic=cli_t" in ln and "lag=0" in ln for ln in r.stdout.splitlines())
    r = txmq(cluster, "stats", "--json")
    stats = json.loads(r.stdout)["broker-a"]
    assert stats["topics"]["cli_t"]["messages"] == 6
    assert stats["consumerGroups"]["cli_t@cli_g"]["lag"] == 0

    r = txmq(cluster, "topic", "delete", "cli_t")
    assert r.returncode == 0 and "topic cli_t deleted" in r.stdout
    assert "cli_t" not in txmq(cluster, "topic", "list").stdout.split()


def test_stats_shows_the_disk_as_puts_see_it(cluster):
    """`txmq stats` (text) shows the store's disk use and says when puts are refused for a full disk: an operator
    reads it there, not only in --json (docs/storage.md, "A full disk")."""
    cluster.start_broker_with_topic("cli_disk", {"diskSpaceWarningLevelRatio": 0.0001})  # any use is "full"
    r = txmq(cluster, "send", "--topic", "cli_disk", "--body", "x")
    assert r.returncode == 1 and "the disk is full" in r.stderr, r.stderr
    store = json.loads(txmq(cluster, "stats", "--json").stdout)["broker-a"]["store"]
    r = txmq(cluster, "stats")
    assert r.returncode == 0, r.stderr
    assert f"disk {store['disk_used_percent']:.1f} % used" in r.stdout, r.stdout
    assert "puts refused: the disk is full" in r.stdout, r.stdout
    assert "durability lost" not in r.stdout


def test_cli_errors_are_clear(cluster):
    cluster.start_broker(conf={"autoCreateTopicEnable": "false"})
    r = txmq(cluster, "send", "--topic", "absent", "--body", "x")
    assert r.returncode == 1
    assert "txmq send:" in r.stderr and "absent" in r.stderr and "Traceback" not in r.stderr
    r = txmq(cluster, "topic", "create", "bad name")
    assert r.returncode == 1 and "illegal characters" in r.stderr and "Traceback" not in r.stderr
    r = txmq(cluster, "topic", "create")
    assert r.returncode == 2 and "topic name is required" in r.stderr
    r = txmq(cluster, "topic", "list", "-n", "127.0.0.1:1")
    assert r.returncode == 1 and "Traceback" not in r.stderr and "name server" in r.stderr
