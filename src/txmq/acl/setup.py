"""Building the validators and the broker's signing hook from configuration."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from txmq.acl.config import AclFile, find_acl_file
from txmq.acl.signer import AclClientRPCHook, SessionCredentials
from txmq.acl.validator import AccessValidator

if TYPE_CHECKING:
    from txmq.broker.config import BrokerConfig


def broker_validator(config: BrokerConfig) -> AccessValidator | None:
    """The broker's validator when ``aclEnable`` is true. Raises ``AclConfigError``/``OSError`` on a bad file."""
    if not config.acl_enable:
        return None
    return AccessValidator(AclFile(find_acl_file(config.acl_file or None)), "broker")


def namesrv_validator(acl_file: str | None) -> AccessValidator:
    """The name server's: route writes need Update on the cluster (the cluster's brokers: a super account)."""
    return AccessValidator(AclFile(find_acl_file(acl_file)), "namesrv")


def controller_validator(acl_file: str | None) -> AccessValidator:
    """The controller's: heartbeats and SyncStateSet changes need Update on the cluster (the brokers' account)."""
    return AccessValidator(AclFile(find_acl_file(acl_file)), "controller")


def broker_rpc_hook(config: BrokerConfig) -> AclClientRPCHook | None:
    """Signs the broker's requests to name servers with ``accessKey``/``secretKey`` when they are set."""
    if not config.access_key:
        return None
    return AclClientRPCHook(SessionCredentials(config.access_key, config.secret_key))


def admin_secret(validator: AccessValidator | None, access_key: str) -> str | None:
    """The secretKey of ``access_key`` if it is an admin account of the validator's file as it is now, else None:
    what a master checks an HA slave's proof with (only the cluster's admin accounts replicate)."""
    if validator is None:
        return None
    account = validator.acl_file.current(time.monotonic()).accounts.get(access_key)
    return account.secret_key if account is not None and account.admin else None
