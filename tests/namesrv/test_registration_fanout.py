"""A broker registers with all its name servers at once (RocketMQ's ``BrokerOuterAPI.registerBrokerAll`` asks
each on its own thread): a name server that accepts the connection and never answers (a hung process, a
half-open path) holds the others' registrations for nothing. Real name servers and a broker in this process over
sockets on 127.0.0.1; the silent ones are listening sockets that never accept."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest

from tests.e2e.helpers import silent_servers
from tests.namesrv.test_registration_version import NEVER, namesrv
from txmq.broker.config import BrokerConfig
from txmq.broker.controller import BrokerController
from txmq.launch import free_port
from txmq.store import StoreConfig

pytestmark = pytest.mark.slow  # the silent name servers' timeouts, at start and at stop


def test_a_name_server_that_never_answers_delays_no_other_s_registration(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    async def main(silent: list[str]) -> None:
        async with namesrv() as ns:
            listed = [silent[0], ns.addr, silent[1]]
            broker = BrokerController(BrokerConfig(
                store=StoreConfig(store_path_root_dir=str(tmp_path / "store")), listen_port=free_port(),
                grpc_port=-1, namesrv_addr=";".join(listed), register_name_server_period=NEVER))
            starting = asyncio.ensure_future(broker.start())
            try:
                while broker.config.broker_addr not in ns.routes.broker_live_table:
                    assert not starting.done(), "started without registering"
                    await asyncio.sleep(0.01)
                # registered at the answering name server before the first silent one's registration timed out
                assert not [r for r in caplog.records if "register to namesrv" in r.getMessage()]
                await starting
                failed = sorted(r.getMessage().split()[3] for r in caplog.records
                                if r.getMessage().startswith("register to namesrv"))
                assert failed == sorted([listed[0], listed[2]]), failed
            finally:
                await starting
                await broker.shutdown()

    caplog.set_level(logging.WARNING, "txmq.broker")
    with silent_servers(2) as silent:
        asyncio.run(main(silent))
