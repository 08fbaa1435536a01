"""The gRPC endpoint's client sessions: one per account and client id, bounded per account and in all."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator

import pytest

from txmq.acl.grpc_auth import _own_groups_only
from txmq.grpc.convert import Code, GrpcStatusError
from txmq.grpc.protocol import definition_pb2 as pb
from txmq.grpc.protocol import service_pb2 as spb
from txmq.grpc.telemetry import OUTBOX_LIMIT, TOPICS_PER_SETTINGS, ClientSessions


def test_a_client_id_names_one_session_per_account():
    sessions = ClientSessions()
    victim = sessions.get("victimKey", "host@1", "127.0.0.1")
    other = sessions.get("attackKey", "host@1", "127.0.0.1")
    assert victim is not other and sessions.get("victimKey", "host@1", "127.0.0.1") is victim
    sessions.remove("attackKey", "host@1")
    assert sessions.find("victimKey", "host@1") is victim and sessions.find("attackKey", "host@1") is None


def test_sessions_and_streams_per_account_are_bounded(caplog):
    sessions = ClientSessions(per_account=3, limit=100)
    opened = [sessions.get("key", f"c{i}", "10.0.0.1") for i in range(3)]
    with caplog.at_level(logging.WARNING, "txmq.grpc"):
        for i in range(50):
            with pytest.raises(GrpcStatusError) as refused:
                sessions.get("key", f"more{i}", "10.0.0.1")
            assert refused.value.code == pb.TOO_MANY_REQUESTS
    assert len(caplog.records) == 1 and "grpcMaxSessionsPerAccount" in caplog.records[0].getMessage()
    assert sessions.get("other", "c0", "10.0.0.1") is not None  # another account has its own bound
    assert len(sessions.sessions) == 4
    outboxes = [sessions.open_stream(s, "10.0.0.1") for s in opened]
    with pytest.raises(GrpcStatusError, match="3 gRPC Telemetry streams open"):
        sessions.open_stream(opened[0], "10.0.0.1")
    sessions.close_stream(opened[0], outboxes[0])
    outboxes[0] = sessions.open_stream(opened[0], "10.0.0.1")
    # a session that ends or expires frees its place; its streams are told to end
    sessions.remove("key", "c1")
    assert outboxes[1].queue.get_nowait() is None
    sessions.get("key", "again", "10.0.0.1")
    for s, outbox in zip(opened, outboxes, strict=True):
        sessions.close_stream(s, outbox)
    sessions.scan_expired(-1)
    assert not sessions.sessions
    sessions.get("key", "after", "10.0.0.1")


def test_every_session_together_is_bounded_with_acl_off():
    """With ACL off every client is the anonymous account "": only the endpoint's bound holds, and it holds."""
    sessions = ClientSessions(per_account=3, limit=10)
    for i in range(10):
        sessions.get("", f"c{i}", "10.0.0.1")
    with pytest.raises(GrpcStatusError, match="10 sessions are open"):
        sessions.get("", "c10", "10.0.0.1")
    with pytest.raises(GrpcStatusError):
        sessions.get("key", "c0", "10.0.0.1")
    sessions.remove("", "c0")
    sessions.get("key", "c0", "10.0.0.1")
    assert len(sessions.sessions) == 10


def test_each_stream_has_its_own_outbox():
    """Two streams of one client: each gets its own answers; a pushed command goes to one of them, and a full
    outbox still ends its stream when the session does."""
    sessions = ClientSessions()
    session = sessions.get("key", "c", "10.0.0.1")
    first, second = sessions.open_stream(session, "h"), sessions.open_stream(session, "h")
    check = spb.TelemetryCommand(status=pb.Status(code=pb.OK))
    assert session.push(check) and second.queue.qsize() == 1 and first.queue.empty()
    while second.answer(check):
        pass
    assert session.push(check) and first.queue.qsize() == 1  # the newest stream is full: the other one
    sessions.remove("key", "c")
    ended = [second.queue.get_nowait() for _ in range(second.queue.qsize())]
    assert len(ended) == OUTBOX_LIMIT and ended[-1] is None and first.queue.get_nowait() == (check, check.ByteSize())
    assert first.queue.get_nowait() is None
    # the push it dropped counts no more; the answers it holds count until written
    assert second.bytes == (OUTBOX_LIMIT - 1) * check.ByteSize()
    assert sessions.outbox_bytes.held == first.bytes + second.bytes


def test_publishing_topics_are_bounded_per_settings_and_for_every_session_together():
    """A producer's Settings names at most TOPICS_PER_SETTINGS topics (BAD_REQUEST), and every session keeps at
    most ``max_topics`` together (TOO_MANY_REQUESTS); a refused Settings leaves the session's topics as they were,
    a later one replaces them, and a session removed or expired gives its share back."""
    sessions = ClientSessions(max_topics=3000)
    a = sessions.get("", "a", "127.0.0.1")
    b = sessions.get("", "b", "127.0.0.1")
    c = sessions.get("", "c", "127.0.0.1")
    sessions.publish(a, frozenset(f"a{i}" for i in range(TOPICS_PER_SETTINGS)), "127.0.0.1")
    with pytest.raises(GrpcStatusError) as too_many:
        sessions.publish(b, frozenset(f"b{i}" for i in range(TOPICS_PER_SETTINGS + 1)), "127.0.0.1")
    assert too_many.value.code == Code.BAD_REQUEST and b.topics == frozenset()
    sessions.publish(b, frozenset(f"b{i}" for i in range(TOPICS_PER_SETTINGS)), "127.0.0.1")
    with pytest.raises(GrpcStatusError) as full:
        sessions.publish(c, frozenset(f"c{i}" for i in range(1000)), "127.0.0.1")
    assert full.value.code == Code.TOO_MANY_REQUESTS and c.topics == frozenset()
    assert sessions.topics == 2 * TOPICS_PER_SETTINGS
    sessions.publish(a, frozenset({"only"}), "127.0.0.1")  # replaces a's 1,024
    sessions.publish(c, frozenset(f"c{i}" for i in range(1000)), "127.0.0.1")
    assert sessions.topics == 1 + TOPICS_PER_SETTINGS + 1000
    sessions.remove("", "b")
    assert sessions.topics == 1001
    sessions.scan_expired(-1.0)  # no stream open: every session expires
    assert sessions.topics == 0 and not sessions.sessions


def test_a_removed_session_s_settings_are_neither_kept_nor_counted():
    """NotifyClientTermination removes a session whose Telemetry stream may still read (its writer held up in a
    check-back the client does not read): a Settings that stream sent then was counted against a session nothing
    gives back again, the share it gave back taken off a second time (the count below what the sessions keep, past
    ``max_topics``) or its new topics counted for ever (a few hundred such Settings and no producer's Settings is
    taken again). A removed session's Settings now keeps and counts nothing; the bound stays whole for the rest."""
    sessions = ClientSessions(max_topics=2 * TOPICS_PER_SETTINGS)
    gone = sessions.get("", "gone", "127.0.0.1")
    sessions.open_stream(gone, "127.0.0.1")
    sessions.publish(gone, frozenset({"a", "b"}), "127.0.0.1")
    sessions.remove("", "gone")
    assert sessions.topics == 0
    sessions.publish(gone, frozenset({"a"}), "127.0.0.1")  # the stream's next Settings
    assert sessions.topics == 0
    sessions.publish(gone, frozenset(f"g{i}" for i in range(TOPICS_PER_SETTINGS)), "127.0.0.1")
    assert sessions.topics == 0
    again = sessions.get("", "gone", "127.0.0.1")  # the client id's new session: the old one's stream is not it
    sessions.publish(gone, frozenset({"old"}), "127.0.0.1")
    sessions.publish(again, frozenset(f"n{i}" for i in range(TOPICS_PER_SETTINGS)), "127.0.0.1")
    other = sessions.get("", "other", "127.0.0.1")
    sessions.publish(other, frozenset(f"o{i}" for i in range(TOPICS_PER_SETTINGS)), "127.0.0.1")
    assert sessions.topics == 2 * TOPICS_PER_SETTINGS
    sessions.remove("", "gone")
    sessions.remove("", "other")
    assert sessions.topics == 0


def test_the_acl_filter_reads_no_name_of_a_settings_naming_too_many_topics():
    """With ACL on, a stream's Settings has the topics its account may not publish for left out before the endpoint
    sees it (one check per name); a Settings naming more than TOPICS_PER_SETTINGS goes on unread, for the endpoint
    to refuse whole (``check_named``) without a check per name either."""
    asked: list[str] = []

    def may_publish_for(topic: str) -> bool:
        asked.append(topic)
        return topic != "theirs"

    def settings(names: list[str]) -> spb.TelemetryCommand:
        return spb.TelemetryCommand(settings=pb.Settings(client_type=pb.PRODUCER, publishing=pb.Publishing(
            topics=[pb.Resource(name=n) for n in names])))

    async def commands() -> AsyncIterator[spb.TelemetryCommand]:
        yield settings(["mine", "theirs"])
        yield settings([f"t{i}" for i in range(TOPICS_PER_SETTINGS + 1)])

    async def run() -> list[spb.TelemetryCommand]:
        return [cmd async for cmd in _own_groups_only(commands(), may_publish_for)]

    few, many = asyncio.run(run())
    assert [t.name for t in few.settings.publishing.topics] == ["mine"]
    assert len(many.settings.publishing.topics) == TOPICS_PER_SETTINGS + 1
    assert asked == ["mine", "theirs"]
    sessions = ClientSessions()
    sessions.check_named(TOPICS_PER_SETTINGS, "127.0.0.1")
    with pytest.raises(GrpcStatusError) as refused:
        sessions.check_named(len(many.settings.publishing.topics), "127.0.0.1")
    assert refused.value.code == Code.BAD_REQUEST
