"""Helpers of the gRPC tests, in a module of its own (not ``conftest``: another folder's could be imported
instead when pytest is given folders in another order)."""

from __future__ import annotations


def bodies(events: list[dict], kind: str = "received") -> list[str]:
    return [e["body"] for e in events if e["event"] == kind]
