"""The name server's CPU for one broker registration (REGISTER_BROKER) of many topics, in one process: the
request as the broker sends it every ``registerNameServerPeriod``, through the name server's parse and handler
(no socket), with the broker's data version unchanged since the last registration and changed before each one.

    .venv/bin/python bench/namesrv_registration.py [--topics 10000] [--reps 15]

Prints the median, minimum and maximum of each (``time.process_time``), and the body's size.
"""

from __future__ import annotations

import argparse
import statistics
import time

import orjson

from txmq.namesrv.processor import NamesrvProcessor
from txmq.namesrv.route_info import RouteInfoManager
from txmq.remoting.codes import RequestCode
from txmq.remoting.command import RemotingCommand
from txmq.topic import TopicConfig

IDENTITY = {"clusterName": "c", "brokerAddr": "127.0.0.1:10911", "brokerName": "b", "brokerId": "0",
            "haServerAddr": "", "compressed": "false"}


class Connection:
    """What the handler uses of the broker's connection."""

    remote_address = "127.0.0.1:10911"

    def __init__(self) -> None:
        self.on_close: list[object] = []


def body(topics: int, counter: int) -> bytes:
    table = {f"topic_{i}": TopicConfig(f"topic_{i}", 8, 8).to_json() for i in range(topics)}
    wrapper = {"topicConfigTable": table, "dataVersion": {"timestamp": 1, "counter": counter}}
    return orjson.dumps({"topicConfigSerializeWrapper": wrapper, "filterServerList": []})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--topics", type=int, default=10_000)
    parser.add_argument("--reps", type=int, default=15)
    args = parser.parse_args()
    processor = NamesrvProcessor(RouteInfoManager())
    spec = next(s for s in processor.requests() if s.code == RequestCode.REGISTER_BROKER)
    conn = Connection()

    def handle(data: bytes) -> float:
        cmd = RemotingCommand.request(RequestCode.REGISTER_BROKER, dict(IDENTITY), body=data)
        start = time.process_time()
        spec.handler(conn, cmd, spec.parse(cmd))
        return (time.process_time() - start) * 1000

    same = body(args.topics, 0)
    handle(same)
    runs = {"unchanged": [same] * args.reps, "changed": [body(args.topics, i + 1) for i in range(args.reps)]}
    for label, bodies in runs.items():
        ms = [handle(b) for b in bodies]
        print(f"{label}: median {statistics.median(ms):.1f} ms CPU (min {min(ms):.1f}, max {max(ms):.1f}; "
              f"{args.reps} registrations of {args.topics} topics, {len(same) / 1e6:.2f} MB)")


if __name__ == "__main__":
    main()
