"""Prometheus metrics of a broker under RocketMQ 5.1's names and labels (``metricsExporterType=PROM``)."""

from txmq.metrics.collector import BrokerCollector
from txmq.metrics.exporter import PromExporter

__all__ = ["BrokerCollector", "PromExporter"]
