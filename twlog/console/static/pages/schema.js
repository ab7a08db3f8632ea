// One subject (/schemas/<subject>?version=&from=&to=): its compatibility, its versions, one version's
// schema, and a diff between two versions.

import { enc, get, query } from "../api.js";
import { field, h, section, select, stat } from "../ui.js";

function pretty(schema) {
  try {
    return JSON.stringify(JSON.parse(schema), null, 2);
  } catch (e) {
    return String(schema);
  }
}

export async function render(main, ctx) {
  const subject = ctx.params.subject;
  main.append(h("p", { class: "crumbs" }, h("a", { href: "/schemas" }, "Schemas"), " / "), h("h1", {}, subject));
  const s = await get(`schemas/${enc(subject)}`);
  if (!ctx.current()) return;
  const versions = s.versions.map((v) => String(v.version));
  const latest = versions[versions.length - 1];
  const chosen = versions.includes(ctx.query.get("version")) ? ctx.query.get("version") : latest;
  const schemaBox = h("pre", { class: "schema", id: "schema" });
  const versionSelect = select("version", versions.map((v) => [v, `version ${v}`]), chosen, { id: "version" });
  const options = versions.map((v) => [v, `version ${v}`]);
  const fromSelect = select("from", options, ctx.query.get("from") || versions[Math.max(0, versions.length - 2)], { id: "diff-from" });
  const toSelect = select("to", options, ctx.query.get("to") || latest, { id: "diff-to" });
  const diffBox = h("div", { id: "diff" });

  function showVersion() {
    const v = s.versions.find((x) => String(x.version) === versionSelect.value);
    schemaBox.textContent = v ? pretty(v.schema) : "";
    ctx.setQuery({ version: versionSelect.value === latest ? "" : versionSelect.value });
  }

  async function showDiff() {
    ctx.setQuery({ from: fromSelect.value, to: toSelect.value });
    const d = await get(`schemas/${enc(subject)}/diff${query({ from: fromSelect.value, to: toSelect.value })}`);
    const changed = d.lines.filter((l) => l.op !== " ").length;
    diffBox.replaceChildren(h("p", { class: "muted" }, changed ? `${changed} line(s) differ` : "The two versions are the same."),
      h("pre", { class: "diff" }, d.lines.map((l) => h("span", { class: l.op === "+" ? "add" : l.op === "-" ? "del" : "same" }, `${l.op} ${l.text}\n`))));
  }

  versionSelect.addEventListener("change", showVersion);
  const current = s.versions.find((v) => String(v.version) === latest);
  main.append(h("div", { class: "stats" }, stat("compatibility", s.compatibility || "–"), stat("versions", String(versions.length)),
    stat("latest id", current ? String(current.id) : "–")),
  section("Schema", h("div", { class: "controls" }, field("Version", versionSelect)), schemaBox),
  section("Diff", h("form", { class: "controls", id: "diff-form", onsubmit: (e) => { e.preventDefault(); showDiff().catch(() => {}); } },
    h("div", { class: "row" }, field("From", fromSelect), field("To", toSelect), h("button", { type: "submit", id: "diff-show" }, "Compare"))), diffBox));
  showVersion();
  if (versions.length > 1) await showDiff().catch(() => {});
}
