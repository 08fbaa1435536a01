"""The serving process's collector settings (``txmq.gctune.tune_gc``), and the launcher's free ports."""

from __future__ import annotations

import contextlib
import gc
import itertools
import os
import socket
import subprocess
import sys
from pathlib import Path

from txmq import ports
from txmq.gctune import YOUNG_THRESHOLD, collector_time, tune_gc
from txmq.launch import free_port


def test_tune_gc_freezes_startup_objects_and_raises_only_the_young_threshold() -> None:
    before = gc.get_threshold()
    gc.set_threshold(700, 10, 10)  # CPython's defaults (a client started earlier in this process raised the first)
    startup_object: list[list[int]] = [[]]  # tracked by the collector
    try:
        tune_gc()
        assert gc.get_freeze_count() > 0
        assert not any(o is startup_object for o in gc.get_objects())  # frozen: out of every generation
        assert gc.get_threshold() == (YOUNG_THRESHOLD, 10, 10)
        assert collector_time in gc.callbacks
        collections = sum(collector_time.collections)
        gc.collect()
        assert sum(collector_time.collections) == collections + 1
    finally:
        with contextlib.suppress(ValueError):
            gc.callbacks.remove(collector_time)
        gc.unfreeze()
        gc.set_threshold(*before)


def test_free_ports_are_below_the_ephemeral_range_and_never_handed_out_twice():
    """A port picked for a process started later must not be one an outgoing connection or a port-0 listener
    can take meanwhile (the kernel's ephemeral range), nor one this process already gave out."""
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    ports = [free_port() for _ in range(200)]
    assert len(set(ports)) == len(ports)
    assert all(1024 <= p < low for p in ports), ports
    with socket.socket() as s:
        s.bind(("127.0.0.1", ports[-1]))  # free when given


def test_parallel_workers_pick_ports_from_shares_that_do_not_overlap(monkeypatch):
    """``make test`` runs its main pass on parallel workers, each starting servers on ports it picks: with
    ``TXMQ_PORT_SLICE=k/n`` each picks inside its own share, so two never race for one port."""
    shares = []
    for k in range(3):
        monkeypatch.setenv("TXMQ_PORT_SLICE", f"{k}/3")
        picked = {free_port() for _ in range(100)}
        low, high = ports._share(*ports.free_range())
        assert all(low <= p < high for p in picked)
        shares.append(range(low, high))
    assert all(set(a).isdisjoint(b) for a, b in itertools.combinations(shares, 2))
    for bad in ("x/2", "3/3", "-1/2", "1/0"):  # not a share: the whole range
        monkeypatch.setenv("TXMQ_PORT_SLICE", bad)
        assert ports._share(*ports.free_range()) == ports.free_range()


def test_the_launcher_imports_no_server():
    """A program that only starts txmq processes (a test, a bench, the demo) must not load the broker, the store or
    the name server to do so."""
    code = ("import sys, txmq.launch; print(sorted(m for m in sys.modules if m.startswith(('txmq.broker', "
            "'txmq.store', 'txmq.namesrv', 'txmq.controller', 'txmq.server'))))")
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True).stdout.strip() == "[]"


def test_a_server_reports_its_collector_in_the_runtime_info(tmp_path: Path) -> None:
    """``brokerStatus`` (GET_BROKER_RUNTIME_INFO) of a running ``txmq server`` shows its frozen objects and its
    collections and their seconds per generation: the collector's share, read from outside."""
    from txmq.admin.client import MQAdminExt
    from txmq.launch import ServerProcess, txmq_command

    (tmp_path / "broker.conf").write_text("grpcPort=-1\n")
    proc = ServerProcess(txmq_command("server", "--store", str(tmp_path / "store"), "--port", "0", "--namesrv-port",
                                      str(free_port()), "-c", str(tmp_path / "broker.conf")),
                         tmp_path / "server.log", dict(os.environ, HOME=str(tmp_path), PYTHONUNBUFFERED="1")).start(30)
    try:
        with MQAdminExt(proc.namesrv) as admin:
            info = admin.runtime_info(proc.addrs["broker"])
    finally:
        proc.stop(30)
    assert int(info["gcFrozen"]) > 0  # start-up's heap, at least
    assert len([int(n) for n in info["gcCollections"].split()]) == 3
    assert len([float(s) for s in info["gcSeconds"].split()]) == 3
