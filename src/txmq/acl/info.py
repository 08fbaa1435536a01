"""RocketMQ's bodies of the user and ACL admin requests, as JSON both ways: ``UserInfo`` (``username``,
``password``, ``userType``, ``userStatus``) and ``AclInfo`` (``subject``, ``policies`` of ``policyType`` and
``entries`` of ``resource``, ``actions``, ``sourceIps``, ``decision``). Also the store file's records.

Parsing is strict where RocketMQ is lenient: an unknown action, type, status or decision is an error naming it,
never a value quietly left out (an ACL missing an action it was meant to carry is a silent change of meaning)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from txmq.acl.model import (
    Acl,
    Action,
    Decision,
    PolicyEntry,
    PolicyType,
    Resource,
    SourceIps,
    UserStatus,
    UserType,
    parse_subject,
)

MASKED_PASSWORD = "******"  # what GET/LIST answer for every password


def user_info(username: str, password: str, user_type: UserType, user_status: UserStatus) -> dict[str, str]:
    return {"username": username, "password": password, "userType": user_type.value,
            "userStatus": user_status.value}


def entry_info(entry: PolicyEntry) -> dict[str, Any]:
    return {"resource": entry.resource.key, "actions": sorted(a.value for a in entry.actions),
            "sourceIps": list(entry.source_ips.texts), "decision": entry.decision.value}


def acl_info(acl: Acl) -> dict[str, Any]:
    return {"subject": acl.subject, "policies": [
        {"policyType": ptype.value, "entries": [entry_info(e) for e in entries]}
        for ptype, entries in sorted(acl.policies.items(), key=lambda item: item[0].value)]}


def policy_info(resources: Iterable[str], actions: Iterable[str], source_ips: Iterable[str],
                decision: str) -> dict[str, Any]:
    """RocketMQ's ``PolicyInfo.of``: one entry per resource, each with the same actions, addresses, decision
    (what ``createAcl -r A,B -a Pub,Sub -d Allow`` sends); no policy type, which the server reads as Custom."""
    return {"entries": [{"resource": r, "actions": list(actions), "sourceIps": list(source_ips),
                         "decision": decision} for r in resources]}


def _text(data: dict[str, Any], key: str) -> str:
    value = data.get(key)
    if value is None:
        return ""
    if not isinstance(value, str):
        raise ValueError(f"{key} must be a string")
    return value.strip()


def _texts(data: dict[str, Any], key: str) -> list[str]:
    value = data.get(key) or []
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ValueError(f"{key} must be a list of strings")
    return value


def read_user_info(data: Any) -> tuple[str, str, UserType | None, UserStatus | None]:
    """(username, password, type, status) of a ``UserInfo``; empty strings and None for what it leaves out."""
    if not isinstance(data, dict):
        raise ValueError("the body must be a UserInfo object")
    user_type, status = _text(data, "userType"), _text(data, "userStatus")
    return (_text(data, "username"), _text(data, "password"), UserType.parse(user_type) if user_type else None,
            UserStatus.parse(status) if status else None)


def read_entry(data: Any) -> PolicyEntry:
    if not isinstance(data, dict):
        raise ValueError("a policy entry must be an object")
    actions = _texts(data, "actions")
    if not actions:
        raise ValueError(f"entry {data.get('resource')!r}: actions are required")
    decision = _text(data, "decision")
    if not decision:
        raise ValueError(f"entry {data.get('resource')!r}: a decision (Allow or Deny) is required")
    return PolicyEntry(Resource.parse(_text(data, "resource")), frozenset(Action.parse(a) for a in actions),
                       Decision.parse(decision), SourceIps(_texts(data, "sourceIps")))


def read_policies(data: Any) -> dict[PolicyType, tuple[PolicyEntry, ...]]:
    """The policies of an ``AclInfo``; at least one entry."""
    if not isinstance(data, dict) or not isinstance(data.get("policies"), list):
        raise ValueError("the body must be an AclInfo object with a list of policies")
    out: dict[PolicyType, list[PolicyEntry]] = {}
    for policy in data["policies"]:
        if not isinstance(policy, dict) or not isinstance(policy.get("entries") or [], list):
            raise ValueError("a policy must be an object with a list of entries")
        ptype = PolicyType.parse(_text(policy, "policyType"))
        out.setdefault(ptype, []).extend(read_entry(e) for e in policy.get("entries") or [])
    if not any(out.values()):
        raise ValueError("the ACL has no policy entries")
    return {t: tuple(e) for t, e in out.items()}


def read_acl_info(data: Any) -> Acl:
    """An ``AclInfo`` with its subject (the store file's records)."""
    if not isinstance(data, dict):
        raise ValueError("an ACL must be an object")
    return Acl(parse_subject(_text(data, "subject")), read_policies(data))
