"""The transaction contract as a hypothesis state machine against a live ``txmq server`` (SYNC_FLUSH).

Rules: store half messages (single, or half batches of several messages), decide them (COMMIT, ROLLBACK,
UNKNOWN; repeated and conflicting; over END_TRANSACTION 37 answered, or txmq's 9005 batch end, several at
once), choose what the group's producer answers to check-backs, let time pass so checks come, and restart
the broker (SIGTERM or SIGKILL). The model holds each transaction's first decision as the broker confirmed
it, and the outcomes the producer handed to checks. After every step and at the end:

* every message of a committed transaction is in its real topic exactly once; of a rolled-back or pending
  one, never (a pending one may show once only if the producer answered a check with COMMIT: then the model
  learns the commit);
* a decision answered SUCCESS was the first (or a repeat); a conflicting one is answered
  TRANSACTION_SHOULD_COMMIT (200) or TRANSACTION_SHOULD_ROLLBACK (201) naming the first;
* no pull reads a half: the half, op and discard (TRANS_CHECK_MAX_TIME_TOPIC, which keeps discarded halves'
  bodies) topics are refused.

Bounded for CI (``TXMQ_MODEL_EXAMPLES``, ``TXMQ_MODEL_STEPS`` make the long run; it is then not derandomized).
"""

from __future__ import annotations

import itertools
import os
import signal
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import Bundle, RuleBasedStateMachine, invariant, precondition, rule

from tests.fuzz.campaign import roundtrip
from txmq import Admin, BrokerError, ClientError, HalfMessageRef, LocalTransactionState, Message, TransactionProducer
from txmq.client.instance import MessageQueue
from txmq.client.pull_consumer import PullConsumer, PullStatus
from txmq.launch import ServerProcess, free_port, txmq_command
from txmq.message import MessageConst, MessageExt
from txmq.remoting.codes import RequestCode, ResponseCode
from txmq.remoting.command import RemotingCommand
from txmq.remoting.request_headers import EndTransactionRequestHeader
from txmq.topic import RMQ_SYS_TRANS_CHECK_MAX_TIME_TOPIC, RMQ_SYS_TRANS_HALF_TOPIC, RMQ_SYS_TRANS_OP_HALF_TOPIC

COMMIT, ROLLBACK, UNKNOWN = LocalTransactionState.COMMIT, LocalTransactionState.ROLLBACK, LocalTransactionState.UNKNOWN
BROKER_CONF = ("flushDiskType=SYNC_FLUSH\ntransactionTimeOut=1000\ntransactionCheckInterval=1000\n"
               "transactionCheckMax=3\n")
EXAMPLES = int(os.environ.get("TXMQ_MODEL_EXAMPLES", "15"))
STEPS = int(os.environ.get("TXMQ_MODEL_STEPS", "25"))
QUEUES = 2
MAX_RESTARTS = 2  # per run: a restart costs a second or two


class Server:
    """The one server of the module, on fixed ports so that clients find it again after a restart."""

    def __init__(self, root: Path) -> None:
        (root / "home").mkdir(parents=True)
        (root / "broker.conf").write_text(BROKER_CONF)
        args = txmq_command("server", "--store", str(root / "store"), "--port", str(free_port()), "--namesrv-port",
                            str(free_port()), "--grpc-port", str(free_port()), "-c", str(root / "broker.conf"))
        self.proc = ServerProcess(args, root / "server.log", dict(os.environ, HOME=str(root / "home"),
                                                                   PYTHONUNBUFFERED="1"))

    @property
    def broker(self) -> tuple[str, int]:
        host, port = self.proc.addrs["broker"].rsplit(":", 1)
        return host, int(port)

    def restart(self, sig: signal.Signals) -> None:
        self.proc.kill(sig)
        self.proc.start(30)
        SEEN[f"restart {sig.name}"] += 1


SERVER: Server | None = None
_examples = itertools.count()
SEEN: Counter[str] = Counter()  # what the runs went through: answer codes, checks, commits by check, restarts


@dataclass
class Tx:
    """One transaction as the model knows it."""

    n: int
    bodies: list[bytes]
    ref: HalfMessageRef
    first: LocalTransactionState | None = None  # the first decision, as the broker confirmed it
    by_check: set[LocalTransactionState] = field(default_factory=set)  # what the producer answered to checks
    check_answer: LocalTransactionState = UNKNOWN


class Checks:
    """The group's producer's answers to check-backs: the model's choice per transaction, recorded as given."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.by_id: dict[str, Tx] = {}

    def execute_local_transaction(self, msg: Message, arg: object) -> LocalTransactionState:
        return UNKNOWN

    def check_local_transaction(self, msg: MessageExt) -> LocalTransactionState:
        with self.lock:
            tx = self.by_id.get(msg.transaction_id or "")
            if tx is None:
                return UNKNOWN
            tx.by_check.add(tx.check_answer)
            SEEN[f"check answered {tx.check_answer.name}"] += 1
            return tx.check_answer


class TransactionModel(RuleBasedStateMachine):
    txs = Bundle("txs")

    def __init__(self) -> None:
        super().__init__()
        assert SERVER is not None
        self.server = SERVER
        self.n = next(_examples)
        self.topic, self.group = f"model_t{self.n}", f"model_g{self.n}"
        with Admin(self.server.proc.namesrv) as admin:
            admin.create_topic(self.topic, QUEUES)
        self.checks = Checks()
        self.producer = TransactionProducer(self.group, self.checks, self.server.proc.namesrv).start()
        self.reader = PullConsumer(f"model_r{self.n}", self.server.proc.namesrv).start()
        self.all: list[Tx] = []
        self.restarts = 0
        deadline = time.monotonic() + 10
        while True:  # the route (and the broker's address) reach the name server with the next registration
            try:
                self.reader.fetch_subscribe_message_queues(self.topic)
                break
            except ClientError:
                assert time.monotonic() < deadline, f"no route for {self.topic}"
                time.sleep(0.1)

    # --- rules ----------------------------------------------------------------------------------------

    @rule(target=txs, size=st.integers(1, 3), batch=st.booleans(), check_answer=st.sampled_from([COMMIT, ROLLBACK,
                                                                                                UNKNOWN]))
    def store_half(self, size: int, batch: bool, check_answer: LocalTransactionState) -> Tx:
        n = len(self.all)
        bodies = [f"ex{self.n}-tx{n}-m{k}".encode() for k in range(size if batch else 1)]
        if batch:
            result = self.producer.send_half_batch_async([Message(self.topic, b) for b in bodies],
                                                         self.group).result(15)
        else:
            # with a selector, as send_message_in_transaction: one attempt (a retry could store a second half)
            result = self.producer.send(Message(self.topic, bodies[0], properties={
                MessageConst.TRANSACTION_PREPARED: "true", MessageConst.PRODUCER_GROUP: self.group}),
                selector=lambda mqs, _msg, _arg: mqs[n % len(mqs)])
        tx = Tx(n, bodies, HalfMessageRef.of(result), check_answer=check_answer)
        with self.checks.lock:
            self.checks.by_id[result.transaction_id or result.msg_id] = tx
        self.all.append(tx)
        return tx

    @rule(tx=txs, decision=st.sampled_from([COMMIT, ROLLBACK, UNKNOWN]))
    def end_transaction(self, tx: Tx, decision: LocalTransactionState) -> None:
        """END_TRANSACTION (37) as a producer sends it, but answered (not oneway) so the code can be checked."""
        header = EndTransactionRequestHeader(
            producer_group=self.group, tran_state_table_offset=tx.ref.tran_state_table_offset,
            commit_log_offset=tx.ref.commit_log_offset, commit_or_rollback=decision.sys_flag)
        resp = roundtrip(self.server.broker, RemotingCommand.request(RequestCode.END_TRANSACTION, header.to_ext()))
        self._answered(tx, decision, resp.code, resp.remark)

    @rule(ends=st.lists(st.tuples(txs, st.sampled_from([COMMIT, ROLLBACK, UNKNOWN])), min_size=1, max_size=5))
    def end_transactions(self, ends: list[tuple[Tx, LocalTransactionState]]) -> None:
        """txmq's 9005: several decisions in one request, repeats and conflicts within it included."""
        answers = self.producer.end_transactions([(tx.ref, d) for tx, d in ends])
        for (tx, decision), answer in zip(ends, answers, strict=True):
            self._answered(tx, decision, answer.code, answer.remark)

    @rule(tx=txs, answer=st.sampled_from([COMMIT, ROLLBACK, UNKNOWN]))
    def answer_checks_with(self, tx: Tx, answer: LocalTransactionState) -> None:
        with self.checks.lock:
            tx.check_answer = answer

    @precondition(lambda self: self.all)
    @rule()
    def let_checks_come(self) -> None:
        time.sleep(1.5)  # past transactionTimeOut and one check interval

    @precondition(lambda self: self.all and self.restarts < MAX_RESTARTS)
    @rule(sig=st.sampled_from([signal.SIGTERM, signal.SIGKILL]))
    def restart_broker(self, sig: signal.Signals) -> None:
        self.restarts += 1
        self.server.restart(sig)

    # --- the contract ---------------------------------------------------------------------------------

    def _answered(self, tx: Tx, decision: LocalTransactionState, code: int, remark: str | None) -> None:
        what = f"tx {tx.n} {decision.name}: code {code} ({remark})"
        SEEN[f"{decision.name} answered {ResponseCode(code).name}"] += 1
        if decision is UNKNOWN:
            assert code == ResponseCode.SUCCESS, what
            return
        with self.checks.lock:
            if code == ResponseCode.SUCCESS:
                assert tx.first in (None, decision), f"{what}, but {tx.first} was decided first"
                tx.first = decision
            elif code in (ResponseCode.TRANSACTION_SHOULD_COMMIT, ResponseCode.TRANSACTION_SHOULD_ROLLBACK):
                first = COMMIT if code == ResponseCode.TRANSACTION_SHOULD_COMMIT else ROLLBACK
                assert first is not decision, what
                assert tx.first is first or (tx.first is None and first in tx.by_check), \
                    f"{what}: the model knows {tx.first}, checks answered {tx.by_check}"
                tx.first = first
            else:
                raise AssertionError(f"{what}: neither a decision nor a conflict")

    def _visible(self) -> Counter[bytes]:
        seen: Counter[bytes] = Counter()
        for q in range(QUEUES):
            offset = 0
            for _ in range(100):
                got = self.reader.pull(MessageQueue(self.topic, "broker-a", q), offset=offset, max_nums=32)
                seen.update(m.body for m in got.msgs)
                if got.status != PullStatus.FOUND or got.next_begin_offset <= offset:
                    break
                offset = got.next_begin_offset
        return seen

    def _problems(self, seen: Counter[bytes]) -> tuple[list[str], list[str]]:
        """(broken promises, commits not visible yet)."""
        broken, lagging = [], []
        ours = {b for tx in self.all for b in tx.bodies}
        broken += [f"{b!r} is no message of ours" for b in seen if b not in ours]
        with self.checks.lock:
            for tx in self.all:
                counts = [seen[b] for b in tx.bodies]
                if any(c > 1 for c in counts):
                    broken.append(f"tx {tx.n} visible more than once: {counts}")
                elif tx.first is COMMIT and counts != [1] * len(counts):
                    lagging.append(f"committed tx {tx.n} shows {counts}")
                elif tx.first is None and any(counts) and COMMIT in tx.by_check:
                    tx.first = COMMIT  # a check answered COMMIT and the broker took it
                    SEEN["committed by a check"] += 1
                    if counts != [1] * len(counts):
                        lagging.append(f"tx {tx.n} committed by a check shows {counts}")
                elif tx.first is not COMMIT and any(counts):
                    broken.append(f"tx {tx.n} ({tx.first}, checks answered {tx.by_check}) is visible: {counts}")
        return broken, lagging

    @invariant()
    def committed_once_and_nothing_else(self) -> None:
        if not self.all:
            return
        deadline = time.monotonic() + 5.0
        while True:
            broken, lagging = self._problems(self._visible())
            assert not broken, broken
            if not lagging:
                return
            assert time.monotonic() < deadline, lagging
            time.sleep(0.1)

    def teardown(self) -> None:
        try:
            if self.all:
                self.committed_once_and_nothing_else()
                self._no_pull_reads_a_half()
        finally:
            self.reader.shutdown()
            self.producer.shutdown()

    def _no_pull_reads_a_half(self) -> None:
        for topic in (RMQ_SYS_TRANS_HALF_TOPIC, RMQ_SYS_TRANS_OP_HALF_TOPIC, RMQ_SYS_TRANS_CHECK_MAX_TIME_TOPIC):
            with pytest.raises(BrokerError) as refused:
                self.reader.pull(MessageQueue(topic, "broker-a", 0), offset=0)
            assert refused.value.code == ResponseCode.NO_PERMISSION, topic


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    global SERVER
    SERVER = Server(tmp_path_factory.mktemp("model"))
    SERVER.proc.start(30)
    try:
        yield SERVER
    finally:
        SERVER.proc.stop()
        SERVER = None


@pytest.mark.timeout(max(300, EXAMPLES * STEPS * 3))  # a step may wait seconds (checks, restarts)
def test_transaction_contract_holds_against_a_live_broker(server: Server) -> None:
    long_run = "TXMQ_MODEL_EXAMPLES" in os.environ
    TransactionModel.TestCase.settings = settings(
        max_examples=EXAMPLES, stateful_step_count=STEPS, deadline=None, derandomize=not long_run, database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
    SEEN.clear()
    TransactionModel.TestCase().runTest()
    print(f"model: {next(_examples)} runs: " + ", ".join(f"{k} {v}" for k, v in sorted(SEEN.items())))
    if not long_run:  # derandomized: the short run must keep reaching every part of the contract
        for what in ("COMMIT answered SUCCESS", "ROLLBACK answered SUCCESS", "restart SIGKILL", "restart SIGTERM"):
            assert SEEN[what], f"the model never reached {what!r}: {SEEN}"
        assert SEEN["COMMIT answered TRANSACTION_SHOULD_ROLLBACK"] + SEEN["ROLLBACK answered TRANSACTION_SHOULD_COMMIT"]
        assert sum(v for k, v in SEEN.items() if k.startswith("check answered")), SEEN
