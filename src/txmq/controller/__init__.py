"""Automatic failover (RocketMQ 5's controller mode): a controller keeps, per broker group, the master, its
epoch and the SyncStateSet in a coordination service (etcd) and elects a new master when the master's
heartbeats stop; brokers learn their role from it (``txmq.broker.replicas_manager``). The controller's logic sees the
coordination service only through ``DCS`` (``txmq.controller.dcs``), so it runs over an in-memory one in unit
tests. See docs/ha.md, "Automatic failover"."""
