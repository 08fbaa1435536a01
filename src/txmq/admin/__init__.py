"""RocketMQ's operator tools for txmq: ``MQAdminExt`` (the requests of ``DefaultMQAdminExt``) and the
``txmq admin`` commands under mqadmin's names and flags."""

from txmq.admin.client import MQAdminExt

__all__ = ["MQAdminExt"]
