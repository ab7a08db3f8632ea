// The overview (/): brokers and the controller, topics, under-replicated and offline partitions, and live
// charts of the cluster's messages and bytes per second.

import { get, poll } from "../api.js";
import { historyChart } from "../charts.js";
import { byteRate, h, num, rate, section, stat, table } from "../ui.js";

const REFRESH_MS = 10000;

function partitionLink(p) {
  return h("a", { href: `/topics/${encodeURIComponent(p.topic)}` }, `${p.topic} ${p.partition}`);
}

export async function render(main, ctx) {
  const stats = h("div", { class: "stats" });
  const brokers = h("div");
  const trouble = h("div");
  const charts = [
    historyChart({ title: "Messages in per second", names: ["cluster.messages_in"], labels: () => "messages in", unit: "/s" }),
    historyChart({ title: "Bytes in and out per second", names: ["cluster.bytes_in", "cluster.bytes_out"],
      labels: (n) => (n.endsWith("in") ? "bytes in" : "bytes out"), unit: "bytes/s" }),
  ];
  main.append(h("h1", {}, "Overview"), stats,
    h("div", { class: "charts" }, charts.map((c) => c.element)),
    h("div", { class: "columns" }, section("Brokers", brokers), section("Partitions needing attention", trouble)));

  async function refresh() {
    const o = await get("overview");
    if (!ctx.current()) return;
    const rates = o.rates || {};
    const alive = o.brokers.filter((b) => b.alive).length;
    stats.replaceChildren(
      stat("brokers alive", `${alive} of ${o.brokers.length}`, alive < o.brokers.length ? "bad" : ""),
      stat("controller", o.controller === null || o.controller === undefined ? "none" : `broker ${o.controller}`),
      stat("topics", h("a", { href: "/topics" }, num(o.topics))),
      stat("partitions", num(o.partitions)),
      stat("under-replicated", num(o.under_replicated.length), o.under_replicated.length ? "warn" : ""),
      stat("offline", num(o.offline.length), o.offline.length ? "bad" : ""),
      stat("messages in", rate(rates.messages_in)),
      stat("bytes in", byteRate(rates.bytes_in)),
      stat("bytes out", byteRate(rates.bytes_out)));
    brokers.replaceChildren(table([
      { label: "id", cell: (b) => String(b.id) },
      { label: "address", cell: (b) => `${b.host}:${b.port}` },
      { label: "state", cell: (b) => h("span", { class: b.alive ? "ok" : "bad" }, b.alive ? "alive" : "down") },
      { label: "role", cell: (b) => (b.id === o.controller ? "controller" : "") },
    ], o.brokers, { id: "brokers", empty: "No broker is registered in ZooKeeper." }));
    const rows = [...o.offline.map((p) => ({ ...p, state: "offline" })),
      ...o.under_replicated.map((p) => ({ ...p, state: "under-replicated" }))];
    trouble.replaceChildren(table([
      { label: "partition", cell: partitionLink },
      { label: "state", cell: (p) => h("span", { class: p.state === "offline" ? "bad" : "warn" }, p.state) },
    ], rows, { id: "trouble", empty: "Every partition is fully replicated." }));
  }

  async function refreshCharts() {
    await Promise.all(charts.map((c) => c.load()));
  }

  await Promise.allSettled([refresh(), refreshCharts()]);
  poll(refresh, REFRESH_MS);
  poll(refreshCharts, REFRESH_MS);
}
