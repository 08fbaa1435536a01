"""The web console in a real browser (Debian's chromium through chromedriver and Selenium): each page's main
flow clicked through against live broker processes. ``TXMQ_SCREENSHOTS=DIR`` saves a screenshot of each page
(docs/console-*.png come from such a run)."""

from __future__ import annotations

import http.server
import os
import socket
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from selenium.webdriver.common.by import By

from tests.e2e.cluster import Cluster
from tests.e2e.console_browser import Site, running_browser
from tests.e2e.console_http import Http
from tests.e2e.helpers import RawClient, Recorder, push_consumer
from tests.e2e.test_operator_errors import _half
from txmq import ConsumeStatus, LocalTransactionState, Message, Producer, TransactionProducer
from txmq.admin import MQAdminExt
from txmq.launch import ServerProcess, free_port, txmq_command
from txmq.message import create_offset_msg_id

N = 5


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    root = Path(tmp_path_factory.mktemp("console"))
    cluster = Cluster(root)
    try:
        cluster.start_namesrv()
        cluster.start_broker(conf={"grpcPort": -1, "transactionTimeOut": 600_000})
        console = cluster._proc("console", ["console", "-n", cluster.namesrv_addr, "--port", str(free_port())])
        console.start()
        with MQAdminExt(cluster.namesrv_addr) as admin:
            admin.create_topic("web_t", 2)
        cluster.wait_route("web_t")
        with Producer("web_p", cluster.namesrv_addr) as producer:
            for i in range(N):
                producer.send(Message("web_t", f"body {i}".encode(), tags="T", keys=f"k{i}"))
        shots = os.environ.get("TXMQ_SCREENSHOTS")
        with running_browser(root / "profile") as driver:
            yield Site(cluster, f"http://{console.addrs['console']}", driver, Path(shots) if shots else None)
    finally:
        cluster.close()


def test_cluster_page(site):
    site.open("/")
    rows = site.rows("brokers")
    assert len(rows) == 1
    cluster, broker, bid, role, addr, version = rows[0][:6]
    assert (cluster, broker, bid, role) == ("DefaultCluster", "broker-a", "0", "ASYNC_MASTER")
    assert addr == site.cluster.procs[1].addrs["broker"] and version.startswith("txmq ")
    assert int(rows[0][9]) >= N  # messages in
    site.shot("cluster")


def test_topics_create_permission_delete(site):
    site.open("/topics")
    assert any(r[0] == "web_t" and r[1] == "2" and r[3] == str(N) for r in site.rows("topics"))
    site.shot("topics")
    site.submit("create-topic", topic="web_orders", queues="4")
    assert "topic web_orders created" in site.text("#notice")
    assert [r[1] for r in site.rows("queues")] == ["0", "1", "2", "3"]
    site.submit("topic-perm", perm="4")
    assert site.text("#perm") == "R-"
    site.submit("topic-delete", accept=False)  # asked, and said no: nothing happens
    assert "/topics/web_orders" in site.driver.current_url and site.text("#perm") == "R-"
    site.submit("topic-delete", accept=True)
    site.wait(lambda: "deleted" in site.text("#notice"), "the delete notice")
    assert "web_orders" not in [r[0] for r in site.rows("topics")]


def test_group_lag_clients_and_reset(site):
    rec = Recorder()
    consumer = push_consumer(site.cluster.namesrv_addr, "web_g", "web_t", rec, persist_interval_s=0.2)
    try:
        assert rec.wait_for(N)
        site.open("/groups")
        site.wait(lambda: ["web_g", "web_t", "0"] in [r[:3] for r in site.rows("groups")], "lag 0", reload=True)
        site.shot("groups")
        site.driver.find_element(By.LINK_TEXT, "web_g").click()
        assert site.text("#lag") == "0" and [r[0] for r in site.rows("group-queues")].count("web_t") == 2
        assert len(site.rows("clients")) == 1 and site.rows("clients")[0][2] == "PYTHON"
    finally:
        consumer.shutdown()
    site.open("/groups/web_g")
    site.submit("reset-offsets", accept=True, topic="web_t", time="2000-01-01T00:00:00")
    site.wait(lambda: "offsets of web_g on web_t reset" in site.text("#notice"), "the reset notice")
    assert site.text("#lag") == str(N)
    site.shot("group")


def test_messages_by_key_id_range_and_dlq_resend(site):
    site.open("/messages")
    site.submit("by-key", topic="web_t", key="k3")
    rows = site.rows("results")
    assert len(rows) == 1 and rows[0][1:4] == ["web_t", "T", "k3"] and rows[0][7] == "body 3"
    site.driver.find_element(By.CSS_SELECTOR, "#results a.msg").click()
    assert site.text("#body") == "body 3"
    assert ["KEYS", "k3"] in site.rows("properties")
    offset_id = dict(site.rows("message"))["Offset message id"]
    site.shot("message")
    site.open("/messages")
    site.submit("by-id", id=offset_id)
    assert [r[7] for r in site.rows("results")] == ["body 3"]
    site.open("/messages")
    site.submit("by-range", topic="web_t")
    assert sorted(r[7] for r in site.rows("results")) == [f"body {i}" for i in range(N)]
    site.shot("messages")

    dead = Recorder(decide=lambda m: ConsumeStatus.RECONSUME_LATER)
    consumer = push_consumer(site.cluster.namesrv_addr, "web_dlq", "web_t", dead, max_reconsume_times=0)
    try:
        site.open("/messages")
        site.wait(lambda: site.submit("by-range", topic="%DLQ%web_dlq") or len(site.rows("results")) == N,
                  "the dead letters", timeout=30)
    finally:
        consumer.shutdown()
    site.driver.find_element(By.CSS_SELECTOR, "#results a.msg").click()
    key = dict(site.rows("message"))["Keys"]
    site.submit("resend", accept=True)
    site.wait(lambda: "resent to web_t as" in site.text("#notice"), "the resend notice")
    site.open("/messages")
    site.submit("by-key", topic="web_t", key=key)
    assert len(site.rows("results")) == 2


class Undecided:
    def execute_local_transaction(self, msg, arg):
        return LocalTransactionState.UNKNOWN

    def check_local_transaction(self, msg):
        return LocalTransactionState.UNKNOWN


def _row_form(site: Site, table_id: str, cell: str, action: str) -> str:
    """The id of the ``action`` form on the row of table ``table_id`` that has a cell ``cell``."""
    row = next(tr for tr in site.driver.find_elements(By.CSS_SELECTOR, f"#{table_id} tbody tr")
               if cell in [td.text for td in tr.find_elements(By.TAG_NAME, "td")])
    return next(f.get_attribute("id") for f in row.find_elements(By.TAG_NAME, "form") if f.text == action.title())


def _decide_row(site: Site, group: str, action: str) -> None:
    """Press ``action`` on the pending row of producer group ``group``, and accept the confirmation."""
    site.submit(_row_form(site, "pending", group, action), accept=True)


def test_transactions_commit_and_rollback_with_confirmation(site):
    with TransactionProducer("web_txp", Undecided(), site.cluster.namesrv_addr) as producer:
        keep = producer.send_message_in_transaction(Message("web_t", b"operator commit", keys="tx_keep"))
        drop = producer.send_message_in_transaction(Message("web_t", b"operator rollback", keys="tx_drop"))
    site.open("/transactions")
    pending = {r[0]: r for r in site.rows("pending")}
    assert set(pending) == {keep.transaction_id, drop.transaction_id}
    assert pending[keep.transaction_id][2:4] == ["web_t", "web_txp"]
    site.shot("transactions")
    site.submit(_row_form(site, "pending", keep.transaction_id, "commit"), accept=False)
    assert len(site.rows("pending")) == 2
    site.submit(_row_form(site, "pending", keep.transaction_id, "commit"), accept=True)
    site.wait(lambda: "committed on broker-a by an operator" in site.text("#notice"), "the commit notice")
    site.submit(_row_form(site, "pending", drop.transaction_id, "rollback"), accept=True)
    site.wait(lambda: "rolled back" in site.text("#notice"), "the rollback notice")
    assert site.rows("pending") == []
    site.open("/messages")
    site.submit("by-key", topic="web_t", key="tx_keep")
    assert [r[7] for r in site.rows("results")] == ["operator commit"]
    site.submit("by-key", topic="web_t", key="tx_drop")
    assert site.rows("results") == []


def test_live_charts(site):
    site.open("/charts?interval=500")
    root = site.driver.find_element(By.ID, "charts")
    site.wait(lambda: int(root.get_attribute("data-samples") or 0) >= 2, "two samples")
    before = int(root.get_attribute("data-commits") or 0)

    class Commit:
        def execute_local_transaction(self, msg, arg):
            return LocalTransactionState.COMMIT

        def check_local_transaction(self, msg):
            return LocalTransactionState.COMMIT

    with TransactionProducer("web_chart", Commit(), site.cluster.namesrv_addr) as producer:
        for i in range(20):  # in bursts, so that the charts have a shape
            producer.send_message_in_transaction(Message("web_t", f"chart {i}".encode()))
            if i % 5 == 4:
                time.sleep(0.6)
    site.wait(lambda: int(root.get_attribute("data-commits") or 0) >= before + 20, "the commits on the chart")
    samples = int(root.get_attribute("data-samples") or 0)
    site.wait(lambda: int(root.get_attribute("data-samples") or 0) >= samples + 3, "more samples")
    assert "commits" in site.text("#legend-outcomes") and "p99" in site.text("#legend-latency")
    drawn = site.driver.execute_script(
        "return ['throughput','outcomes','latency'].map(n => { const c = document.getElementById('chart-' + n);"
        " return c.getContext('2d').getImageData(0, 0, c.width, c.height).data.some(v => v > 0); });")
    assert drawn == [True, True, True]
    assert root.get_attribute("data-error") is None
    site.shot("charts")


def test_server_serves_the_console(tmp_path):
    proc = ServerProcess(txmq_command("server", "--port", str(free_port()), "--namesrv-port", str(free_port()),
                                      "--grpc-port", "-1", "--console-port", "0", "--store", str(tmp_path / "s")),
                         tmp_path / "server.log")
    try:
        proc.start()
        with urllib.request.urlopen(f"http://{proc.addrs['console']}/", timeout=10) as r:
            page = r.read().decode()
        assert "broker-a" in page and "ASYNC_MASTER" in page
    finally:
        proc.kill()




def test_a_row_s_decision_decides_that_row_s_half(site):
    """A row's buttons decide the half the row shows, whatever its transaction id: an id that other halves carry
    too (another group's, a producer's retry), or one of digits, which as an id names a half offset (here another
    group's half)."""
    with RawClient(site.cluster.procs[1].addrs["broker"]) as raw:
        first = _half(raw, "web_t", "web_d1", "WEBDUP" * 5)
        second = _half(raw, "web_t", "web_d2", "WEBDUP" * 5)
        digits = _half(raw, "web_t", "web_d3", str(first))
    site.open("/transactions")
    _decide_row(site, "web_d2", "rollback")
    site.wait(lambda: "rolled back on broker-a" in site.text("#notice"), "the rollback notice")
    _decide_row(site, "web_d3", "commit")
    site.wait(lambda: "committed on broker-a" in site.text("#notice"), "the commit notice")
    with MQAdminExt(site.cluster.namesrv_addr) as admin:
        states = {offset: admin.tx_show(str(offset))["state"] for offset in (first, second, digits)}
    assert states == {first: "PENDING", second: "ROLLBACK", digits: "COMMIT"}, states


def test_discarded_transaction_resumed(site):
    """A broker that gives up fast (one check) discards a transaction its producer never decides; the console
    lists it as discarded and puts it back into checking."""
    site.cluster.start_broker("broker-b", conf={"grpcPort": -1, "transactionTimeOut": 500, "transactionCheckMax": 1,
                                                "transactionCheckInterval": 300})
    with MQAdminExt(site.cluster.namesrv_addr) as admin:
        admin.create_topic("web_b", 1, ["broker-b"])
    site.cluster.wait_route("web_b", brokers=2)
    with TransactionProducer("web_orphan", Undecided(), site.cluster.namesrv_addr) as producer:
        tx = producer.send_message_in_transaction(Message("web_b", b"never decided"))
        site.open("/transactions")
        row = site.wait(lambda: [r for r in site.rows("discarded") if r[0] == tx.transaction_id], "the discard",
                        timeout=30, reload=True)[0]
        assert row[1:4] == ["broker-b", "web_b", "web_orphan"] and row[5] == "1"
        site.shot("transactions-discarded")
        site.submit(_row_form(site, "discarded", tx.transaction_id, "resume"))
        assert f"transaction {tx.transaction_id} resumed into checking on broker-b" in site.text("#notice")
        assert tx.transaction_id in [r[0] for r in site.rows("pending")]


# --- as an attacker ---------------------------------------------------------------------------------------------


@pytest.fixture
def forge(site):
    """A topic with messages, a group whose offsets are at the end, and a pending transaction: what the forged
    requests below try to change."""
    with MQAdminExt(site.cluster.namesrv_addr) as admin:
        admin.create_topic("forge_t", 2)
        site.cluster.wait_route("forge_t")
        with Producer("forge_p", site.cluster.namesrv_addr) as producer:
            for i in range(N):
                producer.send(Message("forge_t", f"forge {i}".encode()))
        admin.set_offsets("forge_g", "forge_t", 2**62)
        with TransactionProducer("forge_txp", Undecided(), site.cluster.namesrv_addr) as producer:
            tx = producer.send_message_in_transaction(Message("forge_t", b"pending", keys="forge_tx"))
        yield admin, tx.transaction_id


def _unchanged(admin: MQAdminExt, tx_id: str) -> None:
    """Through the broker: nothing the forged requests asked for happened."""
    assert "forged_t" not in admin.list_topics()
    addr = next(iter(admin.broker_addrs().values()))
    assert admin.topic_config(addr, "forge_t")["perm"] == 6  # there, and still read-write
    stats, _ = admin.consume_stats("forge_g", "forge_t")
    assert sum(s.values["brokerOffset"] - s.values["consumerOffset"] for s in stats) == 0  # no reset to 2000
    pending = [t["transactionId"] for d in admin.tx_list(200).values() for t in d["pending"]]
    assert tx_id in pending  # not committed


def _forged(admin: MQAdminExt, tx_id: str) -> list[tuple[str, dict[str, str]]]:
    tx = admin.tx_show(tx_id)
    return [("/topics", {"topic": "forged_t", "queues": "4", "perm": "6"}),
            ("/topics/forge_t/perm", {"perm": "4"}),
            ("/topics/forge_t/delete", {}),
            ("/groups/forge_g/reset", {"topic": "forge_t", "time": "2000-01-01T00:00:00"}),
            (f"/transactions/{tx['broker']}/{tx['halfOffset']}/commit", {"id": tx_id})]


def test_forged_posts_are_refused_and_change_nothing(site, forge):
    """Form POSTs as another site's page makes a browser send them (foreign Origin, no token), as a script sends
    them (no Origin, no token), with a made-up token, and with a real token but a foreign Origin or a cross-site
    Sec-Fetch-Site: each is refused with 403, and the broker shows nothing changed. The same request from the
    console's own page goes through."""
    admin, tx_id = forge
    client = Http(site.base.removeprefix("http://"))
    evil = {"Origin": "http://evil.example:8000"}

    def refused(path: str, fields: dict[str, str], headers: dict[str, str]) -> None:
        answer = client.request("POST", path, fields, headers=headers)
        assert answer.status == 403, (path, headers, answer.status, answer.text[:300])
        assert "refused" in answer.text or "another site" in answer.text

    for path, form in _forged(admin, tx_id):
        refused(path, form, evil)
        refused(path, form, {})
        refused(path, {**form, "csrf": "made-up"}, {"Origin": site.base})
    token = client.token("/topics")
    for path, form in _forged(admin, tx_id):
        refused(path, {**form, "csrf": token}, evil)
        refused(path, {**form, "csrf": token}, {"Sec-Fetch-Site": "cross-site"})
    _unchanged(admin, tx_id)
    answer = client.post("/topics/forge_t/perm", {"perm": "4", "csrf": token})
    assert answer.status == 303
    assert admin.topic_config(next(iter(admin.broker_addrs().values())), "forge_t")["perm"] == 4


ATTACK_PAGE = """<!doctype html><html><body><h1>cute cats</h1>
<form id="f" method="post" action="{action}">{fields}</form>
<script>document.getElementById("f").submit();</script></body></html>"""


def test_cross_site_form_in_a_real_browser_changes_nothing(site, forge, tmp_path):
    """A page served from another origin (another port) auto-submits forms to the console in the same browser
    that uses the console: it gets a refusal, and the broker shows nothing changed."""
    admin, tx_id = forge
    site.open("/topics")  # the user has the console open: the browser holds its session cookie
    pages = {f"/attack{i}": ATTACK_PAGE.format(
        action=site.base + path,
        fields="".join(f'<input name="{k}" value="{v}">' for k, v in form.items()))
        for i, (path, form) in enumerate(_forged(admin, tx_id))}

    class Attacker(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = pages.get(self.path, "").encode()
            self.send_response(200 if body else 404)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    attacker = http.server.ThreadingHTTPServer(("127.0.0.1", free_port()), Attacker)
    thread = threading.Thread(target=attacker.serve_forever, daemon=True)
    thread.start()
    try:
        for i, (path, _) in enumerate(_forged(admin, tx_id)):
            site.driver.get(f"http://127.0.0.1:{attacker.server_port}/attack{i}")
            site.wait(lambda: site.driver.current_url.startswith(site.base) and site.text("h1") == "Forbidden",
                      f"the console's refusal of the forged POST to {path}", timeout=10)
    finally:
        attacker.shutdown()
        attacker.server_close()
        thread.join(5)
    _unchanged(admin, tx_id)


def test_foreign_host_is_refused(site):
    """DNS rebinding: a name the attacker controls, resolved to the console's address, sends that name as Host."""
    client = Http(site.base.removeprefix("http://"))
    port = client.port
    for host in (f"rebind.evil.example:{port}", "rebind.evil.example", f"10.0.0.1:{port}", ""):
        answer = client.get("/", host=host)
        assert answer.status == 421, (host, answer.status)
        assert "broker-a" not in answer.text
        assert client.get("/api/stats", host=host).status == 421
        assert client.request("POST", "/topics", {"topic": "rebound_t"}, host=host,
                            headers={"Origin": f"http://{host}"}).status == 421
    for host in (f"localhost:{port}", f"127.0.0.1:{port}", f"LOCALHOST.:{port}"):
        answer = client.get("/", host=host)
        assert answer.status == 200 and "broker-a" in answer.text, host
    with MQAdminExt(site.cluster.namesrv_addr) as admin:
        assert "rebound_t" not in admin.list_topics()


def test_every_answer_has_the_security_headers(site):
    client = Http(site.base.removeprefix("http://"))
    for path in ("/", "/topics", "/static/console.js", "/no/such/page", "/charts?interval=x"):
        h = client.get(path).headers
        assert "frame-ancestors 'none'" in h["Content-Security-Policy"], path
        assert "script-src 'self'" in h["Content-Security-Policy"] and "unsafe-inline" not in h[
            "Content-Security-Policy"]
        assert h["X-Frame-Options"] == "DENY" and h["X-Content-Type-Options"] == "nosniff", path
    cookie = Http(site.base.removeprefix("http://")).get("/").cookies()
    assert cookie and "HttpOnly" in cookie[0] and "SameSite=Strict" in cookie[0]


BAD_QUERIES = ["/charts?interval=abc", "/charts?interval=99999999999999999999999999", "/charts?interval=%ff",
               "/charts?interval=-5", "/messages?by=range&topic=web_t&begin=not-a-time",
               "/messages?by=range&topic=web_t&end=99999-99-99", "/messages?by=sideways",
               "/messages?by=id&id=%00%ff", "/messages/zzzz", "/messages/" + "0" * 32]


def test_bad_query_strings_get_a_clear_400_and_one_log_line(site):
    """Each bad query string is answered 400 with what is wrong; a flood of them writes one line per kind and
    page in 10 s (throttled per client: this one connects from 127.0.0.3), and no traceback."""
    client = Http(site.base.removeprefix("http://"), source="127.0.0.3")
    log = site.cluster.root / "console.log"
    before = len(log.read_text())
    start = time.monotonic()
    for path in BAD_QUERIES:
        answer = client.get(path)
        assert answer.status == 400, (path, answer.status, answer.text[:300])
        assert 'class="error"' in answer.text, path
    for _ in range(30):
        for path in BAD_QUERIES:
            assert client.get(path).status == 400
    host, port = site.base.removeprefix("http://").split(":")
    for _ in range(20):  # requests aiohttp itself cannot parse
        with socket.create_connection((host, int(port)), source_address=("127.0.0.3", 0)) as s:
            s.sendall(b"GET / HTTP/1.1\r\nHost: localhost\r\nA header without a colon\r\n\r\n")
            assert s.recv(100).startswith(b"HTTP/1.0 400")
    windows = int((time.monotonic() - start) // 10) + 1
    assert client.get("/charts?interval=500").status == 200
    added = log.read_text()[before:]
    assert "Traceback" not in added and "Error handling request" not in added
    lines = [ln for ln in added.splitlines() if "console refused a request from 127.0.0.3" in ln]
    kinds = {ln.split("from 127.0.0.3: ", 1)[1].partition(" (+")[0] for ln in lines}
    assert kinds == {"400 GET /charts: bad query string", "400 GET /messages: Bad Request",
                     "400 GET /messages/{id}: bad message id", "unreadable HTTP request (BadHttpMessage)"}, lines
    assert len(lines) <= len(kinds) * windows, lines


def test_message_id_naming_a_foreign_address_is_not_followed(site):
    """An offset message id names the broker to ask: one naming any other address is refused, and the console
    opens no connection there."""
    bait = socket.create_server(("127.0.0.1", 0))
    bait.settimeout(2)
    try:
        ident = create_offset_msg_id(("127.0.0.1", bait.getsockname()[1]), 0)
        client = Http(site.base.removeprefix("http://"))
        answer = client.get(f"/messages/{ident}")
        assert answer.status == 400 and "names no broker of this cluster" in answer.text
        assert client.get(f"/messages?by=id&id={ident}").status == 400
        with pytest.raises(TimeoutError):
            bait.accept()
    finally:
        bait.close()
