"""The web console in a real browser (Debian's chromium through chromedriver and Selenium): each page's main
flow clicked through against live broker processes. ``TXMQ_SCREENSHOTS=DIR`` saves a screenshot of each page
(docs/console-*.png come from such a run)."""

from __future__ import annotations

import os
import shutil
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from cluster import Cluster
from helpers import Recorder, push_consumer
from selenium import webdriver
from selenium.common.exceptions import WebDriverException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support.ui import Select, WebDriverWait

from txmq import ConsumeStatus, LocalTransactionState, Message, Producer, TransactionProducer
from txmq.admin import MQAdminExt
from txmq.launch import ServerProcess, free_port, txmq_command

N = 5


class Site:
    """The console's address, a browser, and the cluster behind them."""

    def __init__(self, cluster: Cluster, base: str, driver: WebDriver, shots: Path | None) -> None:
        self.cluster, self.base, self.driver, self.shots = cluster, base, driver, shots

    def open(self, path: str) -> None:
        self.driver.get(self.base + path)

    def rows(self, table_id: str) -> list[list[str]]:
        body = self.driver.find_element(By.CSS_SELECTOR, f"#{table_id} tbody")
        return [[td.text for td in tr.find_elements(By.TAG_NAME, "td")]
                for tr in body.find_elements(By.TAG_NAME, "tr") if "empty" not in (tr.get_attribute("class") or "")]

    def text(self, css: str) -> str:
        return self.driver.find_element(By.CSS_SELECTOR, css).text

    def submit(self, form_id: str, accept: bool | None = None, **fields: str) -> None:
        """Fill the form's fields and press its button; ``accept``: answer the confirmation it asks."""
        form = self.driver.find_element(By.ID, form_id)
        for name, value in fields.items():
            el = form.find_element(By.NAME, name)
            if el.tag_name == "select":
                Select(el).select_by_value(value)
            else:
                el.clear()
                el.send_keys(value)
        form.find_element(By.TAG_NAME, "button").click()
        if accept is not None:
            alert = WebDriverWait(self.driver, 5).until(lambda d: d.switch_to.alert)
            alert.accept() if accept else alert.dismiss()
        if accept is not False:  # the next page has loaded when this form is gone
            WebDriverWait(self.driver, 20).until(lambda _: _gone(form))

    def wait(self, pred: Callable[[], Any], what: str, timeout: float = 20, reload: bool = False) -> Any:
        deadline = time.monotonic() + timeout
        while True:
            try:
                got = pred()
            except WebDriverException:
                got = None
            if got:
                return got
            assert time.monotonic() < deadline, f"timed out waiting for {what}"
            time.sleep(0.3)
            if reload:
                self.driver.refresh()

    def shot(self, name: str) -> None:
        if self.shots is not None:
            self.driver.save_screenshot(str(self.shots / f"console-{name}.png"))


def browser(profile: Path) -> WebDriver:
    chromium, chromedriver = shutil.which("chromium"), shutil.which("chromedriver")
    if not chromium or not chromedriver:
        pytest.fail("chromium and chromedriver are missing (make test installs Debian's chromium, chromium-driver)")
    opts = webdriver.ChromeOptions()
    opts.binary_location = chromium
    for arg in ("--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
                "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage", "--window-size=1280,860",
                f"--user-data-dir={profile}"):
        opts.add_argument(arg)
    return webdriver.Chrome(options=opts, service=Service(executable_path=chromedriver))


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    root = Path(tmp_path_factory.mktemp("console"))
    cluster = Cluster(root)
    driver = None
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
        driver = browser(root / "profile")
        shots = os.environ.get("TXMQ_SCREENSHOTS")
        yield Site(cluster, f"http://{console.addrs['console']}", driver, Path(shots) if shots else None)
    finally:
        if driver is not None:
            pid = driver.service.process.pid if driver.service.process else None
            driver.quit()
            if pid is not None:
                with pytest.raises(ProcessLookupError):
                    for _ in range(50):  # chromedriver gone (quit waits for it; this only checks)
                        os.kill(pid, 0)
                        time.sleep(0.1)
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


def test_transactions_commit_and_rollback_with_confirmation(site):
    with TransactionProducer("web_txp", Undecided(), site.cluster.namesrv_addr) as producer:
        keep = producer.send_message_in_transaction(Message("web_t", b"operator commit", keys="tx_keep"))
        drop = producer.send_message_in_transaction(Message("web_t", b"operator rollback", keys="tx_drop"))
    site.open("/transactions")
    pending = {r[0]: r for r in site.rows("pending")}
    assert set(pending) == {keep.transaction_id, drop.transaction_id}
    assert pending[keep.transaction_id][2:4] == ["web_t", "web_txp"]
    site.shot("transactions")
    site.submit(f"commit-{keep.transaction_id}", accept=False)
    assert len(site.rows("pending")) == 2
    site.submit(f"commit-{keep.transaction_id}", accept=True)
    site.wait(lambda: "committed on broker-a by an operator" in site.text("#notice"), "the commit notice")
    site.submit(f"rollback-{drop.transaction_id}", accept=True)
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
        site.submit(f"resume-{tx.transaction_id}")
        assert f"transaction {tx.transaction_id} resumed into checking on broker-b" in site.text("#notice")
        assert tx.transaction_id in [r[0] for r in site.rows("pending")]


def _gone(element: Any) -> bool:
    """Whether ``element`` left the document: Chromium answers a node of a page being replaced either "stale" or
    "does not belong to the document" (a WebDriverException), both meaning gone."""
    try:
        element.is_enabled()
    except WebDriverException:  # StaleElementReferenceException is one too
        return True
    return False
