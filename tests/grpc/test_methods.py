"""Every method of ``apache.rocketmq.v2.MessagingService`` is declared once with what it needs, and the endpoint's
interceptor refuses a method that is not (fail closed), over a real gRPC server on 127.0.0.1."""

from __future__ import annotations

import asyncio
from typing import Any

import grpc
import pytest

from txmq.acl.grpc_auth import SERVICE, CallInterceptor, date_time_skew
from txmq.acl.model import Needs
from txmq.grpc.call import MethodTable
from txmq.grpc.protocol import service_pb2 as spb
from txmq.grpc.protocol import service_pb2_grpc
from txmq.grpc.service import METHODS


def test_every_method_of_the_service_is_declared():
    served = {m.name for m in SERVICE.methods}
    assert set(METHODS.needs) == served, (served - set(METHODS.needs), set(METHODS.needs) - served)
    for method in SERVICE.methods:  # each declaration reads its own request type (Telemetry: none at opening)
        request = None if method.client_streaming else getattr(spb, method.input_type.name)()
        assert isinstance(METHODS.needs[method.name](request), Needs)


def test_a_method_declared_twice_is_refused():
    table = MethodTable()

    async def QueryRoute(request: Any, context: Any) -> None: ...

    table.declare(lambda r: Needs())(QueryRoute)
    with pytest.raises(ValueError, match="QueryRoute is declared twice"):
        table.declare(lambda r: Needs())(QueryRoute)


def test_a_method_without_a_declaration_is_refused():
    """A table without Heartbeat: the interceptor refuses it PERMISSION_DENIED before any handler runs; a
    declared method reaches the servicer (here grpcio's base servicer, which answers UNIMPLEMENTED)."""
    table = MethodTable()
    table.needs["QueryRoute"] = lambda r: Needs()

    async def run() -> tuple[grpc.StatusCode, grpc.StatusCode, str]:
        server = grpc.aio.server(interceptors=[CallInterceptor(table, None)])
        service_pb2_grpc.add_MessagingServiceServicer_to_server(service_pb2_grpc.MessagingServiceServicer(), server)
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        try:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
                stub = service_pb2_grpc.MessagingServiceStub(channel)
                with pytest.raises(grpc.aio.AioRpcError) as refused:
                    await stub.Heartbeat(spb.HeartbeatRequest(), timeout=5)
                with pytest.raises(grpc.aio.AioRpcError) as served:
                    await stub.QueryRoute(spb.QueryRouteRequest(), timeout=5)
                return refused.value.code(), served.value.code(), refused.value.details() or ""
        finally:
            await server.stop(None)

    refused, served, details = asyncio.run(run())
    assert refused == grpc.StatusCode.PERMISSION_DENIED and "Heartbeat has no declared permission" in details
    assert served == grpc.StatusCode.UNIMPLEMENTED


@pytest.mark.parametrize(("date_time", "skew"), [
    ("20240229T120000Z", 0.0), ("20240229T115959Z", 1.0), ("20240229T121500Z", -900.0),
    ("20230229T120000Z", None), ("20240229T120000", None), ("2024-02-29T12:00:00Z", None), ("", None),
    ("２０２４0229T120000Z", None),  # digits of another script are not the clients' format
])
def test_date_time_skew(date_time, skew):
    now = 1709208000.0  # 2024-02-29 12:00:00 UTC
    assert date_time_skew(date_time, now) == skew
