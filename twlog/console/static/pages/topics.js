// The topic list (/topics): sorted, filtered and paged on the server; the state is in the address.

import { enc, get, poll, query } from "../api.js";
import { byteRate, bytes, filterBox, h, num, pager, rate, table } from "../ui.js";

const LIMIT = 50;

export async function render(main, ctx) {
  const state = {
    filter: ctx.query.get("filter") || "",
    sort: ctx.query.get("sort") || "name",
    order: ctx.query.get("order") || "asc",
    offset: Number(ctx.query.get("offset") || 0),
  };
  const body = h("div", { id: "topics-list" });
  main.append(h("div", { class: "title-row" }, h("h1", {}, "Topics"),
    filterBox(state.filter, (text) => change({ filter: text, offset: 0 }), "Filter topics")), body);

  function change(values) {
    Object.assign(state, values);
    ctx.setQuery({ filter: state.filter, sort: state.sort === "name" ? "" : state.sort,
      order: state.order === "asc" ? "" : state.order, offset: state.offset || "" });
    refresh();
  }

  async function refresh() {
    const answer = await get(`topics${query({ ...state, limit: LIMIT })}`);
    if (!ctx.current()) return;
    const sorting = { sort: state.sort, order: state.order, onSort: (sort, order) => change({ sort, order, offset: 0 }) };
    body.replaceChildren(table([
      { label: "topic", sort: "name", cell: (t) => h("a", { href: `/topics/${enc(t.name)}` }, t.name) },
      { label: "partitions", sort: "partitions", num: true, cell: (t) => num(t.partitions) },
      { label: "replication", num: true, cell: (t) => (t.replicated ? `×${t.replication_factor}` : "per broker") },
      { label: "size", sort: "size", num: true, cell: (t) => bytes(t.size_bytes) },
      { label: "messages in", sort: "rate", num: true, cell: (t) => rate(t.messages_in_per_s) },
      { label: "bytes in", num: true, cell: (t) => byteRate(t.bytes_in_per_s) },
      { label: "retention", num: true, cell: (t) => (t.retention_hours === null || t.retention_hours === undefined ? "–" : `${num(t.retention_hours)} h`) },
      { label: "under-replicated", num: true, cell: (t) => (t.under_replicated ? h("span", { class: "warn" }, num(t.under_replicated)) : "0") },
      { label: "", cell: (t) => h("a", { href: `/topics/${enc(t.name)}/messages?newest=20` }, "messages") },
    ], answer.topics, { sorting, id: "topics", empty: state.filter ? `No topic matches “${state.filter}”.` : "No topics yet." }),
    pager(answer.total, answer.offset, answer.limit, (offset) => change({ offset })));
  }

  await refresh();
  poll(refresh, 15000);
}
