"""The endpoint's conversions that need no server: a client's born host from grpcio's peer string."""

from __future__ import annotations

from txmq.grpc.convert import BornHosts, peer_host


def test_peer_host_reads_ipv4_and_nothing_else():
    assert peer_host("ipv4:10.1.2.3:53422") == ("10.1.2.3", 53422)
    assert peer_host("ipv6:[::1]:53422") == ("0.0.0.0", 0)
    assert peer_host("unix:/tmp/s") == ("0.0.0.0", 0)
    assert peer_host("ipv4:10.1.2.3:port") == ("0.0.0.0", 0)
    assert peer_host("") == ("0.0.0.0", 0)


def test_born_hosts_parse_a_peer_once_and_tell_connections_apart():
    hosts = BornHosts()
    first = hosts.of("ipv4:127.0.0.1:40001")
    assert first == ("127.0.0.1", 40001)
    assert hosts.of("ipv4:127.0.0.1:40001") is first  # the same connection: the parsed tuple kept
    assert hosts.of("ipv4:127.0.0.1:40002") == ("127.0.0.1", 40002)  # another connection: its own port
    assert hosts.of("ipv4:127.0.0.1:40001") is first and len(hosts) == 2


def test_born_hosts_start_again_past_their_limit():
    hosts = BornHosts(limit=2)
    peers = [f"ipv4:10.0.0.{i}:{5000 + i}" for i in range(5)]
    for i, peer in enumerate(peers):
        assert hosts.of(peer) == (f"10.0.0.{i}", 5000 + i)
        assert len(hosts) <= 2
    assert hosts.of(peers[0]) == ("10.0.0.0", 5000)  # dropped with the rest, parsed again
