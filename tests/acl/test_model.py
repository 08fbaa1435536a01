"""ACL 2.0's rule (txmq.acl.model): the most specific matching entry decides, Deny wins a tie, no entry denies."""

import pytest

from txmq.acl.model import Action, Decision, Needs, PolicyEntry, Resource, SourceIps, decide

PUB, SUB, GET = Action.PUB, Action.SUB, Action.GET


def entry(key: str, *actions: Action, decision: Decision = Decision.ALLOW, ips: tuple[str, ...] = ()) -> PolicyEntry:
    return PolicyEntry(Resource.parse(key), frozenset(actions), decision, SourceIps(ips))


def test_resource_keys_round_trip_and_match():
    for key in ("Topic:orders", "Topic:ord*", "Topic:*", "Group:billing", "Cluster", "*"):
        assert Resource.parse(key).key == key
    assert Resource.parse("Topic:ord*").matches(Resource.topic("orders"))
    assert not Resource.parse("Topic:ord*").matches(Resource.topic("payments"))
    assert not Resource.parse("Topic:*").matches(Resource.group("orders"))
    assert Resource.parse("*").matches(Resource.group("g"))
    assert Resource.parse("Cluster:DefaultCluster") == Resource.cluster()
    for bad in ("Queue:x", "Topic:", "Topic", ""):
        with pytest.raises(ValueError):
            Resource.parse(bad)


def test_no_entry_denies_and_actions_must_match():
    orders = Resource.topic("orders")
    assert not decide([], orders, frozenset({PUB}), "10.0.0.1")
    assert not decide([entry("Topic:orders", SUB)], orders, frozenset({PUB}), "10.0.0.1")
    assert decide([entry("Topic:orders", SUB)], orders, frozenset({PUB, SUB}), "10.0.0.1")  # any of
    assert decide([entry("Topic:orders", Action.ALL)], orders, frozenset({GET}), "10.0.0.1")


def test_the_most_specific_entry_decides():
    orders = Resource.topic("orders")
    entries = [entry("Topic:*", PUB, decision=Decision.DENY), entry("Topic:ord*", PUB),
               entry("Topic:orders", PUB, decision=Decision.DENY), entry("*", PUB)]
    assert not decide(entries, orders, frozenset({PUB}), "h")  # the literal denies
    assert decide(entries, Resource.topic("ordinal"), frozenset({PUB}), "h")  # the prefix allows
    assert not decide(entries, Resource.topic("payments"), frozenset({PUB}), "h")  # Topic:* before *
    assert decide(entries, Resource.group("g"), frozenset({PUB}), "h")  # only * matches
    longer = [entry("Topic:o*", PUB), entry("Topic:ord*", PUB, decision=Decision.DENY)]
    assert not decide(longer, orders, frozenset({PUB}), "h")


def test_deny_wins_between_equals_and_source_ips_filter():
    orders = Resource.topic("orders")
    tie = [entry("Topic:orders", PUB), entry("Topic:orders", Action.ALL, decision=Decision.DENY)]
    assert not decide(tie, orders, frozenset({PUB}), "h")
    assert not decide(list(reversed(tie)), orders, frozenset({PUB}), "h")
    ips = [entry("Topic:orders", PUB, ips=("10.0.0.0/8", "192.168.1.7"))]
    assert decide(ips, orders, frozenset({PUB}), "10.2.3.4")
    assert decide(ips, orders, frozenset({PUB}), "192.168.1.7")
    assert not decide(ips, orders, frozenset({PUB}), "192.168.1.8")
    assert not decide(ips, orders, frozenset({PUB}), "not-an-ip")
    assert decide(ips, orders, frozenset({PUB}), "::ffff:10.2.3.4")  # an IPv4-mapped address is its IPv4 address


def test_a_deny_by_source_address_holds_for_mapped_and_unknown_addresses():
    """A Deny entry limited to some addresses applied neither to the same peer seen as an IPv4-mapped IPv6 address
    nor to a peer whose address is no IP address: the Deny was walked around. Now it applies to both (an Allow
    entry's addresses still let neither in)."""
    orders = Resource.topic("orders")
    entries = [entry("Topic:*", PUB), entry("Topic:orders", PUB, decision=Decision.DENY, ips=("10.0.1.0/24",))]
    for host in ("10.0.1.5", "::ffff:10.0.1.5", "unix:/tmp/s", ""):
        assert not decide(entries, orders, frozenset({PUB}), host), host
    assert decide(entries, orders, frozenset({PUB}), "10.0.2.5")


def test_each_action_a_request_accepts_is_decided_on_its_own():
    """A route lookup needs Pub, Sub or Get: a Deny of Pub must not refuse it to an account allowed Sub, and an
    Allow of Sub must not let it publish."""
    orders = Resource.topic("orders")
    entries = [entry("Topic:orders", SUB), entry("Topic:orders", PUB, decision=Decision.DENY)]
    assert decide(entries, orders, frozenset({PUB, SUB, GET}), "h")
    assert not decide(entries, orders, frozenset({PUB}), "h")
    assert not decide([entry("Topic:orders", PUB, SUB, decision=Decision.DENY), entry("Topic:*", GET)], orders,
                      frozenset({SUB}), "h")


def test_needs_name_retry_topics_as_their_group():
    needs = Needs().topic("%RETRY%billing", PUB).topic("orders", PUB).group("", SUB)
    assert needs.wants == [(Resource.group("billing"), frozenset({SUB})), (Resource.topic("orders"), frozenset({PUB}))]
    assert needs.describe() == "Sub on Group:billing; Pub on Topic:orders"
    assert Needs().describe() == "any authenticated user"
