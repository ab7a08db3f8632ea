"""The console in headless Chromium (Selenium) against a real cluster (C{twlog local}, two brokers, metrics on) and
real C{twlog console} processes: every page clicked through, the message browser sought by offset and by time,
an idle group's offsets reset through the preview and the confirmation, live charts, read-only mode, the banner
when ZooKeeper is unreachable, and polling stopped while the tab is hidden.

Skipped, saying what to install, without Chromium, its driver or Selenium (L{tests.browser.harness.missing}).
"""

from __future__ import annotations

import atexit
import json
import os
import re
import time
import urllib.parse

from twisted.trial.unittest import SynchronousTestCase

from tests.browser import harness
from tests.browser.harness import api, banner, open_page, wait_for, wait_page
from twlog.coord.zkserver import free_port

TOPIC = "browse"
GROUP = "idle-readers"
MESSAGES = 40
DOOMED = "doomed-readers"
LIVE = "live-readers"
ADMIN = "admin"
AVRO_TOPIC = "points"
POINT = {"type": "record", "name": "Point",
         "fields": [{"name": "x", "type": "int"}, {"name": "label", "type": "string"}]}

_state: dict = {}
_failed: list[Exception] = []


def environment() -> dict:
    """The run's cluster with its data (a topic of JSON messages and an idle group), its console, a read-only
    console, and the browser: made on first use, stopped when the run ends."""
    if _state:
        return _state
    if _failed:  # (the next tests fail at once with the same error, without starting everything again)
        raise AssertionError(f"the environment could not be made: {_failed[0]}")
    try:
        return _make_environment()
    except Exception as e:
        _failed.append(e)
        raise


def _make_environment() -> dict:
    cluster = harness.shared_cluster()
    registry = cluster.registry()
    # The consoles and the browser start while the data is written.
    console, read_only = cluster.start_console("--registry", registry), cluster.start_console("--read-only")
    nowhere = f"127.0.0.1:{free_port()}"  # (a ZooKeeper that does not answer)
    unreachable = cluster.start_console(zookeeper=nowhere)
    login = cluster.start_console("--login", "--super-users", f"User:{ADMIN}")
    driver = harness.browser()
    atexit.register(driver.quit)
    cluster.create_topic(TOPIC, 2, replication_factor=2)
    before_ms = int(time.time() * 1000)
    time.sleep(0.05)  # (a time strictly before the first write, at the clock's resolution)
    lines = [json.dumps({"n": n, "word": f"word-{n:03d}"}) for n in range(MESSAGES)]
    cluster.produce(TOPIC, lines, partition="0")
    cluster.consume_groups([(GROUP, TOPIC, 10), (DOOMED, TOPIC, 5)])
    schema = os.path.join(cluster.directory, "point.avsc")
    with open(schema, "w") as f:
        json.dump(POINT, f)
    cluster.produce(AVRO_TOPIC, [json.dumps({"x": n, "label": f"point-{n}"}) for n in range(5)], partition="0",
                    avro=(schema, registry))
    # A member that stays: its group has live members.
    cluster.processes.start("live-member", "consume", "--zookeeper", cluster.zookeeper, "--group", LIVE,
                            "--topic", TOPIC, "--follow")
    _state.update(cluster=cluster, before_ms=before_ms, console=console(), read_only=read_only(), driver=driver,
                  nowhere=nowhere, unreachable=unreachable(), login=login())
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

    def assertNoJunk(self, where: str) -> None:
        """The page shows no value the script failed to format (null, undefined, NaN, [object Object])."""
        junk = re.findall(r"\bnull\b|\bundefined\b|\bNaN\b|\[object", self.css("main").text)
        self.assertEqual(junk, [], f"on {where}")

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
            self.assertNoJunk(path)
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
        # The form: start at a time picked (the browser's local time, UTC here), written into the box as UTC.
        from selenium.webdriver.support.ui import Select

        Select(self.css("#start")).select_by_value("time")
        self.assertTrue(self.css("#time-picker").is_displayed())
        picked = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(_state["before_ms"] / 1000 - 1))
        self.driver.execute_script("const p = document.getElementById('time-picker'); p.value = arguments[0];"
                                   "p.dispatchEvent(new Event('change'));", picked)
        self.assertEqual(self.css("#start-value").get_attribute("value"), before)
        self.click("#show")
        wait_for("message 0 first again", lambda: '"n": 0' in self.rows("#messages")[0].text)
        self.assertIn(urllib.parse.quote(before, safe=""), self.path())
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

    def test_avro_through_the_registry(self) -> None:
        """Avro messages are decoded through the registry; the schemas page lists their subject."""
        open_page(self.driver, f"{self.base}/topics/{AVRO_TOPIC}/messages?partition=0&oldest=1&format=avro")
        rows = self.rows("#messages")
        self.assertEqual(len(rows), 5)
        self.assertIn("point-3", rows[3].text)
        self.assertIn('"x": 3', rows[3].text)
        open_page(self.driver, f"{self.base}/schemas")
        wait_for("the subject", lambda: f"{AVRO_TOPIC}-value" in self.css("#subjects").text)
        self.click_link(f"{AVRO_TOPIC}-value")
        self.assertIn('"name": "Point"', wait_for("the schema", lambda: self.css("#schema").text))

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
        self.assertNoJunk("the preview")
        self.assertEqual(len(row), 1)
        self.assertEqual(row[0].get_attribute("data-new-offset"), "0")
        self.assertEqual(api_offsets(), committed)  # (the preview changed nothing)
        self.click("#reset-confirm")
        wait_for("the reset applied", lambda: "Reset: 1 partition(s) committed." in self.css("#reset-result").text)
        self.assertNoJunk("the group page after the reset")
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

    def test_a_topic_that_does_not_exist_is_a_banner(self) -> None:
        """A topic's address naming no topic draws the page with the API's one line in the banner."""
        open_page(self.driver, f"{self.base}/topics/no-such-topic")
        self.assertEqual(self.heading(), "no-such-topic")
        self.assertIn("does not exist", wait_for("the banner", lambda: banner(self.driver)))
        self.driver.get(f"{self.base}/no/such/page")  # (the site's own 404 page, with a link to the overview)
        self.assertIn("No page at this address", self.driver.find_element("css selector", "body").text)

    def test_delete_an_idle_group(self) -> None:
        """Delete group, then Delete: the group is gone (the API answers 404) and the page goes to the list."""
        open_page(self.driver, f"{self.base}/groups/{DOOMED}")
        wait_for("the delete button", lambda: self.css("#delete-group").is_enabled())
        self.click("#delete-group")
        wait_for("the confirmation", lambda: self.css("#delete-confirm")).click()
        wait_for("the groups list", lambda: self.path() == "/groups")
        status, answer = api(self.base, f"groups/{DOOMED}")
        self.assertEqual(status, 404, answer)

    def test_a_group_with_live_members_cannot_be_reset(self) -> None:
        """While the group has a live member, the reset and the delete are disabled and the page says why."""
        wait_for("the live member", lambda: api(self.base, f"groups/{LIVE}")[1].get("live"), 30, step_s=0.5)
        open_page(self.driver, f"{self.base}/groups/{LIVE}")
        reason = wait_for("the reason", lambda: self.css("#live-reason").text)
        self.assertIn("live member", reason)
        self.assertFalse(self.css("#reset-preview").is_enabled())
        self.assertFalse(self.css("#delete-group").is_enabled())
        self.assertEqual(len(self.all("#members tbody tr code")), 1)

    def test_users_and_acls_edited(self) -> None:
        """The security page adds a user and an ACL, then removes both."""
        from selenium.webdriver.support.ui import Select

        open_page(self.driver, f"{self.base}/security")
        form = self.css("#user-form")
        form.find_element("name", "user").send_keys("carol")
        form.find_element("name", "password").send_keys("carol-secret")
        form.find_element("css selector", "button[type=submit]").click()
        wait_for("carol listed", lambda: "carol" in self.css("#users").text)
        acl = self.css("#acl-form")
        acl.find_element("name", "principal").send_keys("User:carol")
        acl.find_element("name", "resource_name").send_keys(TOPIC)
        Select(acl.find_element("name", "operation")).select_by_value("Read")
        acl.find_element("css selector", "button[type=submit]").click()
        wait_for("carol's ACL listed", lambda: "User:carol" in self.css("#acls").text)
        status, answer = api(self.base, "acls?principal=User:carol")
        self.assertEqual([(a["operation"], a["resource_name"]) for a in answer["acls"]], [("Read", TOPIC)])
        [remove] = [row for row in self.all("#acls tbody tr") if "User:carol" in row.text]
        remove.find_element("css selector", "button").click()
        wait_for("carol's ACL gone", lambda: "User:carol" not in self.css("#acls").text)
        self.css('button[data-user="carol"]').click()
        wait_for("carol gone", lambda: "carol" not in self.css("#users").text)

    def test_login(self) -> None:
        """With --login a page sends the browser to the login, which comes back to the page once logged in."""
        status, answer = api(self.base, "users", "POST", {"user": ADMIN, "password": "admin-secret"},
                             {"X-Twlog-Console": "1"})
        self.assertEqual(status, 200, answer)
        base = _state["login"]
        self.driver.delete_all_cookies()
        open_page(self.driver, f"{base}/groups")
        wait_for("the login page", lambda: self.path().startswith("/login?next="))
        self.css("#login-user").send_keys(ADMIN)
        self.css("#login-password").send_keys("wrong")
        self.click("#login")
        wait_for("the refusal", lambda: self.css("#login-form .note.error").text)
        self.css("#login-password").clear()
        self.css("#login-password").send_keys("admin-secret")
        self.click("#login")
        wait_for("back on the groups", lambda: self.path() == "/groups")
        wait_page(self.driver)
        self.assertEqual(self.css("#who .user").text, ADMIN)
        wait_for("the groups listed", lambda: GROUP in self.css("#groups").text)
        self.click("#logout")
        wait_for("the login page again", lambda: self.path().startswith("/login"))
