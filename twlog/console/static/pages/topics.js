// The topic list (/topics): sorted, filtered and paged on the server; the state is in the address.

import { enc } from "../api.js";
import { listPage } from "../listpage.js";
import { byteRate, bytes, h, num, rate } from "../ui.js";

export function render(main, ctx) {
  return listPage(main, ctx, {
    title: "Topics", id: "topics", path: "topics", rows: "topics", what: "topic", none: "No topics yet.",
    columns: [
      { label: "topic", sort: "name", cell: (t) => h("a", { href: `/topics/${enc(t.name)}` }, t.name) },
      { label: "partitions", sort: "partitions", num: true, cell: (t) => num(t.partitions) },
      { label: "replication", num: true, cell: (t) => (t.replicated ? `×${t.replication_factor}` : "per broker") },
      { label: "size", sort: "size", num: true, cell: (t) => bytes(t.size_bytes) },
      { label: "messages in", sort: "rate", num: true, cell: (t) => rate(t.messages_in_per_s) },
      { label: "bytes in", num: true, cell: (t) => byteRate(t.bytes_in_per_s) },
      { label: "retention", num: true, cell: (t) => (t.retention_hours === null || t.retention_hours === undefined ? "–" : `${num(t.retention_hours)} h`) },
      { label: "under-replicated", num: true, cell: (t) => (t.under_replicated ? h("span", { class: "warn" }, num(t.under_replicated)) : "0") },
      { label: "", cell: (t) => h("a", { href: `/topics/${enc(t.name)}/messages?newest=20` }, "messages") },
    ],
  });
}
