// A list page (topics, groups): its filter, sort, order and offset in the address, the list sorted, filtered and
// paged on the server, polled while the tab is shown.

import { get, poll, query } from "./api.js";
import { filterBox, h, pager, table } from "./ui.js";

const LIMIT = 50;

// path: the API path ("topics"); rows: the answer's list ("topics"); columns: the table's; what: "topic"/"group".
export async function listPage(main, ctx, { title, id, path, rows, columns, what, none }) {
  const state = {
    filter: ctx.query.get("filter") || "",
    sort: ctx.query.get("sort") || "name",
    order: ctx.query.get("order") || "asc",
    offset: Number(ctx.query.get("offset") || 0),
  };
  const body = h("div", { id: `${id}-list` });
  main.append(h("div", { class: "title-row" }, h("h1", {}, title),
    filterBox(state.filter, (text) => change({ filter: text, offset: 0 }), `Filter ${id}`)), body);

  function change(values) {
    Object.assign(state, values);
    ctx.setQuery({ filter: state.filter, sort: state.sort === "name" ? "" : state.sort,
      order: state.order === "asc" ? "" : state.order, offset: state.offset || "" });
    refresh();
  }

  async function refresh() {
    const answer = await get(`${path}${query({ ...state, limit: LIMIT })}`);
    if (!ctx.current()) return;
    const sorting = { sort: state.sort, order: state.order, onSort: (sort, order) => change({ sort, order, offset: 0 }) };
    body.replaceChildren(table(columns, answer[rows],
      { sorting, id, empty: state.filter ? `No ${what} matches “${state.filter}”.` : none }),
    pager(answer.total, answer.offset, answer.limit, (offset) => change({ offset })));
  }

  await refresh();
  poll(refresh, 15000);
}
