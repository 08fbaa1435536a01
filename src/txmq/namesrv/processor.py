"""Requests the name server answers (RocketMQ ``DefaultRequestProcessor``)."""

from __future__ import annotations

import logging
from typing import Any

import orjson

from txmq.acl.processor import AuthProcessor
from txmq.errors import InvalidMessageError, RemoteProtocolError
from txmq.namesrv.route_info import MASTER_ID, RouteInfoManager
from txmq.remoting.body import read_body
from txmq.remoting.codes import RequestCode, ResponseCode
from txmq.remoting.command import RemotingCommand
from txmq.remoting.transport import Connection
from txmq.topic import TopicConfig, check_topic

log = logging.getLogger("txmq.namesrv")


class NamesrvProcessor:
    def __init__(self, routes: RouteInfoManager, auth: AuthProcessor | None = None) -> None:
        self.routes = routes
        self.auth = auth  # the user and ACL administration (AUTH_* codes)
        self._watched: set[int] = set()

    def __call__(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        code = cmd.code
        if self.auth is not None and code in self.auth.handlers:
            return self.auth.process(conn, cmd)
        try:
            if code == RequestCode.GET_ROUTEINFO_BY_TOPIC:
                return self._route(cmd)
            if code == RequestCode.REGISTER_BROKER:
                return self._register(conn, cmd)
            if code == RequestCode.UNREGISTER_BROKER:
                f = cmd.ext_fields
                self.routes.unregister_broker(
                    f.get("clusterName", ""), f.get("brokerAddr", ""), f.get("brokerName", ""),
                    int(f.get("brokerId", "0")),
                )
                return RemotingCommand.response_to(cmd, ResponseCode.SUCCESS)
            if code == RequestCode.GET_BROKER_CLUSTER_INFO:
                return RemotingCommand.response_to(cmd, ResponseCode.SUCCESS,
                                                   body=orjson.dumps(self.routes.cluster_info()))
            if code == RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER:
                body = orjson.dumps({"topicList": self.routes.topic_list()})
                return RemotingCommand.response_to(cmd, ResponseCode.SUCCESS, body=body)
            if code == RequestCode.DELETE_TOPIC_IN_NAMESRV:
                topic = cmd.ext_fields.get("topic", "")
                check_topic(topic)
                self.routes.delete_topic(topic)
                return RemotingCommand.response_to(cmd, ResponseCode.SUCCESS)
        except (ValueError, KeyError, orjson.JSONDecodeError, RemoteProtocolError, InvalidMessageError) as exc:
            return RemotingCommand.response_to(cmd, ResponseCode.SYSTEM_ERROR, remark=f"bad request: {exc}")
        return RemotingCommand.response_to(
            cmd, ResponseCode.REQUEST_CODE_NOT_SUPPORTED, remark=f"request code {code} not supported by namesrv"
        )

    def _route(self, cmd: RemotingCommand) -> RemotingCommand:
        topic = cmd.ext_fields.get("topic", "")
        check_topic(topic)
        data = self.routes.pick_topic_route_data(topic)
        if data is None:
            return RemotingCommand.response_to(
                cmd, ResponseCode.TOPIC_NOT_EXIST, remark=f"No topic route info in name server for the topic: {topic}"
            )
        return RemotingCommand.response_to(cmd, ResponseCode.SUCCESS, body=orjson.dumps(data))

    def _register(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        f = cmd.ext_fields
        wrapper, configs = read_body(cmd.body, _registration, "a registration body holds topicConfigSerializeWrapper")
        for cfg in configs:  # names a broker registers reach every client's routes
            check_topic(cfg.topic_name)
        conn_id = id(conn)
        if conn_id not in self._watched:
            self._watched.add(conn_id)
            conn.on_close.append(lambda c: self._closed(id(c)))
        broker_id = int(f.get("brokerId", "0"))
        self.routes.register_broker(
            f["clusterName"], f["brokerAddr"], f["brokerName"], broker_id, configs,
            wrapper.get("dataVersion") or {}, conn_id, f.get("haServerAddr", ""),
        )
        master, ha = self.routes.master_of(f["brokerName"]) if broker_id != MASTER_ID else ("", "")
        return RemotingCommand.response_to(cmd, ResponseCode.SUCCESS, ext_fields={"haServerAddr": ha,
                                                                                  "masterAddr": master})

    def _closed(self, conn_id: int) -> None:
        self._watched.discard(conn_id)
        self.routes.on_connection_closed(conn_id)


def _registration(body: dict[str, Any]) -> tuple[dict[str, Any], list[TopicConfig]]:
    """(topicConfigSerializeWrapper, its topic configs) of a REGISTER_BROKER body."""
    wrapper = body.get("topicConfigSerializeWrapper") or {}
    return wrapper, [TopicConfig.from_json(v) for v in (wrapper.get("topicConfigTable") or {}).values()]
