"""The console in a real browser: Debian's chromium through chromedriver and Selenium, and what the tests do
with it (open a page, read a table, fill and send a form, answer its confirmation)."""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from selenium import webdriver
from selenium.common.exceptions import WebDriverException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support.ui import Select, WebDriverWait

from tests.e2e.cluster import Cluster


class Site:
    """The console's address, a browser, and the cluster behind them."""

    def __init__(self, cluster: Cluster | None, base: str, driver: WebDriver, shots: Path | None = None) -> None:
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




@contextmanager
def running_browser(profile: Path) -> Iterator[WebDriver]:
    """A browser, quit at the end, its chromedriver gone."""
    driver = browser(profile)
    try:
        yield driver
    finally:
        pid = driver.service.process.pid if driver.service.process else None
        driver.quit()
        if pid is not None:
            with pytest.raises(ProcessLookupError):
                for _ in range(50):  # chromedriver gone (quit waits for it; this only checks)
                    os.kill(pid, 0)
                    time.sleep(0.1)


def _gone(element: Any) -> bool:
    """Whether ``element`` left the document: Chromium answers a node of a page being replaced either "stale" or
    "does not belong to the document" (a WebDriverException), both meaning gone."""
    try:
        element.is_enabled()
    except WebDriverException:  # StaleElementReferenceException is one too
        return True
    return False
