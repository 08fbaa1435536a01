"""Access control as RocketMQ 5.3's ACL 2.0 does it (users, ACLs of resources, actions, source addresses and
decisions; ``aclEnable``, signed requests), with ACL 1.0's ``plain_acl.yml`` still read; shared by the broker,
the name server, the controller and the gRPC endpoint; handlers never look at signatures."""

from txmq.acl.config import AclConfigError, AclFile, find_acl_file
from txmq.acl.signer import AclClientRPCHook, SessionCredentials
from txmq.acl.store import AuthStore
from txmq.acl.validator import AccessValidator

__all__ = ["AccessValidator", "AclClientRPCHook", "AclConfigError", "AclFile", "AuthStore", "SessionCredentials",
           "find_acl_file"]
