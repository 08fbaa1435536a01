"""Transactions in a broker group, real processes: the slave refuses END_TRANSACTION and sends no check-backs,
but follows the replicated half and op records, so its transaction state table (pending, decided, check counts)
equals the master's at a quiet point, also after the slave restarts from its own snapshot; committed halves
are visible on the slave exactly once."""

from __future__ import annotations

from typing import Any

import orjson

from tests.e2e.ha_group import Group, ha_status, request, wait_caught_up
from tests.e2e.helpers import Recorder, push_consumer, wait_until
from txmq import LocalTransactionState, Message, SendStatus, TransactionProducer
from txmq.message import MessageConst
from txmq.remoting.codes import RequestCode, ResponseCode

COMMIT, ROLLBACK, UNKNOWN = LocalTransactionState.COMMIT, LocalTransactionState.ROLLBACK, LocalTransactionState.UNKNOWN
TX = {"transactionTimeOut": 1000, "transactionCheckInterval": 500, "transactionCheckMax": 2,
      "transactionSnapshotInterval": 1000, "slaveReadEnable": "true"}
N = 24


class Listener:
    """i % 4: 0 COMMIT, 1 ROLLBACK, 2 UNKNOWN and checks say UNKNOWN (discarded after 2 checks), 3 UNKNOWN and
    the first check says COMMIT. Messages with the immunity property stay pending, unchecked."""

    def __init__(self) -> None:
        self.checks: dict[str, int] = {}

    def execute_local_transaction(self, msg: Message, arg: Any) -> LocalTransactionState:
        return {0: COMMIT, 1: ROLLBACK}.get(arg % 4, UNKNOWN) if arg < N else UNKNOWN

    def check_local_transaction(self, msg: Any) -> LocalTransactionState:
        i = int(msg.body.decode()[2:])
        self.checks[msg.transaction_id] = self.checks.get(msg.transaction_id, 0) + 1
        return COMMIT if i % 4 == 3 else UNKNOWN


def _table(addr: str) -> dict[str, Any]:
    """The broker's transaction state as txmq tx list / show give it: pending and discarded with their check
    counts, and the state of every half offset."""
    listed = orjson.loads(request(addr, RequestCode.TXMQ_TX_LIST, {"limit": "1000"}).body)
    states = {}
    for half_offset in range(N + 4):
        resp = request(addr, RequestCode.TXMQ_TX_SHOW, {"id": str(half_offset)})
        assert resp.code == ResponseCode.SUCCESS, resp.remark
        shown = orjson.loads(resp.body)
        states[half_offset] = (shown["state"], shown["checks"])
    return {"pending": sorted((t["halfOffset"], t["checks"], t["topic"], t["group"]) for t in listed["pending"]),
            "discarded": sorted((t["halfOffset"], t["checks"]) for t in listed["discarded"]),
            "states": states}


def test_the_slave_follows_the_masters_transactions_and_shows_commits_once(cluster):
    group = Group(cluster, conf=TX)
    master = group.member(0, "SYNC_MASTER", {"flushDiskType": "SYNC_FLUSH"}).start()
    slave = group.member(1, "SLAVE").start()
    m_addr, s_addr = group.addr(0), group.addr(1)
    assert wait_until(lambda: len(ha_status(m_addr)["slaves"]) == 1, 15)
    listener = Listener()
    with TransactionProducer("tx-ha", listener, cluster.namesrv_addr) as producer:
        sent = [producer.send_message_in_transaction(Message("ha-tx", f"tx{i}".encode(), keys=f"k{i}"), arg=i)
                for i in range(N)]
        immune = [producer.send_message_in_transaction(
            Message("ha-tx", f"tx{i}".encode(), properties={MessageConst.CHECK_IMMUNITY_TIME_IN_SECONDS: "600"}),
            arg=i) for i in range(N, N + 4)]
        assert {r.status for r in sent + immune} == {SendStatus.SEND_OK}
        # Quiet point: the UNKNOWN ones were checked twice and discarded, the rest committed by their check.
        assert wait_until(lambda: len(_table(m_addr)["discarded"]) == N // 4, 30), _table(m_addr)
        assert wait_until(lambda: len(_table(m_addr)["pending"]) == 4, 10)
    wait_caught_up(m_addr, [s_addr])
    master_table = _table(m_addr)
    assert {s for s, _ in master_table["states"].values()} == {"COMMIT", "ROLLBACK", "DISCARD", "PENDING"}
    assert all(checks == 2 for _, checks in master_table["discarded"])
    assert _table(s_addr) == master_table
    # The slave sent no check-backs: every check the producer answered was the master's (2 per discarded one,
    # 1 per one committed by its check).
    assert sum(listener.checks.values()) == 2 * (N // 4) + N // 4

    # Restarted, the slave loads its own snapshot and replays only what follows it.
    assert wait_until(lambda: (group.store(1) / "config" / "transactionState.snapshot").exists(), 10)
    slave.stop()
    slave.start()
    assert wait_until(lambda: ha_status(s_addr)["master"]["connected"], 15)
    assert _table(s_addr) == master_table
    assert "from snapshot" in (cluster.root / f"{group.name}-1.log").read_text().rsplit("recovered store", 1)[1]

    # The master gone, the slave serves each committed message once.
    master.kill()
    committed = {r.msg_id for i, r in enumerate(sent) if i % 4 in (0, 3)}
    recorder = Recorder()
    consumer = push_consumer(cluster.namesrv_addr, "g-ha-tx", "ha-tx", recorder)
    try:
        assert recorder.wait_for(len(committed), 30), len(recorder)
        assert not wait_until(lambda: len(recorder) > len(committed), 2)
    finally:
        consumer.shutdown()
    assert recorder.ids() == dict.fromkeys(committed, 1)
