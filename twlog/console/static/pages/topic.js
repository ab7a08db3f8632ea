// A topic (/topics/<topic>): each partition with leader, replicas, ISR, first and last offset and size; the
// groups reading it; its configuration; a chart of its size over the last hour.

import { enc, get, poll } from "../api.js";
import { historyChart } from "../charts.js";
import { bytes, h, list, num, section, stat, table } from "../ui.js";

export async function render(main, ctx) {
  const topic = ctx.params.topic;
  const stats = h("div", { class: "stats" });
  const partitions = h("div");
  const groups = h("div");
  const config = h("div");
  const chart = historyChart({ title: "Size over the last hour", names: [`topic.${topic}.size`], labels: () => "size", unit: "bytes" });
  main.append(
    h("p", { class: "crumbs" }, h("a", { href: "/topics" }, "Topics"), " / "),
    h("div", { class: "title-row" }, h("h1", {}, topic),
      h("a", { class: "button", id: "browse", href: `/topics/${enc(topic)}/messages?newest=20` }, "Browse messages")),
    stats, h("div", { class: "charts" }, chart.element),
    section("Partitions", partitions),
    h("div", { class: "columns" }, section("Consumer groups reading it", groups), section("Configuration", config)));

  async function refresh() {
    const t = await get(`topics/${enc(topic)}`);
    if (!ctx.current()) return;
    const size = t.partitions.reduce((sum, p) => sum + (p.size_bytes || 0), 0);
    stats.replaceChildren(stat("partitions", num(t.partitions.length)),
      stat("replication", t.replicated ? "replicated" : "per broker (0.7)"),
      stat("size", bytes(size)),
      stat("groups", num(t.groups.length)));
    const link = (p, offset, text) => h("a", { href: `/topics/${enc(topic)}/messages?partition=${enc(p.partition)}&offset=${offset}` }, text);
    partitions.replaceChildren(table([
      { label: "partition", cell: (p) => link(p, p.first_offset ?? 0, String(p.partition)) },
      { label: "leader", num: true, cell: (p) => (p.leader === null || p.leader === undefined ? h("span", { class: "bad" }, "none") : String(p.leader)) },
      { label: "replicas", cell: (p) => list(p.replicas) },
      { label: "ISR", cell: (p) => {
        const short = p.replicas && p.isr && p.isr.length < p.replicas.length;
        return h("span", { class: short ? "warn" : null }, list(p.isr));
      } },
      { label: "first offset", num: true, cell: (p) => num(p.first_offset) },
      { label: "last offset", num: true, cell: (p) => num(p.last_offset) },
      { label: "high watermark", num: true, cell: (p) => num(p.high_watermark) },
      { label: "size", num: true, cell: (p) => bytes(p.size_bytes) },
    ], t.partitions, { id: "partitions", empty: "This topic has no partitions on a live broker." }));
    groups.replaceChildren(table([
      { label: "group", cell: (g) => h("a", { href: `/groups/${enc(g.group)}` }, g.group) },
      { label: "lag", num: true, cell: (g) => bytes(g.lag_bytes) },
    ], t.groups, { id: "topic-groups", empty: "No group has committed an offset on it." }));
    const entries = Object.entries(t.config || {});
    config.replaceChildren(table([
      { label: "setting", cell: ([k]) => h("code", {}, k) },
      { label: "value", cell: ([, v]) => (typeof v === "object" && v !== null ? JSON.stringify(v) : String(v)) },
    ], entries, { id: "config", empty: "Defaults only." }));
  }

  await Promise.allSettled([refresh(), chart.load()]);
  poll(refresh, 15000);
  poll(chart.load, 10000);
}
