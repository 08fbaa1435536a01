"""What the console serves and checks: the ``txmq console`` flags (``--console-…`` for ``txmq server``)."""

from __future__ import annotations

from dataclasses import dataclass

LOCAL_NAMES = ("localhost", "127.0.0.1", "::1")  # always answered: no other site can make a browser send them
WILDCARDS = ("", "0.0.0.0", "::")  # bound addresses that name no host a browser would send


def host_name(value: str) -> str:
    """The host of a ``Host`` header or an allowed-hosts entry, without its port, brackets or final dot, lower
    case: ``[::1]:8080`` is ``::1``, ``Console.Example.:443`` is ``console.example``."""
    value = value.strip().lower()
    if value.startswith("["):
        return value[1:].partition("]")[0]
    if value.count(":") == 1:  # name:port (an IPv6 address without brackets has several colons)
        value = value.partition(":")[0]
    return value.rstrip(".")


@dataclass
class ConsoleConfig:
    """``login``: users log in with their own ACL account and every request the console makes is signed as them
    (on whenever the cluster runs with ACL). ``allowed_hosts``: ``Host`` names answered besides the bound address
    and the localhost names (DNS rebinding sends any other). ``read_timeout_s``: how long a client may take to
    send a request's headers, then its body, and how long a connection may stay idle. ``max_connections``: open
    connections at most; more are closed as they are accepted. ``session_timeout_s``: a login unused that long
    ends. ``https_cert``/``https_key``: serve HTTPS (the session cookie is then ``Secure``)."""

    host: str = "127.0.0.1"
    port: int = 8080
    namesrv: str | None = None
    login: bool = False
    allowed_hosts: tuple[str, ...] = ()
    read_timeout_s: float = 10.0
    max_connections: int = 256
    session_timeout_s: float = 1800.0
    https_cert: str = ""
    https_key: str = ""

    def check(self) -> None:
        """``ValueError`` naming the setting that cannot work."""
        if not self.read_timeout_s > 0:
            raise ValueError(f"console read timeout {self.read_timeout_s}: must be above 0 seconds")
        if self.max_connections < 1:
            raise ValueError(f"console max connections {self.max_connections}: must be at least 1")
        if not self.session_timeout_s > 0:
            raise ValueError(f"console session timeout {self.session_timeout_s}: must be above 0 seconds")
        if bool(self.https_cert) != bool(self.https_key):
            raise ValueError("console HTTPS needs both a certificate and its key")
        if any(not host_name(h) for h in self.allowed_hosts):
            raise ValueError(f"console allowed hosts {','.join(self.allowed_hosts)!r}: an empty name")

    @property
    def https(self) -> bool:
        return bool(self.https_cert)

    def host_names(self) -> frozenset[str]:
        """The ``Host`` names answered."""
        names = {*LOCAL_NAMES, *(host_name(h) for h in self.allowed_hosts)}
        if self.host not in WILDCARDS:
            names.add(host_name(self.host if ":" not in self.host else f"[{self.host}]"))
        return frozenset(names)
