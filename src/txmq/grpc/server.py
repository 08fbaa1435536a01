"""The RocketMQ 5 gRPC endpoint of a broker: a ``grpc.aio`` server on the broker's event loop serving
``apache.rocketmq.v2.MessagingService`` (``service.py``) over the broker's store, transaction service and
managers. The broker starts it after its remoting server and stops it before its store (``BrokerController``).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import grpc

from txmq.acl.grpc_auth import CallInterceptor
from txmq.grpc.protocol import service_pb2_grpc
from txmq.grpc.service import METHODS, MessagingService
from txmq.grpc.telemetry import ClientSessions, GrpcCheckSender
from txmq.remoting.tls import TlsServerConfig

if TYPE_CHECKING:
    from txmq.broker.controller import BrokerController

log = logging.getLogger("txmq.grpc")

# The gRPC message limit must admit the broker's largest message plus its protobuf envelope.
_ENVELOPE = 1024 * 1024
# Calls open at once on one connection (grpcio's default is unbounded): a client's telemetry stream, its long
# polls and its sends in flight; more wait in the client until one ends.
MAX_CONCURRENT_STREAMS = 256


def _credentials(tls: TlsServerConfig) -> grpc.ServerCredentials:
    with open(tls.key_path, "rb") as key, open(tls.cert_path, "rb") as cert:
        return grpc.ssl_server_credentials([(key.read(), cert.read())])


class GrpcEndpoint:
    def __init__(self, broker: BrokerController, host: str, port: int) -> None:
        self.broker = broker
        self.host = host
        self.port = port
        self.sessions = ClientSessions(broker.config.grpc_max_sessions_per_account)
        self.check_sender = GrpcCheckSender(self.sessions)
        self.service: MessagingService | None = None
        self._server: grpc.aio.Server | None = None

    @property
    def addr(self) -> str:
        return f"{self.host}:{self.port}"

    async def start(self) -> None:
        limit = self.broker.config.store.max_message_size + _ENVELOPE
        limits = self.broker.config.server_limits
        # every call passes the one interceptor: declared methods only, headers parsed once, ACL when it is on
        interceptors = [CallInterceptor(METHODS, self.broker.acl, self.broker.config.grpc_signature_window_seconds)]
        options = [
            ("grpc.max_receive_message_length", limit),
            ("grpc.max_send_message_length", limit),
            ("grpc.so_reuseport", 0),
            ("grpc.keepalive_permit_without_calls", 1),
            ("grpc.http2.min_ping_interval_without_data_ms", 5000),
            # The remoting server's limits, in grpcio's terms (HTTP/2 flow control already bounds each stream).
            ("grpc.max_concurrent_streams", MAX_CONCURRENT_STREAMS),
            # Counted as HTTP/2 counts them (open streams), which the client sees and queues behind. grpc core's
            # default also counts answered calls the asyncio server has not yet freed, and refuses new streams
            # past the limit (REFUSED_STREAM) whenever the loop lags under load, though the client kept under it.
            ("grpc.http.overload_protection", 0),
            ("grpc.max_allowed_incoming_connections", limits.server_max_connections),
            ("grpc.server_handshake_timeout_ms", int(limits.server_frame_timeout_seconds * 1000)),
        ]
        if limits.server_channel_max_idle_time_seconds:  # 0: no idle check, as on remoting (and in RocketMQ)
            options.append(("grpc.max_connection_idle_ms", int(limits.server_channel_max_idle_time_seconds * 1000)))
        server = grpc.aio.server(interceptors=interceptors, options=options)
        self.service = MessagingService(self.broker, self.sessions, (self.host, self.port))
        service_pb2_grpc.add_MessagingServiceServicer_to_server(self.service, server)
        tls = self.broker.config.tls_server()
        try:
            # grpcio cannot serve TLS and plaintext on one port: permissive serves TLS here (docs/security.md)
            bound = server.add_secure_port(f"{self.host}:{self.port}", _credentials(tls)) if tls.enabled \
                else server.add_insecure_port(f"{self.host}:{self.port}")
        except RuntimeError as exc:  # grpcio raises this for an address in use
            raise OSError(f"gRPC endpoint cannot bind {self.host}:{self.port}: {exc}") from None
        if bound == 0:
            raise OSError(f"gRPC endpoint cannot bind {self.host}:{self.port}")
        self.port = bound
        self.service.endpoint = (self.host, bound)
        await server.start()
        self._server = server
        if self.check_sender not in self.broker.check_service.senders:
            self.broker.check_service.senders.append(self.check_sender)
        log.info("gRPC endpoint (apache.rocketmq.v2.MessagingService) listening on %s (TLS %s)", self.addr,
                 "on" if tls.enabled else "off")

    def scan_expired(self, expired_s: float) -> None:
        self.sessions.scan_expired(expired_s)

    async def stop(self, grace_s: float = 1.0) -> None:
        if self.check_sender in self.broker.check_service.senders:
            self.broker.check_service.senders.remove(self.check_sender)
        self.sessions.close_all()
        if self.service is not None:
            self.service.group_route.forget()
        if self._server is not None:
            await self._server.stop(grace_s)
            self._server = None
