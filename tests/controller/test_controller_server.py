"""The controller process's request handling over an in-memory DCS, real TCP on 127.0.0.1: heartbeats answer
the group's state, malformed bodies are refused with an answer (the controller goes on), a controller that is
not the leader names the leader and changes nothing."""

from __future__ import annotations

import asyncio

import orjson

from txmq.controller.dcs import MemoryDCS
from txmq.controller.server import ControllerManager
from txmq.remoting.codes import RequestCode, ResponseCode
from txmq.remoting.command import RemotingCommand
from txmq.remoting.transport import RemotingClient

BEAT = {"clusterName": "c", "brokerName": "g", "brokerId": 1, "brokerAddr": "127.0.0.1:1", "haAddr": "127.0.0.1:2",
        "maxOffset": 0, "epoch": 0, "heartbeatTimeoutMillis": 5000}


async def _scenario() -> None:
    dcs = MemoryDCS()
    a, b = ControllerManager(dcs, port=0), ControllerManager(dcs, port=0)
    await a.start()
    for _ in range(50):
        if a.acting:
            break
        await asyncio.sleep(0.05)
    await b.start()
    client = RemotingClient()
    try:
        async def ask(addr: str, code: int, body: bytes) -> RemotingCommand:
            return await client.invoke(addr, RemotingCommand.request(code, body=body), 3.0)

        for junk in (b"\xff\x00", b"[1,2]", b'{"brokerName": "g"}', b'{"brokerId": "x"}'):
            resp = await ask(a.addr, RequestCode.BROKER_HEARTBEAT, junk)
            assert resp.code == ResponseCode.SYSTEM_ERROR, resp
        resp = await ask(a.addr, RequestCode.BROKER_HEARTBEAT, orjson.dumps(BEAT))
        assert resp.code == ResponseCode.SUCCESS, resp.remark
        state = orjson.loads(resp.body)
        assert (state["master_id"], state["epoch"], state["alive"]) == (1, 1, [1])
        await asyncio.sleep(1.2)  # b has looked the leader up
        resp = await ask(b.addr, RequestCode.BROKER_HEARTBEAT, orjson.dumps({**BEAT, "brokerId": 2}))
        assert resp.code == ResponseCode.SYSTEM_ERROR and resp.ext_fields["leaderAddr"] == a.addr
        meta = orjson.loads((await ask(b.addr, RequestCode.CONTROLLER_GET_METADATA_INFO, b"")).body)
        assert meta == {"controller": b.addr, "leader": a.addr, "isLeader": False}
        info = orjson.loads((await ask(a.addr, RequestCode.CONTROLLER_GET_REPLICA_INFO, b"{}")).body)
        assert sorted(info["g"]["replicas"]) == ["1"]
    finally:
        await client.close()
        await b.close()
        await a.close()


def test_controller_requests():
    asyncio.run(_scenario())


PLAIN_ACL = """\
accounts:
  - accessKey: brokerKey01
    secretKey: brokerSecret01
    admin: true
  - accessKey: clientKey01
    secretKey: clientSecret01
    defaultTopicPerm: PUB|SUB
    defaultGroupPerm: PUB|SUB
"""


async def _acl_scenario(acl_path) -> None:
    from txmq.acl.setup import controller_validator
    from txmq.acl.signer import AclClientRPCHook, SessionCredentials

    a = ControllerManager(MemoryDCS(), port=0, acl=controller_validator(str(acl_path)))
    await a.start()
    try:
        for _ in range(50):
            if a.acting:
                break
            await asyncio.sleep(0.05)

        async def ask(code: int, body: bytes, key: str | None = None, secret: str = "") -> RemotingCommand:
            hook = AclClientRPCHook(SessionCredentials(key, secret)) if key else None
            async with RemotingClient(rpc_hook=hook) as client:
                return await client.invoke(a.addr, RemotingCommand.request(code, body=body), 3.0)

        beat = orjson.dumps(BEAT)
        assert (await ask(RequestCode.BROKER_HEARTBEAT, beat)).code != ResponseCode.SUCCESS  # unsigned
        assert (await ask(RequestCode.BROKER_HEARTBEAT, beat, "clientKey01", "clientSecret01")).code \
            != ResponseCode.SUCCESS  # a client's account is not the cluster's
        assert (await ask(RequestCode.BROKER_HEARTBEAT, beat, "brokerKey01", "wrongSecret01")).code \
            != ResponseCode.SUCCESS
        assert a.manager is not None and a.manager.state("g") is None  # none of those changed anything
        assert (await ask(RequestCode.BROKER_HEARTBEAT, beat, "brokerKey01", "brokerSecret01")).code \
            == ResponseCode.SUCCESS
        # Reading the replicas is a read of the cluster (Get on Cluster): the cluster's account, not a client's.
        assert (await ask(RequestCode.CONTROLLER_GET_REPLICA_INFO, b"{}")).code != ResponseCode.SUCCESS
        assert (await ask(RequestCode.CONTROLLER_GET_REPLICA_INFO, b"{}", "clientKey01", "clientSecret01")).code \
            == ResponseCode.NO_PERMISSION
        assert (await ask(RequestCode.CONTROLLER_GET_REPLICA_INFO, b"{}", "brokerKey01", "brokerSecret01")).code \
            == ResponseCode.SUCCESS
    finally:
        await a.close()


def test_controller_with_acl_takes_heartbeats_only_from_admin_accounts(tmp_path):
    acl = tmp_path / "plain_acl.yml"
    acl.write_text(PLAIN_ACL)
    asyncio.run(_acl_scenario(acl))
