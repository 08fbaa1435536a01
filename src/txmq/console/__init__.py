"""The web console (RocketMQ Dashboard's job): cluster, topics, consumer groups, messages, transactions and live
charts, served by ``txmq console`` and by ``txmq server``. A client of the brokers like any other: every figure
comes from an admin request over the protocol (``txmq.admin.MQAdminExt``), never from broker internals."""

from txmq.console.app import Console, make_app

__all__ = ["Console", "make_app"]
