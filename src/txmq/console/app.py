"""The console's pages and actions (aiohttp). Handlers run the blocking admin calls in threads
(``asyncio.to_thread``), so the console may share the broker's loop in ``txmq server`` without ever blocking it:
the admin client's own loop thread does the network IO. Each request acts through the clients ``guard`` gives it:
under login, the user's own, signing as their account."""

from __future__ import annotations

import argparse
import logging
import os
import socket
import time
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass
from dataclasses import field as dataclass_field
from datetime import datetime
from pathlib import Path
from typing import Any, Generic, TypeVar

from aiohttp import web
from aiohttp_session import session_middleware
from aiohttp_session.cookie_storage import EncryptedCookieStorage

from txmq.admin import MQAdminExt
from txmq.admin.client import QueueStat
from txmq.admin.commands import fmt_time, parse_time, pull_range, queue_window
from txmq.console import auth
from txmq.console.config import ConsoleConfig
from txmq.console.guard import (
    CLIENTS,
    CONFIG,
    LOGINS,
    REFUSALS,
    SHARED,
    USER,
    Handler,
    Refusal,
    bad_query,
    check_host,
    error_banner,
    error_page,
    flash,
    protect,
    secure_headers,
    take_flash,
)
from txmq.console.html import Raw, e, field, form, hidden, link, page, path, section, select, table
from txmq.console.logins import Clients, Logins, call
from txmq.errors import BrokerError, InvalidMessageError, TxmqError
from txmq.message import Message, MessageConst, MessageExt, decode_offset_msg_id
from txmq.refusals import RefusalLog
from txmq.remoting.codes import ResponseCode
from txmq.remoting.transport import RemotingConnectError, RemotingTimeoutError
from txmq.topic import DLQ_GROUP_TOPIC_PREFIX, PermName, is_system_topic

log = logging.getLogger("txmq.console")

STATIC = Path(__file__).parent / "static"
PERMS = (("6", "read and write"), ("4", "read only"), ("2", "write only"))
RESULTS_MAX = 100  # messages one search shows
FORM_MAX_BYTES = 64 * 1024  # the console's forms are a few fields
T = TypeVar("T")


def clients_of(request: web.Request) -> Clients:
    clients = request[CLIENTS]
    if not clients:
        raise web.HTTPSeeOther("/login")
    return clients[0]


def admin_of(request: web.Request) -> MQAdminExt:
    return clients_of(request).admin


def back(request: web.Request, location: str, notice: str = "", error: str = "") -> web.HTTPSeeOther:
    """Redirect after a POST, with what happened for the next page to show."""
    flash(request, notice, error)
    return web.HTTPSeeOther(location)


def render(request: web.Request, title: str, *body: Raw | str, active: str, status: int = 200) -> web.Response:
    notice, error = take_flash(request)
    return web.Response(text=page(title, *body, active=active, notice=notice, error=error, user=request[USER]),
                        content_type="text/html", status=status)


def query_time(text: str, what: str) -> int:
    """A time a client typed (mqadmin's forms), in ms; ``ValueError`` saying which forms are understood."""
    try:
        return parse_time(text.strip())
    except (argparse.ArgumentTypeError, ValueError, OverflowError, OSError):
        raise ValueError(f"{what} {text.strip()[:40]!r}: give milliseconds, 'now', yyyy-MM-dd#HH:mm:ss:SSS or "
                         "2024-05-01T12:00:00") from None


def query_int(request: web.Request, name: str, default: int, low: int, high: int) -> int:
    text = request.query.get(name)
    if text is None:
        return default
    if not text.isascii() or not text.isdigit() or not low <= int(text) <= high:
        raise bad_query(f"{name}: a whole number from {low} to {high}")
    return int(text)


def user_topics(topics: list[str]) -> list[str]:
    return [t for t in topics if not is_system_topic(t) and not t.startswith(("%RETRY%", "TBW102"))]


# --- what each broker answers ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Unanswered:
    """A broker whose part a page lacks: its name, address and why (timeout, refused, or its refusal)."""

    broker: str
    addr: str
    why: str


def why_unanswered(exc: TxmqError) -> str:
    if isinstance(exc, RemotingTimeoutError):
        return f"timeout: {exc}"
    if isinstance(exc, RemotingConnectError):
        return f"refused: {exc}"
    return str(exc)


@dataclass
class Gathered(Generic[T]):
    """What the brokers asked answered, by address, and those that did not."""

    answers: dict[str, T] = dataclass_field(default_factory=dict)
    unanswered: list[Unanswered] = dataclass_field(default_factory=list)

    def banner(self) -> list[Raw]:
        """The page's word on the brokers missing from it (none when every one answered)."""
        if not self.unanswered:
            return []
        names = "; ".join(f"{u.broker} {u.addr} ({u.why})" for u in self.unanswered)
        return [error_banner(f"not shown: the part of {names}", "unanswered")]


async def from_each(admin: MQAdminExt, brokers: list[tuple[str, str]],
                    ask: Callable[[str], Awaitable[T]]) -> Gathered[T]:
    """``ask(addr)`` of each (name, address) at once, on the admin client's loop: a broker that hangs costs the
    page one request timeout and hides only its own part, which the page then names."""
    results = await admin.ask_each([addr for _, addr in brokers], ask)
    out: Gathered[T] = Gathered()
    for (name, addr), result in zip(brokers, results, strict=True):
        if isinstance(result, TxmqError):
            out.unanswered.append(Unanswered(name, addr, why_unanswered(result)))
        else:
            out.answers[addr] = result
    return out


async def masters(admin: MQAdminExt) -> list[tuple[str, str]]:
    """(name, master address) of every broker, by name."""
    return sorted((await call(admin.broker_addrs)).items())


# --- cluster ------------------------------------------------------------------------------------------------


async def cluster(request: web.Request) -> web.Response:
    admin = admin_of(request)
    info = await call(admin.cluster_info)
    members = [(cluster_name, name, bid, addr)
               for cluster_name, names in sorted((info.get("clusterAddrTable") or {}).items()) for name in sorted(names)
               for bid, addr in sorted(((info["brokerAddrTable"].get(name) or {}).get("brokerAddrs") or {}).items())]
    runtime = await from_each(admin, [(name, addr) for _, name, _, addr in members], admin.runtime_info_at)
    rows = []
    for cluster_name, name, bid, addr in members:
        rt = runtime.answers.get(addr, {})
        rows.append((cluster_name, name, bid, rt.get("brokerRole", "?"), addr, rt.get("brokerVersionDesc", "?"),
                     f"{float(rt.get('commitLogDiskRatio', 0)):.1%}", rt.get("putTps", "0").split()[0],
                     rt.get("getTransferedTps", "0").split()[0], rt.get("msgPutTotalTodayNow", "0"),
                     rt.get("msgGetTotalTodayNow", "0")))
    return render(request, "Cluster", *runtime.banner(), table(
        ("Cluster", "Broker", "BID", "Role", "Address", "Version", "Disk used", "TPS in", "TPS out", "Messages in",
         "Messages out"), rows, "brokers"), active="/")


# --- topics -------------------------------------------------------------------------------------------------


async def _topics_at(admin: MQAdminExt, addr: str, listed: list[str]) -> dict[str, tuple[int, list[QueueStat]]]:
    """The permission and queues of each of ``listed`` this broker holds (its own config: current at once)."""
    configs = await admin.topic_configs_at(addr)
    out = {}
    for topic in (t for t in listed if t in configs):
        try:
            out[topic] = int(configs[topic].get("perm", PermName.READ_WRITE)), await admin.topic_stats_at(addr, topic)
        except BrokerError:  # deleted meanwhile
            continue
    return out


async def topics(request: web.Request) -> web.Response:
    admin = admin_of(request)
    try:
        listed, missing = user_topics(await call(admin.list_topics)), []
    except TxmqError as exc:  # an account that may not list the topics may still create one
        listed, missing = [], [error_banner(f"topics not listed: {exc}")]
    held = await from_each(admin, await masters(admin), lambda addr: _topics_at(admin, addr, listed))
    rows = []
    for topic in listed:
        parts = [part[topic] for part in held.answers.values() if topic in part]
        if not parts:  # on no broker that answered
            continue
        stats = [s for _, queues in parts for s in queues]
        rows.append((link(path("topics", topic), topic), len(stats), PermName.to_string(parts[0][0]),
                     sum(s.values["maxOffset"] - s.values["minOffset"] for s in stats),
                     fmt_time(max((s.values["lastUpdateTimestamp"] for s in stats), default=0))))
    create = form("/topics", [field("topic", "Name", required="required"),
                              field("queues", "Queues", 8, "number", min="1", max="1024"),
                              select("perm", "Permission", PERMS)], "Create topic", form_id="create-topic")
    return render(request, "Topics", *missing, *held.banner(),
                  table(("Topic", "Queues", "Permission", "Messages", "Last message"), rows, "topics"),
                  section("Create a topic", create), active="/topics")


def form_perm(data: Any) -> int:
    value = str(data.get("perm", "6"))
    if value not in dict(PERMS):
        raise ValueError(f"permission {value[:10]!r}: one of {', '.join(dict(PERMS))}")
    return int(value)


def form_queues(data: Any) -> int:
    value = str(data.get("queues", "8")).strip()
    if not value.isascii() or not value.isdigit() or not 1 <= int(value) <= 1024:
        raise ValueError(f"queues {value[:10]!r}: a whole number from 1 to 1024")
    return int(value)


async def create_topic(request: web.Request) -> web.StreamResponse:
    data = await request.post()
    topic = str(data.get("topic", "")).strip()
    try:
        await call(admin_of(request).create_topic, topic, form_queues(data), None, form_perm(data))
    except (TxmqError, ValueError) as exc:
        raise back(request, "/topics", error=f"topic {topic} not created: {exc}") from None
    raise back(request, path("topics", topic), notice=f"topic {topic} created")


async def _topic_at(admin: MQAdminExt, addr: str, topic: str) -> tuple[int | None, list[QueueStat], list[str]]:
    """The topic on one broker: its permission there (None when it holds no config of it), queues, consumer
    groups."""
    cfg = (await admin.topic_configs_at(addr)).get(topic)
    perm = None if cfg is None else int(cfg.get("perm", PermName.READ_WRITE))
    return perm, await admin.topic_stats_at(addr, topic), await admin.consumed_by_at(addr, topic)


async def topic_detail(request: web.Request) -> web.Response:
    admin, topic = admin_of(request), request.match_info["topic"]
    try:
        routed = sorted((await call(admin.route_masters, topic)).items())
    except BrokerError as exc:
        if exc.code == ResponseCode.TOPIC_NOT_EXIST:
            raise Refusal(404, f"No topic {topic} (the name server routes none of that name).", "no such topic") \
                from None
        raise
    parts = await from_each(admin, routed, lambda addr: _topic_at(admin, addr, topic))
    answers = [parts.answers[addr] for _, addr in routed if addr in parts.answers]
    perm = next((p for p, _, _ in answers if p is not None), PermName.READ_WRITE)
    stats = [s for _, queues, _ in answers for s in queues]
    groups = sorted({g for _, _, named in answers for g in named})
    rows = [(s.mq.broker_name, s.mq.queue_id, s.values["minOffset"], s.values["maxOffset"],
             fmt_time(s.values["lastUpdateTimestamp"])) for s in stats]
    actions = [
        form(path("topics", topic, "perm"), [select("perm", "Permission", PERMS, str(perm))], "Change permission",
             form_id="topic-perm"),
        form(path("topics", topic, "delete"), [], "Delete topic", confirm=f"Delete topic {topic} and its messages?",
             form_id="topic-delete"),
    ]
    return render(request, f"Topic {topic}", *parts.banner(),
                  Raw(f'<p>Permission: <strong id="perm">{PermName.to_string(perm)}</strong></p>'),
                  table(("Broker", "Queue", "Min offset", "Max offset", "Last message"), rows, "queues"),
                  section("Consumer groups", table(("Group",), [(link(path("groups", g), g),) for g in groups],
                                                   "topic-groups")),
                  section("Change", *actions), active="/topics")


async def topic_perm(request: web.Request) -> web.StreamResponse:
    admin, topic = admin_of(request), request.match_info["topic"]
    try:
        perm = form_perm(await request.post())
        addrs = sorted((await call(admin.broker_addrs)).values())
        await call(admin.update_topic_perm, topic, perm, addrs)
    except (TxmqError, ValueError) as exc:
        raise back(request, path("topics", topic), error=f"permission not changed: {exc}") from None
    raise back(request, path("topics", topic), notice=f"permission of {topic} is now {PermName.to_string(perm)}")


async def topic_delete(request: web.Request) -> web.StreamResponse:
    topic = request.match_info["topic"]
    try:
        await call(admin_of(request).delete_topic, topic)
    except TxmqError as exc:
        raise back(request, path("topics", topic), error=str(exc)) from None
    raise back(request, "/topics", notice=f"topic {topic} deleted")


# --- consumer groups ------------------------------------------------------------------------------------------


async def _groups_at(admin: MQAdminExt, addr: str, listed: list[str]) -> dict[tuple[str, str], tuple[int, float]]:
    """(lag, TPS) on this broker of each (group, topic) of ``listed`` that a group consumes here."""
    out = {}
    for topic in listed:
        for group in await admin.consumed_by_at(addr, topic):
            stats, tps = await admin.consume_stats_at(addr, group, topic)
            out[(group, topic)] = sum(s.lag for s in stats), tps
    return out


async def groups(request: web.Request) -> web.Response:
    admin = admin_of(request)
    listed = user_topics(await call(admin.list_topics))
    parts = await from_each(admin, await masters(admin), lambda addr: _groups_at(admin, addr, listed))
    totals: dict[tuple[str, str], tuple[int, float]] = {}
    for part in parts.answers.values():
        for key, (behind, tps) in part.items():
            was_behind, was_tps = totals.get(key, (0, 0.0))
            totals[key] = was_behind + behind, was_tps + tps
    rows = [(link(path("groups", group), group), topic, behind, f"{tps:.1f}")
            for (group, topic), (behind, tps) in sorted(totals.items(), key=lambda kv: (kv[0][1], kv[0][0]))]
    return render(request, "Consumer groups", *parts.banner(), table(("Group", "Topic", "Lag", "TPS"), rows, "groups"),
                  active="/groups")


async def _group_at(admin: MQAdminExt, addr: str, group: str
                    ) -> tuple[list[QueueStat], float, dict[str, Any] | None]:
    """The group on one broker: its queues, TPS, and its clients when online there."""
    stats, tps = await admin.consume_stats_at(addr, group)
    return stats, tps, await admin.consumer_connection_at(addr, group)


async def group_detail(request: web.Request) -> web.Response:
    admin, group = admin_of(request), request.match_info["group"]
    brokers = await masters(admin)
    parts = await from_each(admin, brokers, lambda addr: _group_at(admin, addr, group))
    answers = [parts.answers[addr] for _, addr in brokers if addr in parts.answers]
    stats = sorted((s for queues, _, _ in answers for s in queues),
                   key=lambda s: (s.mq.topic, s.mq.broker_name, s.mq.queue_id))
    tps = sum(rate for _, rate, _ in answers)
    conn: dict[str, Any] = next((c for _, _, c in answers if c is not None), {"connectionSet": []})
    rows = [(s.mq.topic, s.mq.broker_name, s.mq.queue_id, s.values["brokerOffset"], s.values["consumerOffset"],
             s.lag, fmt_time(s.values["lastTimestamp"]))
            for s in stats]
    clients = [(c["clientId"], c["clientAddr"], c["language"], c["version"]) for c in conn["connectionSet"]]
    topics_ = sorted({s.mq.topic for s in stats}, key=lambda t: (t.startswith("%RETRY%"), t))  # retry last
    reset = form(path("groups", group, "reset"), [
        select("topic", "Topic", [(t, t) for t in topics_]),
        field("time", "Time", datetime.now().strftime("%Y-%m-%dT%H:%M:%S"), placeholder="2024-05-01T12:00:00"),
    ], "Reset offsets", confirm=f"Move the offsets of group {group} to this time?", form_id="reset-offsets")
    return render(request, f"Consumer group {group}", *parts.banner(),
                  Raw(f'<p>Consume TPS: {tps:.1f}; lag in all: <strong id="lag">'
                      f'{sum(r[5] for r in rows)}</strong></p>'),
                  table(("Topic", "Broker", "Queue", "Broker offset", "Consumer offset", "Lag", "Last consumed"), rows,
                        "group-queues"),
                  section("Clients", table(("Client", "Address", "Language", "Version"), clients, "clients",
                                           empty="no client online")),
                  section("Reset offsets by time", reset), active="/groups")


async def group_reset(request: web.Request) -> web.StreamResponse:
    group = request.match_info["group"]
    data = await request.post()
    topic = str(data.get("topic", ""))
    try:
        when = query_time(str(data.get("time", "")), "time")
        await call(admin_of(request).reset_offset, group, topic, when)
    except (TxmqError, ValueError) as exc:
        raise back(request, path("groups", group), error=f"offsets not reset: {exc}") from None
    raise back(request, path("groups", group), notice=f"offsets of {group} on {topic} reset to {fmt_time(when)}")


# --- messages -----------------------------------------------------------------------------------------------


def _message_rows(msgs: list[MessageExt]) -> list[tuple[Any, ...]]:
    return [(link(path("messages", m.offset_msg_id), m.msg_id, class_="msg"), m.topic, m.tags or "", m.keys or "",
             m.queue_id, m.queue_offset, fmt_time(m.store_timestamp), m.body[:80].decode(errors="replace"))
            for m in msgs]


async def _search(admin: MQAdminExt, q: Any) -> list[MessageExt] | None:
    """The messages a search asks for, None when it asks for none; ``ValueError`` for a query that cannot be
    asked."""
    by = q.get("by", "")
    if by == "id" and q.get("id"):
        ident = q["id"].strip()
        if q.get("topic"):
            return await call(admin.query_message, q["topic"].strip(), ident, 32, 0, 2**63 - 1, True)
        return [await view(admin, ident)]
    if by == "key" and q.get("key"):
        return await call(admin.query_message, q.get("topic", "").strip(), q["key"].strip())
    if by == "range" and q.get("topic"):
        begin = query_time(q["begin"], "from") if q.get("begin") else 0
        end = query_time(q["end"], "to") if q.get("end") else 2**63 - 1
        return await call(_range, admin, q["topic"].strip(), begin, end)
    if by not in ("", "id", "key", "range"):
        raise ValueError(f"search by {by[:20]!r}: by id, key or range")
    return None


async def messages(request: web.Request) -> web.Response:
    admin, q = admin_of(request), request.query
    found: list[MessageExt] | None = None
    error, status = "", 200
    try:
        found = await _search(admin, q)
    except ValueError as exc:  # what the client asked for
        error, status = str(exc), 400
    except TxmqError as exc:  # what a broker answered
        error = str(exc)
    searches = [
        form("/messages", [hidden("by", "id"), field("id", "Message id", q.get("id", "")),
                           field("topic", "Topic (for a message id; empty for an offset id)", q.get("topic", ""))],
             "Find by id", method="get", form_id="by-id"),
        form("/messages", [hidden("by", "key"), field("topic", "Topic", q.get("topic", "")),
                           field("key", "Key", q.get("key", ""))], "Find by key", method="get", form_id="by-key"),
        form("/messages", [hidden("by", "range"), field("topic", "Topic", q.get("topic", "")),
                           field("begin", "From", q.get("begin", ""), placeholder="2024-05-01T12:00:00"),
                           field("end", "To", q.get("end", ""), placeholder="now")], "Find by time",
             method="get", form_id="by-range"),
    ]
    body: list[Raw | str] = [section("Search", *searches)]
    if found is not None:
        body.append(section(f"{len(found)} messages", table(
            ("Message id", "Topic", "Tags", "Keys", "Queue", "Offset", "Stored", "Body"), _message_rows(found),
            "results", empty="no message found")))
    if error:
        body.insert(0, error_banner(error))
    return render(request, "Messages", *body, active="/messages", status=status)


async def view(admin: MQAdminExt, ident: str) -> MessageExt:
    """VIEW_MESSAGE_BY_ID, sent only to a broker of this cluster: an offset message id names the address the
    request goes to, and a made-up one must not make the console connect anywhere else."""
    try:
        (host, port), _ = decode_offset_msg_id(ident)
    except InvalidMessageError:
        raise ValueError(f"{ident[:40]!r} is not an offset message id") from None
    if (host, port) not in await call(_member_addrs, admin):
        raise ValueError(f"{ident[:40]!r} names no broker of this cluster")
    return await call(admin.view_message, ident)


def _member_addrs(admin: MQAdminExt) -> set[tuple[str, int]]:
    """(IPv4 address, port) of every member of every broker group the name server knows (a store host in a
    message id is an IPv4 address; a member may be registered under a host name)."""
    out: set[tuple[str, int]] = set()
    for group in (admin.cluster_info().get("brokerAddrTable") or {}).values():
        for addr in (group.get("brokerAddrs") or {}).values():
            host, _, port = str(addr).rpartition(":")
            try:
                infos = socket.getaddrinfo(host.strip("[]"), int(port), socket.AF_INET, socket.SOCK_STREAM)
            except (OSError, ValueError):
                continue
            out.update((str(info[4][0]), int(port)) for info in infos)
    return out


def _range(admin: MQAdminExt, topic: str, begin: int, end: int) -> list[MessageExt]:
    out: list[MessageExt] = []
    for mq, lo, hi in queue_window(admin, topic, begin, end):
        for m in pull_range(admin, mq, lo, hi):
            out.append(m)
            if len(out) >= RESULTS_MAX:
                return out
    return out


async def message_detail(request: web.Request) -> web.Response:
    admin, ident = admin_of(request), request.match_info["id"]
    try:
        m = await view(admin, ident)
    except ValueError as exc:
        raise Refusal(400, str(exc), "bad message id") from None
    fields = [("Message id", m.msg_id), ("Offset message id", m.offset_msg_id), ("Topic", m.topic),
              ("Tags", m.tags or ""), ("Keys", m.keys or ""), ("Queue", m.queue_id), ("Queue offset", m.queue_offset),
              ("Born", fmt_time(m.born_timestamp)), ("Stored", fmt_time(m.store_timestamp)),
              ("Reconsume times", m.reconsume_times)]
    body: list[Raw | str] = [table(("Field", "Value"), fields, "message"),
                             section("Properties", table(("Property", "Value"), sorted(m.properties.items()),
                                                         "properties")),
                             section("Body", Raw(f'<pre id="body">{e(m.body.decode(errors="replace"))}</pre>'))]
    if m.topic.startswith(DLQ_GROUP_TOPIC_PREFIX):
        origin = m.properties.get(MessageConst.RETRY_TOPIC, "")
        body.append(section("Dead letter", form(path("messages", ident, "resend"), [], f"Resend to {origin}",
                                                confirm=f"Send this message to {origin} again?", form_id="resend")))
    return render(request, f"Message {m.msg_id}", *body, active="/messages")


async def message_resend(request: web.Request) -> web.StreamResponse:
    """A dead letter back to the topic it came from, as a new message with its body, tags, keys and user
    properties (RocketMQ Dashboard's "resend")."""
    clients, ident = clients_of(request), request.match_info["id"]
    try:
        m = await view(clients.admin, ident)
        origin = m.properties.get(MessageConst.RETRY_TOPIC)
        if not origin:
            raise back(request, path("messages", ident), error="this message names no topic to go back to")
        msg = Message(origin, m.body, tags=m.tags, keys=m.keys, properties=m.user_properties)
        result = await call((await clients.producer()).send, msg)
    except (TxmqError, ValueError) as exc:
        raise back(request, path("messages", ident), error=f"not resent: {exc}") from None
    raise back(request, path("messages", ident), notice=f"resent to {origin} as {result.msg_id}")


# --- transactions -------------------------------------------------------------------------------------------


async def transactions(request: web.Request) -> web.Response:
    admin = admin_of(request)
    brokers = await masters(admin)
    parts = await from_each(admin, brokers, lambda addr: admin.tx_list_at(addr, 200))
    pending, discarded = [], []
    for broker, d in ((name, parts.answers[addr]) for name, addr in brokers if addr in parts.answers):
        for t in d["pending"]:
            pending.append((t["transactionId"], broker, t["topic"], t["group"], f"{t['ageS']:.0f} s", t["checks"],
                            t["halfOffset"], _decide_forms(broker, t)))
        for t in d["discarded"]:
            discarded.append((t["transactionId"], broker, t["topic"], t["group"], f"{t['ageS']:.0f} s", t["checks"],
                              t["halfOffset"], Raw(_tx_form(broker, t, "resume") + _decide_forms(broker, t))))
    return render(request, "Transactions", *parts.banner(),
                  section("Pending", table(TX_COLUMNS, pending, "pending", empty="no pending transaction")),
                  section("Discarded", table(TX_COLUMNS, discarded, "discarded", empty="no discarded transaction")),
                  active="/transactions")


TX_COLUMNS = ("Transaction", "Broker", "Topic", "Producer group", "Age", "Checks", "Half offset", "")


def _tx_form(broker: str, t: dict[str, Any], action: str, confirm: str = "") -> Raw:
    """A button acting on the row's half by its broker and half offset: its transaction id is the one its producer
    chose, which other halves may carry too, and one of digits would name a half offset (another half)."""
    return form(path("transactions", broker, str(t["halfOffset"]), action), [hidden("id", t["transactionId"])],
                action.title(), form_id=f"{action}-{broker}-{t['halfOffset']}", confirm=confirm)


def _decide_forms(broker: str, t: dict[str, Any]) -> Raw:
    question = "transaction {}? An operator's decision is final: the first one wins."
    return Raw("".join(_tx_form(broker, t, action, f"{action.title()} {question.format(t['transactionId'])}")
                       for action in ("commit", "rollback")))


async def transaction_action(request: web.Request) -> web.StreamResponse:
    admin, action = admin_of(request), request.match_info["action"]
    broker, half = request.match_info["broker"], request.match_info["half"]
    tx_id = str((await request.post()).get("id", ""))[:200] or f"at half offset {half}"
    try:
        if action == "resume":
            await call(admin.tx_resume, half, "", broker)
            notice = f"transaction {tx_id} resumed into checking on {broker}"
        else:
            await call(admin.tx_decide, half, action.upper(), "", broker)
            done = "committed" if action == "commit" else "rolled back"
            notice = f"transaction {tx_id} {done} on {broker} by an operator"
    except TxmqError as exc:
        raise back(request, "/transactions", error=str(exc)) from None
    log.warning("console: %s%s", notice, f" (account {request[USER]})" if request[USER] else "")
    raise back(request, "/transactions", notice=notice)


# --- charts -------------------------------------------------------------------------------------------------


async def charts(request: web.Request) -> web.Response:
    canvases = "".join(f'<figure><figcaption>{title} <span class="legend" id="legend-{name}"></span></figcaption>'
                       f'<canvas id="chart-{name}" width="1000" height="150"></canvas></figure>'
                       for name, title in (("throughput", "Throughput (messages/s)"),
                                           ("outcomes", "Transaction outcomes (per interval)"),
                                           ("latency", "Commit latency (ms)")))
    interval = query_int(request, "interval", 2000, 100, 60_000)
    return render(request, "Charts", Raw(f'<div id="charts" data-interval="{interval}" data-samples="0">'
                                         f'{canvases}</div>'), active="/charts")


async def api_stats(request: web.Request) -> web.Response:
    """The cluster's figures summed over the brokers that answered; ``unanswered`` names the others."""
    admin = admin_of(request)
    parts = await from_each(admin, await masters(admin), admin.stats_at)
    out: dict[str, Any] = {"time": time.time(), "putTps": 0.0, "getTps": 0.0, "commits": 0, "rollbacks": 0,
                           "p50": 0.0, "p99": 0.0, "unanswered": [asdict(u) for u in parts.unanswered]}
    for s in parts.answers.values():
        rates, tx = s.get("rates", {}), s["transactions"]
        out["putTps"] += rates.get("putTps", 0.0)
        out["getTps"] += rates.get("getTps", 0.0)
        out["commits"] += tx["commits"]
        out["rollbacks"] += tx["rollbacks"]
        out["p50"] = max(out["p50"], tx["commitLatencyMs"].get("p50", 0.0))
        out["p99"] = max(out["p99"], tx["commitLatencyMs"].get("p99", 0.0))
    return web.json_response(out)


# --- the application ----------------------------------------------------------------------------------------


@web.middleware
async def errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    """A broker's refusal on a page is shown on the page, not as a 500: 504 when the broker did not answer in
    time (what a proxy says of a server that hangs), else 502."""
    try:
        return await handler(request)
    except TxmqError as exc:
        return error_page(504 if isinstance(exc, RemotingTimeoutError) else 502, str(exc), request[USER])


def make_app(config: ConsoleConfig) -> web.Application:
    """The console's application: its checks (``guard``) around the pages; without login one set of unsigned
    clients serves every visitor, under login each user's own."""
    https = config.https
    storage = EncryptedCookieStorage(os.urandom(32), cookie_name="__Host-txmq_console" if https else "txmq_console",
                                     httponly=True, samesite="Strict", secure=https)
    app = web.Application(middlewares=[check_host, session_middleware(storage), protect, errors],
                          client_max_size=FORM_MAX_BYTES)
    app[CONFIG] = config
    app[REFUSALS] = RefusalLog(log, "console refused a request")
    app[LOGINS] = Logins(config.session_timeout_s)
    app[SHARED] = [] if config.login else [Clients(config.namesrv, None)]

    async def start(app: web.Application) -> None:
        for clients in app[SHARED]:
            await clients.start()

    async def stop(app: web.Application) -> None:
        await app[LOGINS].close()
        for clients in app[SHARED]:
            await clients.close()

    app.on_startup.append(start)
    app.on_cleanup.append(stop)
    app.on_response_prepare.append(secure_headers)
    if config.login:
        auth.add_routes(app)
    app.add_routes([
        web.get("/", cluster), web.get("/topics", topics), web.post("/topics", create_topic),
        web.get("/topics/{topic}", topic_detail), web.post("/topics/{topic}/perm", topic_perm),
        web.post("/topics/{topic}/delete", topic_delete), web.get("/groups", groups),
        web.get("/groups/{group}", group_detail), web.post("/groups/{group}/reset", group_reset),
        web.get("/messages", messages), web.get("/messages/{id}", message_detail),
        web.post("/messages/{id}/resend", message_resend), web.get("/transactions", transactions),
        web.post("/transactions/{broker}/{half:[0-9]{1,19}}/{action:commit|rollback|resume}", transaction_action),
        web.get("/charts", charts), web.get("/api/stats", api_stats), web.static("/static", STATIC),
    ])
    return app
