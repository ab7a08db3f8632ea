// A consumer group (/groups/<group>): members, owners, committed offset, end and lag per partition, a chart of
// its lag over the last hour, the offset reset (a preview first, then Confirm) and deleting the group.

import { enc, get, poll } from "../api.js";
import { historyChart } from "../charts.js";
import { bytes, h, list, num, section, stat, table } from "../ui.js";
import { resetPanel } from "./reset.js";

export async function render(main, ctx) {
  const group = ctx.params.group;
  const stats = h("div", { class: "stats" });
  const members = h("div");
  const partitions = h("div");
  const actions = h("div", { id: "group-actions" });
  // (the total is always asked for, so the request names a series before the first sample)
  const chart = historyChart({ title: "Lag over the last hour", names: [`group.${group}.lag`], prefix: `group.${group}.`, unit: "bytes",
    labels: (n) => (n === `group.${group}.lag` ? "total" : n.slice(`group.${group}.`.length, -".lag".length)),
    pick: (n) => n.endsWith(".lag") });
  main.append(h("p", { class: "crumbs" }, h("a", { href: "/groups" }, "Groups"), " / "),
    h("h1", {}, group), stats, h("div", { class: "charts" }, chart.element),
    section("Partitions", partitions), section("Members", members), actions);

  let reset = null;

  async function refresh() {
    const g = await get(`groups/${enc(group)}`);
    if (!ctx.current()) return;
    const live = Boolean(g.live) || g.members.length > 0;
    const lagLeft = g.lag_leaves_out && g.lag_leaves_out.length ? ` (leaves out ${list(g.lag_leaves_out)})` : "";
    stats.replaceChildren(stat("state", live ? "active" : "idle", live ? "ok" : ""),
      stat("members", num(g.members.length)),
      stat("partitions", num(g.partitions.length)),
      stat("total lag", `${bytes(g.lag_bytes)}${lagLeft}`, g.lag_bytes ? "warn" : ""));
    members.replaceChildren(table([
      { label: "member", cell: (m) => h("code", {}, m.id) },
      { label: "subscription", cell: (m) => Object.entries(m.subscription || {}).map(([t, n]) => `${t} ×${n}`).join(", ") || "–" },
    ], g.members, { id: "members", empty: "No live members: the group is idle." }));
    partitions.replaceChildren(table([
      { label: "topic", cell: (p) => h("a", { href: `/topics/${enc(p.topic)}` }, p.topic) },
      { label: "partition", cell: (p) => String(p.partition) },
      { label: "owner", cell: (p) => (p.owner ? h("code", {}, p.owner) : h("span", { class: "muted" }, "none")) },
      { label: "committed", num: true, cell: (p) => (p.offset === null || p.offset === undefined ? "–"
        : h("a", { href: `/topics/${enc(p.topic)}/messages?partition=${enc(p.partition)}&offset=${p.offset}` }, num(p.offset))) },
      { label: "end", num: true, cell: (p) => num(p.latest) },
      { label: "lag (bytes)", num: true, cell: (p) => bytes(p.lag_bytes) },
      { label: "lag (messages)", num: true, cell: (p) => num(p.lag_messages) },
      { label: "problem", cell: (p) => (p.problem ? h("span", { class: "warn" }, p.problem) : "") },
    ], g.partitions, { id: "group-partitions", empty: "The group has committed no offsets.",
      rowAttrs: (p) => ({ dataset: { topic: p.topic, partition: p.partition } }) }));
    if (ctx.session.read_only) {
      actions.replaceChildren(h("p", { class: "muted", id: "read-only-note" }, "The console is read-only: no reset, no delete."));
      return;
    }
    if (!reset) {
      reset = resetPanel(group, { onChanged: refresh, onDeleted: () => ctx.navigate("/groups") });
      actions.replaceChildren(reset.element);
    }
    reset.update(g, live);
  }

  await Promise.allSettled([refresh(), chart.load()]);
  poll(refresh, 10000);
  poll(chart.load, 10000);
}
