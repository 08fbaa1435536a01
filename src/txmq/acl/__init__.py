"""Access control: RocketMQ 5.3's ACL 2.0 model (``txmq.acl.model``) over accounts read from ``plain_acl.yml``
(ACL 1.0), signed requests, and one validator that every request passes before its handler, shared by the
broker, the name server, the controller and the gRPC endpoint; handlers never look at signatures."""

from txmq.acl.config import AclConfigError, AclFile, find_acl_file
from txmq.acl.signer import AclClientRPCHook, SessionCredentials
from txmq.acl.validator import AccessValidator

__all__ = ["AccessValidator", "AclClientRPCHook", "AclConfigError", "AclFile", "SessionCredentials", "find_acl_file"]
