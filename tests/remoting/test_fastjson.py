"""fastjson's MessageQueue-keyed maps (ConsumeStats, TopicStatsTable, ResetOffsetBody): written and read back."""

from __future__ import annotations

import pytest

from txmq.remoting import fastjson


def test_object_keys_round_trip():
    mq = {"brokerName": "b", "queueId": 0, "topic": "t"}
    raw = fastjson.dumps({"offsetTable": fastjson.ObjectMap([(mq, {"maxOffset": 5})]), "consumeTps": 1.5})
    assert raw == (b'{"offsetTable":{{"brokerName":"b","queueId":0,"topic":"t"}:{"maxOffset":5}},'
                   b'"consumeTps":1.5}')
    assert fastjson.loads(raw) == {"offsetTable": [(mq, {"maxOffset": 5})], "consumeTps": 1.5}


def test_plain_json_reads_as_json():
    assert fastjson.loads(' {"a": [1, {"b": null}], "c": {}} ') == {"a": [1, {"b": None}], "c": {}}


@pytest.mark.parametrize("bad", ['{"a" 1}', "[1 2]", '{"a": 1} x', "{"])
def test_malformed_raises(bad):
    with pytest.raises(ValueError):
        fastjson.loads(bad)
