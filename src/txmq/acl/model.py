"""RocketMQ 5.3's ACL 2.0 vocabulary: what a request needs (``Needs``: resources and actions) and the policies an
ACL grants (``PolicyEntry``), with the one rule that decides between them (``decide``). No IO here.

Resources are written as RocketMQ writes them: ``Topic:orders``, ``Topic:order-*`` (prefix), ``Topic:*``,
``Group:billing``, ``Cluster``, and ``*`` for any resource. Actions: ``Pub``, ``Sub``, ``Create``, ``Update``,
``Delete``, ``Get``, ``List``, and ``All`` in a policy for every action.

Deciding (RocketMQ's ``AclAuthorizationHandler``): of the entries that match the resource, one of the requested
actions and the source address, the most specific resource wins (a literal name, then the longest prefix, then
``Type:*``, then ``*``); between equally specific entries Deny wins; no matching entry means deny.
"""

from __future__ import annotations

import enum
import ipaddress
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import NamedTuple

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

    def match(self, host: str) -> bool:
        if not self.networks:
            return True
        try:
            addr = ipaddress.ip_address(host)
        except ValueError:
            return False
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
                and self.source_ips.match(host))


def decide(entries: Iterable[PolicyEntry], wanted: Resource, any_of: frozenset[Action], host: str) -> bool:
    """Whether ``entries`` allow one of ``any_of`` on ``wanted`` from ``host`` (the module's rule)."""
    best: PolicyEntry | None = None
    for entry in entries:
        if not entry.applies(wanted, any_of, host):
            continue
        if best is None:
            best = entry
            continue
        rank, best_rank = entry.resource.specificity(), best.resource.specificity()
        if rank < best_rank or (rank == best_rank and entry.decision is Decision.DENY):
            best = entry
    return best is not None and best.decision is Decision.ALLOW


class Needs:
    """What one request needs: for each resource it touches, one of a set of actions (RocketMQ's authorization
    contexts). Empty: any authenticated user. A super user needs nothing. Built for every request under ACL:
    plain slots, and the action sets shared (``_any_of``)."""

    __slots__ = ("wants",)

    def __init__(self) -> None:
        self.wants: list[tuple[Resource, frozenset[Action]]] = []

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Needs) and other.wants == self.wants

    def __repr__(self) -> str:
        return f"Needs({self.describe()})"

    def topic(self, name: str, *any_of: Action) -> Needs:
        """A topic; a retry topic ``%RETRY%G`` is its group's resource (``Sub`` on group G), as in RocketMQ."""
        if name.startswith(RETRY_GROUP_TOPIC_PREFIX):
            return self.group(name[len(RETRY_GROUP_TOPIC_PREFIX):], Action.SUB)
        if name:
            self.wants.append((Resource(ResourceType.TOPIC, name), _any_of(any_of)))
        return self

    def group(self, name: str, *any_of: Action) -> Needs:
        if name:
            self.wants.append((Resource(ResourceType.GROUP, name), _any_of(any_of)))
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
