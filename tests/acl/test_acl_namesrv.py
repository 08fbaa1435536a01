"""A separate name server with its own plain_acl.yml (``txmq namesrv --acl-file``) and brokers as their own
processes: only a broker signing with the cluster's (admin) credentials is registered and routed."""

from __future__ import annotations

import os
from pathlib import Path

import orjson
import pytest

from txmq.acl.signer import SessionCredentials
from txmq.launch import ServerProcess, free_port, txmq_command
from txmq.remoting.codes import RequestCode, ResponseCode

from .conftest import ADMIN, ATTACKER, PLAIN_ACL, VICTIM, call


def _broker(root: Path, name: str, namesrv: str, ak: str, sk: str) -> ServerProcess:
    conf = root / f"{name}.conf"
    conf.write_text(f"brokerName={name}\nnamesrvAddr={namesrv}\nstorePathRootDir={root / name}\n"
                    f"listenPort={free_port()}\ngrpcPort=-1\naccessKey={ak}\nsecretKey={sk}\n")
    env = dict(os.environ, HOME=str(root), PYTHONUNBUFFERED="1")
    return ServerProcess(txmq_command("broker", "-c", str(conf)), root / f"{name}.log", env)


def test_only_brokers_with_the_clusters_credentials_register(tmp_path):
    (tmp_path / "plain_acl.yml").write_text(PLAIN_ACL)
    env = dict(os.environ, HOME=str(tmp_path), PYTHONUNBUFFERED="1")
    namesrv = ServerProcess(txmq_command("namesrv", "--port", str(free_port()), "--acl-file",
                                         str(tmp_path / "plain_acl.yml")), tmp_path / "namesrv.log", env)
    procs = [namesrv]
    try:
        namesrv.start()
        ns = namesrv.namesrv
        procs.append(_broker(tmp_path, "broker-a", ns, ADMIN.access_key, ADMIN.secret_key).start())
        # a broker the name server refuses does not start (it would serve unrouted), and says which keys to set
        for name, creds in (("broker-evil", ATTACKER), ("broker-nokey", SessionCredentials("", ""))):
            broker = _broker(tmp_path, name, ns, creds.access_key, creds.secret_key)
            procs.append(broker)  # stopped below should it start after all
            with pytest.raises(RuntimeError, match="txmq did not start"):
                broker.start(timeout=30)
            assert broker.popen is not None and broker.popen.returncode not in (0, None)
            log = (tmp_path / f"{name}.log").read_text()
            assert f"namesrv {ns} refused the registration (request code 103: " in log
            assert "set accessKey/secretKey in broker.conf" in log
        # each broker registers before it says it is ready
        resp = call(ns, RequestCode.GET_BROKER_CLUSTER_INFO, as_=VICTIM)
        assert resp.code == ResponseCode.SUCCESS
        assert set(orjson.loads(resp.body)["brokerAddrTable"]) == {"broker-a"}
        # reads need a valid account too
        assert call(ns, RequestCode.GET_BROKER_CLUSTER_INFO).code == ResponseCode.NO_PERMISSION
    finally:
        for p in reversed(procs):
            p.stop()


def test_default_server_is_open_on_loopback_and_says_so(tmp_path):
    env = dict(os.environ, HOME=str(tmp_path), PYTHONUNBUFFERED="1")
    server = ServerProcess(txmq_command("server", "--store", str(tmp_path / "store"), "--port", "0",
                                        "--namesrv-port", str(free_port()), "--grpc-port", "-1"),
                           tmp_path / "server.log", env).start()
    try:
        assert server.namesrv.startswith("127.0.0.1:") and server.addrs["broker"].startswith("127.0.0.1:")
        log = (tmp_path / "server.log").read_text()
        assert "ACL off: any client reaching this address may do anything" in log
        assert "namesrv listening on 127.0.0.1" in log and "ACL off: anyone may register brokers" in log
        assert call(server.namesrv, RequestCode.GET_BROKER_CLUSTER_INFO).code == ResponseCode.SUCCESS
    finally:
        server.stop()
