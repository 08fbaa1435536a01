"""The broker's rules for sends, pulls, pops, retries, dead letters and the topics they create, in no protocol's
terms: functions and services that take plain values and return results or a ``Refusal`` (a kind and a message).

The protocols are adapters over this package and never over each other: ``txmq.broker.processor`` (RocketMQ 4.x
remoting) and ``txmq.grpc`` (RocketMQ 5 gRPC) translate their requests into these calls and map a refusal's kind
to their own codes. A rule written here holds for every protocol: one dead-letter path, one set of counters.
"""
