"""Requests the name server answers (RocketMQ ``DefaultRequestProcessor``), each declared once with what it needs
(``requests``)."""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

import orjson

from txmq.acl.model import Action, Needs, any_user, cluster_get, cluster_update
from txmq.data_version import DataVersion, data_version_of
from txmq.namesrv.route_info import MASTER_ID, QueueData, RouteInfoManager
from txmq.remoting.admin_headers import DeleteTopicRequestHeader
from txmq.remoting.body import read_body, read_fields
from txmq.remoting.codes import RequestCode, ResponseCode
from txmq.remoting.command import RemotingCommand
from txmq.remoting.registry import RequestSpec, header, no_header
from txmq.remoting.request_headers import Header
from txmq.remoting.transport import Connection
from txmq.topic import TopicConfig, check_queue_nums, check_topic, out_of_bounds

log = logging.getLogger("txmq.namesrv")


@dataclasses.dataclass(slots=True)
class GetRouteInfoRequestHeader(Header):
    topic: str


@dataclasses.dataclass(slots=True)
class UnRegisterBrokerRequestHeader(Header):
    cluster_name: str
    broker_addr: str
    broker_name: str
    broker_id: int = 0


@dataclasses.dataclass(slots=True)
class RegisterBrokerRequestHeader(Header):
    cluster_name: str
    broker_addr: str
    broker_name: str
    broker_id: int = 0
    ha_server_addr: str = ""


@dataclasses.dataclass(slots=True)
class RegisterTopicRequestHeader(Header):
    topic: str


@dataclasses.dataclass(slots=True)
class WipeWritePermOfBrokerRequestHeader(Header):
    """WIPE_WRITE_PERM_OF_BROKER's and ADD_WRITE_PERM_OF_BROKER's header."""

    broker_name: str


@dataclasses.dataclass(slots=True)
class TopicRegistration:
    """REGISTER_TOPIC_IN_NAMESRV as read once: the topic and its queues on the registering broker."""

    topic: str
    queue_datas: list[QueueData]


@dataclasses.dataclass(slots=True)
class Registration:
    """REGISTER_BROKER as read once: its header, its topic table's data version, the topics its body registers and
    those it skips (name -> why). ``configs`` None: the broker is registered with that version already, and its
    topics were not read."""

    header: RegisterBrokerRequestHeader
    data_version: DataVersion | None
    configs: list[TopicConfig] | None
    skipped: dict[str, str]


def parse_route(cmd: RemotingCommand) -> GetRouteInfoRequestHeader:
    h = GetRouteInfoRequestHeader.from_ext(cmd.ext_fields)
    check_topic(h.topic)
    return h


def route_needs(h: GetRouteInfoRequestHeader) -> Needs:
    """Pub, Sub or Get on the topic (a producer, a consumer or a tool of it)."""
    return Needs().topic(h.topic, Action.PUB, Action.SUB, Action.GET)


def parse_registration(cmd: RemotingCommand, routes: RouteInfoManager) -> Registration:
    """The header and the body's data version first; the topics only when ``routes`` do not hold that version of
    this broker's table already (RocketMQ decodes them all, and updates the routes only then): at 10,000 topics
    reading them is most of the cost of a registration, which a broker sends every 30 s. The body is parsed as
    JSON whole either way (orjson cannot read one field of it alone), so a malformed one is refused either way."""
    h = RegisterBrokerRequestHeader.from_ext(cmd.ext_fields)
    what = "a registration body holds topicConfigSerializeWrapper"
    wrapper = read_body(cmd.body, _wrapper, what)
    version = data_version_of(wrapper.get("dataVersion"))
    if routes.unchanged(h.cluster_name, h.broker_addr, h.broker_name, h.broker_id, version):
        return Registration(h, version, None, {})
    configs = read_fields(wrapper, _topic_configs, what)
    for cfg in configs:  # names a broker registers reach every client's routes
        check_topic(cfg.topic_name)
    # Queue numbers size every client's loops over a route: a topic out of bounds is left out, the others kept
    skipped = out_of_bounds(configs)
    kept = [cfg for cfg in configs if cfg.topic_name not in skipped]
    return Registration(h, version, kept, skipped)


def parse_topic_registration(cmd: RemotingCommand) -> TopicRegistration:
    h = RegisterTopicRequestHeader.from_ext(cmd.ext_fields)
    check_topic(h.topic)
    queue_datas = read_body(cmd.body, _queue_datas, "a topic registration body holds queueDatas")
    for qd in queue_datas:  # as a full registration's, refused: the request is this topic only
        check_queue_nums(qd.read_queue_nums, qd.write_queue_nums)
    return TopicRegistration(h.topic, queue_datas)


def parse_delete_topic(cmd: RemotingCommand) -> DeleteTopicRequestHeader:
    h = DeleteTopicRequestHeader.from_ext(cmd.ext_fields)
    check_topic(h.topic)
    return h


class NamesrvProcessor:
    def __init__(self, routes: RouteInfoManager) -> None:
        self.routes = routes
        self._watched: set[int] = set()

    def requests(self) -> list[RequestSpec[Any]]:
        return [
            RequestSpec(RequestCode.GET_ROUTEINFO_BY_TOPIC, parse_route, route_needs, self._route),
            RequestSpec(RequestCode.REGISTER_BROKER, self._parse_registration, cluster_update, self._register),
            RequestSpec(RequestCode.REGISTER_TOPIC_IN_NAMESRV, parse_topic_registration, cluster_update,
                        self._register_topic),
            RequestSpec(RequestCode.UNREGISTER_BROKER, header(UnRegisterBrokerRequestHeader), cluster_update,
                        self._unregister),
            # A client learns the brokers (names and addresses, as routes show them) to heartbeat them.
            RequestSpec(RequestCode.GET_BROKER_CLUSTER_INFO, no_header, any_user, self._cluster_info),
            RequestSpec(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER, no_header, cluster_get, self._topic_list),
            RequestSpec(RequestCode.DELETE_TOPIC_IN_NAMESRV, parse_delete_topic, cluster_update, self._delete_topic),
            RequestSpec(RequestCode.WIPE_WRITE_PERM_OF_BROKER, header(WipeWritePermOfBrokerRequestHeader),
                        cluster_update, self._write_perm),
            RequestSpec(RequestCode.ADD_WRITE_PERM_OF_BROKER, header(WipeWritePermOfBrokerRequestHeader),
                        cluster_update, self._write_perm),
        ]

    def _parse_registration(self, cmd: RemotingCommand) -> Registration:
        return parse_registration(cmd, self.routes)

    def _route(self, conn: Connection, cmd: RemotingCommand, h: GetRouteInfoRequestHeader) -> RemotingCommand:
        data = self.routes.pick_topic_route_data(h.topic)
        if data is None:
            return RemotingCommand.response_to(
                cmd, ResponseCode.TOPIC_NOT_EXIST, remark=f"No topic route info in name server for the topic: {h.topic}"
            )
        return RemotingCommand.response_to(cmd, ResponseCode.SUCCESS, body=orjson.dumps(data))

    def _register(self, conn: Connection, cmd: RemotingCommand, reg: Registration) -> RemotingCommand:
        h = reg.header
        conn_id = id(conn)
        if conn_id not in self._watched:
            self._watched.add(conn_id)
            conn.on_close.append(lambda c: self._closed(id(c)))
        if reg.configs is None:
            self.routes.refresh(h.broker_addr, conn_id, h.ha_server_addr)
        else:
            self._register_topics(h, reg.configs, reg.skipped, reg.data_version, conn_id)
        master, ha = self.routes.master_of(h.broker_name) if h.broker_id != MASTER_ID else ("", "")
        return RemotingCommand.response_to(cmd, ResponseCode.SUCCESS, ext_fields={"haServerAddr": ha,
                                                                                  "masterAddr": master})

    def _register_topics(self, h: RegisterBrokerRequestHeader, configs: list[TopicConfig], skipped: dict[str, str],
                         data_version: DataVersion | None, conn_id: int) -> None:
        if skipped:
            log.warning("registration of %s %s: %d topic%s skipped: %.500s", h.broker_name, h.broker_addr,
                        len(skipped), "" if len(skipped) == 1 else "s",
                        "; ".join(f"{name}: {why}" for name, why in skipped.items()))
        self.routes.register_broker(h.cluster_name, h.broker_addr, h.broker_name, h.broker_id, configs,
                                    data_version, conn_id, h.ha_server_addr)

    def _register_topic(self, conn: Connection, cmd: RemotingCommand, reg: TopicRegistration) -> RemotingCommand:
        if not self.routes.register_topic(reg.topic, reg.queue_datas):
            return RemotingCommand.response_to(cmd, ResponseCode.SYSTEM_ERROR,
                                               remark=f"topic {reg.topic}: a queue names a broker not registered")
        return RemotingCommand.response_to(cmd, ResponseCode.SUCCESS)

    def _unregister(self, conn: Connection, cmd: RemotingCommand, h: UnRegisterBrokerRequestHeader) -> RemotingCommand:
        self.routes.unregister_broker(h.cluster_name, h.broker_addr, h.broker_name, h.broker_id)
        return RemotingCommand.response_to(cmd, ResponseCode.SUCCESS)

    def _cluster_info(self, conn: Connection, cmd: RemotingCommand, _: None) -> RemotingCommand:
        return RemotingCommand.response_to(cmd, ResponseCode.SUCCESS, body=orjson.dumps(self.routes.cluster_info()))

    def _topic_list(self, conn: Connection, cmd: RemotingCommand, _: None) -> RemotingCommand:
        body = orjson.dumps({"topicList": self.routes.topic_list()})
        return RemotingCommand.response_to(cmd, ResponseCode.SUCCESS, body=body)

    def _delete_topic(self, conn: Connection, cmd: RemotingCommand, h: DeleteTopicRequestHeader) -> RemotingCommand:
        self.routes.delete_topic(h.topic)
        return RemotingCommand.response_to(cmd, ResponseCode.SUCCESS)

    def _write_perm(self, conn: Connection, cmd: RemotingCommand,
                    h: WipeWritePermOfBrokerRequestHeader) -> RemotingCommand:
        """WIPE_WRITE_PERM_OF_BROKER or ADD_WRITE_PERM_OF_BROKER: the broker's topics changed, and how many."""
        wipe = cmd.code == RequestCode.WIPE_WRITE_PERM_OF_BROKER
        routes = self.routes
        count = (routes.wipe_write_perm_of_broker if wipe else routes.add_write_perm_of_broker)(h.broker_name)
        log.info("write permission of broker %s %s by %s: %d topics", h.broker_name, "wiped" if wipe else "added",
                 conn.remote_address, count)
        return RemotingCommand.response_to(cmd, ResponseCode.SUCCESS,
                                           ext_fields={"wipeTopicCount" if wipe else "addTopicCount": str(count)})

    def _closed(self, conn_id: int) -> None:
        self._watched.discard(conn_id)
        self.routes.on_connection_closed(conn_id)


def _queue_datas(body: dict[str, Any]) -> list[QueueData]:
    """The QueueData list of a TopicRouteData body (RocketMQ's field names; ``topicSynFlag`` sic)."""
    return [QueueData(str(q["brokerName"]), int(q["readQueueNums"]), int(q["writeQueueNums"]), int(q["perm"]),
                      int(q.get("topicSynFlag", 0))) for q in body["queueDatas"]]


def _wrapper(body: dict[str, Any]) -> dict[str, Any]:
    """The topicConfigSerializeWrapper of a REGISTER_BROKER body."""
    wrapper = body.get("topicConfigSerializeWrapper") or {}
    if not isinstance(wrapper, dict):
        raise TypeError(f"topicConfigSerializeWrapper is a {type(wrapper).__name__}")
    return wrapper


def _topic_configs(wrapper: dict[str, Any]) -> list[TopicConfig]:
    return [TopicConfig.from_json(v) for v in (wrapper.get("topicConfigTable") or {}).values()]
