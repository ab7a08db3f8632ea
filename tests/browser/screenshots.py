"""Redraw docs/console/*.png: each page of the console, in headless Chromium at 1280 px wide, over a real cluster
with some data (topics, an idle group, a registry with two versions of a schema) and a minute of samples.

    python -m tests.browser.screenshots [--out docs/console]      (or: ./dev screenshots)
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

from tests.browser import harness
from tests.browser.harness import Cluster, api, open_page, wait_for

SCHEMA_V1 = {"type": "record", "name": "Order", "fields": [{"name": "id", "type": "long"},
                                                          {"name": "amount", "type": "double"}]}
SCHEMA_V2 = {"type": "record", "name": "Order", "fields": [{"name": "id", "type": "long"},
                                                          {"name": "amount", "type": "double"},
                                                          {"name": "currency", "type": "string", "default": "EUR"}]}


def seed(cluster: Cluster, registry: str) -> None:
    cluster.create_topic("clicks", 4, replication_factor=2)
    cluster.create_topic("orders", 2, replication_factor=2)
    cluster.create_topic("audit-log", 1)
    for n in range(4):
        cluster.produce("clicks", [json.dumps({"user": f"u{(n * 50 + i) % 17}", "page": f"/p/{i % 9}", "ms": 120 + i})
                                   for i in range(50)], partition=str(n))
    orders = [json.dumps({"id": i, "amount": round(9.5 * i, 2), "currency": "EUR"}) for i in range(30)]
    cluster.produce("orders", orders, partition="0")
    cluster.consume_groups([("dashboards", "clicks", 60), ("billing", "orders", 12)])
    for schema in (SCHEMA_V1, SCHEMA_V2):
        status, answer = api(registry, "subjects/orders-value/versions", "POST", {"schema": json.dumps(schema)},
                             {"Content-Type": "application/vnd.schemaregistry.v1+json"}, prefix="/")
        if status != 200:
            raise AssertionError(f"registering a schema: {status} {answer}")


def traffic(cluster: Cluster, seconds: float) -> None:
    """Produce a batch a second for C{seconds}, so the charts have something to draw."""
    deadline = time.monotonic() + seconds
    n = 0
    while time.monotonic() < deadline:
        cluster.produce("clicks", [json.dumps({"user": f"u{i % 17}", "page": f"/p/{i % 9}", "batch": n})
                                   for i in range(20 + 15 * (n % 4))], partition=str(n % 4))
        n += 1


PAGES = [
    ("overview", "/", None),
    ("topics", "/topics", None),
    ("topic", "/topics/clicks", "figure.chart canvas"),
    ("messages", "/topics/orders/messages?partition=0&newest=8&format=json", "#messages"),
    ("groups", "/groups", "#groups"),
    ("group", "/groups/dashboards", "#group-partitions"),
    ("group-reset", "/groups/dashboards", "#preview"),
    ("brokers", "/brokers", "#brokers"),
    ("schemas", "/schemas", "#subjects"),
    ("schema", "/schemas/orders-value?from=1&to=2", "#diff pre"),
    ("security", "/security", None),
]


def shoot(base: str, out: str) -> list[str]:
    from selenium.webdriver.support.ui import Select

    driver = harness.browser(1280, 900)
    written = []
    try:
        for name, path, selector in PAGES:
            open_page(driver, base + path)
            if name == "group-reset":  # (the reset's preview: every partition to the latest offset, not confirmed)
                wait_for("the reset form", lambda: driver.find_element("css selector", "#reset-preview").is_enabled())
                Select(driver.find_element("css selector", "#reset-to")).select_by_value("latest")
                driver.find_element("css selector", "#reset-preview").click()
            if selector:
                wait_for(f"{selector} on {path}", lambda s=selector: driver.find_elements("css selector", s))
            time.sleep(0.5)  # (the charts' first draw and the fonts)
            # The whole page (at most 1,800 px), not only the window's height.
            height = driver.execute_script("return Math.min(1800, document.documentElement.scrollHeight)")
            driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride",
                                   {"width": 1280, "height": max(700, height), "deviceScaleFactor": 1, "mobile": False})
            time.sleep(0.3)
            target = os.path.join(out, f"{name}.png")
            driver.save_screenshot(target)
            driver.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})
            written.append(target)
    finally:
        driver.quit()
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="docs/console", help="directory of the PNGs (default: docs/console)")
    parser.add_argument("--traffic-s", type=float, default=25.0, help="seconds of traffic before the pictures")
    args = parser.parse_args(argv)
    why = harness.missing()
    if why:
        print(f"screenshots: {why}", file=sys.stderr)
        return 1
    os.makedirs(args.out, exist_ok=True)
    cluster = Cluster(brokers=2).start()
    try:
        registry = cluster.registry()
        seed(cluster, registry)
        base = cluster.console("--registry", registry)
        traffic(cluster, args.traffic_s)
        for path in shoot(base, args.out):
            print(path)
    finally:
        cluster.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
