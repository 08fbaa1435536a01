"""The console under ACL: an ACL-enabled ``txmq server`` whose process was given the admin account (as an operator
gives one for the console to work), its console driven in a real browser and by raw HTTP. Every page needs a
login with the user's own account; what the user may do is what the brokers' ACL allows that account, whatever
account the console's process has; the session cookie is HttpOnly and SameSite=Strict (Secure over HTTPS), ends at
logout and when unused, and no secret reaches a page, a cookie or the log."""

from __future__ import annotations

import datetime
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from selenium.webdriver.common.by import By

from tests.e2e.console_browser import Site, running_browser
from tests.e2e.console_http import Http
from txmq import Message, Producer
from txmq.acl.signer import SessionCredentials
from txmq.admin import MQAdminExt
from txmq.launch import ServerProcess, free_port, txmq_command

ADMIN = SessionCredentials("consoleAdmin01", "consoleAdminSecret01")
USER = SessionCredentials("teamKey01", "teamSecret0123")  # may read and write topic "team", nothing else
OPS = SessionCredentials("opsTool0001", "opsToolSecret01")  # unsigned from the broker's host (whiteRemoteAddress)
WRONG_SECRET = "notTheSecret0123"

PLAIN_ACL = f"""\
globalWhiteRemoteAddresses: []
accounts:
  - accessKey: {ADMIN.access_key}
    secretKey: {ADMIN.secret_key}
    admin: true
    defaultTopicPerm: PUB|SUB
    defaultGroupPerm: PUB|SUB
  - accessKey: {USER.access_key}
    secretKey: {USER.secret_key}
    defaultTopicPerm: DENY
    defaultGroupPerm: DENY
    topicPerms: [team=PUB|SUB]
    groupPerms: [team-group=SUB]
  - accessKey: {OPS.access_key}
    secretKey: {OPS.secret_key}
    whiteRemoteAddress: 127.0.0.1
    defaultTopicPerm: PUB|SUB
    defaultGroupPerm: SUB
"""


@dataclass
class AclConsole:
    proc: ServerProcess
    root: Path

    @property
    def base(self) -> str:
        return f"http://{self.proc.addrs['console']}"

    @property
    def addr(self) -> str:
        return self.proc.addrs["console"]

    def admin(self) -> MQAdminExt:
        return MQAdminExt(self.proc.namesrv).set_session_credentials(ADMIN.access_key, ADMIN.secret_key)


def start(root: Path, *flags: str) -> AclConsole:
    """``txmq server`` with ACL on and the console on a free port; its process holds the admin account."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "plain_acl.yml").write_text(PLAIN_ACL)
    (root / "broker.conf").write_text(
        f"aclEnable=true\naclFile={root / 'plain_acl.yml'}\naccessKey={ADMIN.access_key}\n"
        f"secretKey={ADMIN.secret_key}\nautoCreateTopicEnable=false\n")
    env = dict(os.environ, PYTHONUNBUFFERED="1", TXMQ_ACCESS_KEY=ADMIN.access_key, TXMQ_SECRET_KEY=ADMIN.secret_key)
    args = txmq_command("server", "--store", str(root / "store"), "--port", "0", "--namesrv-port", str(free_port()),
                        "--grpc-port", "-1", "--console-port", "0", "-c", str(root / "broker.conf"), *flags)
    return AclConsole(ServerProcess(args, root / "server.log", env).start(), root)


@pytest.fixture(scope="module")
def acl(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AclConsole]:
    server = start(tmp_path_factory.mktemp("acl-console"))
    try:
        with server.admin() as admin:
            admin.create_topic("team", 2)
        producer = Producer("team-producer", server.proc.namesrv)
        producer.set_session_credentials(ADMIN.access_key, ADMIN.secret_key)
        with producer:
            for i in range(3):
                producer.send(Message("team", f"team body {i}".encode(), keys=f"team-k{i}"))
        yield server
    finally:
        server.proc.stop()


@pytest.fixture(scope="module")
def site(acl: AclConsole, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    shots = os.environ.get("TXMQ_SCREENSHOTS")
    with running_browser(tmp_path_factory.mktemp("profile")) as driver:
        yield Site(None, acl.base, driver, Path(shots) if shots else None)


def topics_of(acl: AclConsole) -> list[str]:
    with acl.admin() as admin:
        return admin.list_topics()


def test_every_page_needs_a_login(acl):
    """Without a login every page sends to the login page and shows nothing of the cluster; an action is done
    by no one, even with the session's own token."""
    client = Http(acl.addr)
    for path in ("/", "/topics", "/topics/team", "/groups", "/messages?by=key&topic=team&key=team-k1",
                 "/transactions", "/charts"):
        answer = client.get(path)
        assert answer.status == 303 and answer.headers["Location"] == "/login", (path, answer.status)
        assert "team" not in answer.text and "broker-a" not in answer.text
    assert client.get("/api/stats").status == 401
    answer = client.post("/topics", {"csrf": client.token("/login"), "topic": "anonymous_t", "queues": "1",
                                     "perm": "6"})
    assert answer.status == 303 and answer.headers["Location"] == "/login"
    assert "anonymous_t" not in topics_of(acl)


def login(site: Site, credentials: SessionCredentials, secret: str | None = None) -> None:
    site.open("/login")
    site.submit("login", access_key=credentials.access_key, secret_key=secret or credentials.secret_key)


def test_a_wrong_secret_is_refused(site, acl):
    login(site, USER, WRONG_SECRET)
    assert "Login refused" in site.text("#error")
    site.shot("login")
    assert site.driver.current_url == site.base + "/login"
    assert WRONG_SECRET not in site.driver.page_source
    site.open("/")
    assert site.driver.current_url == site.base + "/login"


def test_each_user_acts_as_their_own_account(site, acl):
    """The same console, two accounts: the brokers' ACL lets the user read their topic and refuses them a new
    topic (shown on the page, nothing created), and lets the admin create one. The console's process holds the
    admin account all along: it is not what the user's requests are signed with."""
    pages = []
    login(site, USER)
    assert site.driver.current_url == site.base + "/"
    assert "logged in as teamKey01" in site.text("#notice")
    assert site.text("header .user") == USER.access_key
    site.open("/messages")
    site.submit("by-key", topic="team", key="team-k1")
    assert [r[7] for r in site.rows("results")] == ["team body 1"]  # allowed: SUB on topic team
    pages.append(site.driver.page_source)
    site.open("/topics")
    site.submit("create-topic", topic="team-extra", queues="2")
    assert "team-extra not created" in site.text("#error")  # refused by the broker: signed as this user
    site.shot("refused")
    pages.append(site.driver.page_source)
    assert "team-extra" not in topics_of(acl)

    site.driver.find_element(By.CSS_SELECTOR, "#logout button").click()
    site.wait(lambda: site.driver.current_url == site.base + "/login", "the login page after logout")
    site.open("/topics")
    assert site.driver.current_url == site.base + "/login"

    login(site, ADMIN)
    site.open("/topics")
    site.submit("create-topic", topic="admin-made", queues="2")
    assert "topic admin-made created" in site.text("#notice")
    pages.append(site.driver.page_source)
    assert "admin-made" in topics_of(acl)
    site.driver.find_element(By.CSS_SELECTOR, "#logout button").click()
    site.wait(lambda: site.driver.current_url == site.base + "/login", "the login page after logout")

    log = (acl.root / "server.log").read_text()
    for secret in (USER.secret_key, WRONG_SECRET):
        assert secret not in log
        assert not any(secret in p for p in pages)
    assert f"console: {USER.access_key} logged in" in log


def test_no_login_as_an_account_the_servers_take_unsigned_from_the_console(acl):
    """The servers see the console's address, not the user's. An account whose whiteRemoteAddress covers the
    console's host (a tool run on the broker's host) needs no signature from there: anyone, from any address,
    logged in as it with a made-up secret and read its topics through the console. Now a login stands only when
    every server refuses the account's requests signed with a wrong secret; this one cannot log in at all."""
    client = Http(acl.addr, source="127.0.0.2")
    for secret in (WRONG_SECRET, OPS.secret_key):
        answer = client.login(OPS.access_key, secret)
        assert answer.status == 403, (answer.status, answer.headers.get("Location"))
        assert "cannot tell who logs in" in answer.text
        assert client.get("/topics").status == 303
    assert client.login(USER.access_key, USER.secret_key).status == 303  # a signed account still logs in


def test_session_cookie_and_logout(acl):
    """The cookie is HttpOnly and SameSite=Strict (not Secure over plain HTTP), a new one at login (a cookie
    planted before it is worth nothing after), and a logged-out cookie replayed opens nothing."""
    client = Http(acl.addr)
    planted = client.get("/login").cookies()
    answer = client.login(USER.access_key, USER.secret_key)
    assert answer.status == 303 and answer.headers["Location"] == "/"
    (cookie,) = answer.cookies()
    assert cookie.startswith("txmq_console=") and "HttpOnly" in cookie and "SameSite=Strict" in cookie
    assert "Secure" not in cookie and USER.secret_key not in cookie
    assert planted and planted[0].split(";")[0] != cookie.split(";")[0]
    assert client.get("/topics").status == 200
    stolen = dict(client.jar)
    answer = client.post("/logout", {"csrf": client.token("/topics")})
    assert answer.status == 303 and answer.headers["Location"] == "/login"
    replay = Http(acl.addr)
    replay.jar = stolen
    assert replay.get("/topics").status == 303


def test_an_unused_login_ends(tmp_path):
    """--console-session-timeout: a login unused that long ends; the login page says so."""
    server = start(tmp_path / "server", "--console-session-timeout", "4")  # each request well within it
    try:
        client = Http(server.addr)
        assert client.login(USER.access_key, USER.secret_key).status == 303
        assert client.get("/topics").status == 200
        assert client.get("/topics").status == 200  # use keeps it going
        time.sleep(4.5)
        answer = client.get("/topics")
        assert answer.status == 303 and answer.headers["Location"] == "/login"
        assert "Your session has ended" in client.get("/login").text
    finally:
        server.proc.stop()


def self_signed(d: Path) -> tuple[Path, Path]:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(hours=1))
            .not_valid_after(now + datetime.timedelta(days=1)).sign(key, hashes.SHA256()))
    (d / "console.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (d / "console.key").write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                      serialization.NoEncryption()))
    return d / "console.pem", d / "console.key"


def test_over_https_the_cookie_is_secure(acl, tmp_path):
    cert, key = self_signed(tmp_path)
    console = ServerProcess(txmq_command("console", "-n", acl.proc.namesrv, "--port", str(free_port()), "--login",
                                         "--https-cert", str(cert), "--https-key", str(key)), tmp_path / "console.log")
    try:
        console.start()
        client = Http(console.addrs["console"], https=True)
        answer = client.login(USER.access_key, USER.secret_key)
        assert answer.status == 303 and answer.headers["Location"] == "/"
        (cookie,) = answer.cookies()
        assert cookie.startswith("__Host-txmq_console=") and "Secure" in cookie and "HttpOnly" in cookie
        assert client.get("/topics").status == 200
    finally:
        console.stop()
