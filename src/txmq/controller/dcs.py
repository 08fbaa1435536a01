"""The controller's only view of its coordination service (Patroni's AbstractDCS is the model): who is the
acting controller (a key held under a lease) and each broker group's state, written with compare-and-swap
guarded by that leadership. ``EtcdDCS`` speaks etcd's v3 JSON gateway; ``MemoryDCS`` is for unit tests."""

from __future__ import annotations

import base64
import json
import threading
import time
import urllib.error
import urllib.request
from abc import ABC, abstractmethod
from typing import Any

PREFIX = "/txmq/controller/"
LEADER_KEY = PREFIX + "leader"
GROUPS_PREFIX = PREFIX + "groups/"


class DCSError(Exception):
    """The coordination service could not be reached or answered nonsense: the controller does not act."""


class DCS(ABC):
    """Leadership and group state. Every method is blocking (the controller calls them off its loop)."""

    @abstractmethod
    def hold_leadership(self, value: str, ttl_s: int) -> bool:
        """Take the leader key if free, or renew it if ours; True while we hold it."""

    @abstractmethod
    def leader(self) -> str | None:
        """The acting controller's value (its address), or None."""

    @abstractmethod
    def release_leadership(self) -> None:
        """Give the leader key up (a stopping controller), so another acts without waiting for the lease."""

    @abstractmethod
    def load_groups(self) -> dict[str, tuple[dict[str, Any], int]]:
        """Every group's state and its version (for ``save_group``)."""

    @abstractmethod
    def save_group(self, name: str, state: dict[str, Any], version: int, leader: str) -> int | None:
        """Write a group's state if it is still at ``version`` (0: absent) and ``leader`` still holds the leader
        key; the new version, or None when either changed (another controller acted)."""


class MemoryDCS(DCS):
    """One process's stand-in for etcd, for unit tests of the controller's logic; leases expire on time."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._leader: tuple[str, float] | None = None
        self._groups: dict[str, tuple[dict[str, Any], int]] = {}
        self._revision = 0

    def _current_leader(self) -> str | None:
        if self._leader is not None and self._leader[1] <= time.monotonic():
            self._leader = None
        return self._leader[0] if self._leader else None

    def hold_leadership(self, value: str, ttl_s: int) -> bool:
        with self._lock:
            if self._current_leader() in (None, value):
                self._leader = (value, time.monotonic() + ttl_s)
                return True
            return False

    def leader(self) -> str | None:
        with self._lock:
            return self._current_leader()

    def release_leadership(self) -> None:
        with self._lock:
            self._leader = None

    def load_groups(self) -> dict[str, tuple[dict[str, Any], int]]:
        with self._lock:
            return {k: (json.loads(json.dumps(s)), v) for k, (s, v) in self._groups.items()}

    def save_group(self, name: str, state: dict[str, Any], version: int, leader: str) -> int | None:
        with self._lock:
            if self._current_leader() != leader or self._groups.get(name, ({}, 0))[1] != version:
                return None
            self._revision += 1
            self._groups[name] = (json.loads(json.dumps(state)), self._revision)
            return self._revision


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def _unb64(text: str) -> str:
    return base64.b64decode(text).decode()


class EtcdDCS(DCS):
    """etcd v3 through its JSON gateway (``/v3/kv/txn``, ``/v3/lease/grant``, …): plain HTTP, no client library.
    Several endpoints may be given; a request goes to the first that answers."""

    def __init__(self, endpoints: str, timeout_s: float = 2.0) -> None:
        self.endpoints = [e.strip().rstrip("/") for e in endpoints.split(",") if e.strip()]
        if not self.endpoints:
            raise ValueError("no etcd endpoint")
        self.endpoints = [e if "://" in e else f"http://{e}" for e in self.endpoints]
        self.timeout_s = timeout_s
        self._lease = 0

    def _post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        data = json.dumps(body).encode()
        last: Exception | None = None
        for endpoint in self.endpoints:
            req = urllib.request.Request(endpoint + path, data=data, headers={"Content-Type": "application/json"})
            try:
                with urllib.request.urlopen(req, timeout=self.timeout_s) as resp:
                    answer = json.loads(resp.read() or b"{}")
            except (OSError, urllib.error.URLError, ValueError) as exc:
                last = exc
                continue
            if not isinstance(answer, dict):
                raise DCSError(f"etcd {endpoint}{path} answered {answer!r}")
            return answer
        raise DCSError(f"no etcd endpoint of {self.endpoints} answered {path}: {last}")

    def _txn(self, compare: list[dict[str, Any]], success: list[dict[str, Any]],
             failure: list[dict[str, Any]] | None = None) -> dict[str, Any]:
        return self._post("/v3/kv/txn", {"compare": compare, "success": success, "failure": failure or []})

    def hold_leadership(self, value: str, ttl_s: int) -> bool:
        if self._lease:
            answer = self._post("/v3/lease/keepalive", {"ID": str(self._lease)}).get("result", {})
            if int(answer.get("TTL", 0)) > 0 and self.leader() == value:
                return True
            self._lease = 0
        grant = self._post("/v3/lease/grant", {"TTL": str(ttl_s)})
        lease = int(grant.get("ID", 0))
        if not lease:
            raise DCSError(f"etcd granted no lease: {grant}")
        key = _b64(LEADER_KEY)
        done = self._txn([{"key": key, "target": "CREATE", "result": "EQUAL", "create_revision": "0"}],
                         [{"request_put": {"key": key, "value": _b64(value), "lease": str(lease)}}])
        if done.get("succeeded"):
            self._lease = lease
            return True
        self._post("/v3/lease/revoke", {"ID": str(lease)})
        return False

    def leader(self) -> str | None:
        kvs = self._post("/v3/kv/range", {"key": _b64(LEADER_KEY)}).get("kvs") or []
        return _unb64(kvs[0].get("value", "")) if kvs else None

    def release_leadership(self) -> None:
        if self._lease:
            self._post("/v3/lease/revoke", {"ID": str(self._lease)})
            self._lease = 0

    def load_groups(self) -> dict[str, tuple[dict[str, Any], int]]:
        start = GROUPS_PREFIX
        end = start[:-1] + chr(ord(start[-1]) + 1)
        kvs = self._post("/v3/kv/range", {"key": _b64(start), "range_end": _b64(end)}).get("kvs") or []
        out = {}
        for kv in kvs:
            name = _unb64(kv["key"])[len(GROUPS_PREFIX):]
            try:
                out[name] = (json.loads(_unb64(kv.get("value", ""))), int(kv["mod_revision"]))
            except (ValueError, KeyError) as exc:
                raise DCSError(f"unreadable group state {name!r} in etcd: {exc}") from exc
        return out

    def save_group(self, name: str, state: dict[str, Any], version: int, leader: str) -> int | None:
        key = _b64(GROUPS_PREFIX + name)
        compare = [{"key": _b64(LEADER_KEY), "target": "VALUE", "result": "EQUAL", "value": _b64(leader)},
                   {"key": key, "target": "MOD", "result": "EQUAL", "mod_revision": str(version)}]
        done = self._txn(compare, [{"request_put": {"key": key, "value": _b64(json.dumps(state))}}])
        if not done.get("succeeded"):
            return None
        return int(done.get("header", {}).get("revision", 0))
