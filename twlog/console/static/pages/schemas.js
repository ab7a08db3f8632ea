// The registry's subjects (/schemas): filtered and paged on the server.

import { enc, get, query } from "../api.js";
import { filterBox, h, num, pager, table } from "../ui.js";

const LIMIT = 50;

export async function render(main, ctx) {
  const state = { filter: ctx.query.get("filter") || "", offset: Number(ctx.query.get("offset") || 0) };
  const body = h("div", { id: "schemas-list" });
  main.append(h("div", { class: "title-row" }, h("h1", {}, "Schemas"),
    filterBox(state.filter, (text) => change({ filter: text, offset: 0 }), "Filter subjects")), body);
  if (!ctx.session.registry) {
    body.replaceChildren(h("p", { class: "note warn", id: "no-registry" },
      "No schema registry is configured: start the console with --registry URL (twlog registry serves one)."));
    return;
  }

  function change(values) {
    Object.assign(state, values);
    ctx.setQuery({ filter: state.filter, offset: state.offset || "" });
    refresh().catch(() => {});
  }

  async function refresh() {
    const answer = await get(`schemas${query({ ...state, limit: LIMIT })}`);
    if (!ctx.current()) return;
    body.replaceChildren(table([
      { label: "subject", cell: (s) => h("a", { href: `/schemas/${enc(s.subject)}` }, s.subject) },
      { label: "versions", num: true, cell: (s) => (Array.isArray(s.versions) ? num(s.versions.length) : num(s.versions)) },
      { label: "latest id", num: true, cell: (s) => num(s.latest_id) },
      { label: "compatibility", cell: (s) => s.compatibility || "–" },
    ], answer.subjects, { id: "subjects", empty: state.filter ? `No subject matches “${state.filter}”.` : "No subjects registered." }),
    pager(answer.total, answer.offset || state.offset, answer.limit || LIMIT, (offset) => change({ offset })));
  }

  await refresh();
}
