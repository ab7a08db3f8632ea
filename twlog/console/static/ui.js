// Small DOM helpers shared by the pages: elements, numbers, tables, list controls.

/** An element: h("a", {href: "/x", class: "y", onclick: f}, "text", child, [more]). */
export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key.startsWith("on") && typeof value === "function") el.addEventListener(key.slice(2), value);
    else if (key === "class") el.className = value;
    else if (key === "dataset") Object.assign(el.dataset, value);
    else if (key === "value") el.value = value;
    else if (key === "checked" || key === "disabled" || key === "selected") el[key] = Boolean(value);
    else el.setAttribute(key, value === true ? "" : value);
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const child of children) {
    if (child === undefined || child === null || child === false) continue;
    if (Array.isArray(child)) append(el, child);
    else el.append(child instanceof Node ? child : String(child));
  }
}

export const UNKNOWN = "–";

export function bytes(n) {
  if (n === null || n === undefined) return UNKNOWN;
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let value = Number(n);
  let unit = 0;
  while (Math.abs(value) >= 1024 && unit < units.length - 1) {
    value /= 1024;
    unit += 1;
  }
  return unit === 0 ? `${value} B` : `${value.toFixed(value < 10 ? 2 : 1)} ${units[unit]}`;
}

export function num(n) {
  if (n === null || n === undefined) return UNKNOWN;
  return Number(n).toLocaleString("en-US", { maximumFractionDigits: 1 });
}

export function rate(n, unit = "/s") {
  return n === null || n === undefined ? UNKNOWN : `${num(n)}${unit}`;
}

export function byteRate(n) {
  return n === null || n === undefined ? UNKNOWN : `${bytes(Math.round(n))}/s`;
}

export function ms(n) {
  return n === null || n === undefined ? UNKNOWN : `${Number(n).toFixed(n < 10 ? 2 : 1)} ms`;
}

export function when(seconds) {
  if (seconds === null || seconds === undefined) return UNKNOWN;
  return new Date(seconds * 1000).toLocaleTimeString("en-GB");
}

export function list(values) {
  return values && values.length ? values.join(", ") : UNKNOWN;
}

/**
 * A table: columns are {label, cell(row) -> node or text, sort (the API's sort name), num (right-aligned)}.
 * `sorting` ({sort, order, onSort}) makes the headers of sortable columns buttons.
 */
export function table(columns, rows, { sorting = null, empty = "Nothing here.", rowAttrs = null,
  id = null } = {}) {
  const head = h("tr", {}, columns.map((col) => {
    const attrs = { class: col.num ? "num" : null, scope: "col" };
    if (sorting && col.sort) {
      const active = sorting.sort === col.sort;
      const arrow = active ? (sorting.order === "desc" ? " ▼" : " ▲") : "";
      const next = active && sorting.order === "asc" ? "desc" : "asc";
      return h("th", { ...attrs, "aria-sort": active ? (sorting.order === "desc" ? "descending" : "ascending") : null },
        h("button", { class: "sort", type: "button", dataset: { sort: col.sort },
          onclick: () => sorting.onSort(col.sort, active ? next : (col.num ? "desc" : "asc")) }, col.label, arrow));
    }
    return h("th", attrs, col.label);
  }));
  const body = rows.length
    ? rows.map((row) => h("tr", rowAttrs ? rowAttrs(row) : {},
      columns.map((col) => h("td", { class: col.num ? "num" : null }, col.cell(row)))))
    : [h("tr", {}, h("td", { colspan: columns.length, class: "muted" }, empty))];
  return h("table", { id }, h("thead", {}, head), h("tbody", {}, body));
}

/** "Showing 51–100 of 1,234" with Previous and Next. */
export function pager(total, offset, limit, go) {
  const first = total === 0 ? 0 : offset + 1;
  const last = Math.min(offset + limit, total);
  return h("div", { class: "pager" },
    h("button", { type: "button", class: "prev", disabled: offset <= 0, onclick: () => go(Math.max(0, offset - limit)) },
      "‹ Previous"),
    h("span", { class: "count" }, `${num(first)}–${num(last)} of ${num(total)}`),
    h("button", { type: "button", class: "next", disabled: last >= total, onclick: () => go(offset + limit) },
      "Next ›"));
}

/** A filter box that calls `onChange(text)` once typing pauses. */
export function filterBox(value, onChange, placeholder = "Filter") {
  let timer = null;
  return h("input", { type: "search", class: "filter", placeholder, value: value || "", "aria-label": placeholder,
    oninput: (e) => {
      clearTimeout(timer);
      timer = setTimeout(() => onChange(e.target.value), 300);
    } });
}

export function section(title, ...children) {
  return h("section", {}, h("h2", {}, title), ...children);
}

export function stat(label, value, cls = null) {
  return h("div", { class: `stat ${cls || ""}` }, h("div", { class: "value" }, value), h("div", { class: "label" }, label));
}

/** A labelled form control. */
export function field(label, control) {
  return h("label", { class: "field" }, h("span", {}, label), control);
}

export function select(name, options, value, attrs = {}) {
  return h("select", { name, ...attrs }, options.map(([v, text]) => h("option", { value: v, selected: v === value }, text)));
}

/** A short note inside the page (a result, a refusal), kept apart from the banner. */
export function note(text, level = "info") {
  return h("p", { class: `note ${level}` }, text);
}
