"""``txmq admin <command>``: RocketMQ's mqadmin commands under their names and flags (``-n`` for the name
server, ``-t`` topic, ``-g`` group, ``-b`` broker, ``-c`` cluster, ...), so operators' scripts carry over.
Each command is one function over ``MQAdminExt``; what it prints follows mqadmin's columns."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Iterator
from datetime import datetime
from typing import Any

from txmq.admin.client import MQAdminExt
from txmq.cli.registry import CLIENT, TXMQ, Commands, opt, parse_time
from txmq.client.admin import check_topic_perm
from txmq.client.instance import MASTER_ID, MessageQueue
from txmq.client.producer import Producer
from txmq.client.pull_consumer import PullConsumer, PullStatus
from txmq.errors import ClientError, TxmqError
from txmq.message import Message, MessageExt
from txmq.remoting.admin_headers import QueryConsumeQueueRequestHeader
from txmq.remoting.codes import RequestCode
from txmq.remoting.request_headers import CreateTopicRequestHeader
from txmq.topic import DLQ_GROUP_TOPIC_PREFIX, RETRY_GROUP_TOPIC_PREFIX, PermName, is_system_topic

# mqadmin's commands, each declared with its flags beside its handler (a function over ``MQAdminExt``); ``-n`` and
# the account follow each one's own flags, as mqadmin takes them.
ADMIN = Commands("admin_command", handler_key="admin_fn", metavar="COMMAND", trailing=CLIENT, describe=True)
command = ADMIN.command

TOPIC = opt("-t", "--topic", required=True, help="topic name")
GROUP = opt("-g", "--consumerGroup", dest="group", required=True, help="consumer group")
BROKER = opt("-b", "--brokerAddr", dest="broker", help="broker address or name (default: every broker)")
CLUSTER = opt("-c", "--clusterName", dest="cluster", help="cluster name (default: every broker)")


def fmt_time(ms: int) -> str:
    """A stored timestamp in local time, as mqadmin prints it ("-" for none). Any value prints: one no date holds
    (a producer's broken clock stored before the broker refused such, or a record written by another program)
    prints as its number."""
    if not ms:
        return "-"
    try:
        return datetime.fromtimestamp(ms / 1000).strftime("%Y-%m-%d %H:%M:%S,%f")[:-3]
    except (OverflowError, OSError, ValueError):
        return f"{ms} (ms since the epoch: not a date)"


def targets(admin: MQAdminExt, args: argparse.Namespace) -> dict[str, str]:
    return admin.broker_addrs(getattr(args, "broker", None), getattr(args, "cluster", None))


def on_each_broker(admin: MQAdminExt, args: argparse.Namespace, act: Callable[[str, str], str | None]) -> int:
    """``act(name, addr)`` on each target broker, printing the line it returns (None: that broker had nothing to
    change) or why that broker failed. A broker that is down or refuses stops none of the others (mqadmin stops at
    the first, leaving the rest untried and unnamed): the output names every broker that has the change and every
    one that has not; 1 when one failed."""
    failed = False
    for name, addr in sorted(targets(admin, args).items()):
        try:
            line = act(name, addr)
        except TxmqError as exc:
            failed = True
            print(f"FAILED on {name} {addr}: {exc}")
            continue
        if line is not None:
            print(line)
    return int(failed)


def user_topic(topic: str) -> bool:
    """Whether statsAll and consumerProgress list ``topic``: not a system topic (``is_system_topic``, the one rule
    the brokers apply too, so that no broker-kept topic such as ``rmq_sys_wheel_timer`` slips through), nor a
    group's retry or dead-letter topic (as mqadmin)."""
    return not is_system_topic(topic) and not topic.startswith((RETRY_GROUP_TOPIC_PREFIX, DLQ_GROUP_TOPIC_PREFIX))


def print_message(m: MessageExt, body: bool = True) -> None:
    props = dict(m.properties)
    rows = [("Topic", m.topic), ("Tags", f"[{m.tags or ''}]"), ("Keys", f"[{m.keys or ''}]"),
            ("Queue ID", m.queue_id), ("Queue Offset", m.queue_offset), ("CommitLog Offset", m.commit_log_offset),
            ("Reconsume Times", m.reconsume_times), ("Born Timestamp", fmt_time(m.born_timestamp)),
            ("Store Timestamp", fmt_time(m.store_timestamp)), ("Born Host", "{}:{}".format(*m.born_host)),
            ("Store Host", "{}:{}".format(*m.store_host)), ("System Flag", m.sys_flag), ("Properties", props),
            ("Message ID", m.msg_id), ("Offset Message ID", m.offset_msg_id)]
    for label, value in rows:
        print(f"{label + ':':<20}{value}")
    if body:
        print(f"{'Message Body:':<20}{m.body.decode(errors='replace')}")


# --- cluster and brokers ----------------------------------------------------------------------------------


@command("clusterList", "brokers of each cluster: address, version, TPS in and out, disk use", CLUSTER)
def cluster_list(admin: MQAdminExt, args: argparse.Namespace) -> int:
    info = admin.cluster_info()
    print(f"{'#Cluster Name':<22}{'#Broker Name':<22}{'#BID':<6}{'#Addr':<24}{'#Version':<16}{'#InTPS':>10}"
          f"{'#OutTPS':>10}  {'#Role':<14}{'#SPACE':>8}")
    for cluster, names in sorted((info.get("clusterAddrTable") or {}).items()):
        if args.cluster and cluster != args.cluster:
            continue
        for name in sorted(names):
            for bid, addr in sorted(((info["brokerAddrTable"].get(name) or {}).get("brokerAddrs") or {}).items()):
                rt = admin.runtime_info(addr)
                put = float(rt.get("putTps", "0").split()[0])
                get = float(rt.get("getTransferedTps", "0").split()[0])
                print(f"{cluster:<22}{name:<22}{bid:<6}{addr:<24}{rt.get('brokerVersionDesc', '?'):<16}{put:>10.2f}"
                      f"{get:>10.2f}  {rt.get('brokerRole', '?'):<14}{float(rt.get('commitLogDiskRatio', 0)):>8.2%}")
    return 0


@command("brokerStatus", "a broker's runtime figures (GET_BROKER_RUNTIME_INFO)", BROKER, CLUSTER)
def broker_status(admin: MQAdminExt, args: argparse.Namespace) -> int:
    for name, addr in sorted(targets(admin, args).items()):
        for key, value in sorted(admin.runtime_info(addr).items()):
            print(f"{name:<16}{addr:<22}{key:<32}: {value}")
    return 0


@command("getBrokerConfig", "a broker's configuration as broker.conf keys", BROKER, CLUSTER)
def get_broker_config(admin: MQAdminExt, args: argparse.Namespace) -> int:
    for name, addr in sorted(targets(admin, args).items()):
        print(f"============{name} {addr}============")
        for key, value in sorted(admin.broker_config(addr).items()):
            print(f"{key:<50}=  {value}")
    return 0


@command("updateBrokerConfig", "change a broker.conf key that can change while the broker runs", BROKER, CLUSTER,
         opt("-k", "--key", required=True, help="broker.conf key"), opt("-v", "--value", required=True, help="value"))
def update_broker_config(admin: MQAdminExt, args: argparse.Namespace) -> int:
    def act(name: str, addr: str) -> str:
        admin.update_broker_config(addr, {args.key: args.value})
        return f"update broker config success, {name} {addr}"
    return on_each_broker(admin, args, act)


BROKER_NAME = opt("-b", "--brokerName", dest="broker", required=True, help="broker name")


def _write_perm(admin: MQAdminExt, code: int, what: str, broker: str) -> int:
    """``code`` on each name server, a line for each as mqadmin prints it; 1 when one failed."""
    failed = False
    for addr, count in admin.write_perm_of_broker(code, broker):
        failed = failed or isinstance(count, Exception)
        result = f"Failed: {count}" if isinstance(count, Exception) else f"OK, {count}"
        print(f"{what} write perm of broker[{broker}] in name server[{addr}] {result}")
    return int(failed)


@command("wipeWritePerm", "take write off a broker's topics at each name server: producers send elsewhere (until "
         "the broker registers a changed topic table)", BROKER_NAME)
def wipe_write_perm(admin: MQAdminExt, args: argparse.Namespace) -> int:
    return _write_perm(admin, RequestCode.WIPE_WRITE_PERM_OF_BROKER, "wipe", args.broker)


@command("addWritePerm", "make a broker's topics readable and writable again at each name server", BROKER_NAME)
def add_write_perm(admin: MQAdminExt, args: argparse.Namespace) -> int:
    return _write_perm(admin, RequestCode.ADD_WRITE_PERM_OF_BROKER, "add", args.broker)


# --- topics -----------------------------------------------------------------------------------------------


@command("topicList", "every topic the name server knows")
def topic_list(admin: MQAdminExt, args: argparse.Namespace) -> int:
    for topic in admin.list_topics():
        print(topic)
    return 0


@command("topicRoute", "a topic's route: brokers and queues", TOPIC)
def topic_route(admin: MQAdminExt, args: argparse.Namespace) -> int:
    print(json.dumps(admin.route(args.topic), indent=2, sort_keys=True))
    return 0


@command("topicStatus", "a topic's queues: min and max offsets, last update", TOPIC)
def topic_status(admin: MQAdminExt, args: argparse.Namespace) -> int:
    print(f"{'#Broker Name':<32}{'#QID':<6}{'#Min Offset':>14}{'#Max Offset':>14}  #Last Updated")
    for s in admin.topic_stats(args.topic):
        v = s.values
        print(f"{s.mq.broker_name:<32}{s.mq.queue_id:<6}{v['minOffset']:>14}{v['maxOffset']:>14}  "
              f"{fmt_time(v['lastUpdateTimestamp'])}")
    return 0


@command("updateTopic", "create a topic or change its queues, permission and order", TOPIC, BROKER, CLUSTER,
         opt("-r", "--readQueueNums", dest="read", type=int, default=8, help="read queues (default 8)"),
         opt("-w", "--writeQueueNums", dest="write", type=int, default=8, help="write queues (default 8)"),
         opt("-p", "--perm", type=int, default=PermName.READ_WRITE, help="2 write, 4 read, 6 both (default 6)"),
         opt("-o", "--order", type=lambda s: s.lower() == "true", default=False, help="ordered topic (true|false)"))
def update_topic(admin: MQAdminExt, args: argparse.Namespace) -> int:
    check_topic_perm(args.perm)
    header = CreateTopicRequestHeader(topic=args.topic, read_queue_nums=args.read, write_queue_nums=args.write,
                                      perm=args.perm, order=args.order)

    def act(name: str, addr: str) -> str:
        admin.update_topic(addr, header)
        return f"create topic to {addr} success."
    failed = on_each_broker(admin, args, act)
    print(f"TopicConfig [topicName={args.topic}, readQueueNums={args.read}, writeQueueNums={args.write}, "
          f"perm={PermName.to_string(args.perm)}, order={str(args.order).lower()}]")
    return failed


@command("updateTopicPerm", "change a topic's permission (2 write, 4 read, 6 both)", TOPIC, BROKER, CLUSTER,
         opt("-p", "--perm", type=int, required=True, choices=[2, 4, 6], help="2 write, 4 read, 6 both"))
def update_topic_perm(admin: MQAdminExt, args: argparse.Namespace) -> int:
    held: list[str] = []

    def act(name: str, addr: str) -> str | None:
        former = admin.update_topic_perm_in(addr, args.topic, args.perm)
        if former is None:
            return None
        held.append(addr)
        return f"update topic perm from {former} to {args.perm} in {addr} success."
    failed = on_each_broker(admin, args, act)
    if not held and not failed:
        raise ClientError(f"topic {args.topic} does not exist on the brokers asked")
    return failed


@command("deleteTopic", "delete a topic from brokers and name servers", TOPIC, CLUSTER)
def delete_topic(admin: MQAdminExt, args: argparse.Namespace) -> int:
    had: list[bool] = []

    def act(name: str, addr: str) -> str | None:
        had.append(admin.delete_topic_in_broker(addr, args.topic))
        return f"delete topic [{args.topic}] from broker {name} {addr} success." if had[-1] else None
    if on_each_broker(admin, args, act):
        print(f"topic [{args.topic}] kept in the name servers' routes: a broker above may still have it (run "
              "deleteTopic again once it answers)")
        return 1
    if had and not any(had):
        raise ClientError(f"topic {args.topic} does not exist")
    admin.delete_topic_in_namesrv(args.topic)
    print(f"delete topic [{args.topic}] from cluster [{args.cluster or 'all brokers'}] success.")
    return 0


@command("cleanUnusedTopic", "drop the consume queues of topics a broker's topic table does not hold (a deleted "
         "topic's)", BROKER, CLUSTER)
def clean_unused_topic(admin: MQAdminExt, args: argparse.Namespace) -> int:
    def act(name: str, addr: str) -> str:
        dropped = admin.clean_unused_topic(addr)
        return (f"clean unused topic success, {name} {addr}: the queues of {len(dropped)} topic"
                f"{'' if len(dropped) == 1 else 's'} dropped{': ' + ', '.join(dropped) if dropped else ''}")
    return on_each_broker(admin, args, act)


# --- consumer and producer groups -------------------------------------------------------------------------


@command("consumerProgress", "a group's offsets and lag per queue, or every group's lag",
         opt("-g", "--consumerGroup", dest="group", help="consumer group (default: every group)"),
         opt("-t", "--topic", help="only this topic"))
def consumer_progress(admin: MQAdminExt, args: argparse.Namespace) -> int:
    if not args.group:
        print(f"{'#Group':<40}{'#Topic':<40}{'#Diff Total':>12}")
        for topic in (args.topic and [args.topic]) or [t for t in admin.list_topics() if user_topic(t)]:
            for group in admin.consumed_by(topic):
                table, _ = admin.consume_stats(group, topic)
                diff = sum(s.lag for s in table)
                print(f"{group:<40}{topic:<40}{diff:>12}")
        return 0
    table, tps = admin.consume_stats(args.group, args.topic or "")
    if not table:
        raise ClientError(f"consumer group {args.group} has no offsets (it has consumed nothing yet)")
    print(f"{'#Topic':<32}{'#Broker Name':<24}{'#QID':<6}{'#Broker Offset':>16}{'#Consumer Offset':>18}"
          f"{'#Diff':>10}  #LastTime")
    total = 0
    for s in table:
        v = s.values
        diff = s.lag
        total += diff
        print(f"{s.mq.topic:<32}{s.mq.broker_name:<24}{s.mq.queue_id:<6}{v['brokerOffset']:>16}"
              f"{v['consumerOffset']:>18}{diff:>10}  {fmt_time(v['lastTimestamp'])}")
    print(f"\nConsume TPS: {tps:.2f}\nDiff Total: {total}")
    return 0


def _print_connections(conns: list[dict[str, Any]]) -> None:
    print(f"{'#ClientId':<48}{'#ClientAddr':<24}{'#Language':<12}#Version")
    for c in sorted(conns, key=lambda c: c["clientId"]):
        print(f"{c['clientId']:<48}{c['clientAddr']:<24}{c['language']:<12}{c['version']}")


@command("consumerConnection", "a consumer group's clients and subscriptions", GROUP)
def consumer_connection(admin: MQAdminExt, args: argparse.Namespace) -> int:
    data = admin.consumer_connection(args.group)
    _print_connections(data.get("connectionSet") or [])
    print("\nBelow is subscription:")
    for topic, sub in sorted((data.get("subscriptionTable") or {}).items()):
        print(f"{'Topic: ' + topic:<60}SubExpression: {sub.get('subString')}")
    print(f"\nConsumeType: {data.get('consumeType')}\nMessageModel: {data.get('messageModel')}\n"
          f"ConsumeFromWhere: {data.get('consumeFromWhere')}")
    return 0


@command("producerConnection", "a producer group's clients", opt("-g", "--producerGroup", dest="group", required=True,
                                                                   help="producer group"),
         opt("-t", "--topic", help="look on this topic's brokers (default: every broker)"))
def producer_connection(admin: MQAdminExt, args: argparse.Namespace) -> int:
    _print_connections(admin.producer_connection(args.group, args.topic).get("connectionSet") or [])
    return 0


def _print_offsets(table: list[Any]) -> None:
    print(f"{'#brokerName':<32}{'#queueId':<10}#offset")
    for s in table:
        print(f"{s.mq.broker_name:<32}{s.mq.queue_id:<10}{s.values}")


@command("resetOffsetByTime", "move a group's offsets on a topic to a time (consumers online follow)", GROUP, TOPIC,
         opt("-s", "--timestamp", type=parse_time, required=True,
             help="'now', milliseconds or yyyy-MM-dd#HH:mm:ss:SSS"),
         opt("-f", "--force", type=lambda s: s.lower() == "true", default=True,
             help="also move offsets forward (true|false, default true)"))
def reset_offset_by_time(admin: MQAdminExt, args: argparse.Namespace) -> int:
    _print_offsets(admin.reset_offset(args.group, args.topic, args.timestamp, args.force))
    return 0


@command("skipAccumulatedMessage", "move a group's offsets on a topic to the end (skip the backlog)", GROUP, TOPIC)
def skip_accumulated(admin: MQAdminExt, args: argparse.Namespace) -> int:
    _print_offsets(admin.reset_offset(args.group, args.topic, -1, True))
    return 0


def _flag(text: str) -> bool:
    if text.lower() not in ("true", "false"):
        raise argparse.ArgumentTypeError(f"{text!r}: true or false")
    return text.lower() == "true"


@command("updateSubGroup", "create or change a subscription group", GROUP, BROKER, CLUSTER,
         opt("-s", "--consumeEnable", type=_flag, help="may the group consume (true|false)"),
         opt("-m", "--consumeFromMinEnable", type=_flag, help="true|false"),
         opt("-d", "--consumeBroadcastEnable", type=_flag, help="true|false"),
         opt("-q", "--retryQueueNums", type=int, help="retry queues"),
         opt("-r", "--retryMaxTimes", type=int, help="most retries before the DLQ"),
         opt("-i", "--brokerId", type=int, help="broker id to consume from"),
         opt("-w", "--whichBrokerWhenConsumeSlowly", type=int, help="broker id when consumption is slow"),
         opt("-a", "--notifyConsumerIdsChanged", dest="notifyConsumerIdsChangedEnable", type=_flag,
             help="notify consumers when the group changes (true|false)"))
def update_sub_group(admin: MQAdminExt, args: argparse.Namespace) -> int:
    keys = ("consumeEnable", "consumeFromMinEnable", "consumeBroadcastEnable", "retryQueueNums", "retryMaxTimes",
            "brokerId", "whichBrokerWhenConsumeSlowly", "notifyConsumerIdsChangedEnable")
    def act(name: str, addr: str) -> str:
        config = {**admin.sub_groups(addr).get(args.group, {}), "groupName": args.group}
        config.update({k: getattr(args, k) for k in keys if getattr(args, k) is not None})
        admin.update_sub_group(addr, config)
        return f"create subscription group to {addr} success.\n{config}"
    return on_each_broker(admin, args, act)


@command("deleteSubGroup", "delete a subscription group", GROUP, BROKER, CLUSTER,
         opt("-r", "--removeOffset", type=_flag, default=False, help="also remove its offsets (true|false)"))
def delete_sub_group(admin: MQAdminExt, args: argparse.Namespace) -> int:
    def act(name: str, addr: str) -> str:
        admin.delete_sub_group(addr, args.group, args.removeOffset)
        return f"delete subscription group [{args.group}] from broker [{addr}] success."
    return on_each_broker(admin, args, act)


# --- messages ---------------------------------------------------------------------------------------------


@command("queryMsgById", "a message by its offset message id", opt("-i", "--msgId", required=True,
                                                                    help="offset message id(s), comma separated"))
def query_msg_by_id(admin: MQAdminExt, args: argparse.Namespace) -> int:
    for msg_id in args.msgId.split(","):
        print_message(admin.view_message(msg_id.strip()))
    return 0


@command("queryMsgByKey", "messages of a topic by key", TOPIC, opt("-k", "--msgKey", required=True, help="key"),
         opt("-b", "--beginTimestamp", type=parse_time, default=0, help="from (default: the beginning)"),
         opt("-e", "--endTimestamp", type=parse_time, default=2**63 - 1, help="to (default: now)"),
         opt("-c", "--maxNum", type=int, default=64, help="at most this many (default 64)"))
def query_msg_by_key(admin: MQAdminExt, args: argparse.Namespace) -> int:
    found = admin.query_message(args.topic, args.msgKey, args.maxNum, args.beginTimestamp, args.endTimestamp)
    if not found:
        raise ClientError(f"no message of topic {args.topic} has key {args.msgKey}")
    print(f"{'#Message ID':<40}{'#QID':<6}#Offset")
    for m in found:
        print(f"{m.msg_id:<40}{m.queue_id:<6}"
              f"{m.queue_offset}")
    return 0


@command("queryMsgByUniqueKey", "a message by its message id (UNIQ_KEY)", TOPIC,
         opt("-i", "--msgId", required=True, help="message id"))
def query_msg_by_unique_key(admin: MQAdminExt, args: argparse.Namespace) -> int:
    found = admin.query_message(args.topic, args.msgId, 32, unique=True)
    if not found:
        raise ClientError(f"no message of topic {args.topic} has message id {args.msgId}")
    for m in found:
        print_message(m)
    return 0


@command("queryCq", "the entries of one consume queue: commit-log offset, size and tag hash of each", TOPIC,
         opt("-q", "--queue", type=int, required=True, help="queue id"),
         opt("-i", "--index", type=int, required=True, help="first queue offset (index) to show"),
         opt("-c", "--count", type=int, default=10, help="how many entries (default 10, at most 1000)"),
         opt("-b", "--broker", help="broker address (HOST:PORT, a slave's too) or name (default: the topic's first "
                                    "broker's master)"),
         opt("-g", "--consumer", help="consumer group: its subscription to the topic is shown too"))
def query_cq(admin: MQAdminExt, args: argparse.Namespace) -> int:
    if args.broker and ":" in args.broker:
        addr = args.broker
    elif args.broker:
        addr = next(iter(admin.broker_addrs(args.broker).values()))
    else:
        route = admin.route(args.topic)
        masters = sorted((bd["brokerName"], bd["brokerAddrs"][MASTER_ID]) for bd in route.get("brokerDatas") or []
                         if MASTER_ID in (bd.get("brokerAddrs") or {}))
        if not masters:
            raise ClientError(f"topic {args.topic} has no broker with a master")
        addr = masters[0][1]
    body, remark = admin.query_consume_queue(addr, QueryConsumeQueueRequestHeader(
        args.topic, args.queue, args.index, args.count, args.consumer))
    rule = "======================================"
    if body.get("subscriptionData") is not None:
        print(f"Subscription data: \n{json.dumps(body['subscriptionData'], indent=4)}\n{rule}")
    if body.get("filterData") is not None:
        print(f"Filter data: \n{body['filterData']}\n{rule}")
    print(f"Queue data: \nmax: {body['maxQueueIndex']}, min: {body['minQueueIndex']}\n{rule}")
    if remark:
        print(remark)
    for idx, e in enumerate(body.get("queueData") or [], args.index):
        text = {k: "null" if e.get(k) is None else e[k] for k in ("extendDataJson", "bitMap", "msg")}
        print(f"idx: {idx}\nConsumeQueueData{{physicOffset={e['physicOffset']}, physicSize={e['physicSize']}, "
              f"tagsCode={e['tagsCode']}, extendDataJson='{text['extendDataJson']}', bitMap='{text['bitMap']}', "
              f"eval={str(e.get('eval', False)).lower()}, msg='{text['msg']}'}}\n{rule}")
    return 0


def pull_range(admin: MQAdminExt, mq: MessageQueue, start: int, end: int,
               expression: str = "*") -> Iterator[MessageExt]:
    """The messages of ``mq`` from ``start`` to ``end`` (queue offsets), pulled without a committed offset."""
    with PullConsumer("TOOLS_CONSUMER", admin.namesrv) as consumer:
        consumer.fetch_subscribe_message_queues(mq.topic)
        offset = start
        while offset < end:
            r = consumer.pull(mq, expression, offset, min(32, end - offset))
            if r.status == PullStatus.OFFSET_ILLEGAL or r.next_begin_offset <= offset:
                return
            yield from r.msgs
            offset = r.next_begin_offset


@command("queryMsgByOffset", "the message at a queue offset", TOPIC,
         opt("-b", "--brokerName", required=True, help="broker name"),
         opt("-i", "--queueId", type=int, required=True, help="queue id"),
         opt("-o", "--offset", type=int, required=True, help="queue offset"))
def query_msg_by_offset(admin: MQAdminExt, args: argparse.Namespace) -> int:
    mq = MessageQueue(args.topic, args.brokerName, args.queueId)
    for m in pull_range(admin, mq, args.offset, args.offset + 1):
        print_message(m)
        return 0
    raise ClientError(f"no message at offset {args.offset} of {args.topic} queue {args.queueId} on {args.brokerName}")


def queue_window(admin: MQAdminExt, topic: str, begin: int, end: int) -> list[tuple[MessageQueue, int, int]]:
    """Each queue of the topic with the offsets its messages stored between ``begin`` and ``end`` (ms) span."""
    out = []
    with PullConsumer("TOOLS_CONSUMER", admin.namesrv) as consumer:
        for mq in consumer.fetch_subscribe_message_queues(topic):
            lo = admin.search_offset(mq, begin) if begin > 0 else consumer.min_offset(mq)
            hi = admin.search_offset(mq, end) if end < 2**62 else consumer.max_offset(mq)
            out.append((mq, lo, hi))
    return out


@command("printMsg", "print the messages of a topic stored in a time range", TOPIC,
         opt("-s", "--subExpression", default="*", help="tag expression (default *)"),
         opt("-b", "--beginTimestamp", type=parse_time, default=0, help="from (default: the beginning)"),
         opt("-e", "--endTimestamp", type=parse_time, default=2**63 - 1, help="to (default: now)"),
         opt("-d", "--printBody", type=_flag, default=True, help="print bodies (true|false, default true)"))
def print_msg(admin: MQAdminExt, args: argparse.Namespace) -> int:
    for mq, lo, hi in queue_window(admin, args.topic, args.beginTimestamp, args.endTimestamp):
        print(f"minOffset={lo}, maxOffset={hi}, {mq}")
        for m in pull_range(admin, mq, lo, hi, args.subExpression):
            body = f" BODY: {m.body.decode(errors='replace')}" if args.printBody else ""
            print(f"MSGID: {m.msg_id} {m!r}{body}")
    return 0


@command("sendMessage", "send one message", TOPIC, opt("-p", "--body", required=True, help="body"),
         opt("-k", "--key", help="keys"), opt("-c", "--tags", help="tags"),
         opt("-b", "--broker", help="only to this broker (name)"),
         opt("-i", "--qid", type=int, help="only to this queue (with -b)"))
def send_message(admin: MQAdminExt, args: argparse.Namespace) -> int:
    msg = Message(args.topic, args.body.encode(), tags=args.tags, keys=args.key)
    with Producer("TOOLS_PRODUCER", admin.namesrv) as producer:
        queue = None
        if args.broker:
            queue = MessageQueue(args.topic, args.broker, args.qid if args.qid is not None else 0)
        r = producer.send(msg, queue=queue)
    print(f"{'#Broker Name':<32}{'#QID':<6}{'#Send Result':<16}#MsgId")
    print(f"{r.message_queue.broker_name:<32}{r.queue_id:<6}{r.status.value:<16}{r.msg_id}")
    return 0


@command("consumeMessage", "read messages of a topic again (no offsets committed)", TOPIC,
         opt("-b", "--brokerName", help="only this broker"), opt("-i", "--queueId", type=int, help="only this queue"),
         opt("-o", "--offset", type=int, help="from this queue offset (with -b and -i)"),
         opt("-s", "--beginTimestamp", type=parse_time, default=0, help="from (default: the beginning)"),
         opt("-e", "--endTimestamp", type=parse_time, default=2**63 - 1, help="to (default: now)"),
         opt("-c", "--messageNumber", type=int, default=128, help="at most this many (default 128)"))
def consume_message(admin: MQAdminExt, args: argparse.Namespace) -> int:
    left = args.messageNumber
    for mq, lo, hi in queue_window(admin, args.topic, args.beginTimestamp, args.endTimestamp):
        if (args.brokerName and mq.broker_name != args.brokerName) or (
                args.queueId is not None and mq.queue_id != args.queueId):
            continue
        start = args.offset if args.offset is not None else lo
        for m in pull_range(admin, mq, start, min(hi, start + left)):
            print(f"Consume ok {mq.topic} q{mq.queue_id}@{m.queue_offset} "
                  f"{m.msg_id}: "
                  f"{m.body.decode(errors='replace')}")
            left -= 1
        if left <= 0:
            break
    return 0


@command("statsAll", "every topic's consumer groups: backlog, TPS in and out, messages in 24 h",
         opt("-t", "--topic", help="only this topic"), opt("-a", "--activeTopic", action="store_true",
                                                          help="only topics with traffic"))
def stats_all(admin: MQAdminExt, args: argparse.Namespace) -> int:
    print(f"{'#Topic':<40}{'#Consumer Group':<40}{'#Accumulation':>14}{'#InTPS':>10}{'#OutTPS':>10}"
          f"{'#InMsg24Hour':>14}{'#OutMsg24Hour':>14}")
    addrs = admin.broker_addrs()
    topics = [args.topic] if args.topic else [t for t in admin.list_topics() if user_topic(t)]
    for topic in topics:
        in_tps = in_day = 0.0
        for addr in addrs.values():
            data = admin.stats_data(addr, "TOPIC_PUT_NUMS", topic)
            if data:
                in_tps += data["statsMinute"]["tps"]
                in_day += data["statsDay"]["sum"]
        groups = admin.consumed_by(topic)
        if args.activeTopic and not in_day and not groups:
            continue
        for group in groups or [""]:
            backlog = out_tps = out_day = 0.0
            if group:
                table, _ = admin.consume_stats(group, topic)
                backlog = sum(s.lag for s in table)
                for addr in addrs.values():
                    data = admin.stats_data(addr, "GROUP_GET_NUMS", f"{topic}@{group}")
                    if data:
                        out_tps += data["statsMinute"]["tps"]
                        out_day += data["statsDay"]["sum"]
            print(f"{topic:<40}{group or '-':<40}{int(backlog):>14}{in_tps:>10.2f}{out_tps:>10.2f}"
                  f"{int(in_day):>14}{int(out_day):>14}")
    return 0


@TXMQ.command("admin", "RocketMQ's mqadmin commands (clusterList, topicStatus, consumerProgress, ...)", *CLIENT,
              sub=ADMIN)
def run(args: argparse.Namespace) -> int:
    with MQAdminExt(args.namesrv) as admin:
        return int(args.admin_fn(admin, args))
