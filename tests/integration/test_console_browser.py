"""The console in headless Chromium (Selenium) against a real cluster (C{twlog local}, two brokers, metrics on) and
real C{twlog console} processes: every page clicked through, the message browser sought by offset and by time,
an idle group's offsets reset through the preview and the confirmation, live charts, read-only mode, the banner
when ZooKeeper is unreachable, and polling stopped while the tab is hidden.

Skipped, saying what to install, without Chromium, its driver or Selenium (L{tests.browser.harness.missing}).
"""

from __future__ import annotations

import atexit
import json
import time
import urllib.parse

from twisted.trial.unittest import SynchronousTestCase

from tests.browser import harness
from tests.browser.harness import api, banner, open_page, wait_for, wait_page
from twlog.coord.zkserver import free_port

TOPIC = "browse"
GROUP = "idle-readers"
MESSAGES = 40

_state: dict = {}


def environment() -> dict:
    """The run's cluster with its data (a topic of JSON messages and an idle group), its console, a read-only
    console, and the browser: made on first use, stopped when the run ends."""
    if _state:
        return _state
    cluster = harness.shared_cluster()
    # The consoles and the browser start while the data is written.
    console, read_only = cluster.start_console(), cluster.start_console("--read-only")
    nowhere = f"127.0.0.1:{free_port()}"  # (a ZooKeeper that does not answer)
    unreachable = cluster.start_console(zookeeper=nowhere)
    driver = harness.browser()
    atexit.register(driver.quit)
    cluster.create_topic(TOPIC, 2, replication_factor=2)
    before_ms = int(time.time() * 1000)
    time.sleep(0.05)  # (a time strictly before the first write, at the clock's resolution)
    lines = [json.dumps({"n": n, "word": f"word-{n:03d}"}) for n in range(MESSAGES)]
    cluster.produce(TOPIC, lines, partition="0")
    cluster.consume_group(GROUP, TOPIC, 10)
    _state.update(cluster=cluster, before_ms=before_ms, console=console(), read_only=read_only(), driver=driver,
                  nowhere=nowhere, unreachable=unreachable())
    return _state


class ConsoleBrowserTests(SynchronousTestCase):
    skip = harness.missing()

    def setUp(self) -> None:
        env = environment()
        self.cluster, self.base, self.driver = env["cluster"], env["console"], env["driver"]

    # -- helpers -----------------------------------------------------------------------------------

    def css(self, selector: str):
        from selenium.webdriver.common.by import By

        return self.driver.find_element(By.CSS_SELECTOR, selector)

    def all(self, selector: str):
        from selenium.webdriver.common.by import By

        return self.driver.find_elements(By.CSS_SELECTOR, selector)

    def click(self, selector: str) -> None:
        self.css(selector).click()

    def click_link(self, text: str) -> None:
        from selenium.webdriver.common.by import By

        self.driver.find_element(By.LINK_TEXT, text).click()
        wait_page(self.driver)

    def path(self) -> str:
        url = urllib.parse.urlsplit(self.driver.current_url)
        return url.path + (f"?{url.query}" if url.query else "")

    def heading(self) -> str:
        return self.css("main h1").text

    def rows(self, selector: str) -> list:
        return wait_for(f"rows of {selector}", lambda: self.all(f"{selector} tbody tr[data-offset]"))

    def messages_api(self, query: str) -> dict:
        status, answer = api(self.base, f"topics/{TOPIC}/messages?{query}")
        self.assertEqual(status, 200, answer)
        return answer

    # -- the pages ---------------------------------------------------------------------------------

    def test_click_through_every_page(self) -> None:
        """From the overview, the nav and the links reach every page, each at its own address, drawn without an
        error banner, and a reload of the address draws the same page."""
        open_page(self.driver, self.base + "/")
        self.assertEqual(self.heading(), "Overview")
        wait_for("the brokers on the overview", lambda: len(self.all("#brokers tbody tr")) == 2)
        visits = [("Topics", "/topics", "Topics"), (TOPIC, f"/topics/{TOPIC}", TOPIC),
                  ("Browse messages", f"/topics/{TOPIC}/messages?newest=20", f"Messages in {TOPIC}"),
                  ("Groups", "/groups", "Consumer groups"), (GROUP, f"/groups/{GROUP}", GROUP),
                  ("Brokers", "/brokers", "Brokers"), ("Schemas", "/schemas", "Schemas"),
                  ("Security", "/security", "Security"), ("Overview", "/", "Overview")]
        for link, path, heading in visits:
            self.click_link(link)
            self.assertEqual(self.path(), path)
            self.assertEqual(self.heading(), heading)
            self.assertEqual(banner(self.driver), "", f"the banner on {path}")
        open_page(self.driver, f"{self.base}/topics/{TOPIC}")
        wait_for("the partitions", lambda: len(self.all("#partitions tbody tr")) == 2)
        cells = [td.text for td in self.all("#partitions tbody tr")[0].find_elements("css selector", "td")]
        self.assertEqual(cells[0], "0")
        self.assertEqual(sorted(cells[2].split(", ")), ["0", "1"])  # (replicas)
        self.assertIn(GROUP, [a.text for a in self.all("#topic-groups a")])
        open_page(self.driver, f"{self.base}/brokers")
        wait_for("two brokers", lambda: len(self.all("#brokers tbody tr")) == 2)

    def test_topics_filter_sort_and_address(self) -> None:
        """The topic list filters on the server and keeps its filter and sort in the address."""
        open_page(self.driver, f"{self.base}/topics")
        box = self.css("input.filter")
        box.send_keys("no-such-topic")
        wait_for("the filter in the address", lambda: "filter=no-such-topic" in self.path())
        wait_for("no topic matches", lambda: "No topic matches" in self.css("#topics").text)
        open_page(self.driver, f"{self.base}/topics?filter=brow&sort=size&order=desc")
        wait_for("the filtered list", lambda: [a.text for a in self.all("#topics tbody a:first-child")][:1] == [TOPIC])
        self.assertIn("▼", self.css('button.sort[data-sort="size"]').text)

    # -- the message browser -----------------------------------------------------------------------

    def test_seek_to_an_offset(self) -> None:
        """Seeking partition 0 to the offset of message 25 shows message 25 first, marked; its offset link is an
        address that shows it again."""
        everything = self.messages_api("partition=0&oldest=1&limit=100")["messages"]
        self.assertEqual(len(everything), MESSAGES)
        target = everything[25]
        open_page(self.driver, f"{self.base}/topics/{TOPIC}/messages")
        for box in self.all("input[name=partition]"):
            if box.is_selected() != (box.get_attribute("value") == "0"):
                box.click()
        from selenium.webdriver.support.ui import Select

        Select(self.css("#start")).select_by_value("offset")
        self.css("#start-value").send_keys(str(target["offset"]))
        self.click("#show")
        wait_for("message 25 first", lambda: '"n": 25' in self.rows("#messages")[0].text)
        first = self.rows("#messages")[0]
        self.assertEqual(first.get_attribute("data-offset"), str(target["offset"]))
        self.assertIn("target", first.get_attribute("class"))
        self.assertIn(f"offset={target['offset']}", self.path())
        # The link of message 30, opened as an address, shows message 30 first and marked.
        link = self.css(f'tr[data-offset="{everything[30]["offset"]}"] a.offset').get_attribute("href")
        open_page(self.driver, link)
        first = self.rows("#messages")[0]
        self.assertIn('"n": 30', first.text)
        self.assertIn("target", first.get_attribute("class"))

    def test_seek_to_a_time_and_page_on(self) -> None:
        """A time before the first write lands on the first message (a segment's resolution, as OFFSETS by time);
        a time after the last write on the end; Next pages on from where the page stopped."""
        before = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(_state["before_ms"] / 1000 - 1)) + "Z"
        query = urllib.parse.urlencode({"partition": "0", "time": before, "limit": "20"})
        open_page(self.driver, f"{self.base}/topics/{TOPIC}/messages?{query}")
        rows = self.rows("#messages")
        self.assertEqual(len(rows), 20)
        self.assertIn('"n": 0', rows[0].text)
        self.assertEqual(self.css("#start-value").get_attribute("value"), before)
        self.click("#next")
        wait_for("the next page", lambda: '"n": 20' in self.rows("#messages")[0].text)
        self.assertIn("cursor=", self.path())
        later = int(time.time() * 1000) + 60_000
        open_page(self.driver, f"{self.base}/topics/{TOPIC}/messages?partition=0&time={later}")
        wait_for("no messages after the last write", lambda: "No messages here" in self.css("#messages").text)

    def test_formats_and_filter(self) -> None:
        """Pretty JSON, hex and a substring filter."""
        open_page(self.driver, f"{self.base}/topics/{TOPIC}/messages?partition=0&oldest=1&format=json&filter=word-017")
        rows = self.rows("#messages")
        self.assertEqual(len(rows), 1)
        self.assertIn('"word": "word-017"', rows[0].text)
        self.assertIn("\n", self.css("#messages pre.value").text)  # (pretty: one key a line)
        open_page(self.driver, f"{self.base}/topics/{TOPIC}/messages?partition=0&oldest=1&format=hex&limit=20")
        self.assertIn("7b 22 6e 22", self.rows("#messages")[0].text.replace("7b226e22", "7b 22 6e 22"))

    # -- groups --------------------------------------------------------------------------------------

    def test_reset_an_idle_group_through_the_preview(self) -> None:
        """Partition 0 of the idle group, reset to the earliest offset: the preview shows the change and changes
        nothing; Confirm commits it, and twlog groups agrees."""
        def api_offsets() -> dict:
            status, group = api(self.base, f"groups/{GROUP}")
            self.assertEqual(status, 200, group)
            return {p["partition"]: p["offset"] for p in group["partitions"]}

        committed = api_offsets()
        self.assertGreater(committed["0"], 0)
        open_page(self.driver, f"{self.base}/groups/{GROUP}")
        from selenium.webdriver.support.ui import Select

        wait_for("the reset form", lambda: self.css("#reset-preview").is_enabled())
        Select(self.css("#reset-scope")).select_by_value("partition")
        Select(self.css("#reset-topic")).select_by_value(TOPIC)
        Select(self.css("#reset-partition")).select_by_value("0")
        Select(self.css("#reset-to")).select_by_value("earliest")
        self.click("#reset-preview")
        row = wait_for("the preview", lambda: self.all("#preview tbody tr[data-partition]"))
        self.assertEqual(len(row), 1)
        self.assertEqual(row[0].get_attribute("data-new-offset"), "0")
        self.assertEqual(api_offsets(), committed)  # (the preview changed nothing)
        self.click("#reset-confirm")
        wait_for("the reset applied", lambda: "Reset: 1 partition(s) committed." in self.css("#reset-result").text)
        # twlog groups (ZooKeeper's committed offsets) says what the page said it did.
        after = {p["partition"]: p["offset"] for p in self.cluster.group_json(GROUP)["partitions"]}
        self.assertEqual(after, {**committed, "0": 0})
        wait_for("the page's committed offset",
                 lambda: self.css('#group-partitions tr[data-partition="0"] td:nth-child(4)').text == "0", 15)

    def test_read_only_hides_the_changes(self) -> None:
        """The read-only console shows the group without the reset and delete, and refuses a reset."""
        base = _state["read_only"]
        open_page(self.driver, f"{base}/groups/{GROUP}")
        wait_for("the read-only note", lambda: self.all("#read-only-note"))
        self.assertEqual(self.all("#reset-form"), [])
        self.assertEqual(self.all("#delete-group"), [])
        self.assertEqual(self.css("#read-only").text, "read-only")
        status, answer = api(base, f"groups/{GROUP}/reset", "POST", {"topic": TOPIC, "partition": "0", "to": "latest",
                                                                     "dry_run": True}, {"X-Twlog-Console": "1"})
        self.assertEqual(status, 403, answer)

    # -- charts, polling and errors -------------------------------------------------------------------

    def test_charts_draw_live_data(self) -> None:
        """The overview's charts and the topic's size chart draw the console's samples: points and a canvas."""

        def drawn(url: str, selector: str):
            open_page(self.driver, url)
            figure = self.css(selector)
            return int(figure.get_attribute("data-points")) > 0 and figure.find_elements("css selector", "canvas")

        self.cluster.produce(TOPIC, [f"more-{n}" for n in range(20)], partition="1")
        overview = 'figure[data-series="cluster.bytes_in,cluster.bytes_out"]'
        wait_for("the overview's bytes chart", lambda: drawn(self.base + "/", overview), 30, step_s=1.0)
        size = f'figure[data-series="topic.{TOPIC}.size"]'
        wait_for("the topic's size chart", lambda: drawn(f"{self.base}/topics/{TOPIC}", size), 30, step_s=1.0)
        status, history = api(self.base, f"history?series=topic.{TOPIC}.size")
        self.assertEqual(status, 200)
        self.assertTrue(history["series"][f"topic.{TOPIC}.size"])

    def test_polling_stops_while_hidden(self) -> None:
        """Hidden (visibilitychange), the page's pollers stop; shown again, they run."""
        open_page(self.driver, self.base + "/")
        def waiting() -> int:
            return self.driver.execute_script("return window.twlogConsole.pollingState().waiting")

        self.assertGreater(waiting(), 0)
        hide = ("Object.defineProperty(document, 'visibilityState', {value: arguments[0], configurable: true});"
                "document.dispatchEvent(new Event('visibilitychange'));")
        self.driver.execute_script(hide, "hidden")
        wait_for("polling stopped", lambda: waiting() == 0, 10)  # (a round already running ends and waits no more)
        self.driver.execute_script(hide, "visible")
        wait_for("polling again", lambda: waiting() > 0)

    def test_unreachable_zookeeper_is_a_banner(self) -> None:
        """A console whose ZooKeeper does not answer draws its pages with a banner naming ZooKeeper."""
        nowhere, base = _state["nowhere"], _state["unreachable"]
        open_page(self.driver, f"{base}/topics")
        text = wait_for("the banner", lambda: banner(self.driver), 20)
        self.assertIn(f"zookeeper {nowhere}", text)
        self.assertEqual(self.heading(), "Topics")
