"""broker.conf as Java properties, and config values checked when read (issue 16); each key declared once, with
its default, range and documentation, docs/configuration.md generated from the declarations (issue 29)."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import pytest

from txmq.broker.config import RUNTIME_KEYS, BrokerConfig, config_properties
from txmq.conf import declared_keys, parse_properties
from txmq.config_doc import BEGIN, END, section
from txmq.errors import InvalidMessageError
from txmq.launch import txmq_command
from txmq.message import Message, MessageConst
from txmq.remoting.server import ServerLimits
from txmq.store.config import FlushDiskType, StoreConfig
from txmq.store.ha.config import HAConfig


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
    ({"defaultTopicQueueNums": "0"}, "config defaultTopicQueueNums: 0 is out of range (it must be between 1 and "
     "1024)"),
    # auto-created topics beyond the queue numbers updateTopic, slaves and name servers take: routed nowhere
    ({"defaultTopicQueueNums": "1025"}, "config defaultTopicQueueNums: 1025 is out of range (it must be between 1 "
     "and 1024)"),
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


def test_more_delay_levels_than_a_topic_has_queues_are_refused():
    """Level N is queue N-1 of the schedule topic: past 1024 queues slaves and name servers leave it out."""
    with pytest.raises(ValueError) as err:
        BrokerConfig().update({"messageDelayLevel": "1s " * 1025})
    assert str(err.value).endswith("names 1025 levels: at most 1024 (the queues of SCHEDULE_TOPIC_XXXX)")
    BrokerConfig().update({"messageDelayLevel": "1s " * 1024})


def test_every_default_passes_its_own_checks():
    """A default outside its key's range would stop every broker that keeps it; each value getBrokerConfig shows
    reads back as itself."""
    keys = declared_keys(BrokerConfig)
    for k in keys.values():
        assert k.parse(k.text(k.default)) == k.default, k.name
    config = BrokerConfig()
    config.update(config_properties(config))
    assert config_properties(config) == config_properties(BrokerConfig())


def test_every_numeric_key_has_a_range():
    """A number an operator gives is bounded where its key is declared (a zero interval is a busy loop, a zero
    queue count an unroutable topic): a new numeric key without a range fails here."""
    unbounded = [k.name for k in declared_keys(BrokerConfig).values()
                 if k.kind in (int, float) and k.key.range == (None, None)]
    assert not unbounded


def test_a_refused_range_leaves_every_field_as_it_was():
    config = BrokerConfig()
    with pytest.raises(ValueError, match="transactionCheckInterval"):
        config.update({"flushIntervalCommitLog": "200", "transactionCheckInterval": "0"})
    assert config.store.flush_interval_commit_log_ms == 500 and config.transaction_check_interval == 30_000


def test_unknown_keys_are_warned_once(caplog):
    BrokerConfig().update({"brokerName": "b", "fooKey": "1", "barKey": "2"})
    warnings = [r.getMessage() for r in caplog.records if "unknown" in r.getMessage()]
    assert warnings == ["unknown broker config keys ignored: barKey, fooKey (docs/configuration.md lists the keys "
                        "txmq reads)"]


def test_the_configuration_page_shows_the_keys_that_run():
    page = (Path(__file__).parents[1] / "docs" / "configuration.md").read_text()
    assert BEGIN in page and END in page
    shown = page[page.index(BEGIN):page.index(END) + len(END)]
    assert shown == section(), "docs/configuration.md is stale: python -m txmq.config_doc --write regenerates it"
    assert all(f"| `{k.name}` |" in shown for k in declared_keys(BrokerConfig).values())


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


def _names(cls: type) -> set[str]:
    return {k.name for k in declared_keys(cls).values()}


def test_the_store_replication_and_remoting_keys_are_part_of_the_brokers():
    """Each key is declared once, where it is used; broker.conf reaches the store's, replication's and the remoting
    server's keys through the broker's config, under their RocketMQ names."""
    broker = _names(BrokerConfig)
    parts = [_names(StoreConfig), _names(HAConfig), _names(ServerLimits)]
    assert all(part <= broker for part in parts)
    assert sum(map(len, parts)) + len([f for f in declared_keys(BrokerConfig).values() if len(f.path) == 1]) \
        == len(broker)
    assert {"flushIntervalCommitLog", "haListenPort", "serverMaxConnections", "brokerIP1"} <= broker
    config = BrokerConfig()
    config.update({"flushDiskType": "sync_flush", "flushIntervalCommitLog": "200", "haListenPort": "20912",
                   "serverMaxConnections": "16", "diskMaxUsedSpaceRatio": "0.5", "tls.server.mode": "permissive"})
    assert config.store.flush_disk_type is FlushDiskType.SYNC_FLUSH and config.store.flush_interval_commit_log_ms == 200
    assert config.ha.listen_port == 20912 and config.server_limits.server_max_connections == 16
    assert config.store.disk_max_used_space_ratio == 50  # a fraction, as RocketMQ 4.x's system property, in percent
    assert config.tls_server_mode == "permissive"
    props = config_properties(config)
    assert (props["flushDiskType"], props["flushIntervalCommitLog"], props["haListenPort"]) == ("SYNC_FLUSH", "200",
                                                                                                "20912")


def test_the_broker_hands_its_store_the_config_it_reads(tmp_path):
    """No copy field by field: the store runs on the broker's own store config, so a key changed while the broker
    runs (maxMessageSize) is the one the store's put checks."""
    async def main() -> None:
        config = BrokerConfig(store=StoreConfig(store_path_root_dir=str(tmp_path / "store")), listen_port=1)
        from txmq.broker.controller import BrokerController

        broker = BrokerController(config)
        try:
            assert broker.store.config is config.store
            assert broker.store.config.store_host == broker.store_host
            config.update({"maxMessageSize": str(5 << 20)})
            assert broker.store.config.max_message_size == 5 << 20
        finally:
            await broker.store.shutdown()
    asyncio.run(main())


def test_store_checks_hold_for_a_config_built_in_code(tmp_path):
    """The checks of a key (not its operator range) hold however the store's config is made."""
    with pytest.raises(ValueError, match="config mappedFileSizeConsumeQueue: 30 is not a multiple of 20"):
        StoreConfig(store_path_root_dir=str(tmp_path), mapped_file_size_consume_queue=30)
    with pytest.raises(ValueError, match="config mappedFileSizeConsumeQueue: 30 is not a multiple of 20"):
        BrokerConfig().update({"mappedFileSizeConsumeQueue": "30"})
    with pytest.raises(ValueError, match="config messageDelayLevel: '1s 5x' has a bad entry '5x'"):
        BrokerConfig().update({"messageDelayLevel": "1s 5x"})
    assert StoreConfig(store_path_root_dir=str(tmp_path), disk_space_warning_level_ratio=0.9) \
        .disk_space_warning_level_ratio == 90


def test_which_keys_change_at_run_time_and_which_stay_secret():
    """updateBrokerConfig's keys and getBrokerConfig's omissions are declared on the keys."""
    assert set(RUNTIME_KEYS) == {"maxMessageSize", "rejectTransactionMessage", "longPollingEnable",
                                 "enablePropertyFilter", "registerNameServerPeriod", "transactionCheckMax",
                                 "transactionCheckInterval", "timerMaxDelaySec", "timerStopEnqueue",
                                 "timerStopDequeue", "recallMessageEnable", "brokerPermission"}
    secret = {k.name for k in declared_keys(BrokerConfig).values() if k.key.secret}
    assert secret == {"accessKey", "secretKey"}
    config = BrokerConfig()
    config.update({"accessKey": "rocketmq2", "secretKey": "12345678"})
    props = config_properties(config)
    assert not secret & set(props) and "12345678" not in props.values()


@pytest.mark.parametrize(("raw", "message"), [
    ("nan", "config fileReservedTime: 'nan' is not a finite number"),
    ("inf", "config fileReservedTime: 'inf' is not a finite number"),
])
def test_a_number_is_finite(raw, message):
    """NaN compares false with every bound, so it passed every range: a retention that never deletes."""
    with pytest.raises(ValueError) as err:
        BrokerConfig().update({"fileReservedTime": raw})
    assert str(err.value) == message


def test_a_key_declared_twice_is_refused():
    from dataclasses import dataclass

    from txmq.conf import key, section

    @dataclass
    class Inner:
        listen_port: int = key(1, range=(0, 65535), doc="twice")

    @dataclass
    class Outer:
        listen_port: int = key(1, range=(0, 65535), doc="once")
        inner: Inner = section(Inner, "Inner")

    with pytest.raises(TypeError, match="config key listenPort is declared twice"):
        declared_keys(Outer)


def test_the_broker_config_does_not_import_the_transaction_service():
    code = "import sys, txmq.broker.config; print('txmq.broker.transaction.service' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True).stdout.strip() == "False"


@pytest.mark.parametrize(("flags", "message"), [
    (["--port", "abc"], "txmq broker: config listenPort: 'abc' is not an integer"),
    (["--grpc-port", "70000"], "txmq broker: config grpcPort: 70000 is out of range (it must be at most 65535)"),
    (["--flush-disk-type", "SYNC"], "txmq broker: config flushDiskType: 'SYNC' is not one of ASYNC_FLUSH, "
                                    "SYNC_FLUSH"),
])
def test_flags_are_read_as_their_keys(flags, message, tmp_path):
    """A flag that sets a key is parsed and checked once, by its key, and refused as broker.conf's value is."""
    r = subprocess.run(txmq_command("broker", "--store", str(tmp_path / "s"), *flags), capture_output=True,
                       text=True, timeout=60)
    assert r.returncode != 0 and "Traceback" not in r.stderr, r.stderr
    assert r.stderr.strip().splitlines()[-1] == message
