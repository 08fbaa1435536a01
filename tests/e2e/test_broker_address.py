"""brokerIP1 is where the broker listens and registers, and what its stored messages carry as their store host
(RocketMQ's 4-byte IPv4 form, also inside every offset message id): a name resolves at start, an address that
cannot be carried is refused at start, never by every send."""

from __future__ import annotations

import subprocess
import sys

import pytest

from txmq.broker.config import store_address
from txmq.message import decode_offset_msg_id


def test_store_address_keeps_ipv4_resolves_names_and_refuses_the_rest() -> None:
    assert store_address("10.1.2.3") == "10.1.2.3"
    assert store_address("localhost") == "127.0.0.1"
    for bad, why in (("::1", "IPv6"), ("fe80::1%eth0", "IPv6"), ("no-such-host.invalid", "does not resolve"),
                     ("", "does not resolve")):
        with pytest.raises(ValueError, match=why) as info:
            store_address(bad, "brokerIP1")
        assert "brokerIP1" in str(info.value)


def test_a_broker_named_by_host_name_stores_sends_under_its_address(cluster):
    cluster.start_broker(conf={"brokerIP1": "localhost"})
    r = subprocess.run([sys.executable, "-m", "txmq.cli", "send", "-n", cluster.namesrv_addr, "--topic", "named_t",
                        "--body", "hello"], capture_output=True, text=True, timeout=60, env=cluster.env)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("SEND_OK msgId=")
    offset_id = r.stdout.split("offsetMsgId=")[1].split()[0]
    (host, _), _ = decode_offset_msg_id(offset_id)
    assert host == "127.0.0.1"


def test_a_broker_with_an_ipv6_brokerip1_refuses_to_start_with_a_clear_error(cluster):
    proc = cluster.broker(conf={"brokerIP1": "::1"})
    r = subprocess.run(proc.args, capture_output=True, text=True, timeout=60, env=cluster.env)
    assert r.returncode == 1
    assert "brokerIP1 '::1' is an IPv6 address" in r.stderr and "Traceback" not in r.stderr
