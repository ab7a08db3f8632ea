// The group page's changes: the offset reset (scope, target, a preview table from dry_run, then Confirm) and
// deleting the group; both disabled, with the reason, while the group has live members.

import { ApiFailure, change, enc } from "../api.js";
import { field, h, note, num, select, table } from "../ui.js";

const TARGETS = [["earliest", "the earliest"], ["latest", "the latest"], ["time", "a time"], ["offset", "an offset"], ["shift", "shift by N bytes"]];
const SCOPES = [["group", "the whole group"], ["topic", "one topic"], ["partition", "one partition"]];

export function resetPanel(group, { onChanged, onDeleted }) {
  const scope = select("scope", SCOPES, "group", { id: "reset-scope" });
  const topic = h("select", { name: "topic", id: "reset-topic" });
  const partition = h("select", { name: "partition", id: "reset-partition" });
  const to = select("to", TARGETS, "earliest", { id: "reset-to" });
  const value = h("input", { name: "value", id: "reset-value", size: 24, disabled: true });
  const preview = h("button", { type: "submit", id: "reset-preview" }, "Preview");
  const reason = h("p", { class: "note warn", id: "live-reason", hidden: true });
  const result = h("div", { id: "reset-result" });
  const form = h("form", { class: "controls", id: "reset-form" }, h("div", { class: "row" },
    field("Scope", scope), field("Topic", topic), field("Partition", partition), field("Reset to", to),
    field("Time, offset or N", value), preview));
  const deleteButton = h("button", { type: "button", class: "danger", id: "delete-group" }, "Delete group…");
  const deleteBox = h("div", { id: "delete-box" });
  const element = h("div", { class: "columns changes" },
    h("section", { id: "reset" }, h("h2", {}, "Reset offsets"), reason, form, result),
    h("section", { id: "delete" }, h("h2", {}, "Delete group"),
      h("p", { class: "muted" }, "Removes its committed offsets from ZooKeeper."), deleteButton, deleteBox));
  let partitions = [];

  function fillChoices() {
    const topics = [...new Set(partitions.map((p) => p.topic))].sort();
    const keep = topic.value;
    topic.replaceChildren(...topics.map((t) => h("option", { value: t, selected: t === keep }, t)));
    const keepP = partition.value;
    const ps = partitions.filter((p) => p.topic === topic.value).map((p) => String(p.partition));
    partition.replaceChildren(...ps.map((p) => h("option", { value: p, selected: p === keepP }, p)));
    topic.disabled = scope.value === "group";
    partition.disabled = scope.value !== "partition";
  }

  function hint() {
    value.disabled = ["earliest", "latest"].includes(to.value);
    value.placeholder = { time: "2026-11-26T13:00:00Z or ms", offset: "a byte offset", shift: "e.g. -1000 or 500" }[to.value] || "";
  }

  // The partition as the group's answer spells it ("1-0" per broker, or a number).
  function partitionValue() {
    const found = partitions.find((p) => p.topic === topic.value && String(p.partition) === partition.value);
    return found ? found.partition : partition.value;
  }

  function body(dryRun) {
    let target = to.value;
    const v = value.value.trim();
    if (target === "time") target = { time: /^\d+$/.test(v) ? Number(v) : v };
    else if (target === "offset") target = { offset: Number(v) };
    else if (target === "shift") target = { shift: Number(v) };
    return { topic: scope.value === "group" ? null : topic.value,
      partition: scope.value === "partition" ? partitionValue() : null, to: target, dry_run: dryRun };
  }

  async function send(dryRun) {
    const request = body(dryRun);
    if (["offset", "shift"].includes(to.value) && !Number.isInteger(Object.values(request.to)[0])) {
      result.replaceChildren(note(`${to.value === "offset" ? "An offset" : "A shift"} is a whole number.`, "error"));
      return;
    }
    result.replaceChildren(h("p", { class: "muted" }, dryRun ? "Computing the preview…" : "Resetting…"));
    let answer;
    try {
      answer = await change("POST", `groups/${enc(group)}/reset`, request);
    } catch (e) {
      result.replaceChildren(note(`Refused: ${e.message}`, "error"));
      return;
    }
    const rows = table([
      { label: "topic", cell: (r) => r.topic },
      { label: "partition", cell: (r) => String(r.partition) },
      { label: "committed", num: true, cell: (r) => num(r.offset) },
      { label: "new offset", num: true, cell: (r) => num(r.new_offset) },
      { label: "", cell: (r) => (r.clamped ? h("span", { class: "warn" }, "clamped: stopped at the log's start or end") : "") },
    ], answer.rows, { id: dryRun ? "preview" : "applied", empty: "No partition in this scope.",
      rowAttrs: (r) => ({ dataset: { topic: r.topic, partition: r.partition, newOffset: r.new_offset } }) });
    const leftOut = answer.left_out && answer.left_out.length
      ? note(`Left out: ${answer.left_out.join(", ")}`, "warn") : null;
    if (dryRun) {
      const confirm = h("button", { type: "button", class: "primary", id: "reset-confirm", disabled: !answer.rows.length,
        onclick: () => send(false) }, `Confirm: reset ${answer.rows.length} partition(s)`);
      const cancel = h("button", { type: "button", id: "reset-cancel", onclick: () => result.replaceChildren() }, "Cancel");
      result.replaceChildren(...[h("h3", {}, "Preview (nothing changed yet)"), rows, leftOut,
        h("div", { class: "buttons" }, confirm, cancel)].filter(Boolean));
    } else {
      result.replaceChildren(...[note(answer.applied ? `Reset: ${answer.rows.length} partition(s) committed.` : "Nothing was changed.",
        answer.applied ? "ok" : "warn"), rows, leftOut].filter(Boolean));
      onChanged();
    }
  }

  async function remove() {
    try {
      const answer = await change("DELETE", `groups/${enc(group)}`);
      const topics = Object.keys(answer.deleted || {});
      deleteBox.replaceChildren(note(`Deleted ${group} (${topics.join(", ") || "no offsets"}).`, "ok"));
      onDeleted();
    } catch (e) {
      deleteBox.replaceChildren(note(`Refused: ${e instanceof ApiFailure ? e.message : e}`, "error"));
    }
  }

  scope.addEventListener("change", fillChoices);
  topic.addEventListener("change", fillChoices);
  to.addEventListener("change", hint);
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    send(true);
  });
  deleteButton.addEventListener("click", () => {
    deleteBox.replaceChildren(h("p", {}, `Delete group ${group} and its committed offsets?`),
      h("div", { class: "buttons" }, h("button", { type: "button", class: "danger", id: "delete-confirm", onclick: remove }, "Delete"),
        h("button", { type: "button", onclick: () => deleteBox.replaceChildren() }, "Cancel")));
  });
  hint();

  function update(g, live) {
    partitions = g.partitions;
    fillChoices();
    const why = live ? `The group has ${g.members.length} live member(s): stop its consumers to reset or delete it.` : "";
    reason.hidden = !live;
    reason.textContent = why;
    for (const control of [preview, deleteButton]) {
      control.disabled = live;
      control.title = why;
    }
    for (const control of element.querySelectorAll("#reset-confirm, #delete-confirm")) {
      if (live) control.disabled = true;
      control.title = why;
    }
  }

  return { element, update };
}
