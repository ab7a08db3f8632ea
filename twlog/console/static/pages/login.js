// Log in (/login?next=...): the console's users (when it requires a login).

import { change } from "../api.js";
import { field, h, note } from "../ui.js";

export async function render(main, ctx) {
  const next = ctx.query.get("next") || "/";
  const safeNext = next.startsWith("/") && !next.startsWith("//") ? next : "/";
  const result = h("div");
  const form = h("form", { class: "login", id: "login-form" },
    field("User", h("input", { name: "user", id: "login-user", autocomplete: "username", required: true })),
    field("Password", h("input", { name: "password", id: "login-password", type: "password", autocomplete: "current-password", required: true })),
    h("button", { type: "submit", class: "primary", id: "login" }, "Log in"), result);
  form.addEventListener("submit", async (e) => {
    e.preventDefault();
    const f = new FormData(form);
    try {
      await change("POST", "login", { user: f.get("user"), password: f.get("password") });
    } catch (err) {
      result.replaceChildren(note(err.message, "error"));
      return;
    }
    await ctx.relogin();
    ctx.navigate(safeNext, { replace: true });
  });
  main.append(...[h("h1", {}, "Log in"), ctx.session.login_required ? null
    : note("This console does not require a login.", "info"), form].filter(Boolean));
}
