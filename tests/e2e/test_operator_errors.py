"""Errors a person can act on (issue 16), tried as a new user would: each command its own process, and each
failure one line on stderr with a non-zero exit, never a traceback."""

from __future__ import annotations

import argparse
import contextlib
import re
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import orjson

from tests.e2e.cluster import Cluster
from tests.e2e.helpers import RawClient
from txmq import LocalTransactionState, Message, TransactionProducer
from txmq.cli import build_parser
from txmq.launch import ServerProcess, free_port, txmq_command
from txmq.message import MessageConst, MessageSysFlag, properties_to_string
from txmq.remoting.codes import RequestCode, ResponseCode
from txmq.remoting.request_headers import SendMessageRequestHeader

ROOT = Path(__file__).parents[2]


def txmq(cluster: Cluster | None, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    env = dict(cluster.env, NAMESRV_ADDR=cluster.namesrv_addr) if cluster else None
    return subprocess.run(txmq_command(*args), capture_output=True, text=True, timeout=timeout, env=env)


def one_line_error(r: subprocess.CompletedProcess[str], command: str) -> str:
    assert r.returncode != 0 and "Traceback" not in r.stderr, r.stderr
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith(f"txmq {command}: "), r.stderr
    return last


def test_server_start_errors(tmp_path):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        r = txmq(None, "server", "--namesrv-port", str(port), "--port", str(free_port()), "--grpc-port", "-1",
                 "--store", str(tmp_path / "s"), timeout=30)
        assert "another process listens on that port (choose another with --namesrv-port)" \
            in one_line_error(r, "server")
        conf = tmp_path / "taken.conf"  # a port the config file set: its key is named, not a flag it did not use
        conf.write_text(f"brokerName=b\nstorePathRootDir={tmp_path / 'b'}\ngrpcPort=-1\nnamesrvAddr=127.0.0.1:1\n"
                        f"listenPort={free_port()}\nhaListenPort={port}\n")
        r = txmq(None, "broker", "-c", str(conf), timeout=30)
        assert f"another process listens on that port (choose another with haListenPort in {conf})" \
            in one_line_error(r, "broker")
    with _taken_above_a_free_port() as listen_port:  # the HA port no key set: listenPort + 1
        conf.write_text(f"brokerName=b\nstorePathRootDir={tmp_path / 'd'}\ngrpcPort=-1\nnamesrvAddr=127.0.0.1:1\n"
                        f"brokerRole=SYNC_MASTER\nlistenPort={listen_port}\n")
        r = txmq(None, "broker", "-c", str(conf), timeout=30)
        assert "another process listens on that port (choose another with haListenPort in " \
            f"{conf}, listenPort + 1 while unset)" in one_line_error(r, "broker")
    r = txmq(None, "broker", "-c", str(tmp_path / "absent.conf"))
    assert one_line_error(r, "broker") == f"txmq broker: no such file: {tmp_path / 'absent.conf'}"
    for line, expected in (("listenPort = abc", "config listenPort: 'abc' is not an integer"),
                           ("flushDiskType = SYNC", "config flushDiskType: 'SYNC' is not one of ASYNC_FLUSH")):
        conf = tmp_path / "bad.conf"
        conf.write_text(f"brokerName=b\n{line}\n")
        assert expected in one_line_error(txmq(None, "broker", "-c", str(conf)), "broker")


@contextlib.contextmanager
def _taken_above_a_free_port() -> Iterator[int]:
    """A free port whose next port is held by a listening socket while the block runs."""
    for _ in range(100):
        with socket.socket() as busy:
            busy.bind(("127.0.0.1", 0))
            busy.listen()
            below = busy.getsockname()[1] - 1
            try:
                with socket.socket() as probe:
                    probe.bind(("127.0.0.1", below))
            except OSError:
                continue
            yield below
            return
    raise AssertionError("no free port found below a taken one")


def test_conf_read_as_properties_fresh_store_and_log_level(cluster, tmp_path):
    conf = tmp_path / "b.conf"
    store = tmp_path / "store"
    conf.write_text(f"# a broker\nbrokerName = props\\\n    -broker\nnamesrvAddr : {cluster.namesrv_addr}\n"
                    f"listenPort {free_port()}\ngrpcPort=-1\nstorePathRootDir={store}\nfooKey=1\nbarKey=2\n")
    log = tmp_path / "broker.log"
    broker = ServerProcess(txmq_command("broker", "-c", str(conf)), log, cluster.env)
    cluster.procs.append(broker)
    broker.start()
    broker.stop()
    text = log.read_text()
    assert text.count("unknown broker config keys ignored: barKey, fooKey") == 1
    assert "broker props-broker id 0 listening" in text
    assert "new store" in text and "unclean" not in text
    broker.start()
    broker.stop()
    assert log.read_text().count("clean stop") == 1 and "unclean" not in log.read_text()
    quiet = ServerProcess(txmq_command("--log-level", "WARNING", "broker", "-c", str(conf)), tmp_path / "q.log",
                          cluster.env)
    cluster.procs.append(quiet)
    quiet.start()
    quiet.stop()
    assert " INFO " not in (tmp_path / "q.log").read_text()


def test_topic_errors_version_and_help(cluster):
    cluster.start_broker(conf={"grpcPort": -1})
    assert "does not exist" in one_line_error(txmq(cluster, "topic", "delete", "never_made"), "topic")
    assert txmq(cluster, "topic", "create", "grow", "--queues", "4").returncode == 0
    assert "already has 4 queues" in one_line_error(txmq(cluster, "topic", "create", "grow", "--queues", "2"), "topic")
    r = txmq(cluster, "topic", "create", "grow", "--queues", "6")
    assert r.returncode == 0, r.stderr
    r = txmq(cluster, "topic", "list", "-n", cluster.namesrv_addr)
    assert "grow" in r.stdout.split()
    r = txmq(None, "-n", cluster.namesrv_addr, "topic", "list")
    assert "grow" in r.stdout.split()
    r = txmq(None, "--version")
    assert r.returncode == 0 and re.fullmatch(r"txmq \d+\.\d+\.\d+\S*\n", r.stdout)


def test_every_flag_has_help():
    missing = []

    def walk(parser: argparse.ArgumentParser, path: str) -> None:
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    walk(sub, f"{path} {name}")
            elif not isinstance(action, argparse._HelpAction) and not action.help:
                missing.append(f"{path} {'/'.join(action.option_strings) or action.dest}")

    walk(build_parser(), "txmq")
    assert not missing


def test_consume_start_positions_and_delay(cluster):
    cluster.start_broker(conf={"grpcPort": -1, "messageDelayLevel": "1s 2s"})
    assert txmq(cluster, "topic", "create", "pos", "--queues", "1").returncode == 0
    cluster.wait_route("pos")
    assert txmq(cluster, "send", "--topic", "pos", "--body", "m", "--count", "3").returncode == 0
    before = int(time.time() * 1000)
    r = txmq(cluster, "consume", "--topic", "pos", "--group", "g", "--count", "3", "--timeout", "20")
    assert r.returncode == 0 and r.stdout.count("pos q0@") == 3, r.stderr
    r = txmq(cluster, "consume", "--topic", "pos", "--group", "g", "--from-beginning", "--count", "3",
             "--timeout", "20")
    assert r.returncode == 0 and r.stdout.count("pos q0@") == 3, r.stderr
    r = txmq(cluster, "consume", "--topic", "pos", "--group", "g", "--offset", "2", "--count", "1", "--timeout", "20")
    assert r.returncode == 0 and "pos q0@2 " in r.stdout, r.stderr
    r = txmq(cluster, "consume", "--topic", "pos", "--group", "g", "--from-time", str(before + 60_000),
             "--count", "1", "--timeout", "2")
    assert r.returncode == 2 and "pos q0@" not in r.stdout
    assert "topic nowhere does not exist" in one_line_error(
        txmq(cluster, "consume", "--topic", "nowhere", "--count", "1", "--timeout", "2"), "consume")

    sent = time.monotonic()
    r = txmq(cluster, "send", "--topic", "pos", "--body", "later", "--delay", "2")
    assert r.returncode == 0, r.stderr
    r = txmq(cluster, "consume", "--topic", "pos", "--group", "g", "--count", "1", "--timeout", "20")
    assert r.returncode == 0 and r.stdout.strip().endswith(": later"), r.stdout
    assert time.monotonic() - sent >= 2.0


class Undecided:
    def execute_local_transaction(self, msg, arg):
        return LocalTransactionState.UNKNOWN

    def check_local_transaction(self, msg):
        return LocalTransactionState.UNKNOWN


def test_tx_show_operator_commit_and_readable_stats(cluster):
    broker = cluster.start_broker(conf={"grpcPort": -1, "transactionTimeOut": 600_000})
    assert txmq(cluster, "topic", "create", "otx", "--queues", "1").returncode == 0
    cluster.wait_route("otx")
    with TransactionProducer("otx_p", Undecided(), cluster.namesrv_addr) as producer:
        first = producer.send_message_in_transaction(Message("otx", b"stuck body", properties={"order": "7"}))
        second = producer.send_message_in_transaction(Message("otx", b"second"))
    r = txmq(cluster, "tx", "show", first.transaction_id)
    assert r.returncode == 0, r.stderr
    assert re.search(r"^body:\s+stuck body$", r.stdout, re.M) and re.search(r"^property:\s+order=7$", r.stdout, re.M)
    assert re.search(r"^state:\s+PENDING$", r.stdout, re.M), r.stdout

    r = txmq(cluster, "tx", "commit", first.transaction_id)
    assert r.returncode == 0 and "committed on broker-a by an operator" in r.stdout, r.stderr
    assert "already committed (the first decision wins)" in one_line_error(
        txmq(cluster, "tx", "rollback", first.transaction_id), "tx")
    r = txmq(cluster, "tx", "rollback", second.transaction_id)
    assert r.returncode == 0 and "rolled back" in r.stdout
    r = txmq(cluster, "consume", "--topic", "otx", "--group", "otx_g", "--count", "1", "--timeout", "20")
    assert r.returncode == 0 and r.stdout.strip().endswith(": stuck body")
    r = txmq(cluster, "consume", "--topic", "otx", "--group", "otx_g", "--count", "1", "--timeout", "2")
    assert r.returncode == 2  # the rolled-back one never shows
    assert "operator decision: COMMIT" in broker.log_path.read_text()

    r = txmq(cluster, "stats")
    assert r.returncode == 0, r.stderr
    assert re.search(r"in [\d.,]+ msg/s, out [\d.,]+ msg/s \(last minute\); commit log [\d.]+ (B|KiB|MiB)", r.stdout)
    assert "commits=1 rollbacks=1" in r.stdout


def test_repository_files():
    assert "Apache License" in (ROOT / "LICENSE").read_text()
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        text = doc.read_text()
        assert "DESIGN.md" not in text and "STYLE.md" not in text, doc
        for target in re.findall(r"\]\(([^)#:]+\.md)\)", text):
            assert (doc.parent / target).exists(), (doc, target)


def _half(raw: RawClient, topic: str, group: str, transaction_id: str) -> int:
    """A half message of ``group`` sent by hand with ``transaction_id`` as its UNIQ_KEY; its half offset."""
    props = {MessageConst.TRANSACTION_PREPARED: "true", MessageConst.PRODUCER_GROUP: group,
             MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX: transaction_id}
    header = SendMessageRequestHeader(producer_group=group, topic=topic, default_topic="TBW102",
                                      default_topic_queue_nums=4, queue_id=0,
                                      sys_flag=MessageSysFlag.TRANSACTION_PREPARED_TYPE,
                                      born_timestamp=int(time.time() * 1000), flag=0,
                                      properties=properties_to_string(props), reconsume_times=0)
    resp = raw.call(RequestCode.SEND_MESSAGE_V2, header.to_v2_ext(), group.encode())
    assert resp.code == ResponseCode.SUCCESS, resp.remark
    return int(resp.ext_fields["queueOffset"])


def test_a_transaction_id_that_names_several_halves_is_refused_until_an_offset_names_one(cluster):
    """A transaction id is the UNIQ_KEY a producer chose: two halves may carry it (a producer's retry of a half, or
    another group's id). An operator's decision by that id must not take whichever half the index gives first: it
    is refused, naming each half offset, and the offset decides; one producer group's view finds its own half."""
    broker = cluster.start_broker(conf={"grpcPort": -1, "transactionTimeOut": 600_000})
    assert txmq(cluster, "topic", "create", "dup_tx", "--queues", "1").returncode == 0
    cluster.wait_route("dup_tx")
    with RawClient(broker.addrs["broker"]) as raw:
        first = _half(raw, "dup_tx", "dup_g1", "SHARED" * 5)
        second = _half(raw, "dup_tx", "dup_g2", "SHARED" * 5)
        mine = raw.call(RequestCode.TXMQ_TX_SHOW, {"id": "SHARED" * 5, "group": "dup_g1"})
        assert mine.code == ResponseCode.SUCCESS and orjson.loads(mine.body)["halfOffset"] == first, mine.remark
    refused = one_line_error(txmq(cluster, "tx", "commit", "SHARED" * 5), "tx")
    assert f"half offsets {first}, {second}" in refused or f"half offsets {second}, {first}" in refused, refused
    r = txmq(cluster, "tx", "commit", str(second))
    assert r.returncode == 0 and "committed" in r.stdout, r.stderr
    r = txmq(cluster, "tx", "show", str(first))
    assert re.search(r"^state:\s+PENDING$", r.stdout, re.M), r.stdout


def test_transactions_by_id_or_offset_on_two_brokers(cluster):
    """A half offset names one half on one broker, and every broker numbers its halves from 0: deciding by offset
    without a broker would decide whatever half each broker holds there, so it needs ``--broker``. ``show`` of an
    id several halves carry says so (as ``commit`` does), and ``--group`` narrows a ``commit`` as it narrows
    ``show``."""
    conf = {"grpcPort": -1, "transactionTimeOut": 600_000}
    a, b = cluster.start_broker("broker-a", conf), cluster.start_broker("broker-b", conf)
    assert txmq(cluster, "topic", "create", "dup_tx2", "--queues", "1").returncode == 0
    cluster.wait_route("dup_tx2", brokers=2)
    with RawClient(a.addrs["broker"]) as raw:
        first = _half(raw, "dup_tx2", "dup2_g1", "TWICE" * 6)
        second = _half(raw, "dup_tx2", "dup2_g2", "TWICE" * 6)
    with RawClient(b.addrs["broker"]) as raw:
        others = [_half(raw, "dup_tx2", "dup2_g3", f"OTHER{n}" * 6) for n in range(2)]
    assert {first, second} == set(others)  # the same offsets on both brokers
    shown = one_line_error(txmq(cluster, "tx", "show", "TWICE" * 6), "tx")
    assert f"half offsets {first}, {second}" in shown and "broker-a" in shown, shown
    refused = one_line_error(txmq(cluster, "tx", "commit", str(second)), "tx")
    assert "--broker" in refused and "broker-a" in refused and "broker-b" in refused, refused
    r = txmq(cluster, "tx", "commit", str(second), "--broker", "broker-a")
    assert r.returncode == 0 and "committed on broker-a" in r.stdout, r.stderr
    r = txmq(cluster, "tx", "commit", "TWICE" * 6, "--group", "dup2_g1")
    assert r.returncode == 0 and "committed on broker-a" in r.stdout, r.stderr
    r = txmq(cluster, "tx", "list", "--json")
    pending = {(broker, t["halfOffset"]) for broker, d in orjson.loads(r.stdout).items() for t in d["pending"]}
    assert pending == {("broker-b", others[0]), ("broker-b", others[1])}, pending
