"""RocketMQ 4.x remoting: the wire protocol RocketMQ's clients speak, sans-IO codec plus asyncio transport.

See docs/remoting.md. Modules: ``codes`` (request/response/language codes), ``command``
(``RemotingCommand``), ``codec`` (``FrameDecoder``, ``encode_command``), ``headers`` (typed ext-field
access), ``transport`` (``Connection``, ``RemotingClient``), ``server`` (``RemotingServer``, ``ServerLimits``).
"""

from txmq.remoting.codec import DEFAULT_MAX_FRAME_SIZE, FrameDecoder, encode_command
from txmq.remoting.codes import LanguageCode, RequestCode, ResponseCode, SerializeType
from txmq.remoting.command import RemotingCommand
from txmq.remoting.server import RemotingServer, ServerLimits
from txmq.remoting.transport import (
    Connection,
    RemotingClient,
    RemotingConnectError,
    RemotingTimeoutError,
    install_event_loop_policy,
    new_event_loop,
)

__all__ = [
    "DEFAULT_MAX_FRAME_SIZE",
    "Connection",
    "FrameDecoder",
    "LanguageCode",
    "RemotingClient",
    "RemotingCommand",
    "RemotingConnectError",
    "RemotingServer",
    "RemotingTimeoutError",
    "RequestCode",
    "ResponseCode",
    "SerializeType",
    "ServerLimits",
    "encode_command",
    "install_event_loop_policy",
    "new_event_loop",
]
