"""Access control as RocketMQ's ACL 1.0 does it (``aclEnable``, ``plain_acl.yml``, signed requests), shared by
the broker, the name server and the gRPC endpoint; processors never look at signatures."""

from txmq.acl.config import AclConfigError, AclFile, find_acl_file
from txmq.acl.permissions import BROKER_TABLE, NAMESRV_TABLE
from txmq.acl.signer import AclClientRPCHook, SessionCredentials
from txmq.acl.validator import AccessValidator

__all__ = ["BROKER_TABLE", "NAMESRV_TABLE", "AccessValidator", "AclClientRPCHook", "AclConfigError", "AclFile",
           "SessionCredentials", "find_acl_file"]
