"""A name server reads a master's periodic registration in full only when the broker's topic table changed (its
data version differs from the one recorded) or the broker is new to it; otherwise it only refreshes the broker's
liveness (RocketMQ ``isBrokerTopicConfigChanged``). Observable without a mock: a registration read in full rebuilds
the broker's live entry and the queue entries of its topics; an unchanged one keeps both objects and advances the
entry's last update. A real name server and real brokers (in this process) over sockets on 127.0.0.1."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.acl.conftest import ADMIN, ATTACKER, PLAIN_ACL
from tests.broker.test_journal_off_loop import _until as until
from tests.broker.test_journal_off_loop import serving
from txmq import data_version
from txmq.acl.setup import namesrv_validator
from txmq.acl.signer import AclClientRPCHook, SessionCredentials
from txmq.acl.validator import AccessValidator
from txmq.broker.controller import BrokerController
from txmq.broker.topic_config_manager import TopicConfigManager
from txmq.launch import free_port
from txmq.namesrv.controller import NamesrvController
from txmq.namesrv.route_info import BrokerLiveInfo, QueueData
from txmq.remoting.codes import RequestCode, ResponseCode
from txmq.remoting.command import RemotingCommand
from txmq.remoting.transport import RemotingClient
from txmq.topic import TopicConfig

NEVER = 600_000  # ms: no periodic registration during a test; each test registers when it means to


@contextlib.asynccontextmanager
async def namesrv(port: int = 0, broker_expired_s: float = 120.0,
                  acl: AccessValidator | None = None) -> AsyncIterator[NamesrvController]:
    ns = NamesrvController(port=port or free_port(), broker_expired_s=broker_expired_s, acl=acl)
    await ns.start()
    try:
        yield ns
    finally:
        await ns.close()


@contextlib.asynccontextmanager
async def broker_of(ns: NamesrvController, root: Path, **config: Any) -> AsyncIterator[BrokerController]:
    async with serving(root, namesrv_addr=ns.addr, register_name_server_period=NEVER, **config) as (broker, _):
        yield broker


def queue(ns: NamesrvController, topic: str, broker_name: str = "b") -> QueueData | None:
    return ns.routes.topic_queue_table.get(topic, {}).get(broker_name)


def live(ns: NamesrvController, broker: BrokerController) -> BrokerLiveInfo:
    return ns.routes.broker_live_table[broker.config.broker_addr]


async def registered_again(ns: NamesrvController, broker: BrokerController) -> bool:
    """The broker's next full registration: True when the name server read it in full, False when it only
    refreshed the broker's liveness."""
    before = live(ns, broker)
    last_update = before.last_update
    await broker.registration.register_all()
    after = live(ns, broker)
    assert after is not before or after.last_update > last_update, "the registration did not reach the name server"
    return after is not before


def test_a_changed_topic_table_is_read_and_an_unchanged_one_is_not(tmp_path: Path) -> None:
    async def main() -> None:
        async with namesrv() as ns, broker_of(ns, tmp_path, broker_name="b") as broker:
            topics = broker.topic_config_manager
            topics.on_change = None  # no registration at once of a change: only the next full one tells it
            await topics.update(TopicConfig("T", 2, 2))
            assert queue(ns, "T") is None
            assert await registered_again(ns, broker)  # the creation changed the version since the last one
            entry = queue(ns, "T")
            assert entry is not None
            assert not await registered_again(ns, broker)
            assert queue(ns, "T") is entry
            # an update, a topic a send creates, a retry topic a heartbeat creates, a dead-letter topic, a deletion:
            # each is routed as the next registration has it
            changes: list[tuple[Callable[[], Any], Callable[[], bool]]] = [
                (lambda: topics.update(TopicConfig("T", 4, 4)),
                 lambda: getattr(queue(ns, "T"), "read_queue_nums", 0) == 4),
                (lambda: topics.create_in_send("Sent", "TBW102", 4), lambda: queue(ns, "Sent") is not None),
                (lambda: topics.create_all_absent(["%RETRY%g"], 1), lambda: queue(ns, "%RETRY%g") is not None),
                (lambda: topics.create_if_absent("%DLQ%g", 1), lambda: queue(ns, "%DLQ%g") is not None),
                (lambda: topics.delete("T"), lambda: queue(ns, "T") is None),
            ]
            for change, routed in changes:
                version = topics.data_version
                done = change()
                if asyncio.iscoroutine(done):
                    await done
                assert topics.data_version > version
                for name in list(topics.pending):
                    await topics.durable(name)
                await broker.registration.register_all()
                assert routed()
                assert not await registered_again(ns, broker)

    asyncio.run(main())


def test_a_name_server_restarted_gets_the_whole_table_at_the_next_registration(tmp_path: Path) -> None:
    async def main() -> None:
        port = free_port()
        async with namesrv(port) as ns, broker_of(ns, tmp_path, broker_name="b") as broker:
            await broker.topic_config_manager.update(TopicConfig("T", 2, 2))
            await until(lambda: queue(ns, "T") is not None)
            await broker.registration.register_all()
            await ns.close()
            async with namesrv(port) as again:
                assert queue(again, "T") is None
                await broker.registration.register_all()
                assert queue(again, "T") is not None and "b" in again.routes.broker_addr_table
                assert not await registered_again(again, broker)

    asyncio.run(main())


def test_a_restarted_broker_has_a_new_version_after_every_earlier_one_even_with_the_clock_back(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Same topics, a new version (the table loaded may not be the one a name server saw); later than any version
    saved, though the clock stepped back meanwhile."""
    async def main() -> tuple[int, int]:
        topics = TopicConfigManager(tmp_path, auto_create=True, default_queue_nums=4, delay_levels=18)
        for i in range(3):
            await topics.update(TopicConfig(f"T{i}", 1, 1))
        return topics.data_version

    last = asyncio.run(main())
    real = data_version.time.time
    monkeypatch.setattr(data_version.time, "time", lambda: real() - 3600)
    again = TopicConfigManager(tmp_path, auto_create=True, default_queue_nums=4, delay_levels=18)
    assert set(again.table) >= {"T0", "T1", "T2"}
    assert again.data_version > last


def test_a_slave_s_copy_of_its_master_s_topics_and_an_undone_change_give_a_new_version(tmp_path: Path) -> None:
    """A change whose record could not be stored is undone: the table then differs from the one a registration may
    have sent while the change was in it, so its version differs too."""
    topics = TopicConfigManager(tmp_path, auto_create=True, default_queue_nums=4, delay_levels=18)

    async def main() -> None:
        version = topics.data_version
        await topics.replace_all([TopicConfig("orders", 8, 8).to_json()])
        assert topics.data_version > version
        version = topics.data_version
        await topics.replace_all([TopicConfig("orders", 8, 8).to_json()])
        assert topics.data_version == version  # the same table: the same version
        journal = topics.journal.journal_path
        journal.unlink(missing_ok=True)
        journal.mkdir()  # the append fails as a full disk makes it fail: OSError
        failing = asyncio.ensure_future(topics.update(TopicConfig("failed", 1, 1)))
        await asyncio.sleep(0)  # the change made, in the table, its append not failed yet
        assert "failed" in topics.table
        during = topics.data_version
        with pytest.raises(OSError):
            await failing
        assert "failed" not in topics.table and topics.data_version > during

    asyncio.run(main())


def test_a_restarted_broker_is_read_in_full(tmp_path: Path) -> None:
    async def main() -> None:
        async with namesrv() as ns:
            async with broker_of(ns, tmp_path, broker_name="b") as broker:
                await broker.topic_config_manager.update(TopicConfig("T", 2, 2))
                await until(lambda: queue(ns, "T") is not None)
                version = broker.topic_config_manager.data_version
            async with broker_of(ns, tmp_path, broker_name="b") as broker:
                assert broker.topic_config_manager.data_version > version
                await until(lambda: queue(ns, "T") is not None)
                assert ns.routes.broker_live_table[broker.config.broker_addr].data_version == \
                    broker.topic_config_manager.data_version

    asyncio.run(main())


def test_a_slave_s_registration_is_always_read_and_its_master_s_unchanged_one_is_not(tmp_path: Path) -> None:
    async def main() -> None:
        async with (namesrv() as ns, broker_of(ns, tmp_path / "m", broker_name="b") as master,
                    broker_of(ns, tmp_path / "s", broker_name="b", broker_id=1, broker_role="SLAVE") as slave):
            await until(lambda: ns.routes.broker_addr_table["b"].broker_addrs.keys() == {0, 1})
            await master.registration.register_all()
            assert not await registered_again(ns, master)
            assert await registered_again(ns, slave)
            assert await registered_again(ns, slave)

    asyncio.run(main())


# Registrations made by hand, on a raw connection: what the name server decides from a registration's fields.
def _registration(addr: str, name: str, broker_id: int, version: dict[str, int] | None,
                  topics: dict[str, int]) -> RemotingCommand:
    table = {t: TopicConfig(t, n, n).to_json() for t, n in topics.items()}
    wrapper: dict[str, Any] = {"topicConfigTable": table}
    if version is not None:
        wrapper["dataVersion"] = version
    ext = {"clusterName": "c", "brokerAddr": addr, "brokerName": name, "brokerId": str(broker_id)}
    return RemotingCommand.request(RequestCode.REGISTER_BROKER, ext,
                                   body=orjson.dumps({"topicConfigSerializeWrapper": wrapper}))


def test_what_makes_a_registration_with_the_recorded_version_read_in_full() -> None:
    """Two masters of one name, an address that moved to another id, a broker dropped as expired, a topic deleted
    or registered alone at the name server, no version at all: each next registration is read in full, though its
    version is the one recorded."""
    v1 = {"timestamp": 1000, "counter": 1}
    a, b = "127.0.0.1:1", "127.0.0.1:2"

    async def main() -> None:
        async with namesrv(broker_expired_s=0.2) as ns, RemotingClient() as client:
            async def register(addr: str, name: str, broker_id: int, version: dict[str, int] | None,
                               topics: dict[str, int]) -> None:
                resp = await client.invoke(ns.addr, _registration(addr, name, broker_id, version, topics))
                assert resp.code == ResponseCode.SUCCESS, resp.remark

            def read_in_full(addr: str, register_: Callable[[], Any]) -> Any:
                async def check() -> bool:
                    before = ns.routes.broker_live_table.get(addr)
                    await register_()
                    return ns.routes.broker_live_table[addr] is not before
                return check()

            await register(a, "n", 0, v1, {"T": 2})
            assert not await read_in_full(a, lambda: register(a, "n", 0, v1, {"T": 2}))
            # another master of the same name: its table is the name's; the first one's, unchanged, is read again
            await register(b, "n", 0, v1, {"U": 2})
            assert queue(ns, "T", "n") is None
            assert await read_in_full(a, lambda: register(a, "n", 0, v1, {"T": 2}))
            assert queue(ns, "T", "n") is not None and ns.routes.broker_addr_table["n"].broker_addrs[0] == a
            # the address registers as a slave, then as the master again
            await register(a, "n", 1, v1, {"T": 2})
            assert await read_in_full(a, lambda: register(a, "n", 0, v1, {"T": 2}))
            # a topic deleted at the name server, or registered alone: the broker's next registration says again
            ns.routes.delete_topic("T")
            assert await read_in_full(a, lambda: register(a, "n", 0, v1, {"T": 2}))
            assert queue(ns, "T", "n") is not None
            ns.routes.register_topic("X", [QueueData("n", 1, 1, 6)])
            assert await read_in_full(a, lambda: register(a, "n", 0, v1, {"T": 2}))
            assert queue(ns, "X", "n") is None
            # a registration with no version: read in full every time
            await register(a, "n", 0, None, {"T": 2})
            assert await read_in_full(a, lambda: register(a, "n", 0, None, {"T": 2}))
            # dropped as expired meanwhile
            await register(a, "n", 0, v1, {"T": 2})
            await until(lambda: a not in ns.routes.broker_live_table)
            assert queue(ns, "T", "n") is None
            await register(a, "n", 0, v1, {"T": 2})
            assert queue(ns, "T", "n") is not None

    asyncio.run(main())


def test_a_registration_with_the_recorded_version_passes_the_acl_as_any_other(tmp_path: Path) -> None:
    """Skipping the topics of an unchanged registration skips no check: one from an account without Update on the
    cluster, or unsigned, is refused and refreshes nothing."""
    (tmp_path / "plain_acl.yml").write_text(PLAIN_ACL)
    acl = namesrv_validator(str(tmp_path / "plain_acl.yml"), tmp_path / "namesrv-auth.json")
    a, v1 = "127.0.0.1:1", {"timestamp": 1000, "counter": 1}

    async def main() -> None:
        async with (namesrv(acl=acl) as ns, RemotingClient(rpc_hook=AclClientRPCHook(ADMIN)) as admin,
                    RemotingClient(rpc_hook=AclClientRPCHook(ATTACKER)) as attacker, RemotingClient() as unsigned):
            clients = {ADMIN: admin, ATTACKER: attacker, None: unsigned}  # open throughout: a close drops the broker

            async def register(creds: SessionCredentials | None) -> int:
                resp = await clients[creds].invoke(ns.addr, _registration(a, "n", 0, v1, {"T": 2}))
                return resp.code

            assert await register(ADMIN) == ResponseCode.SUCCESS
            entry = ns.routes.broker_live_table[a]
            last_update = entry.last_update
            assert await register(ATTACKER) == ResponseCode.NO_PERMISSION
            assert await register(None) != ResponseCode.SUCCESS
            assert ns.routes.broker_live_table[a] is entry and entry.last_update == last_update
            assert await register(ADMIN) == ResponseCode.SUCCESS
            assert ns.routes.broker_live_table[a] is entry and entry.last_update > last_update

    asyncio.run(main())


def test_a_peer_registering_a_broker_s_version_from_another_connection_keeps_its_routes_one_period_at_most(
        tmp_path: Path) -> None:
    """With ACL off anyone may register a broker's address (with it on, any account with Update on the cluster):
    a peer registers the broker with a table of its own, then again with the broker's own version (which
    GET_ALL_TOPIC_CONFIG tells). That version recorded from the peer's connection, the broker's next registration,
    from its own, only refreshes its liveness; the one after it is read in full and puts the broker's topics back,
    as every registration did before versions were compared, rather than leaving the peer's routes until the
    broker's table changes."""
    async def main() -> None:
        async with (namesrv() as ns, broker_of(ns, tmp_path, broker_name="b") as broker,
                    RemotingClient() as peer):  # open throughout: its close would drop the broker
            await broker.topic_config_manager.update(TopicConfig("T", 2, 2))
            await broker.registration.register_all()
            assert queue(ns, "T") is not None
            addr, c = broker.config.broker_addr, broker.config.broker_cluster_name
            own = data_version.version_json(broker.topic_config_manager.data_version)
            for version in ({"timestamp": 1, "counter": 1}, own):
                forged = _registration(addr, "b", 0, version, {"Forged": 1})
                forged.ext_fields["clusterName"] = c
                assert (await peer.invoke(ns.addr, forged)).code == ResponseCode.SUCCESS
            assert queue(ns, "T") is None and queue(ns, "Forged") is not None
            await broker.registration.register_all()
            await broker.registration.register_all()
            assert queue(ns, "T") is not None and queue(ns, "Forged") is None
            assert not await registered_again(ns, broker)

    asyncio.run(main())


def test_a_saved_version_out_of_a_java_long_s_range_is_not_adopted(tmp_path: Path) -> None:
    """RocketMQ's DataVersion holds Java longs. A topics.json whose saved version is outside (written by hand, or
    by another tool) is not adopted at start: the version the broker starts from stays one every registration and
    journal record can encode (counter 2**64 - 1 made the next one 2**64, which orjson refuses: no topic change
    could be stored, nor the broker registered)."""
    saved = {"timestamp": 1, "counter": 2**64 - 1}
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "topics.json").write_bytes(orjson.dumps(
        {"topicConfigTable": {"T": TopicConfig("T", 1, 1).to_json()}, "dataVersion": saved}))
    topics = TopicConfigManager(tmp_path, auto_create=True, default_queue_nums=4, delay_levels=18)
    assert "T" in topics.table
    orjson.dumps(topics.serialize())
    assert data_version.data_version_of(saved) is None


def test_no_registration_is_sent_once_the_broker_unregistered(tmp_path: Path) -> None:
    """At a broker's stop it unregisters; a registration the periodic task or a topic change sends after that
    would route clients to a broker that is going away."""

    async def main() -> None:
        async with namesrv() as ns, broker_of(ns, tmp_path) as broker:
            assert broker.config.broker_addr in ns.routes.broker_live_table
            await broker.registration.unregister_all()
            assert broker.config.broker_addr not in ns.routes.broker_live_table
            await broker.registration.register_all()
            await broker.registration.register_topic("TopicAfterStop")
            assert broker.config.broker_addr not in ns.routes.broker_live_table

    asyncio.run(main())
