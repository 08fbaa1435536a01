"""The name server takes no topic entry whose queue numbers are out of 1 to 1024 (``check_queue_nums``, the bound
the broker's own updateTopic holds): a client's route code loops once per queue, so one registration claiming 10^9
queues would hang every client of that topic. A full registration skips such a topic (one log line), keeping the
others; a one-topic registration is refused. A real name server process, registrations on a raw socket."""

from __future__ import annotations

import orjson

from tests.e2e.helpers import RawClient
from txmq.client.instance import parse_route
from txmq.remoting.codes import RequestCode, ResponseCode

EVIL = {"clusterName": "c", "brokerAddr": "127.0.0.1:1", "brokerName": "evil", "brokerId": "0"}


def _route(raw: RawClient, topic: str):
    return raw.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic})


def test_a_registration_claiming_a_billion_queues_is_not_routed(cluster):
    table = {"huge": {"topicName": "huge", "readQueueNums": 10**9, "writeQueueNums": 10**9},
             "negative": {"topicName": "negative", "readQueueNums": -1, "writeQueueNums": 4},
             "fine": {"topicName": "fine", "readQueueNums": 4, "writeQueueNums": 4}}
    body = orjson.dumps({"topicConfigSerializeWrapper": {"topicConfigTable": table}})
    with RawClient(cluster.namesrv_addr) as raw:
        assert raw.call(RequestCode.REGISTER_BROKER, EVIL, body).code == ResponseCode.SUCCESS
        assert _route(raw, "huge").code == ResponseCode.TOPIC_NOT_EXIST
        assert _route(raw, "negative").code == ResponseCode.TOPIC_NOT_EXIST
        fine = _route(raw, "fine")
        assert fine.code == ResponseCode.SUCCESS
        assert [(q["readQueueNums"], q["writeQueueNums"]) for q in orjson.loads(fine.body)["queueDatas"]] == [(4, 4)]
        # The one-topic registration of a broker now registered: refused, not routed
        queue = {"brokerName": "evil", "readQueueNums": 4, "writeQueueNums": 10**9, "perm": 6}
        resp = raw.call(RequestCode.REGISTER_TOPIC_IN_NAMESRV, {"topic": "huge"},
                        orjson.dumps({"queueDatas": [queue]}))
        assert resp.code != ResponseCode.SUCCESS and "between 1 and 1024" in (resp.remark or ""), resp.remark
        assert _route(raw, "huge").code == ResponseCode.TOPIC_NOT_EXIST
        # a second registration: one line each, naming the topics skipped
        assert raw.call(RequestCode.REGISTER_BROKER, EVIL, body).code == ResponseCode.SUCCESS
    lines = [ln for ln in (cluster.root / "namesrv.log").read_text().splitlines() if "skipped" in ln]
    assert len(lines) == 2 and all("huge" in ln and "negative" in ln and "fine" not in ln for ln in lines), lines


def test_a_client_leaves_out_a_route_entry_out_of_bounds():
    """A name server of another implementation may route such a registration: the client leaves that broker's
    entry out and keeps the others (here just past the bound: 10^9 would hold the unfixed client for minutes)."""
    data = {"brokerDatas": [{"brokerName": b, "brokerAddrs": {"0": f"127.0.0.1:{i + 1}"}}
                            for i, b in enumerate(("evil", "good"))],
            "queueDatas": [{"brokerName": "evil", "readQueueNums": 1025, "writeQueueNums": 1025, "perm": 6},
                           {"brokerName": "good", "readQueueNums": 2, "writeQueueNums": 2, "perm": 6}]}
    route = parse_route("huge", data)
    assert [(q.broker_name, q.queue_id) for q in route.publish_queues] == [("good", 0), ("good", 1)]
    assert [(q.broker_name, q.queue_id) for q in route.subscribe_queues] == [("good", 0), ("good", 1)]
