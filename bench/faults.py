"""The long fault campaign of controller mode (issue #13; tests/e2e/test_failover.py runs a short one in CI).

    .venv/bin/python bench/faults.py [--faults 30] [--seed 13] [--kinds kill,restart,...] [--json]

etcd, a controller, a name server and a group of three replicas (SYNC_MASTER + SYNC_FLUSH when master), each its own
process on free ports of 127.0.0.1 with a temporary store and a gRPC port. txmq's Producer, the C++ client
(rocketmq==0.4.4, SYNC sends) and the official RocketMQ 5 Python client (gRPC, every replica's endpoint configured),
each making one attempt per message, and a TransactionProducer (COMMIT, ROLLBACK, and UNKNOWN resolved by
check-back) and a push consumer of every topic run the whole time. ``--faults`` faults at random instants, drawn
from: SIGKILL of the master (then restarted), SIGSTOP of the master past its lease (then SIGCONT), the master
partitioned from the controller and from its slaves by TCP proxies while its clients still reach it (then healed; a
send straight to it once another master acts must be refused), a slave's commit-log tail flipped or zeroed while it
is down (``--kinds``: only these, equally often; ``restart`` is the master SIGKILLed, the last bytes of its log
zeroed and restarted at once, within the heartbeat timeout). At the end every replica is read from disk:
acknowledged sends lost or duplicated, COMMITs not visible or visible twice, ROLLBACKs visible, what the consumer
never got (or got and should not have), epochs with two start offsets (two masters), replicas not byte-identical;
the failover time (from the fault on the master to the first send another broker acknowledged to txmq's client), p50
and max; and per client kind the longest pause in its acknowledged sends around each master fault. Every process it
starts is stopped on exit.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "e2e"))

from cluster import Cluster
from failover_group import FailoverGroup
from fault_campaign import MASTER_FAULTS, RESTART_FAULT, SLAVE_FAULTS, Figures, run_campaign

from txmq import bench


def campaign(root: Path, faults: int, seed: int, kinds: tuple[str, ...]) -> tuple[Figures, float]:
    cluster = Cluster(root)
    group = FailoverGroup(cluster, grpc=True)
    started = time.monotonic()
    try:
        cluster.start_namesrv()
        group.start()
        rng = random.Random(seed)

        def progress(n: int, fault: str, figures: Figures) -> None:
            print(f"fault {n + 1}/{faults}: {fault}, failover {figures.failover_s[-1:] or '-'}", file=sys.stderr)

        figures = run_campaign(cluster, group, (rng.choice(kinds) for _ in range(faults)), rng,
                               root / "cpp-home", progress)
        return figures, time.monotonic() - started
    finally:
        cluster.close()
        group.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--faults", type=int, default=30)
    ap.add_argument("--seed", type=int, default=13)
    ap.add_argument("--kinds", help="comma-separated fault kinds, drawn equally often (default: "
                    f"{', '.join(MASTER_FAULTS)} twice as often as {', '.join(SLAVE_FAULTS)})")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    known = (*MASTER_FAULTS, *SLAVE_FAULTS, RESTART_FAULT)
    kinds = tuple(a.kinds.split(",")) if a.kinds else MASTER_FAULTS * 2 + SLAVE_FAULTS
    if not set(kinds) <= set(known):
        ap.error(f"--kinds: one of {', '.join(known)}")
    with tempfile.TemporaryDirectory(prefix="txmq-faults-") as tmp:
        figures, took = campaign(Path(tmp), a.faults, a.seed, kinds)
    out = dataclasses.asdict(figures)
    out["faults"] = dict(figures.faults)
    fo = sorted(figures.failover_s)
    out["failover_p50_s"] = round(statistics.median(fo), 2) if fo else None
    out["failover_max_s"] = round(max(fo), 2) if fo else None
    out["failover_s"] = [round(x, 2) for x in figures.failover_s]
    out["outage_s"] = {kind: [round(x, 1) for x in xs] for kind, xs in figures.outage_s.items()}
    out.pop("master_fault_spans")
    out["duration_s"] = round(took, 1)
    if a.json:
        print(json.dumps(out, indent=2))
        return
    print(f"faults injected: {sum(figures.faults.values())} {dict(figures.faults)} in {took:.0f} s")
    print(f"sends acknowledged: {figures.sends_acked} (C++ client {figures.cpp_sends_acked}, RocketMQ 5 gRPC client "
          f"{figures.grpc_sends_acked}; failed sends {figures.client_errors}), lost {figures.sends_lost}, "
          f"duplicated {figures.sends_duplicated}")
    print(f"transactions acknowledged: {figures.tx_acked}, COMMIT lost {figures.tx_committed_lost}, "
          f"duplicated {figures.tx_duplicated}, ROLLBACK visible {figures.tx_rollback_visible}")
    print(f"consumer (every topic, at least once): {figures.consumed} deliveries; acknowledged sends and COMMITs "
          f"never delivered {figures.consumed_missing}, ROLLBACKs delivered {figures.consumed_rollback}, halves "
          f"delivered {figures.consumed_halves}")
    print(f"split-brain epochs: {figures.split_brain_epochs}; replicas byte-identical: {figures.replicas_identical}")
    print(f"failover (fault -> first send acknowledged by the new master): p50 {out['failover_p50_s']} s, "
          f"max {out['failover_max_s']} s over {len(fo)} master faults")
    print(f"partitioned master, sent to once another acted: answers {figures.fenced_answers} (0 = acknowledged), "
          f"found in the log {figures.fenced_stored}; a ROLLBACK of a COMMIT: answers "
          f"{figures.fenced_decision_answers}; its slaves' HA connections cut {figures.partition_ha_cut}, "
          f"their connections to its link (epoch table, metadata) refused {figures.partition_link_refused}")
    for kind, xs in figures.outage_s.items():
        print(f"longest pause in {kind} acknowledgements around a master fault: p50 {statistics.median(xs):.1f} s, "
              f"max {max(xs):.1f} s" if xs else f"{kind}: no master fault")


if __name__ == "__main__":
    bench.run(main)
