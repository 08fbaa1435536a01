"""``BrokerCollector``: a prometheus_client collector that reads the broker's own counters and tables when
Prometheus scrapes, so nothing is counted twice and the send and pull paths carry no metrics code of their own.

Names, types and labels follow RocketMQ 5.1's broker metrics (``cluster``, ``node_type``, ``node_id`` on every
series); the transaction series add a ``producer_group`` label, and txmq's own outcomes (checks, discards) are
named ``txmq_*``."""

from __future__ import annotations

import contextlib
import os
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from txmq.broker.stats import MESSAGE_SIZE_BUCKETS
from txmq.broker.transaction.metrics import COMMIT_LATENCY_BUCKETS_MS
from txmq.errors import StoreError
from txmq.message import decode_message
from txmq.metrics.rpc import BUCKETS_MS as RPC_BUCKETS_MS
from txmq.topic import is_system_topic

if TYPE_CHECKING:
    from txmq.broker.controller import BrokerController

NODE_LABELS = ("cluster", "node_type", "node_id")
F = TypeVar("F", CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily)


def _buckets(bounds: Iterable[float], counts: list[int]) -> list[tuple[str, float]]:
    """Per-bucket counts as Prometheus's cumulative ``le`` buckets (the last one +Inf)."""
    out, total = [], 0
    for bound, n in zip([*map(str, bounds), "+Inf"], counts, strict=True):
        total += n
        out.append((bound, float(total)))
    return out


def dir_size(root: Path) -> int:
    """Bytes of the files under ``root`` (RocketMQ's storage size: the disk the store takes)."""
    total = 0
    for path, _dirs, files in os.walk(root):
        for name in files:
            with contextlib.suppress(OSError):  # deleted by retention meanwhile
                total += os.stat(os.path.join(path, name)).st_size
    return total


class BrokerCollector(Collector):
    def __init__(self, broker: BrokerController) -> None:
        self.broker = broker
        cfg = broker.config
        self.node = [cfg.broker_cluster_name, "broker", cfg.broker_name]

    def _family(self, kind: Callable[..., F], name: str, doc: str, labels: Iterable[str] = (), **kw: str) -> F:
        return kind(name, doc, labels=[*NODE_LABELS, *labels], **kw)

    def collect(self) -> Iterator[Metric]:
        yield from self._messages()
        yield from self._consumers()
        yield from self._store()
        yield from self._clients()
        yield from self._transactions()
        yield from self._rpc()

    # --- messages in and out ------------------------------------------------------------------------------

    def _messages(self) -> Iterator[Metric]:
        stats, node = self.broker.stats_manager, self.node
        msgs_in = self._family(CounterMetricFamily, "rocketmq_messages_in", "Messages produced",
                               ("topic", "message_type"))
        bytes_in = self._family(CounterMetricFamily, "rocketmq_throughput_in", "Bytes of message bodies produced",
                                ("topic", "message_type"))
        size = self._family(HistogramMetricFamily, "rocketmq_message_size", "Sizes of produced message bodies (bytes)",
                            ("topic", "message_type"))
        for (topic, kind), put in stats.puts.items():
            labels = [*node, topic, kind]
            msgs_in.add_metric(labels, put.messages)
            bytes_in.add_metric(labels, put.bytes)
            size.add_metric(labels, _buckets(MESSAGE_SIZE_BUCKETS, put.size_buckets), sum_value=put.bytes)
        msgs_out = self._family(CounterMetricFamily, "rocketmq_messages_out", "Messages consumed (pulled)",
                                ("topic", "consumer_group"))
        bytes_out = self._family(CounterMetricFamily, "rocketmq_throughput_out", "Bytes of messages consumed",
                                 ("topic", "consumer_group"))
        for (topic, group), got in stats.gets.items():
            msgs_out.add_metric([*node, topic, group], got.messages)
            bytes_out.add_metric([*node, topic, group], got.bytes)
        dlq = self._family(CounterMetricFamily, "rocketmq_send_to_dlq_messages", "Messages sent to a dead-letter topic",
                           ("topic", "consumer_group"))
        for (topic, group), n in stats.dlq.items():
            dlq.add_metric([*node, topic, group], n)
        yield from (msgs_in, bytes_in, size, msgs_out, bytes_out, dlq)

    # --- consumer groups: lag, ready, in flight ---------------------------------------------------------

    def _consumers(self) -> Iterator[Metric]:
        broker, node = self.broker, self.node
        store = broker.store
        labels = ("topic", "consumer_group")
        lag = self._family(GaugeMetricFamily, "rocketmq_consumer_lag_messages",
                           "Messages not yet committed by the group", labels)
        ready = self._family(GaugeMetricFamily, "rocketmq_consumer_ready_messages",
                             "Messages not yet pulled by the group", labels)
        inflight = self._family(GaugeMetricFamily, "rocketmq_consumer_inflight_messages",
                                "Messages pulled but not yet committed", labels)
        latency = self._family(GaugeMetricFamily, "rocketmq_consumer_lag_latency",
                               "Milliseconds since the oldest message the group has not committed was stored", labels)
        queueing = self._family(GaugeMetricFamily, "rocketmq_consumer_queueing_latency",
                                "Milliseconds the oldest message the group has not pulled has waited", labels)
        pulled = broker.stats_manager.pulled
        for key, offsets in broker.consumer_offset_manager.table.items():
            topic, group = key.split("@", 1)
            n_lag = n_ready = n_inflight = oldest = waiting = 0
            for queue, committed in offsets.items():
                top = store.get_max_offset_in_queue(topic, queue)
                got = max(committed, min(top, pulled.get((group, topic, queue), committed)))
                n_lag += max(0, top - committed)
                n_ready += max(0, top - got)
                n_inflight += got - committed
                if committed < top:
                    oldest = max(oldest, self._age_ms(topic, queue, committed))
                if got < top:
                    waiting = max(waiting, self._age_ms(topic, queue, got))
            for family, value in ((lag, n_lag), (ready, n_ready), (inflight, n_inflight), (latency, oldest),
                                  (queueing, waiting)):
                family.add_metric([*node, topic, group], value)
        yield from (lag, ready, inflight, latency, queueing)

    def _age_ms(self, topic: str, queue: int, offset: int) -> int:
        try:
            got = self.broker.store.get_message(topic, queue, offset, 1)
        except StoreError:
            return 0
        if not got.messages:
            return 0
        msg = decode_message(got.messages[0])[0]
        return self.broker.store.clock.age_ms(msg.commit_log_offset, msg.store_timestamp)  # not moved by clock steps

    # --- store --------------------------------------------------------------------------------------------

    def _store(self) -> Iterator[Metric]:
        store, node = self.broker.store, self.node
        size = self._family(GaugeMetricFamily, "rocketmq_storage_size", "Bytes of the store's files on disk")
        size.add_metric(node, dir_size(self.broker.root))
        flush = self._family(GaugeMetricFamily, "rocketmq_storage_flush_behind_bytes",
                             "Bytes of the commit log written but not yet flushed")
        flush.add_metric(node, store.max_phy_offset - store.flushed_offset)
        # Every record is dispatched to its consume queue and index before its put returns: never behind.
        dispatch = self._family(GaugeMetricFamily, "rocketmq_storage_dispatch_behind_bytes",
                                "Bytes of the commit log not yet dispatched to consume queues")
        dispatch.add_metric(node, 0)
        yield from (size, flush, dispatch)
        yield from self._replicas()

    def _replicas(self) -> Iterator[Metric]:
        """A master's slaves: bytes not yet acknowledged and seconds of store time behind (``txmq ha status``)."""
        ha = self.broker.ha_service
        if ha is None:
            return
        lag_bytes = self._family(GaugeMetricFamily, "txmq_replica_lag_bytes",
                                 "Bytes of the commit log a slave has not acknowledged", ("slave_id",))
        lag_s = self._family(GaugeMetricFamily, "txmq_replica_lag_seconds",
                             "Seconds of store time between the master's newest record and a slave's next one",
                             ("slave_id",))
        in_sync = self._family(GaugeMetricFamily, "txmq_replica_in_sync", "1 when a slave is connected and in sync",
                               ("slave_id",))
        for s in ha.status():
            labels = [*self.node, str(s.broker_id)]
            lag_bytes.add_metric(labels, s.lag_bytes)
            lag_s.add_metric(labels, s.lag_seconds)
            in_sync.add_metric(labels, 1 if s.connected and s.in_sync else 0)
        yield from (lag_bytes, lag_s, in_sync)

    # --- clients, topics, groups --------------------------------------------------------------------------

    def _clients(self) -> Iterator[Metric]:
        broker, node = self.broker, self.node
        producers = Counter((c.language, str(c.version)) for chans in broker.producer_manager.groups.values()
                            for c in chans.values())
        prod = self._family(GaugeMetricFamily, "rocketmq_producer_connections", "Producer connections",
                            ("language", "version"))
        for (language, version), n in producers.items():
            prod.add_metric([*node, language, version], n)
        consumers = Counter((g.group, c.language, str(c.version), g.consume_type)
                            for g in broker.consumer_manager.groups.values() for c in g.channels.values())
        cons = self._family(GaugeMetricFamily, "rocketmq_consumer_connections", "Consumer connections",
                            ("consumer_group", "language", "version", "consume_mode"))
        for labels, n in consumers.items():
            cons.add_metric([*node, *labels], n)
        topics = self._family(GaugeMetricFamily, "rocketmq_topic_number", "Topics (system topics excluded)")
        topics.add_metric(node, sum(not is_system_topic(t) for t in broker.topic_config_manager.table))
        groups = {key.split("@", 1)[1] for key in broker.consumer_offset_manager.table} | set(
            broker.consumer_manager.groups)
        group_count = self._family(GaugeMetricFamily, "rocketmq_consumer_group_number", "Consumer groups")
        group_count.add_metric(node, len(groups))
        yield from (prod, cons, topics, group_count)

    # --- transactions -------------------------------------------------------------------------------------

    def _transactions(self) -> Iterator[Metric]:
        tx, node = self.broker.transaction_service, self.node
        half = self._family(GaugeMetricFamily, "rocketmq_half_messages", "Pending half messages", ("topic",))
        for topic, n in tx.table.pending_per_topic.items():
            half.add_metric([*node, topic], n)
        discarded = self._family(GaugeMetricFamily, "txmq_transaction_discarded",
                                 "Discarded transactions that can be resumed")
        discarded.add_metric(node, len(tx.table.discarded))
        group = ("producer_group",)
        families = {what: self._family(CounterMetricFamily, name, doc, group) for what, name, doc in (
            ("commits", "rocketmq_commit_messages", "Transactions committed"),
            ("rollbacks", "rocketmq_rollback_messages", "Transactions rolled back"),
            ("checks", "txmq_transaction_checks", "Check-back requests handed to a producer"),
            ("discards", "txmq_transaction_discards", "Transactions discarded after their last check"),
        )}
        latency = self._family(HistogramMetricFamily, "rocketmq_finish_message_latency",
                               "Milliseconds from a half message's store to its commit", group)
        assert isinstance(latency, HistogramMetricFamily)
        for name, counts in tx.metrics.groups.items():
            for what, family in families.items():
                family.add_metric([*node, name], getattr(counts, what))
            latency.add_metric([*node, name], _buckets(COMMIT_LATENCY_BUCKETS_MS, counts.latency_buckets),
                               sum_value=counts.latency_sum_ms)
        yield from (half, discarded, *families.values(), latency)

    # --- requests -----------------------------------------------------------------------------------------

    def _rpc(self) -> Iterator[Metric]:
        rpc = self.broker.rpc_latency
        family = self._family(HistogramMetricFamily, "rocketmq_rpc_latency",
                              "Milliseconds from a request's arrival to its answer",
                              ("protocol_type", "request_code", "response_code"))
        assert isinstance(family, HistogramMetricFamily)
        if rpc is not None:
            for (code, response), counts in rpc.buckets.items():
                family.add_metric([*self.node, "remoting", str(code), str(response)],
                                  _buckets(RPC_BUCKETS_MS, counts), sum_value=rpc.sums[(code, response)])
        yield family
