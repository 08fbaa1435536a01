"""``txmq controller status``: a controller's view (who leads) and, from the leader, every group's state."""

from __future__ import annotations

import os
from typing import Any

import orjson

from txmq.acl.signer import AclClientRPCHook, SessionCredentials
from txmq.errors import ClientError
from txmq.remoting.codes import RequestCode, ResponseCode
from txmq.remoting.command import RemotingCommand
from txmq.remoting.transport import RemotingClient, run


async def _ask(client: RemotingClient, addr: str, code: int) -> tuple[RemotingCommand, Any]:
    resp = await client.invoke(addr, RemotingCommand.request(code, body=b"{}"), 3.0)
    return resp, orjson.loads(resp.body) if resp.code == ResponseCode.SUCCESS and resp.body else None


async def _status(addr: str) -> dict[str, Any]:
    key = os.environ.get("TXMQ_ACCESS_KEY")  # --access-key/--secret-key, as every txmq command's clients
    hook = AclClientRPCHook(SessionCredentials(key, os.environ.get("TXMQ_SECRET_KEY", ""))) if key else None
    client = RemotingClient(rpc_hook=hook)
    try:
        _, meta = await _ask(client, addr, RequestCode.CONTROLLER_GET_METADATA_INFO)
        if meta is None:
            raise ClientError(f"controller {addr} did not answer its metadata")
        leader = addr if meta["isLeader"] else meta.get("leader")
        groups: dict[str, Any] = {}
        if leader:
            try:
                resp, groups = await _ask(client, leader, RequestCode.CONTROLLER_GET_REPLICA_INFO)
            except (ClientError, OSError):  # the leader key names a controller that is gone (its lease runs out)
                return {"metadata": {**meta, "leaderReachable": False}, "groups": {}}
            if groups is None:
                raise ClientError(f"leader {leader} answered {resp.code}: {resp.remark}")
        return {"metadata": meta, "groups": groups}
    finally:
        await client.close()


def controller_status(addr: str) -> dict[str, Any]:
    return run(_status(addr))
