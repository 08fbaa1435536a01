"""RocketMQ 5.3's ACL 2.0 vocabulary: what a request needs (``Needs``: resources and actions) and the policies an
ACL grants (``PolicyEntry``), with the one rule that decides between them (``decide``). No IO here.

Resources are written as RocketMQ writes them: ``Topic:orders``, ``Topic:order-*`` (prefix), ``Topic:*``,
``Group:billing``, ``Cluster``, and ``*`` for any resource. Actions: ``Pub``, ``Sub``, ``Create``, ``Update``,
``Delete``, ``Get``, ``List``, and ``All`` in a policy for every action.

Deciding (RocketMQ's ``AclAuthorizationHandler``), for each action a request may use on a resource: of the entries
that match the resource, the action and the source address, the most specific resource wins (a literal name, then
the longest prefix, then ``Type:*``, then ``*``); between equally specific entries Deny wins; no matching entry
means deny. A request that accepts one of several actions is allowed when one of them is: a Deny of ``Pub`` does
not refuse a route lookup that ``Sub`` allows. An ``Acl`` (one user's) consults its Default entries for an action
only when none of its Custom ones applies (``PolicyIndex`` decides both ways fast); a ``User`` of type Super needs
no ACL. An entry's source addresses compare an IPv4-mapped IPv6 address as its IPv4 address; a peer whose address
is no IP address is outside every Allow entry's addresses and inside every Deny entry's.
"""

from __future__ import annotations

import enum
import ipaddress
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple, Protocol, TypeVar

import cython

from txmq.acl.signer import Mac, hmac_key
from txmq.topic import RETRY_GROUP_TOPIC_PREFIX


class Action(enum.Enum):
    """RocketMQ's ``Action``; the value is its name on the wire and in files."""

    ALL = "All"
    PUB = "Pub"
    SUB = "Sub"
    CREATE = "Create"
    UPDATE = "Update"
    DELETE = "Delete"
    GET = "Get"
    LIST = "List"

    # Members are singletons, equal only to themselves: hashed by identity (a C slot) rather than by Enum's
    # Python-level hash of the name, as every request's action set and resource are looked up by hash.
    __hash__ = object.__hash__

    @classmethod
    def parse(cls, text: str) -> Action:
        for action in cls:
            if action.value.lower() == text.strip().lower():
                return action
        raise ValueError(f"unknown action {text!r} (Pub, Sub, Create, Update, Delete, Get, List or All)")


class ResourceType(enum.Enum):
    ANY = "Any"
    CLUSTER = "Cluster"
    TOPIC = "Topic"
    GROUP = "Group"

    __hash__ = object.__hash__  # as Action's


class Pattern(enum.IntEnum):
    """How a policy's resource name matches; the order is specificity, most specific first."""

    LITERAL = 0
    PREFIXED = 1
    ANY = 2


class Resource(NamedTuple):
    """A tuple: one is made for every resource a request names (a send's topic), and a tuple is the cheapest."""

    type: ResourceType
    name: str = ""
    pattern: Pattern = Pattern.LITERAL

    @staticmethod
    def topic(name: str) -> Resource:
        return Resource(ResourceType.TOPIC, name)

    @staticmethod
    def group(name: str) -> Resource:
        return Resource(ResourceType.GROUP, name)

    @staticmethod
    def cluster() -> Resource:
        """The cluster itself: brokers, routes, configuration, users and ACLs (one cluster per ACL store)."""
        return _CLUSTER

    @staticmethod
    def parse(key: str) -> Resource:
        """``Topic:orders``, ``Group:bill*``, ``Topic:*``, ``Cluster`` (or ``Cluster:NAME``), ``*``."""
        key = key.strip()
        if key == "*":
            return Resource(ResourceType.ANY, "", Pattern.ANY)
        kind, sep, name = key.partition(":")
        rtype = next((t for t in ResourceType if t.value.lower() == kind.lower()), None)
        if rtype is None or rtype is ResourceType.ANY:
            raise ValueError(f"unknown resource {key!r} (Topic:NAME, Group:NAME, Cluster or *)")
        if rtype is ResourceType.CLUSTER:
            return _CLUSTER
        if not sep or not name:
            raise ValueError(f"resource {key!r} needs a name (Topic:NAME, Topic:PREFIX*, Topic:*)")
        if name == "*":
            return Resource(rtype, "", Pattern.ANY)
        if name.endswith("*"):
            return Resource(rtype, name[:-1], Pattern.PREFIXED)
        return Resource(rtype, name)

    @property
    def key(self) -> str:
        if self.type is ResourceType.ANY:
            return "*"
        if self.type is ResourceType.CLUSTER:
            return "Cluster"
        suffix = {Pattern.LITERAL: self.name, Pattern.PREFIXED: self.name + "*", Pattern.ANY: "*"}[self.pattern]
        return f"{self.type.value}:{suffix}"

    def matches(self, wanted: Resource) -> bool:
        """Whether this (a policy's resource) covers ``wanted`` (a request's literal resource)."""
        if self.type is ResourceType.ANY:
            return True
        if self.type is not wanted.type:
            return False
        if self.pattern is Pattern.ANY or self.type is ResourceType.CLUSTER:
            return True
        if self.pattern is Pattern.PREFIXED:
            return wanted.name.startswith(self.name)
        return wanted.name == self.name

    def specificity(self) -> tuple[bool, int, int]:
        """Sort key, most specific first: a type before ``*``; literal, longer prefix, shorter prefix, any."""
        return (self.type is ResourceType.ANY, self.pattern, -len(self.name))


_CLUSTER = Resource(ResourceType.CLUSTER, "", Pattern.ANY)

# What every request's needs and decision read, as module constants: an Enum member read through its class is a
# Python-level attribute lookup on the Enum's metaclass. ``_new_tuple(Resource, ...)`` makes a Resource without the
# Python frame of a NamedTuple's generated ``__new__`` (the same tuple).
_TOPIC, _GROUP, _LITERAL = ResourceType.TOPIC, ResourceType.GROUP, Pattern.LITERAL
_new_tuple = tuple.__new__


class Decision(enum.Enum):
    ALLOW = "Allow"
    DENY = "Deny"

    @classmethod
    def parse(cls, text: str) -> Decision:
        for decision in cls:
            if decision.value.lower() == text.strip().lower():
                return decision
        raise ValueError(f"unknown decision {text!r} (Allow or Deny)")



class SourceIps:
    """Addresses a policy entry applies to: IPs and CIDR networks (RocketMQ 5's ``sourceIps``); empty = any."""

    __slots__ = ("networks", "texts")

    def __init__(self, texts: Iterable[str] = ()) -> None:
        self.texts = tuple(t.strip() for t in texts if t.strip())
        try:
            self.networks = tuple(ipaddress.ip_network(t, strict=False) for t in self.texts)
        except ValueError as exc:
            raise ValueError(f"bad source IP: {exc}") from None

    def match(self, host: str, unknown: bool = False) -> bool:
        """Whether ``host`` is one of these addresses (an IPv4-mapped IPv6 address as its IPv4 address). ``unknown``:
        the answer for a host that is no IP address, given by a Deny entry as True (it applies: fail closed)."""
        if not self.networks:
            return True
        try:
            addr = ipaddress.ip_address(host)
        except ValueError:
            return unknown
        if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped is not None:
            addr = addr.ipv4_mapped
        return any(addr in net for net in self.networks)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, SourceIps) and other.texts == self.texts

    def __hash__(self) -> int:
        return hash(self.texts)

    def __repr__(self) -> str:
        return f"SourceIps({list(self.texts)!r})"


@dataclass(frozen=True, slots=True)
class PolicyEntry:
    """One grant or denial: a resource (pattern), its actions, from which addresses, Allow or Deny."""

    resource: Resource
    actions: frozenset[Action]
    decision: Decision = Decision.ALLOW
    source_ips: SourceIps = field(default_factory=SourceIps)

    def applies(self, wanted: Resource, any_of: frozenset[Action], host: str) -> bool:
        return (self.resource.matches(wanted) and (Action.ALL in self.actions or not self.actions.isdisjoint(any_of))
                and self.source_ips.match(host, self.decision is Decision.DENY))


def decide(entries: Sequence[PolicyEntry], wanted: Resource, any_of: frozenset[Action], host: str) -> bool:
    """Whether ``entries`` allow one of ``any_of`` on ``wanted`` from ``host`` (the module's rule), each action
    decided on its own: a Deny of one action is no Deny of another that the request may use instead."""
    return any(_decide_one(entries, wanted, _any_of((action,)), host) for action in any_of)


def _decide_one(entries: Sequence[PolicyEntry], wanted: Resource, action: frozenset[Action], host: str) -> bool:
    best: PolicyEntry | None = None
    for entry in entries:
        if not entry.applies(wanted, action, host):
            continue
        if best is None:
            best = entry
            continue
        rank, best_rank = entry.resource.specificity(), best.resource.specificity()
        if rank < best_rank or (rank == best_rank and entry.decision is Decision.DENY):
            best = entry
    return best is not None and best.decision is Decision.ALLOW


class PolicyIndex:
    """``decide``'s rule over fixed entries, made for the request path: literal resources in a dict by name, the
    patterns in ``decide``'s order (most specific first, Deny first among equals), so the first entry that applies
    is the one ``decide`` would pick. Each entry's resource match is reduced to a type and a prefix, and its
    actions and addresses to what the check reads, so deciding costs no method call per entry. Built once per ACL
    change, read on every request.

    Given several tiers (an ACL's Custom and Default entries), a later tier is consulted only when no entry of
    the earlier ones applies."""

    __slots__ = ("tiers",)

    def __init__(self, *tiers: Iterable[PolicyEntry]) -> None:
        built = []
        for entries in tiers:
            literal: dict[str, list[PolicyEntry]] = {}
            patterns: list[PolicyEntry] = []
            for entry in entries:
                res = entry.resource
                if res.pattern is Pattern.LITERAL and res.type not in (ResourceType.CLUSTER, ResourceType.ANY):
                    literal.setdefault(res.name, []).append(entry)
                else:
                    patterns.append(entry)
            built.append(({name: tuple(_scan(e) for e in sorted(found, key=_order)) for name, found in literal.items()},
                          tuple(_scan(e) for e in sorted(patterns, key=_order))))
        self.tiers = tuple(built)

    def allows(self, wanted: Resource, any_of: frozenset[Action], host: str) -> bool:
        """``decide``: one of ``any_of``, each action on its own (most requests name one)."""
        if len(any_of) == 1:
            best = self.best(wanted, any_of, host)
            return best is not None and best.decision is Decision.ALLOW
        return any(self.allows(wanted, _any_of((action,)), host) for action in any_of)

    def best(self, wanted: Resource, any_of: frozenset[Action], host: str) -> PolicyEntry | None:
        """The entry that decides one action (``any_of`` holds one), or None when none applies."""
        wtype, name = wanted.type, wanted.name
        for literal, patterns in self.tiers:
            for rtype, prefix, all_actions, actions, ips, deny, entry in literal.get(name, ()) + patterns:
                if (rtype is None or rtype is wtype) and name.startswith(prefix) \
                        and (all_actions or not actions.isdisjoint(any_of)) and (ips is None or ips.match(host, deny)):
                    return entry
        return None


_Scan = tuple[ResourceType | None, str, bool, frozenset[Action], "SourceIps | None", bool, PolicyEntry]


def _order(entry: PolicyEntry) -> tuple[tuple[bool, int, int], bool]:
    return entry.resource.specificity(), entry.decision is Decision.ALLOW


def _scan(entry: PolicyEntry) -> _Scan:
    """What ``PolicyIndex.best`` reads of an entry: its type (None: any), the prefix a name must start with (a
    literal's own name; a literal is found by name, so a prefix check is exact), whether it grants every action,
    its actions, its addresses (None: any), whether it denies."""
    res = entry.resource
    rtype = None if res.type is ResourceType.ANY else res.type
    prefix = res.name if res.pattern is not Pattern.ANY and res.type is not ResourceType.CLUSTER else ""
    ips = entry.source_ips if entry.source_ips.networks else None
    return rtype, prefix, Action.ALL in entry.actions, entry.actions, ips, entry.decision is Decision.DENY, entry


class PolicyType(enum.Enum):
    """RocketMQ's policy types: an ACL's ``Default`` entries are consulted only when none of its ``Custom`` ones
    applies (``AclAuthorizationHandler``); plain_acl.yml's ``defaultTopicPerm``/``defaultGroupPerm`` become them."""

    CUSTOM = "Custom"
    DEFAULT = "Default"

    @classmethod
    def parse(cls, text: str | None) -> PolicyType:
        """RocketMQ's reading: absent or empty is ``Custom``."""
        if not text:
            return cls.CUSTOM
        return _parse_name(cls, text, "policy type", "Custom or Default")


class UserType(enum.Enum):
    """A ``Super`` user may do everything (RocketMQ's ``UserAuthorizationHandler``); a ``Normal`` one what its ACL
    allows."""

    SUPER = "Super"
    NORMAL = "Normal"

    @classmethod
    def parse(cls, text: str) -> UserType:
        return _parse_name(cls, text, "user type", "Super or Normal")


class UserStatus(enum.Enum):
    ENABLE = "enable"
    DISABLE = "disable"

    @classmethod
    def parse(cls, text: str) -> UserStatus:
        return _parse_name(cls, text, "user status", "enable or disable")


_E = TypeVar("_E", PolicyType, UserType, UserStatus)


def _parse_name(cls: type[_E], text: str, what: str, choices: str) -> _E:
    for member in cls:
        if member.value.lower() == text.strip().lower():
            return member
    raise ValueError(f"unknown {what} {text!r} ({choices})")


class AddressMatcher(Protocol):
    def match(self, host: str) -> bool: ...


@dataclass(slots=True, eq=False)
class User:
    """RocketMQ's ``User``. ``key``: the HMAC-SHA1 state keyed with the password, made once (every request
    checks a signature). ``white_remote_address`` (plain_acl.yml's ``whiteRemoteAddress``): from there the
    signature is not checked. ``from_file``: defined by plain_acl.yml, so read-only to the admin commands."""

    username: str
    password: str = field(repr=False)
    user_type: UserType = UserType.NORMAL
    user_status: UserStatus = UserStatus.ENABLE
    white_remote_address: AddressMatcher | None = None
    from_file: bool = False
    key: Mac = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.key = hmac_key(self.password)

    @property
    def is_super(self) -> bool:
        return self.user_type is UserType.SUPER


SUBJECT_PREFIX = "User:"


def parse_subject(subject: str) -> str:
    """The username of a subject key ``User:NAME`` (RocketMQ's only subject type)."""
    kind, sep, name = subject.strip().partition(":")
    if not sep or kind.lower() != "user" or not name.strip():
        raise ValueError(f"bad subject {subject!r}: expected User:NAME")
    return name.strip()


class Acl:
    """RocketMQ's ``Acl``: a user's policies, Custom and Default, each a list of entries with one entry per
    resource. Immutable: a change makes a new ``Acl``. Indexed at construction for ``allows``, which remembers
    its decisions (``MAX_DECISIONS`` at most): a changed ACL is a new object that remembers none, so no decision
    outlives the entries it was made from."""

    __slots__ = ("_decisions", "_index", "policies", "username")

    # (resource, actions, host) triples remembered per ACL; when full, further ones are decided each time and the
    # remembered ones kept (emptied, a user's sends spread over more topics than it holds missed every time)
    MAX_DECISIONS = 16_384
    MAX_REMEMBERED_NAME = 255  # longer names (RocketMQ's longest is a group's 255) are decided each time

    def __init__(self, username: str, policies: dict[PolicyType, tuple[PolicyEntry, ...]]) -> None:
        self.username = username
        self.policies = {t: tuple(e) for t, e in policies.items() if e}
        self._index = PolicyIndex(self.policies.get(PolicyType.CUSTOM, ()), self.policies.get(PolicyType.DEFAULT, ()))
        self._decisions: dict[tuple[Resource, frozenset[Action], str], bool] = {}

    @property
    def subject(self) -> str:
        return SUBJECT_PREFIX + self.username

    def allows(self, wanted: Resource, any_of: frozenset[Action], host: str) -> bool:
        """``decide`` over the Custom entries, or over the Default ones when no Custom entry applies. Remembered:
        deciding scans the prefix entries (each request of a user names the same few resources)."""
        key = (wanted, any_of, host)
        allowed: bool | None = self._decisions.get(key)
        if allowed is None:
            allowed = self._index.allows(wanted, any_of, host)
            if (len(wanted.name) <= self.MAX_REMEMBERED_NAME and len(host) <= self.MAX_REMEMBERED_NAME
                    and len(self._decisions) < self.MAX_DECISIONS):
                self._decisions[key] = allowed
        return allowed

    def remembered(self) -> int:
        """How many decisions ``allows`` holds (never more than ``MAX_DECISIONS``)."""
        return len(self._decisions)

    def updated(self, policies: dict[PolicyType, tuple[PolicyEntry, ...]]) -> Acl:
        """RocketMQ's ``Acl.updatePolicy``: a new entry replaces the policy's entry for the same resource, others
        are added."""
        merged = {t: list(e) for t, e in self.policies.items()}
        for ptype, entries in policies.items():
            current = merged.setdefault(ptype, [])
            for entry in entries:
                at = next((i for i, old in enumerate(current) if old.resource == entry.resource), None)
                if at is None:
                    current.append(entry)
                else:
                    current[at] = entry
        return Acl(self.username, {t: tuple(e) for t, e in merged.items()})

    def without(self, ptype: PolicyType, resource: Resource) -> Acl:
        """RocketMQ's ``Acl.deletePolicy``: the entry for ``resource`` left out of the ``ptype`` policy."""
        policies = dict(self.policies)
        policies[ptype] = tuple(e for e in policies.get(ptype, ()) if e.resource != resource)
        return Acl(self.username, policies)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Acl) and (other.username, other.policies) == (self.username, self.policies)

    def __repr__(self) -> str:
        return f"Acl({self.subject!r}, {self.policies!r})"


class Needs:
    """What one request needs: for each resource it touches, one of a set of actions (RocketMQ's authorization
    contexts). Empty: any authenticated user. A super user needs nothing. Built for every request under ACL:
    slots (compiled, an extension type: model.pxd), and the action sets shared (``_any_of``)."""

    __slots__ = ("wants",)

    def __init__(self) -> None:
        self.wants: list[tuple[Resource, frozenset[Action]]] = []

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Needs) and other.wants == self.wants

    def __repr__(self) -> str:
        return f"Needs({self.describe()})"

    def topic(self, name: str, *any_of: Action) -> Needs:
        """A topic. A retry topic ``%RETRY%G`` is its group's resource, as in RocketMQ: ``Pub`` on it is ``Sub`` on
        group G (a consumer sends its retries there), any other action is that action on group G (creating,
        changing or deleting the retry topic is the group's Create, Update or Delete, never a consumer's Sub). The
        bare prefix names no group: it is a topic like any other (as group "" it needed nothing)."""
        if name.startswith(RETRY_GROUP_TOPIC_PREFIX) and len(name) > len(RETRY_GROUP_TOPIC_PREFIX):
            return self.group(name[len(RETRY_GROUP_TOPIC_PREFIX):],
                              *(Action.SUB if action is Action.PUB else action for action in any_of))
        if name:
            self.wants.append((_new_tuple(Resource, (_TOPIC, name, _LITERAL)), _any_of(any_of)))
        return self

    def group(self, name: str, *any_of: Action) -> Needs:
        if name:
            self.wants.append((_new_tuple(Resource, (_GROUP, name, _LITERAL)), _any_of(any_of)))
        return self

    def cluster(self, *any_of: Action) -> Needs:
        self.wants.append((_CLUSTER, _any_of(any_of)))
        return self

    def describe(self) -> str:
        """For docs and refusals: ``Pub on Topic:orders; Sub on Group:billing``."""
        if not self.wants:
            return "any authenticated user"
        return "; ".join(f"{'|'.join(sorted(a.value for a in actions))} on {res.key}" for res, actions in self.wants)


_ACTION_SETS: dict[tuple[Action, ...], frozenset[Action]] = {}


@cython.cfunc
def _any_of(actions: tuple[Action, ...]) -> frozenset[Action]:
    found = _ACTION_SETS.get(actions)
    if found is None:
        found = _ACTION_SETS[actions] = frozenset(actions)  # a handful of combinations: declared in code
    return found


def cluster_get(_: object) -> Needs:
    """Get on the cluster: a read of the whole broker or server (every topic, group, offset or figure)."""
    return Needs().cluster(Action.GET)


def cluster_update(_: object) -> Needs:
    """Update on the cluster: a change to the server itself (its configuration, routes, replicas)."""
    return Needs().cluster(Action.UPDATE)


def any_user(_: object) -> Needs:
    """Any authenticated user."""
    return Needs()
