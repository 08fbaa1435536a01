"""The web console (RocketMQ Dashboard's job): cluster, topics, consumer groups, messages, transactions and live
charts, served by ``txmq console`` and by ``txmq server``. A client of the brokers like any other: every figure
comes from an admin request over the protocol (``txmq.admin.MQAdminExt``), never from broker internals. Under ACL
each user logs in with their own account and every request is signed as them (``txmq.console.auth``); every
request passes the checks of ``txmq.console.guard``."""

from txmq.console.app import make_app
from txmq.console.config import ConsoleConfig
from txmq.console.serve import Console

__all__ = ["Console", "ConsoleConfig", "make_app"]
