"""END_TRANSACTION (37) from producers, and CHECK_TRANSACTION_STATE (39) out to them (RocketMQ's
``EndTransactionProcessor`` and ``Broker2Client.checkProducerTransactionState``); and txmq's
TXMQ_END_TRANSACTION_BATCH (9005), many decisions of one producer group in one request:

    request body  {"producerGroup": g, "entries": [{"tranStateTableOffset": n, "commitLogOffset": n,
                                                    "commitOrRollback": 8 | 12 | 0}, ...]}
    answer body   {"results": [{"code": c, "remark": r}, ...]}   one per entry, in order

The answer's own code is SUCCESS whenever the request was well-formed; each entry's code is what a single
END_TRANSACTION would have answered (SUCCESS, TRANSACTION_SHOULD_COMMIT/ROLLBACK, SYSTEM_ERROR, …)."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import orjson

from txmq.acl.model import Action, Needs
from txmq.broker.transaction.service import EndEntry, EndResult
from txmq.broker.transaction.state import Outcome
from txmq.errors import ClientError, RemoteProtocolError
from txmq.message import MessageConst, MessageExt, MessageSysFlag, encode_message
from txmq.refusals import RefusalLog
from txmq.remoting.body import json_object
from txmq.remoting.codes import RequestCode, ResponseCode
from txmq.remoting.command import RemotingCommand
from txmq.remoting.registry import RequestSpec, header
from txmq.remoting.request_headers import CheckTransactionStateRequestHeader, EndTransactionRequestHeader
from txmq.remoting.transport import Connection, Reply

if TYPE_CHECKING:
    from txmq.broker.controller import BrokerController

log = logging.getLogger("txmq.transaction")

_OUTCOMES = {
    MessageSysFlag.TRANSACTION_COMMIT_TYPE: Outcome.COMMIT,
    MessageSysFlag.TRANSACTION_ROLLBACK_TYPE: Outcome.ROLLBACK,
}


# answers a oneway decision needs no log line for: success, and the conflicts the service logs itself
_QUIET_ANSWERS = frozenset({ResponseCode.SUCCESS, ResponseCode.TRANSACTION_SHOULD_COMMIT,
                             ResponseCode.TRANSACTION_SHOULD_ROLLBACK})


def _no_decision(flag: int) -> EndResult:
    """The answer to a commitOrRollback that is neither COMMIT nor ROLLBACK: UNKNOWN changes nothing, the rest
    is refused."""
    if flag == MessageSysFlag.TRANSACTION_NOT_TYPE:
        return EndResult(ResponseCode.SUCCESS, "state unknown: nothing changed")
    return EndResult(ResponseCode.SYSTEM_ERROR, f"commitOrRollback {flag} is not 0, 8 or 12")


class EndTransactionProcessor:
    def __init__(self, broker: BrokerController) -> None:
        self.broker = broker

    def requests(self) -> list[RequestSpec[Any]]:
        return [RequestSpec(RequestCode.END_TRANSACTION, header(EndTransactionRequestHeader), end_needs, self.end),
                RequestSpec(RequestCode.TXMQ_END_TRANSACTION_BATCH, parse_end_batch, end_batch_needs,
                            self.end_batch)]

    def end(self, conn: Connection, cmd: RemotingCommand, h: EndTransactionRequestHeader):
        if self.broker.config.is_slave:
            return _slave_refusal(cmd)
        outcome = _OUTCOMES.get(h.commit_or_rollback)
        if outcome is None:
            if h.commit_or_rollback == MessageSysFlag.TRANSACTION_NOT_TYPE:
                log.debug("producer %s reports transaction %s UNKNOWN%s: nothing changes", conn.remote_address,
                          h.msg_id, " (check)" if h.from_transaction_check else "")
            answer = _no_decision(h.commit_or_rollback)
            return RemotingCommand.response_to(cmd, answer.code, remark=answer.remark)
        # The decisions of one loop iteration are decided together (``end_transaction``); each its own answer,
        # written by its ``_EndAnswer`` (a oneway one, as RocketMQ's clients send it, gets none).
        return self.broker.transaction_service.end_transaction(
            producer_group=h.producer_group, half_offset=h.tran_state_table_offset,
            commit_log_offset=h.commit_log_offset, outcome=outcome,
            source="check" if h.from_transaction_check else "producer", waiter=_EndAnswer(conn, cmd))

    def end_batch(self, conn: Connection, cmd: RemotingCommand, batch: EndBatch):
        if self.broker.config.is_slave:
            return _slave_refusal(cmd)
        return self._end_batch(cmd, *batch)

    async def _end_batch(self, cmd: RemotingCommand, group: str, entries: list[tuple[int, int, int]]):
        results: list[EndResult | None] = [None] * len(entries)
        decisions: list[EndEntry] = []
        where: list[int] = []
        for i, (half_offset, commit_log_offset, flag) in enumerate(entries):
            outcome = _OUTCOMES.get(flag)
            if outcome is not None:
                decisions.append((half_offset, commit_log_offset, outcome))
                where.append(i)
            else:
                results[i] = _no_decision(flag)
        if decisions:
            ended = await self.broker.transaction_service.end_transactions(group, decisions, "producer batch")
            for i, result in zip(where, ended, strict=True):
                results[i] = result
        body = orjson.dumps({"results": [{"code": r.code, "remark": r.remark} for r in results if r is not None]})
        return RemotingCommand.response_to(cmd, ResponseCode.SUCCESS, body=body)


class _EndAnswer(Reply):
    """The answer to one END_TRANSACTION, the waiter its decision resolves: no future, done callback or context
    per decision, kept until the decision's put is flushed. Two-way, it writes the decision's code and remark. A
    oneway request (RocketMQ's clients send it so) is answered by nothing: a refusal is logged (its transaction
    stays pending, or as it was, and will be checked), a failure as a handler's is, and the metrics' request
    timing (``observer``) hears the decision's code all the same."""

    __slots__ = ()

    def set_result(self, result: EndResult) -> None:  # type: ignore[override]
        if self.cmd.is_oneway:
            if result.code not in _QUIET_ANSWERS:
                _log_refusal(self.conn.remote_address.rpartition(":")[0], result)
            Reply.set_result(self, result)  # type: ignore[arg-type]  # has a code; nothing is written for a oneway
        else:
            Reply.set_result(self, RemotingCommand.response_to(self.cmd, result.code, remark=result.remark))

    def set_exception(self, exc: BaseException) -> None:
        Reply.set_result(self, self.conn._failed(self.cmd, exc))


def _log_refusal(host: str, result: EndResult) -> None:
    """A refused oneway decision, which nobody reads, logged by its code's name (folded per host: a producer may
    repeat one at will)."""
    try:
        code = ResponseCode(result.code).name
    except ValueError:
        code = str(result.code)
    _ONEWAY_REFUSALS.refused(host, f"{code}{f' ({result.remark})' if result.remark else ''}")


_ONEWAY_REFUSALS = RefusalLog(log, "broker refused a oneway END_TRANSACTION")


def _slave_refusal(cmd: RemotingCommand) -> RemotingCommand:
    return RemotingCommand.response_to(cmd, ResponseCode.SLAVE_NOT_AVAILABLE,
                                       remark="broker is a slave: end transaction is forbidden")


def end_needs(h: EndTransactionRequestHeader) -> Needs:
    """Pub on the producer group it names; the transaction service refuses a group other than the half's own
    (``PGROUP``), so this is Pub on the half's group. A check answer (``fromTransactionCheck``) is one too."""
    return Needs().group(h.producer_group, Action.PUB)


EndBatch = tuple[str, list[tuple[int, int, int]]]


def end_batch_needs(batch: EndBatch) -> Needs:
    """Pub on the producer group of the body (as END_TRANSACTION)."""
    return Needs().group(batch[0], Action.PUB)


def parse_end_batch(cmd: RemotingCommand) -> EndBatch:
    """(producer group, [(half offset, commit-log offset, commitOrRollback)]) of a 9005 request body."""
    req = json_object(cmd.body)
    if not isinstance(req.get("producerGroup"), str) \
            or not isinstance(req.get("entries"), list):
        raise RemoteProtocolError("the body must be a JSON object with producerGroup (string) and entries (list)")
    out: list[tuple[int, int, int]] = []
    for n, e in enumerate(req["entries"]):
        half_offset, commit_log_offset, flag = (e.get("tranStateTableOffset"), e.get("commitLogOffset"),
                                                e.get("commitOrRollback")) if isinstance(e, dict) else (0, 0, None)
        if type(half_offset) is not int or type(commit_log_offset) is not int or type(flag) is not int:
            raise RemoteProtocolError(f"entry {n}: tranStateTableOffset, commitLogOffset and commitOrRollback "
                                      "must be integers")
        out.append((half_offset, commit_log_offset, flag))
    return str(req["producerGroup"]), out


class RemotingCheckSender:
    """Sends code 39 to one live remoting connection of the producer group, round robin."""

    def __init__(self, broker: BrokerController) -> None:
        self.broker = broker

    def send_check(self, group: str, half: MessageExt, half_offset: int) -> bool:
        conn = self.broker.producer_manager.available_channel(group)
        if conn is None:
            return False
        uniq = half.properties.get(MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX, "")
        header = CheckTransactionStateRequestHeader(
            tran_state_table_offset=half_offset, commit_log_offset=half.commit_log_offset, msg_id=uniq,
            transaction_id=uniq, offset_msg_id=half.offset_msg_id)
        shown = MessageExt(
            half.properties.get(MessageConst.REAL_TOPIC, half.topic), half.body, half.properties, flag=half.flag,
            queue_id=int(half.properties.get(MessageConst.REAL_QUEUE_ID, "0")), queue_offset=half_offset,
            commit_log_offset=half.commit_log_offset, sys_flag=half.sys_flag, born_timestamp=half.born_timestamp,
            born_host=half.born_host, store_timestamp=half.store_timestamp, store_host=half.store_host,
            reconsume_times=half.reconsume_times)
        cmd = RemotingCommand.request(RequestCode.CHECK_TRANSACTION_STATE, header.to_ext(),
                                      body=encode_message(shown), oneway=True)
        try:
            conn.send(cmd)
        except ClientError as exc:
            log.warning("check of %s to %s failed: %s", uniq, conn.remote_address, exc)
            return False
        return True

    def held_up(self, group: str) -> bool:
        return self.broker.producer_manager.held_up(group)
