"""Users and ACLs of one server (RocketMQ 5.3's ACL 2.0): who a request is (``identify``) and whether it may do
what it asks (``refusal``), on every request; and the changes the admin commands make.

Two sources, one view:

- **plain_acl.yml** (ACL 1.0, ``txmq.acl.config``): its accounts are users with ACLs (``txmq.acl.migration``),
  re-read when the file changes (the last good one kept). They are read-only to the commands: edit the file.
- **the store** (a JSON file: the broker's ``<storePathRootDir>/config/auth.json``, the name server's
  ``--auth-store``): users and ACLs the commands create, written atomically before a change is answered, loaded
  at start. A store that cannot be read stops the server from starting: starting without its users would lock
  them out, and starting without its Deny entries would open what they close.

A name in both is the file's (a command cannot create, change or delete a file user or its ACL; a user added to
the file later hides the stored one until the file drops it again, with a warning at each reload).

Every change replaces the view at once (dicts swapped, not mutated), so requests see either the old or the new
state: a change takes effect on the next request, without a restart.
"""

from __future__ import annotations

import fcntl
import logging
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

from txmq.acl.config import AclFile, RemoteAddressMatcher
from txmq.acl.info import acl_info, read_acl_info, read_user_info, user_info
from txmq.acl.migration import migrate
from txmq.acl.model import Acl, Action, Needs, PolicyEntry, PolicyType, Resource, User, UserStatus, UserType
from txmq.fileio import write_atomic

log = logging.getLogger("txmq.acl")

# What a connection from a global white address is: RocketMQ lets it do anything.
WHITE_USER = User("(white address)", "", UserType.SUPER)

# Read on every request: module constants, not Enum members read through their class (a Python-level lookup).
_SUPER, _DISABLE = UserType.SUPER, UserStatus.DISABLE

_STORE_VERSION = 1


class AuthError(ValueError):
    """A change that cannot be made as asked; the message is the answer's remark."""


class AuthForbidden(AuthError):
    """A change only a Super user may make (RocketMQ: Super users are created, changed and deleted by Super
    users)."""


class AuthStoreError(ValueError):
    """The store file cannot be used; the server does not start with it."""


class AuthStore:
    """plain_acl.yml and the store of one server as one view (the module's docstring)."""

    def __init__(self, acl_file: AclFile, path: Path | None = None) -> None:
        """``path`` None: the file's users only (commands are refused), e.g. the controller's."""
        self.acl_file = acl_file
        self.path = path
        self._lock_fd: int | None = None
        self._stored_users: dict[str, User] = {}
        self._stored_acls: dict[str, Acl] = {}
        if path is not None:
            self._lock(path)
            self._stored_users, self._stored_acls = _load(path)
        self._file_config: object = None
        self._users: dict[str, User] = {}
        self._acls: dict[str, Acl] = {}
        self._white: tuple[RemoteAddressMatcher, ...] = ()
        self._current()

    def describe(self) -> str:
        stored = f", users and ACLs stored in {self.path}" if self.path is not None else ""
        return f"plain_acl.yml {self.acl_file.path}{stored}"

    def _lock(self, path: Path) -> None:
        """One process per store: two name servers sharing one file would each overwrite the other's changes."""
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path.with_name(path.name + ".lock"), os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            raise AuthStoreError(f"auth store {path} is in use by another process (give each server its own)") \
                from None
        self._lock_fd = fd

    def close(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    # --- the request path ---------------------------------------------------------------------------------

    def _current(self) -> None:
        """Rebuild the view when plain_acl.yml was re-read (``AclFile`` looks at most once a second)."""
        config = self.acl_file.current(time.monotonic())
        if config is not self._file_config:
            self._file_config = config
            self._merge()

    def _merge(self) -> None:
        config = self.acl_file.config
        file_users, file_acls = migrate(config)
        hidden = sorted(set(file_users) & set(self._stored_users))
        if hidden:
            log.warning("users %s are in plain_acl.yml %s and in the store %s: the file's are used",
                        ", ".join(hidden), self.acl_file.path, self.path)
        acls = {name: acl for name, acl in self._stored_acls.items() if name not in file_users}
        self._users = {**self._stored_users, **file_users}
        self._acls = {**acls, **file_acls}
        self._white = tuple(config.global_white)

    def identify(self, host: str, access_key: str, check_signature: Callable[[User], bool]) -> User | str:
        """The user a request comes from (``WHITE_USER`` from a global white address), or why it has none.
        ``check_signature(user)`` tells whether the request is signed with the user's password (``user.key``);
        it is not asked from the user's plain_acl.yml ``whiteRemoteAddress``."""
        self._current()
        for white in self._white:
            if white.match(host):
                return WHITE_USER
        if not access_key:
            return "no AccessKey (credentials are required)"
        user = self._users.get(access_key)
        if user is None:
            return f"no account for AccessKey {access_key}"
        matcher = user.white_remote_address
        if not (matcher is not None and matcher.match(host)) and not check_signature(user):
            return f"signature check failed for AccessKey {access_key}"
        if user.user_status is _DISABLE:
            return f"user {access_key} is disabled"
        return user

    def refusal_now(self, user: User, needs: Needs, host: str) -> str | None:
        """``refusal`` for a ``user`` identified a while ago (a Telemetry stream is admitted once and asks again
        for every settings command it sends, and no request of its own re-reads the files): decided on the files
        as they are now, ``user`` as they define it now."""
        self._current()
        if user is WHITE_USER:
            for white in self._white:
                if white.match(host):
                    break
            else:
                return f"{host} is no global white address any more"
        else:
            now = self._users.get(user.username)
            if now is None or now.user_status is _DISABLE:
                return f"user {user.username} does not exist or is disabled"
            user = now
        return self.refusal(user, needs, host)

    def refusal(self, user: User, needs: Needs, host: str) -> str | None:
        """None when ``user`` may do what ``needs`` lists from ``host``, else what it lacks first, named as an ACL
        names it (``no Pub permission on Topic:orders``). A Super user may do everything; a user without an ACL
        nothing. ``user`` as ``identify`` just found it, on the files it just read (a user identified earlier:
        ``refusal_now``)."""
        if user.user_type is _SUPER or not needs.wants:
            return None
        acl = self._acls.get(user.username)
        for resource, any_of in needs.wants:
            if acl is None or not acl.allows(resource, any_of, host):
                return _lacks(resource, any_of)
        return None

    # --- users (AUTH_*_USER) ---------------------------------------------------------------------------

    def get_user(self, username: str) -> User | None:
        self._current()
        return self._users.get(username)

    def list_users(self, filter_: str = "") -> list[User]:
        """RocketMQ's filter: names containing it."""
        self._current()
        return [u for name, u in sorted(self._users.items()) if filter_ in name]

    def create_user(self, username: str, password: str, user_type: UserType | None, by_super: bool) -> User:
        """``by_super``: whether the caller is a Super user (only one may create another)."""
        username = _username(username)
        if not password:
            raise AuthError("the password can not be blank")
        self._writable(username)
        if username in self._stored_users:
            raise AuthError(f"user {username} already exists")
        user = User(username, password, user_type or UserType.NORMAL)
        if user.is_super and not by_super:
            raise AuthForbidden("a Super user can only be created by a Super user")
        self._save({**self._stored_users, username: user}, self._stored_acls)
        return user

    def update_user(self, username: str, password: str, user_type: UserType | None,
                    user_status: UserStatus | None, by_super: bool) -> User:
        username = _username(username)
        self._writable(username)
        old = self._stored_users.get(username)
        if old is None:
            raise AuthError(f"user {username} does not exist")
        if (old.is_super or user_type is UserType.SUPER) and not by_super:
            raise AuthForbidden("a Super user can only be updated by a Super user")
        user = User(username, password or old.password, user_type or old.user_type, user_status or old.user_status)
        self._save({**self._stored_users, username: user}, self._stored_acls)
        return user

    def delete_user(self, username: str, by_super: bool) -> bool:
        """The user and its ACL; False when there was no such user (RocketMQ answers that as a success)."""
        username = _username(username)
        self._writable(username)
        old = self._stored_users.get(username)
        if old is None:
            return False
        if old.is_super and not by_super:
            raise AuthForbidden("a Super user can only be deleted by a Super user")
        users = {n: u for n, u in self._stored_users.items() if n != username}
        self._save(users, {n: a for n, a in self._stored_acls.items() if n != username})
        return True

    # --- ACLs (AUTH_*_ACL) -------------------------------------------------------------------------------

    def get_acl(self, username: str) -> Acl | None:
        self._current()
        self._existing(username)
        return self._acls.get(username)

    def list_acls(self, subject_filter: str = "", resource_filter: str = "") -> list[Acl]:
        """RocketMQ's filters: subjects containing one, entries whose resource key contains the other (every
        entry when the subject itself contains it); ACLs left without entries are left out."""
        self._current()
        out = []
        for name, acl in sorted(self._acls.items()):
            if subject_filter not in acl.subject:
                continue
            if resource_filter and resource_filter not in acl.subject:
                acl = Acl(name, {t: tuple(e for e in entries if resource_filter in e.resource.key)
                                 for t, entries in acl.policies.items()})
            if acl.policies:
                out.append(acl)
        return out

    def create_acl(self, username: str, policies: dict[PolicyType, tuple[PolicyEntry, ...]]) -> Acl:
        """RocketMQ's createAcl and updateAcl alike: entries for resources the ACL has replace theirs, the others
        are added."""
        self._writable(username)
        self._existing(username)
        acl = (self._stored_acls.get(username) or Acl(username, {})).updated(policies)
        self._save(self._stored_users, {**self._stored_acls, username: acl})
        return acl

    def delete_acl(self, username: str, policy_type: PolicyType, resource: Resource | None) -> None:
        """The whole ACL (``resource`` None), or the entry for ``resource`` in the ``policy_type`` policy."""
        self._writable(username)
        self._existing(username)
        old = self._stored_acls.get(username)
        if old is None:
            raise AuthError(f"no ACL for User:{username}")
        acl = old.without(policy_type, resource) if resource is not None else None
        acls = {n: a for n, a in self._stored_acls.items() if n != username}
        if acl is not None and acl.policies:
            acls[username] = acl
        self._save(self._stored_users, acls)

    # --- helpers -------------------------------------------------------------------------------------

    def _writable(self, username: str) -> None:
        if self.path is None:
            raise AuthError("this server keeps no users or ACLs of its own")
        self._current()
        user = self._users.get(username)
        if user is not None and user.from_file:
            raise AuthError(f"user {username} is defined in plain_acl.yml {self.acl_file.path}: change it there")

    def _existing(self, username: str) -> None:
        if username not in self._users:
            raise AuthError(f"user {username} does not exist")

    def _save(self, users: dict[str, User], acls: dict[str, Acl]) -> None:
        """Write first, then swap: a change the disk refused is not served either."""
        assert self.path is not None
        doc = {"version": _STORE_VERSION,
               "users": [user_info(u.username, u.password, u.user_type, u.user_status) for u in users.values()],
               "acls": [acl_info(a) for a in acls.values()]}
        write_atomic(self.path, orjson.dumps(doc, option=orjson.OPT_INDENT_2), mode=0o600)
        self._stored_users, self._stored_acls = users, acls
        self._merge()


def _lacks(resource: Resource, any_of: frozenset[Action]) -> str:
    return f"no {'|'.join(sorted(a.value for a in any_of))} permission on {resource.key}"


def _username(username: str) -> str:
    username = username.strip()
    if not username:
        raise AuthError("the username can not be blank")
    if not username.isprintable():  # names go into log lines and tables
        raise AuthError("the username must be printable characters")
    return username


def _load(path: Path) -> tuple[dict[str, User], dict[str, Acl]]:
    """The store's users and ACLs; none when the file does not exist yet. Anything else unreadable raises
    ``AuthStoreError`` naming the file and what is wrong."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return {}, {}
    except OSError as exc:
        raise AuthStoreError(f"auth store {path} cannot be read: {exc}") from None
    try:
        doc: Any = orjson.loads(raw)
        if not isinstance(doc, dict) or doc.get("version") != _STORE_VERSION:
            raise ValueError(f"not a version {_STORE_VERSION} auth store")
        users: dict[str, User] = {}
        for n, data in enumerate(doc.get("users") or []):
            name, password, user_type, status = read_user_info(data)
            if not name or not password:
                raise ValueError(f"user {n}: username and password are required")
            users[name] = User(name, password, user_type or UserType.NORMAL, status or UserStatus.ENABLE)
        acls: dict[str, Acl] = {}
        for data in doc.get("acls") or []:
            acl = read_acl_info(data)
            if acl.username not in users:
                raise ValueError(f"ACL of {acl.subject}: no such user in the store")
            acls[acl.username] = acl
    except ValueError as exc:  # orjson.JSONDecodeError is one
        raise AuthStoreError(f"auth store {path} is not valid ({exc}); the server does not start without its "
                             f"users and ACLs: restore the file, or move it away to start with none") from None
    return users, acls
