"""RocketMQ's ``plain_acl.yml`` (ACL 1.0): global white addresses and accounts with their permissions, parsed
once and re-read when the file changes; ``txmq.acl.migration`` maps each account to an ACL 2.0 user and ACL.

Permissions are RocketMQ's bits (``Permission``): DENY 1, PUB 2, SUB 4; ``PUB|SUB`` is 6. A topic or group an
account does not name falls back to ``defaultTopicPerm`` / ``defaultGroupPerm`` (DENY when absent).
"""

from __future__ import annotations

import ipaddress
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

log = logging.getLogger("txmq.acl")

DENY, PUB, SUB = 1, 2, 4
_PERMS = {"DENY": DENY, "PUB": PUB, "SUB": SUB, "PUB|SUB": PUB | SUB, "SUB|PUB": PUB | SUB, "ANY": PUB | SUB}


class AclConfigError(ValueError):
    """plain_acl.yml cannot be used as written."""


def parse_perm(text: object) -> int:
    perm = _PERMS.get(str(text).strip().upper().replace(" ", ""))
    if perm is None:
        raise AclConfigError(f"unknown permission {text!r} (DENY, PUB, SUB or PUB|SUB)")
    return perm


class RemoteAddressMatcher:
    """RocketMQ's remote address strategies: ``*``, an exact IP, per-segment ``*``, ``a-b`` ranges and ``{a,b}``
    sets (``192.168.1.*``, ``10.0.1-20.*``, ``192.168.0.{1,2}``), and, beyond RocketMQ, CIDR (``10.0.0.0/8``)."""

    def __init__(self, pattern: str) -> None:
        self.pattern = pattern.strip()
        self._any = self.pattern == "*"
        self._net: ipaddress.IPv4Network | ipaddress.IPv6Network | None = None
        self._segments: list[set[int] | None] = []
        if self._any or not self.pattern:
            return
        if "/" in self.pattern:
            try:
                self._net = ipaddress.ip_network(self.pattern, strict=False)
            except ValueError as exc:
                raise AclConfigError(f"bad address pattern {pattern!r}: {exc}") from None
            return
        parts = self.pattern.split(".")
        if len(parts) != 4:
            raise AclConfigError(f"bad address pattern {pattern!r}: expected four dotted parts")
        self._segments = [self._segment(p, pattern) for p in parts]

    @staticmethod
    def _segment(part: str, pattern: str) -> set[int] | None:
        try:
            if part == "*":
                return None
            if part.startswith("{") and part.endswith("}"):
                return {int(x) for x in part[1:-1].split(",")}
            if "-" in part:
                lo, hi = part.split("-", 1)
                return set(range(int(lo), int(hi) + 1))
            return {int(part)}
        except ValueError:
            raise AclConfigError(f"bad address pattern {pattern!r}") from None

    def match(self, host: str) -> bool:
        if self._any:
            return True
        if not self.pattern or not host:
            return False
        if self._net is not None:
            try:
                return ipaddress.ip_address(host) in self._net
            except ValueError:
                return False
        parts = host.split(".")
        if len(parts) != 4 or not all(p.isdigit() for p in parts):
            return False
        return all(s is None or int(p) in s for s, p in zip(self._segments, parts, strict=True))


@dataclass(slots=True)
class Account:
    """One account as the file writes it; ``txmq.acl.migration`` turns it into a user and an ACL."""

    access_key: str
    secret_key: str = field(repr=False)
    admin: bool = False
    default_topic_perm: int | None = None  # None: not given (no default entry)
    default_group_perm: int | None = None
    topic_perms: dict[str, int] = field(default_factory=dict)
    group_perms: dict[str, int] = field(default_factory=dict)
    white_remote_address: RemoteAddressMatcher | None = None


@dataclass(slots=True)
class PlainAccessConfig:
    accounts: dict[str, Account] = field(default_factory=dict)
    global_white: list[RemoteAddressMatcher] = field(default_factory=list)


def _perm_table(entries: Any, what: str) -> dict[str, int]:
    """``["topicA=DENY", "topicB=PUB|SUB"]`` as a dict."""
    out: dict[str, int] = {}
    for entry in entries or []:
        name, sep, perm = str(entry).partition("=")
        if not sep or not name.strip():
            raise AclConfigError(f"bad {what} entry {entry!r}: expected NAME=PERM")
        out[name.strip()] = parse_perm(perm) if perm.strip() else DENY  # as RocketMQ: blank is DENY
    return out


def _default_perm(text: object) -> int | None:
    return None if text is None or str(text).strip() == "" else parse_perm(text)


def parse_plain_acl(text: str) -> PlainAccessConfig:
    try:
        doc = yaml.safe_load(text) or {}
    except yaml.YAMLError as exc:
        raise AclConfigError(f"not YAML: {exc}") from None
    if not isinstance(doc, dict):
        raise AclConfigError("the top level must be a mapping")
    config = PlainAccessConfig(global_white=[RemoteAddressMatcher(str(p))
                                             for p in doc.get("globalWhiteRemoteAddresses") or []])
    for n, raw in enumerate(doc.get("accounts") or []):
        if not isinstance(raw, dict) or not raw.get("accessKey") or not raw.get("secretKey"):
            raise AclConfigError(f"account {n}: accessKey and secretKey are required")
        ak, sk = str(raw["accessKey"]), str(raw["secretKey"])
        if len(ak) <= 6 or len(sk) <= 6:  # as RocketMQ's PlainPermissionManager demands
            raise AclConfigError(f"account {ak!r}: accessKey and secretKey need more than 6 characters")
        white = raw.get("whiteRemoteAddress")
        config.accounts[ak] = Account(
            ak, sk, admin=str(raw.get("admin", False)).lower() == "true",
            default_topic_perm=_default_perm(raw.get("defaultTopicPerm")),
            default_group_perm=_default_perm(raw.get("defaultGroupPerm")),
            topic_perms=_perm_table(raw.get("topicPerms"), "topicPerms"),
            group_perms=_perm_table(raw.get("groupPerms"), "groupPerms"),
            white_remote_address=RemoteAddressMatcher(str(white)) if white else None)
    return config


def find_acl_file(acl_file: str | None) -> Path:
    """``aclFile`` when given, else where RocketMQ looks: ``$ROCKETMQ_HOME/conf/plain_acl.yml``."""
    if acl_file:
        return Path(acl_file)
    home = os.environ.get("ROCKETMQ_HOME")
    if not home:
        raise AclConfigError("aclEnable=true needs aclFile in broker.conf or $ROCKETMQ_HOME/conf/plain_acl.yml")
    return Path(home) / "conf" / "plain_acl.yml"


class AclFile:
    """The parsed file, re-read when its modification time or size changes (looked at most once a second, so
    the request path costs one clock read). A file that stops parsing keeps the last good accounts."""

    def __init__(self, path: Path, check_interval_s: float = 1.0) -> None:
        self.path = path
        self.check_interval_s = check_interval_s
        self._stamp: tuple[int, int] | None = self._stat()
        self.config = parse_plain_acl(path.read_text())
        self._next_check = 0.0

    def _stat(self) -> tuple[int, int]:
        st = self.path.stat()
        return st.st_mtime_ns, st.st_size

    def current(self, now: float) -> PlainAccessConfig:
        if now >= self._next_check:
            self._next_check = now + self.check_interval_s
            self._maybe_reload()
        return self.config

    def _maybe_reload(self) -> None:
        """Re-read after a change; a missing or broken file is logged once per change, not once per check."""
        try:
            stamp: tuple[int, int] | None = self._stat()
        except OSError:
            stamp = None
        if stamp == self._stamp:
            return
        self._stamp = stamp
        try:
            self.config = parse_plain_acl(self.path.read_text())
        except (OSError, AclConfigError) as exc:
            log.error("plain_acl.yml %s not reloaded, the previous accounts stay: %s", self.path, exc)
            return
        log.info("plain_acl.yml %s reloaded: %d accounts", self.path, len(self.config.accounts))
