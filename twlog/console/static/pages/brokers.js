// The brokers (/brokers): per broker bytes in and out, messages in, request latency percentiles, open
// connections, partitions led and followed; a chart of each broker's bytes in.

import { get, poll } from "../api.js";
import { historyChart } from "../charts.js";
import { byteRate, h, ms, num, rate, table } from "../ui.js";

export async function render(main, ctx) {
  const body = h("div", { class: "block" });
  const charts = h("div", { class: "charts" });
  main.append(h("h1", {}, "Brokers"), body, charts);
  let chartSet = null;
  let ids = "";

  async function refresh() {
    const answer = await get("brokers");
    if (!ctx.current()) return;
    body.replaceChildren(table([
      { label: "id", cell: (b) => String(b.id) },
      { label: "address", cell: (b) => `${b.host}:${b.port}${b.tls_port ? ` (TLS ${b.tls_port})` : ""}` },
      { label: "state", cell: (b) => h("span", { class: b.alive ? "ok" : "bad" }, b.alive ? "alive" : "down") },
      { label: "role", cell: (b) => (b.controller ? "controller" : "") },
      { label: "bytes in", num: true, cell: (b) => byteRate(b.bytes_in_per_s) },
      { label: "bytes out", num: true, cell: (b) => byteRate(b.bytes_out_per_s) },
      { label: "messages in", num: true, cell: (b) => rate(b.messages_in_per_s) },
      { label: "connections", num: true, cell: (b) => num(b.connections) },
      { label: "latency p50", num: true, cell: (b) => ms(b.request_latency_ms && b.request_latency_ms.p50) },
      { label: "p99", num: true, cell: (b) => ms(b.request_latency_ms && b.request_latency_ms.p99) },
      { label: "p99.9", num: true, cell: (b) => ms(b.request_latency_ms && b.request_latency_ms.p999) },
      { label: "leads", num: true, cell: (b) => num(b.leader_partitions) },
      { label: "follows", num: true, cell: (b) => num(b.follower_partitions) },
      // (a link only to http(s): the address comes from ZooKeeper, which any broker writes)
      { label: "metrics", cell: (b) => (/^https?:\/\//.test(b.metrics_url || "")
        ? h("a", { href: b.metrics_url, target: "_blank", rel: "noopener noreferrer" }, "metrics") : "–") },
    ], answer.brokers, { id: "brokers", empty: "No broker is registered in ZooKeeper." }));
    const now = answer.brokers.map((b) => b.id).join(",");
    if (now !== ids) {
      ids = now;
      const label = (n) => `broker ${n.split(".")[1]}`;
      chartSet = [
        historyChart({ title: "Bytes in per second, per broker", names: answer.brokers.map((b) => `broker.${b.id}.bytes_in`), labels: label, unit: "bytes/s" }),
        historyChart({ title: "Bytes out per second, per broker", names: answer.brokers.map((b) => `broker.${b.id}.bytes_out`), labels: label, unit: "bytes/s" }),
        historyChart({ title: "Open connections, per broker", names: answer.brokers.map((b) => `broker.${b.id}.connections`), labels: label }),
      ];
      charts.replaceChildren(...chartSet.map((c) => c.element));
    }
  }

  async function refreshCharts() {
    if (chartSet && ids) await Promise.all(chartSet.map((c) => c.load()));
  }

  await refresh().catch(() => {});
  await refreshCharts().catch(() => {});
  poll(refresh, 10000);
  poll(refreshCharts, 10000);
}
