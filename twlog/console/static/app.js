// The console's single page shell: routes location.pathname to a page module (static/pages/), keeps
// links inside the shell (history.pushState), and shows who is logged in and the mode.

import { ApiFailure, change, clearBanner, get, pollingState, showFailure, stopPolling, whenLoginNeeded } from "./api.js";
import { h } from "./ui.js";

// The pages of twlog/console/app.py's PAGES: a pattern (":name" is one path segment) and its module.
const ROUTES = [
  ["/", "overview"],
  ["/topics", "topics"],
  ["/topics/:topic", "topic"],
  ["/topics/:topic/messages", "messages"],
  ["/groups", "groups"],
  ["/groups/:group", "group"],
  ["/brokers", "brokers"],
  ["/schemas", "schemas"],
  ["/schemas/:subject", "schema"],
  ["/security", "security"],
  ["/login", "login"],
];

// Which nav entry each page lights up.
const NAV = { overview: "overview", topics: "topics", topic: "topics", messages: "topics", groups: "groups",
  group: "groups", brokers: "brokers", schemas: "schemas", schema: "schemas", security: "security" };

let session = null;
let generation = 0;

export function match(pathname) {
  const parts = pathname.replace(/\/+$/, "").split("/").slice(1);
  for (const [pattern, page] of ROUTES) {
    const segments = pattern === "/" ? [] : pattern.split("/").slice(1);
    if (segments.length !== parts.length) continue;
    const params = {};
    let ok = true;
    segments.forEach((segment, i) => {
      if (segment.startsWith(":")) {
        if (!parts[i]) ok = false;
        else params[segment.slice(1)] = decodeURIComponent(parts[i]);
      } else if (segment !== parts[i]) {
        ok = false;
      }
    });
    if (ok) return { page, params };
  }
  return null;
}

async function loadSession() {
  try {
    session = await get("session");
  } catch (e) {
    session = session || { read_only: true, login_required: false, user: null, registry: false, failed: true };
  }
  drawWho();
  return session;
}

function drawWho() {
  const who = document.getElementById("who");
  const parts = [];
  if (session.read_only) parts.push(h("span", { class: "badge", id: "read-only" }, "read-only"));
  if (session.zookeeper) parts.push(h("span", { class: "muted" }, session.zookeeper));
  if (session.user) {
    parts.push(h("span", { class: "user" }, session.user));
    parts.push(h("button", { type: "button", class: "link", id: "logout", onclick: logout }, "Log out"));
  }
  who.replaceChildren(...parts);
}

async function logout() {
  try {
    await change("POST", "logout");
  } catch (e) {
    showFailure("logout", e);
    return;
  }
  await loadSession();
  navigate(session.login_required ? "/login" : location.pathname + location.search, { replace: true });
}

/** Go to a page of the console (pushState), or replace this entry (`replace`). */
export function navigate(url, { replace = false } = {}) {
  if (replace) history.replaceState(null, "", url);
  else history.pushState(null, "", url);
  route();
}

async function route() {
  const mine = ++generation;
  stopPolling();
  clearBanner();
  const main = document.getElementById("main");
  const found = match(location.pathname);
  main.dataset.state = "loading";
  if (!found) {
    main.replaceChildren(h("h1", {}, "Not found"), h("p", {}, "No page at this address. ", h("a", { href: "/" }, "The overview"), "."));
    main.dataset.state = "ready";
    return;
  }
  if (session === null || session.failed) await loadSession();
  if (mine !== generation) return;
  if (session.login_required && !session.user && found.page !== "login") {
    navigate(`/login?next=${encodeURIComponent(location.pathname + location.search)}`, { replace: true });
    return;
  }
  for (const a of document.querySelectorAll("#nav a")) {
    a.classList.toggle("active", a.dataset.page === NAV[found.page]);
  }
  main.dataset.page = found.page;
  const ctx = {
    params: found.params,
    query: new URLSearchParams(location.search),
    session,
    navigate,
    current: () => mine === generation,
    // Put a page's state (filter, sort, offset, ...) in the address, replacing the entry.
    setQuery(values) {
      const q = new URLSearchParams(location.search);
      for (const [key, value] of Object.entries(values)) {
        if (value === undefined || value === null || value === "") q.delete(key);
        else q.set(key, String(value));
      }
      const text = q.toString();
      history.replaceState(null, "", location.pathname + (text ? `?${text}` : ""));
      this.query = q;
    },
    relogin: async () => {
      await loadSession();
    },
  };
  try {
    const module = await import(`./pages/${found.page}.js`);
    if (mine !== generation) return;
    main.replaceChildren();
    await module.render(main, ctx);
  } catch (e) {
    if (mine !== generation) return;
    if (!(e instanceof ApiFailure)) showFailure("page", e);
    if (!main.childElementCount) {
      main.replaceChildren(h("h1", {}, "This page could not be drawn"),
        h("p", { class: "muted" }, "The banner above says why; the page tries again when you reload it."));
    }
  }
  if (mine === generation) main.dataset.state = "ready";
}

document.addEventListener("click", (event) => {
  const a = event.target.closest("a");
  if (!a || event.defaultPrevented || event.button !== 0 || event.metaKey || event.ctrlKey || event.shiftKey) return;
  const url = new URL(a.href, location.href);
  if (url.origin !== location.origin || a.target || url.pathname.startsWith("/api/") ||
      url.pathname.startsWith("/static/") || !match(url.pathname)) return;
  event.preventDefault();
  navigate(url.pathname + url.search + url.hash);
});

addEventListener("popstate", route);
whenLoginNeeded(() => {
  if (location.pathname !== "/login") {
    session = { ...(session || {}), user: null, login_required: true };
    navigate(`/login?next=${encodeURIComponent(location.pathname + location.search)}`, { replace: true });
  }
});

// For the browser tests and anyone at the devtools console.
window.twlogConsole = { pollingState, navigate, session: () => session };

route();
