// The consumer groups (/groups): sorted, filtered and paged on the server (lag from the console's last sample).

import { enc } from "../api.js";
import { listPage } from "../listpage.js";
import { bytes, h, list, num, when } from "../ui.js";

export function render(main, ctx) {
  return listPage(main, ctx, {
    title: "Consumer groups", id: "groups", path: "groups", rows: "groups", what: "group", none: "No consumer groups yet.",
    columns: [
      { label: "group", sort: "name", cell: (g) => h("a", { href: `/groups/${enc(g.group)}` }, g.group) },
      { label: "members", sort: "members", num: true, cell: (g) => num(g.members) },
      { label: "state", cell: (g) => (g.members ? h("span", { class: "ok" }, "active") : h("span", { class: "muted" }, "idle")) },
      { label: "topics", cell: (g) => list(g.topics) },
      { label: "lag", sort: "lag", num: true, cell: (g) => bytes(g.lag_bytes) },
      { label: "sampled", num: true, cell: (g) => when(g.sampled_at) },
    ],
  });
}
