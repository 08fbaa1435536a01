"""broker.conf as Java properties, and config values checked when read (issue 16)."""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path

import pytest

from txmq.broker.config import _RANGES, BrokerConfig, config_properties
from txmq.conf import parse_properties
from txmq.errors import InvalidMessageError
from txmq.message import Message, MessageConst


def test_java_properties_rules():
    text = ("# comment\n  ! another\n\na=1\nb : two words\nc  3\nlong = one, \\\n       two, \\\n  three\n"
            "path=C:\\\\dir\\tx\nk\\=y = v\nu=\\u00e9\nodd\\\\\nx=1\nempty=\n")
    assert parse_properties(text) == {"a": "1", "b": "two words", "c": "3", "long": "one, two, three",
                                      "path": "C:\\dir\tx", "k=y": "v", "u": "é", "odd\\": "", "x": "1", "empty": ""}


@pytest.mark.parametrize(("values", "message"), [
    ({"listenPort": "abc"}, "config listenPort: 'abc' is not an integer"),
    ({"flushDiskType": "SYNC"}, "config flushDiskType: 'SYNC' is not one of ASYNC_FLUSH, SYNC_FLUSH"),
    ({"autoCreateTopicEnable": "yes"}, "config autoCreateTopicEnable: 'yes' is not true or false"),
    ({"metricsExporterType": "OTLP"}, "config metricsExporterType: 'OTLP' is not one of DISABLE, PROM"),
    ({"grpcClientProducerMaxAttempts": "0"}, "config grpcClientProducerMaxAttempts: 0 is out of range (it must be at "
     "least 1)"),
    ({"grpcClientProducerMaxAttempts": "-2"}, "config grpcClientProducerMaxAttempts: -2 is out of range (it must be at "
     "least 1)"),
    ({"flushIntervalCommitLog": "0"}, "config flushIntervalCommitLog: 0 is out of range (it must be at least 1)"),
    ({"defaultTopicQueueNums": "0"}, "config defaultTopicQueueNums: 0 is out of range (it must be at least 1)"),
    ({"transactionCheckMax": "-1"}, "config transactionCheckMax: -1 is out of range (it must be at least 0)"),
    ({"listenPort": "65536"}, "config listenPort: 65536 is out of range (it must be between 0 and 65535)"),
    ({"grpcPort": "65536"}, "config grpcPort: 65536 is out of range (it must be at most 65535)"),
    ({"diskMaxUsedSpaceRatio": "101"}, "config diskMaxUsedSpaceRatio: 101.0 is out of range (it must be between 0 and "
     "100)"),
    ({"mappedFileSizeCommitLog": "4096"}, "config mappedFileSizeCommitLog: 4096 is out of range (it must be at least "
     "65536)"),
    ({"registerNameServerPeriod": "10"}, "config registerNameServerPeriod: 10 is out of range (it must be at least "
     "1000)"),
    ({"serverFrameTimeoutSeconds": "0"}, "config serverFrameTimeoutSeconds: 0.0 is out of range (it must be at least "
     "0.1)"),
    ({"serverMaxConnections": "0"}, "config serverMaxConnections: 0 is out of range (it must be at least 1)"),
])
def test_bad_values_name_the_key(values, message):
    with pytest.raises(ValueError) as err:
        BrokerConfig().update(values)
    assert str(err.value) == message


def test_every_range_names_a_key_and_holds_its_default():
    """A range for a key that does not exist would check nothing; a default outside its range would stop every
    broker that keeps it."""
    config = BrokerConfig()
    config.update({k: v for k, v in config_properties(config).items()})  # the defaults pass their own checks
    keys = {f.name for f in fields(config)} | {f.name for f in fields(config.server_limits)}
    assert set(_RANGES) <= keys
    assert {"grpc_port", "transaction_check_max", "server_max_connections"} <= set(_RANGES)


def test_a_refused_range_leaves_every_field_as_it_was():
    config = BrokerConfig()
    with pytest.raises(ValueError, match="transactionCheckInterval"):
        config.update({"flushIntervalCommitLog": "200", "transactionCheckInterval": "0"})
    assert config.flush_interval_commit_log == 500 and config.transaction_check_interval == 30_000


def test_unknown_keys_are_warned_once(caplog):
    BrokerConfig().update({"brokerName": "b", "fooKey": "1", "barKey": "2"})
    warnings = [r.getMessage() for r in caplog.records if "unknown" in r.getMessage()]
    assert warnings == ["unknown broker config keys ignored: barKey, fooKey (docs/configuration.md lists the keys "
                        "txmq reads)"]


def test_every_key_is_documented():
    doc = (Path(__file__).parents[1] / "docs" / "configuration.md").read_text()
    missing = [k for k in config_properties(BrokerConfig()) if f"| `{k}` |" not in doc]
    assert not missing


def test_message_delay_level_setter():
    m = Message("t", b"x")
    m.delay_time_level = 3
    assert m.properties[MessageConst.DELAY_TIME_LEVEL] == "3" and m.delay_time_level == 3
    m.delay_time_level = 0
    assert MessageConst.DELAY_TIME_LEVEL not in m.properties
    with pytest.raises(InvalidMessageError):
        m.delay_time_level = -1


def test_broker_ip_keys_keep_rocketmqs_spelling():
    """brokerIP1/brokerIP2 are read and written under RocketMQ's names (GET_BROKER_CONFIG), not brokerIp2."""
    config = BrokerConfig()
    config.update(parse_properties("brokerIP1=10.0.0.1\nbrokerIP2=10.0.1.1\n"))
    assert (config.broker_ip1, config.broker_ip2) == ("10.0.0.1", "10.0.1.1")
    props = config_properties(config)
    assert (props["brokerIP1"], props["brokerIP2"]) == ("10.0.0.1", "10.0.1.1")
    assert "brokerIp2" not in props


def test_is_slave_follows_every_way_broker_role_is_set():
    """is_slave is kept once asked: each way of setting brokerRole (constructor, update, assignment) renews it."""
    cfg = BrokerConfig(broker_role="slave")
    assert cfg.is_slave and cfg.broker_role == "slave"
    cfg.update({"brokerRole": "SYNC_MASTER"})
    assert not cfg.is_slave and cfg.is_sync_master
    cfg.broker_role = "SLAVE"  # as the controller's change_to_slave sets it
    assert cfg.is_slave and config_properties(cfg)["brokerRole"] == "SLAVE"
    assert not BrokerConfig().is_slave and BrokerConfig().broker_role == "ASYNC_MASTER"


@pytest.mark.parametrize("values", [
    {"maxMessageSize": "5", "transactionCheckMax": "abc"},  # a value of the wrong type
    {"brokerRole": "SLAVE", "flushDiskType": "NOPE"},  # a name not among the choices
    {"brokerRole": "SLAVE", "grpcClientProducerMaxAttempts": "0"},  # below its floor
])
def test_a_refused_update_changes_nothing(values):
    """An update refused (UPDATE_BROKER_CONFIG answered with an error, a bad broker.conf) leaves every field as it
    was, brokerRole and is_slave included: the keys before the bad one are not applied either."""
    cfg = BrokerConfig()
    assert not cfg.is_slave
    before = config_properties(cfg)
    with pytest.raises(ValueError):
        cfg.update(values)
    assert config_properties(cfg) == before and not cfg.is_slave


def test_the_name_server_checks_its_limits_as_the_broker_does(tmp_path):
    """``txmq namesrv -c`` reads the same remoting keys as broker.conf: a value the broker refuses is refused there
    too, naming the key, instead of a name server that closes every connection."""
    from txmq.server import namesrv_limits

    conf = tmp_path / "namesrv.conf"
    conf.write_text("serverMaxConnections=0\n")
    with pytest.raises(ValueError) as err:
        namesrv_limits(str(conf))
    assert str(err.value) == "config serverMaxConnections: 0 is out of range (it must be at least 1)"
    conf.write_text("serverMaxConnections=16\nserverChannelMaxIdleTimeSeconds=0\n")
    assert namesrv_limits(str(conf)).server_max_connections == 16
