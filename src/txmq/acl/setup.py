"""Building the validators and the broker's signing hook from configuration."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from txmq.acl.config import AclConfigError, AclFile, find_acl_file
from txmq.acl.model import UserStatus
from txmq.acl.signer import AclClientRPCHook, SessionCredentials
from txmq.acl.store import AuthStore
from txmq.acl.validator import AccessValidator

if TYPE_CHECKING:
    from txmq.broker.config import BrokerConfig


def broker_auth_store_path(config: BrokerConfig) -> Path:
    return Path(config.store.store_path_root_dir) / "config" / "auth.json"


def namesrv_auth_store_path(auth_store: str | None) -> Path:
    """``--auth-store``, else RocketMQ's home of name server files: ``~/namesrv/auth.json``."""
    return Path(auth_store) if auth_store else Path.home() / "namesrv" / "auth.json"


def check_broker_credentials(config: BrokerConfig) -> None:
    """With ACL on, the broker signs its registrations (and a slave its calls to its master) with its own
    account: without one its name servers refuse it, and it would serve without being routed."""
    if not config.acl_enable:
        return
    missing = [key for key, value in (("accessKey", config.access_key), ("secretKey", config.secret_key))
               if not value]
    if missing:
        raise AclConfigError(f"aclEnable=true needs {' and '.join(missing)} in broker.conf: the broker's own "
                             "account, which its name servers must accept for REGISTER_BROKER (an admin: true "
                             "account of their plain_acl.yml, or a Super user)")


def broker_validator(config: BrokerConfig) -> AccessValidator | None:
    """The broker's validator when ``aclEnable`` is true. Raises ``AclConfigError``/``AuthStoreError``/``OSError``
    on a bad file or store."""
    if not config.acl_enable:
        return None
    check_broker_credentials(config)
    store = AuthStore(AclFile(find_acl_file(config.acl_file or None)), broker_auth_store_path(config))
    return AccessValidator(store, "broker")


def namesrv_validator(acl_file: str | None, auth_store: Path) -> AccessValidator:
    """The name server's: route writes need Update on the cluster (the cluster's brokers: Super users)."""
    return AccessValidator(AuthStore(AclFile(find_acl_file(acl_file)), auth_store), "namesrv")


def controller_validator(acl_file: str | None) -> AccessValidator:
    """The controller's: heartbeats and SyncStateSet changes need Update on the cluster (the brokers' account).
    Its users are plain_acl.yml's alone."""
    return AccessValidator(AuthStore(AclFile(find_acl_file(acl_file))), "controller")


def broker_rpc_hook(config: BrokerConfig) -> AclClientRPCHook | None:
    """Signs the broker's requests to name servers with ``accessKey``/``secretKey`` when they are set."""
    if not config.access_key:
        return None
    return AclClientRPCHook(SessionCredentials(config.access_key, config.secret_key))


def admin_secret(validator: AccessValidator | None, access_key: str) -> str | None:
    """The password of ``access_key`` if it is an enabled Super user (plain_acl.yml's ``admin: true``) as the ACL
    is now, else None: what a master checks an HA slave's proof with (only the cluster's Super users replicate; a
    disabled one, refused every request, replicates nothing either)."""
    if validator is None:
        return None
    user = validator.store.get_user(access_key)
    if user is None or not user.is_super or user.user_status is not UserStatus.ENABLE:
        return None
    return user.password
