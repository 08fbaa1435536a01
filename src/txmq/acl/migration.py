"""plain_acl.yml's accounts (ACL 1.0) as ACL 2.0 users and ACLs, as RocketMQ 5.3's ``AuthMigrator`` maps them:

- ``admin: true`` is a ``Super`` user (it may do everything, whatever permissions it lists); else ``Normal``;
- ``topicPerms``/``groupPerms`` entries are ``Custom`` entries on the literal ``Topic:NAME``/``Group:NAME``;
- ``defaultTopicPerm``/``defaultGroupPerm`` are ``Default`` entries on ``Topic:*``/``Group:*``, consulted only when
  no Custom entry applies (as RocketMQ's 1.0 fell back to the default for a name it does not list);
- ``PUB`` is ``Pub``, ``SUB`` ``Sub``, ``PUB|SUB`` both, each Allow; ``DENY`` is ``All`` with Deny.

Beyond RocketMQ's migration, which widens 1.0's meaning: in 1.0 a listed name's permission is the account's whole
permission on it, and the default applies only to names not listed. ACL 2.0 consults the Default entries for every
action no Custom entry names, so ``orders=SUB`` beside ``defaultTopicPerm: PUB|SUB`` would let the account publish
to ``orders``. A listed ``PUB`` or ``SUB`` therefore also gets a Custom Deny of the other one when the account has
a default for that kind of resource that grants it.
"""

from __future__ import annotations

from txmq.acl.config import DENY, PUB, SUB, Account, PlainAccessConfig
from txmq.acl.model import (
    Acl,
    Action,
    Decision,
    Pattern,
    PolicyEntry,
    PolicyType,
    Resource,
    ResourceType,
    User,
    UserType,
)

_TOPICS = Resource(ResourceType.TOPIC, "", Pattern.ANY)
_GROUPS = Resource(ResourceType.GROUP, "", Pattern.ANY)


def perm_entry(resource: Resource, perm: int) -> PolicyEntry:
    """One 1.0 permission on ``resource`` as a 2.0 entry."""
    if perm & DENY:
        return PolicyEntry(resource, frozenset({Action.ALL}), Decision.DENY)
    actions = frozenset(action for bit, action in ((PUB, Action.PUB), (SUB, Action.SUB)) if perm & bit)
    return PolicyEntry(resource, actions)


def listed_entries(resource: Resource, perm: int, default: int | None) -> list[PolicyEntry]:
    """A listed name's permission as Custom entries: its own, and a Deny of what it leaves out of Pub and Sub where
    the account's ``default`` would grant that."""
    entries = [perm_entry(resource, perm)]
    if perm & DENY or default is None or default & DENY:
        return entries
    left_out = frozenset(action for bit, action in ((PUB, Action.PUB), (SUB, Action.SUB))
                         if default & bit and not perm & bit)
    if left_out:
        entries.append(PolicyEntry(resource, left_out, Decision.DENY))
    return entries


def account_acl(account: Account) -> Acl:
    custom = [e for name, perm in account.topic_perms.items()
              for e in listed_entries(Resource.topic(name), perm, account.default_topic_perm)]
    custom += [e for name, perm in account.group_perms.items()
               for e in listed_entries(Resource.group(name), perm, account.default_group_perm)]
    default = [perm_entry(res, perm) for res, perm in ((_TOPICS, account.default_topic_perm),
                                                         (_GROUPS, account.default_group_perm)) if perm is not None]
    return Acl(account.access_key, {PolicyType.CUSTOM: tuple(custom), PolicyType.DEFAULT: tuple(default)})


def account_user(account: Account) -> User:
    return User(account.access_key, account.secret_key, UserType.SUPER if account.admin else UserType.NORMAL,
                white_remote_address=account.white_remote_address, from_file=True)


def migrate(config: PlainAccessConfig) -> tuple[dict[str, User], dict[str, Acl]]:
    """The file's users and their ACLs, by username (an account without permissions has no ACL)."""
    users = {ak: account_user(account) for ak, account in config.accounts.items()}
    acls = {ak: acl for ak, acl in ((ak, account_acl(a)) for ak, a in config.accounts.items()) if acl.policies}
    return users, acls
