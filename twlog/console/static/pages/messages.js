// The message browser (/topics/<topic>/messages?partition=&offset=|time=|newest=|oldest=&format=&filter=):
// choose partitions, a start, a format and a substring; pages on with the API's cursor, never reading
// more than a bounded number of bytes per request.  Each message links to itself by partition and offset.

import { enc, get, query } from "../api.js";
import { bytes, field, h, note, num, select, table } from "../ui.js";

const STARTS = [["oldest", "the oldest"], ["newest", "the newest N"], ["offset", "an offset"], ["time", "a time"]];
const FORMATS = [["text", "text"], ["json", "pretty JSON"], ["avro", "Avro (registry)"], ["hex", "hex"]];
const LIMITS = [["20", "20"], ["50", "50"], ["100", "100"], ["200", "200"]];

function startOf(q) {
  if (q.has("offset")) return ["offset", q.get("offset")];
  if (q.has("time")) return ["time", q.get("time")];
  if (q.has("newest")) return ["newest", q.get("newest")];
  return ["oldest", ""];
}

/** A date as ISO 8601 in UTC, without milliseconds when it has none. */
function isoSeconds(date) {
  return date.toISOString().replace(".000Z", "Z");
}

/** A time as the API takes it: ms since the epoch as given, else ISO 8601 (a bare local time made UTC-aware). */
export function timeParam(text) {
  const trimmed = text.trim();
  if (/^\d+$/.test(trimmed)) return trimmed;
  const parsed = new Date(trimmed);
  return Number.isNaN(parsed.getTime()) ? trimmed : isoSeconds(parsed);
}

export async function render(main, ctx) {
  const topic = ctx.params.topic;
  const q = ctx.query;
  const [start, startValue] = startOf(q);
  const chosen = new Set((q.get("partition") || "").split(",").filter(Boolean));
  const partitionBox = h("fieldset", { class: "partitions" }, h("legend", {}, "Partitions"));
  const startSelect = select("start", STARTS, start, { id: "start" });
  const valueInput = h("input", { name: "value", id: "start-value", value: startValue, size: 26 });
  // (a time can be typed, ISO 8601 or ms, or picked in the browser's local time, written as UTC)
  const picker = h("input", { type: "datetime-local", id: "time-picker", step: 1, "aria-label": "pick a time",
    onchange: () => {
      if (picker.value) valueInput.value = isoSeconds(new Date(picker.value));
    } });
  const formatSelect = select("format", FORMATS, q.get("format") || "text", { id: "format" });
  const filterInput = h("input", { type: "search", name: "filter", id: "filter", value: q.get("filter") || "", placeholder: "substring" });
  const limitSelect = select("limit", LIMITS, q.get("limit") || "50", { id: "limit" });
  const form = h("form", { class: "controls", id: "browse-form" },
    partitionBox,
    h("div", { class: "row" },
      field("Start at", startSelect), field("Offset, time or N", valueInput), field("Pick a time", picker),
      field("Format", formatSelect), field("Contains", filterInput), field("Per page", limitSelect),
      h("button", { type: "submit", id: "show" }, "Show")));
  const summary = h("div", { class: "summary", id: "summary" });
  const results = h("div", { id: "messages-list" });
  const more = h("div", { class: "pager" });
  main.append(
    h("p", { class: "crumbs" }, h("a", { href: "/topics" }, "Topics"), " / ", h("a", { href: `/topics/${enc(topic)}` }, topic), " / "),
    h("h1", {}, `Messages in ${topic}`), form, summary, results, more);

  function hint() {
    const kind = startSelect.value;
    valueInput.disabled = kind === "oldest";
    picker.parentElement.hidden = kind !== "time";
    valueInput.placeholder = { oldest: "", newest: "how many, e.g. 20", offset: "a byte offset, e.g. 0",
      time: "2026-11-26T13:00:00Z or ms since the epoch" }[kind];
  }
  startSelect.addEventListener("change", hint);
  hint();

  // The partitions to choose from: the topic's (the form works without them, on what the address names).
  try {
    const t = await get(`topics/${enc(topic)}`);
    const all = t.partitions.map((p) => String(p.partition));
    if (!chosen.size) all.forEach((p) => chosen.add(p));
    partitionBox.append(...all.map((p) => h("label", { class: "check" },
      h("input", { type: "checkbox", name: "partition", value: p, checked: chosen.has(p) }), ` ${p}`)));
  } catch (e) {
    partitionBox.append(...[...chosen].map((p) => h("label", { class: "check" },
      h("input", { type: "checkbox", name: "partition", value: p, checked: true }), ` ${p}`)));
  }
  if (!ctx.current()) return;

  function params() {
    const partitions = [...form.querySelectorAll("input[name=partition]:checked")].map((i) => i.value);
    const p = { partition: partitions.join(","), format: formatSelect.value === "text" ? "" : formatSelect.value,
      filter: filterInput.value, limit: limitSelect.value === "50" ? "" : limitSelect.value };
    const value = valueInput.value.trim();
    const kind = startSelect.value;
    if (kind === "oldest") p.oldest = 1;
    else if (kind === "newest") p.newest = value || 20;
    else if (kind === "offset") p.offset = value;
    else if (kind === "time") p.time = value ? timeParam(value) : "";
    return p;
  }

  function messageLink(m) {
    const p = { partition: m.partition, offset: m.offset, format: formatSelect.value === "text" ? "" : formatSelect.value };
    return `/topics/${enc(topic)}/messages${query(p)}`;
  }

  async function show(p) {
    const targetOffset = p.offset !== undefined && p.offset !== "" && !p.cursor ? Number(p.offset) : null;
    results.replaceChildren(h("p", { class: "muted" }, "Reading…"));
    let answer;
    try {
      answer = await get(`topics/${enc(topic)}/messages${query(p)}`);
    } catch (e) {
      results.replaceChildren(note(`Nothing shown: ${e.message}`, "error"));
      more.replaceChildren();
      return;
    }
    if (!ctx.current()) return;
    const ranges = answer.partitions.map((r) => `${r.partition}: ${num(r.first_offset)}–${num(r.end_offset)}`).join(" · ");
    summary.replaceChildren(h("span", {}, `${num(answer.messages.length)} shown · ${num(answer.matched)} matched of ${num(answer.scanned)} scanned · ${bytes(answer.bytes_read)} read${answer.truncated ? " (stopped at the byte bound)" : ""}`),
      h("span", { class: "muted" }, ` · offsets ${ranges}`));
    results.replaceChildren(table([
      { label: "partition", cell: (m) => String(m.partition) },
      { label: "offset", num: true, cell: (m) => h("a", { href: messageLink(m), class: "offset", title: "a link to this message" }, String(m.offset)) },
      { label: "size", num: true, cell: (m) => bytes(m.size) },
      { label: "value", cell: (m) => (m.error
        ? h("span", { class: "bad" }, m.error)
        : h("pre", { class: `value ${m.format || ""}` }, m.value === null || m.value === undefined ? "" : String(m.value))) },
    ], answer.messages, {
      id: "messages",
      empty: p.filter ? `No message contains “${p.filter}” here; Next reads on.` : "No messages here.",
      rowAttrs: (m) => ({ id: `m-${m.partition}-${m.offset}`, dataset: { partition: m.partition, offset: m.offset },
        class: targetOffset !== null && m.offset === targetOffset && String(m.partition) === String(p.partition) ? "target" : null }),
    }));
    const target = results.querySelector("tr.target");
    if (target) target.scrollIntoView({ block: "center" });
    more.replaceChildren(answer.next_cursor
      ? h("button", { type: "button", id: "next", onclick: () => {
        const next = { partition: p.partition, format: p.format, filter: p.filter, limit: p.limit, cursor: answer.next_cursor };
        ctx.setQuery({ cursor: answer.next_cursor, offset: "", time: "", newest: "", oldest: "" });
        show(next);
      } }, "Next ›")
      : h("span", { class: "muted" }, "At the end of the chosen partitions."));
  }

  form.addEventListener("submit", (event) => {
    event.preventDefault();
    const p = params();
    ctx.setQuery({ partition: p.partition, offset: p.offset, time: p.time, newest: p.newest, oldest: p.oldest,
      format: p.format, filter: p.filter, limit: p.limit, cursor: "" });
    show(p);
  });

  const first = q.has("cursor")
    ? { partition: q.get("partition"), format: q.get("format"), filter: q.get("filter"), limit: q.get("limit"), cursor: q.get("cursor") }
    : params();
  await show(first);
}
