// The consumer groups (/groups): sorted, filtered and paged on the server (lag from the console's last sample).

import { enc, get, poll, query } from "../api.js";
import { bytes, filterBox, h, list, num, pager, table, when } from "../ui.js";

const LIMIT = 50;

export async function render(main, ctx) {
  const state = {
    filter: ctx.query.get("filter") || "",
    sort: ctx.query.get("sort") || "name",
    order: ctx.query.get("order") || "asc",
    offset: Number(ctx.query.get("offset") || 0),
  };
  const body = h("div", { id: "groups-list" });
  main.append(h("div", { class: "title-row" }, h("h1", {}, "Consumer groups"),
    filterBox(state.filter, (text) => change({ filter: text, offset: 0 }), "Filter groups")), body);

  function change(values) {
    Object.assign(state, values);
    ctx.setQuery({ filter: state.filter, sort: state.sort === "name" ? "" : state.sort,
      order: state.order === "asc" ? "" : state.order, offset: state.offset || "" });
    refresh();
  }

  async function refresh() {
    const answer = await get(`groups${query({ ...state, limit: LIMIT })}`);
    if (!ctx.current()) return;
    const sorting = { sort: state.sort, order: state.order, onSort: (sort, order) => change({ sort, order, offset: 0 }) };
    body.replaceChildren(table([
      { label: "group", sort: "name", cell: (g) => h("a", { href: `/groups/${enc(g.group)}` }, g.group) },
      { label: "members", sort: "members", num: true, cell: (g) => num(g.members) },
      { label: "state", cell: (g) => (g.members ? h("span", { class: "ok" }, "active") : h("span", { class: "muted" }, "idle")) },
      { label: "topics", cell: (g) => list(g.topics) },
      { label: "lag", sort: "lag", num: true, cell: (g) => bytes(g.lag_bytes) },
      { label: "sampled", num: true, cell: (g) => when(g.sampled_at) },
    ], answer.groups, { sorting, id: "groups", empty: state.filter ? `No group matches “${state.filter}”.` : "No consumer groups yet." }),
    pager(answer.total, answer.offset, answer.limit, (offset) => change({ offset })));
  }

  await refresh();
  poll(refresh, 15000);
}
