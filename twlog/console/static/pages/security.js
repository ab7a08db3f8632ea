// Security (/security): the SCRAM users and the ACLs, listed and edited (hidden when read-only).

import { change, enc, get, query } from "../api.js";
import { field, h, list, note, section, select, table } from "../ui.js";

const MECHANISMS = [["", "both SCRAM mechanisms"], ["SCRAM-SHA-256", "SCRAM-SHA-256"], ["SCRAM-SHA-512", "SCRAM-SHA-512"]];
const OPERATIONS = ["All", "Read", "Write", "Create", "Delete", "Alter", "Describe", "ClusterAction", "DescribeConfigs", "AlterConfigs", "IdempotentWrite"];
const RESOURCES = ["Topic", "Group", "Cluster"];

export async function render(main, ctx) {
  const editable = !ctx.session.read_only;
  const users = h("div", { id: "users-list" });
  const acls = h("div", { id: "acls-list" });
  const userResult = h("div");
  const aclResult = h("div");
  const filters = { principal: ctx.query.get("principal") || "", resource_type: "", resource_name: "" };

  async function loadUsers() {
    const answer = await get("users");
    users.replaceChildren(table([
      { label: "user", cell: (u) => u.user },
      { label: "mechanisms", cell: (u) => list(u.mechanisms) },
      ...(editable ? [{ label: "", cell: (u) => h("button", { type: "button", class: "danger small", dataset: { user: u.user },
        onclick: () => act(userResult, "DELETE", `users/${enc(u.user)}`, undefined, `Deleted user ${u.user}.`, loadUsers) }, "Delete") }] : []),
    ], answer.users, { id: "users", empty: "No users: SASL/SCRAM is not set up (twlog users add)." }));
  }

  async function loadAcls() {
    const answer = await get(`acls${query(filters)}`);
    acls.replaceChildren(table([
      { label: "principal", cell: (a) => a.principal },
      { label: "host", cell: (a) => a.host },
      { label: "operation", cell: (a) => a.operation },
      { label: "permission", cell: (a) => h("span", { class: String(a.permission).toLowerCase() === "deny" ? "bad" : "ok" }, a.permission) },
      { label: "resource", cell: (a) => `${a.resource_type}:${a.resource_name}` },
      { label: "pattern", cell: (a) => a.pattern_type },
      ...(editable ? [{ label: "", cell: (a) => h("button", { type: "button", class: "danger small",
        onclick: () => act(aclResult, "DELETE", "acls", a, "Removed the ACL.", loadAcls) }, "Remove") }] : []),
    ], answer.acls, { id: "acls", empty: "No ACLs." }));
  }

  async function act(box, method, path, body, done, reload) {
    try {
      await change(method, path, body);
      box.replaceChildren(note(done, "ok"));
      await reload();
    } catch (e) {
      box.replaceChildren(note(`Refused: ${e.message}`, "error"));
    }
  }

  const userForm = h("form", { class: "controls", id: "user-form" }, h("div", { class: "row" },
    field("User", h("input", { name: "user", required: true })),
    field("Password", h("input", { name: "password", type: "password", required: true, autocomplete: "new-password" })),
    field("Mechanism", select("mechanism", MECHANISMS, "")),
    h("button", { type: "submit" }, "Add or change")));
  userForm.addEventListener("submit", (e) => {
    e.preventDefault();
    const f = new FormData(userForm);
    const user = { user: f.get("user"), password: f.get("password") };
    if (f.get("mechanism")) user.mechanism = f.get("mechanism");
    act(userResult, "POST", "users", user,
      `Saved user ${f.get("user")}.`, loadUsers).then(() => userForm.reset());
  });

  const aclForm = h("form", { class: "controls", id: "acl-form" }, h("div", { class: "row" },
    field("Principal", h("input", { name: "principal", placeholder: "User:alice", required: true })),
    field("Host", h("input", { name: "host", value: "*", size: 10 })),
    field("Operation", select("operation", OPERATIONS.map((o) => [o, o]), "Read")),
    field("Permission", select("permission", [["Allow", "Allow"], ["Deny", "Deny"]], "Allow")),
    field("Resource", select("resource_type", RESOURCES.map((r) => [r, r]), "Topic")),
    field("Name", h("input", { name: "resource_name", placeholder: "orders or *", required: true })),
    field("Pattern", select("pattern_type", [["LITERAL", "literal"], ["PREFIXED", "prefixed"]], "LITERAL")),
    h("button", { type: "submit" }, "Add")));
  aclForm.addEventListener("submit", (e) => {
    e.preventDefault();
    const acl = Object.fromEntries(new FormData(aclForm).entries());
    act(aclResult, "POST", "acls", acl, "Added the ACL.", loadAcls);
  });

  const aclFilter = h("form", { class: "controls", id: "acl-filter" }, h("div", { class: "row" },
    field("Principal", h("input", { name: "principal", value: filters.principal, placeholder: "User:alice" })),
    field("Resource type", select("resource_type", [["", "any"], ...RESOURCES.map((r) => [r, r])], "")),
    field("Resource name", h("input", { name: "resource_name" })),
    h("button", { type: "submit" }, "Filter")));
  aclFilter.addEventListener("submit", (e) => {
    e.preventDefault();
    Object.assign(filters, Object.fromEntries(new FormData(aclFilter).entries()));
    ctx.setQuery({ principal: filters.principal });
    loadAcls().catch(() => {});
  });

  main.append(...[h("h1", {}, "Security"),
    section("Users", users, editable ? userForm : null, userResult),
    section("ACLs", aclFilter, acls, editable ? aclForm : null, aclResult),
    editable ? null : h("p", { class: "muted" }, "The console is read-only: users and ACLs are shown, not changed.")].filter(Boolean));
  await Promise.allSettled([loadUsers(), loadAcls()]);
}
