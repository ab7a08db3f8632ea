// The console's JSON API (docs/console.md, "API"), the banner that names what is unreachable, and the
// pollers that stop while the tab is hidden.

export const CHANGE_HEADER = "X-Twlog-Console";

/** An answer other than 2xx: the API's one-line `error` and what it could not reach. */
export class ApiFailure extends Error {
  constructor(status, error, unreachable = []) {
    super(error);
    this.status = status;
    this.unreachable = unreachable;
  }
}

// -- the banner -------------------------------------------------------------------------------------
// Each source (an API path, or a name) has its own lines; the banner shows them all, and a source's
// next good answer clears its own.  A new page starts with an empty banner.

const bannerLines = new Map();

function drawBanner() {
  const banner = document.getElementById("banner");
  const lines = [...bannerLines.values()].flat();
  banner.replaceChildren(...lines.map((line) => {
    const p = document.createElement("p");
    p.className = line.level;
    p.textContent = line.text;
    return p;
  }));
  banner.hidden = lines.length === 0;
}

export function setBanner(source, lines) {
  if (lines.length) bannerLines.set(source, lines);
  else bannerLines.delete(source);
  drawBanner();
}

export function clearBanner() {
  bannerLines.clear();
  drawBanner();
}

function sourceOf(path) {
  return path.split("?")[0];
}

function failureLines(failure) {
  const lines = [{ level: "error", text: failure.message }];
  if (failure.unreachable && failure.unreachable.length) {
    lines.push({ level: "error", text: `Unreachable: ${failure.unreachable.join(", ")}` });
  }
  return lines;
}

/** Show a failure (an ApiFailure, or any error) in the banner under `source`. */
export function showFailure(source, failure) {
  setBanner(source, failureLines(failure));
}

// -- requests ---------------------------------------------------------------------------------------

let onLoginNeeded = () => {};

/** What to do on a 401 (the app goes to the login page). */
export function whenLoginNeeded(callback) {
  onLoginNeeded = callback;
}

async function request(method, path, body) {
  const init = { method, headers: { Accept: "application/json" }, credentials: "same-origin" };
  if (method !== "GET") {
    init.headers[CHANGE_HEADER] = "1";
    if (body !== undefined) {
      init.headers["Content-Type"] = "application/json";
      init.body = JSON.stringify(body);
    }
  }
  let response;
  try {
    response = await fetch(`/api/${path}`, init);
  } catch (e) {
    throw new ApiFailure(0, `the console at ${location.host} is unreachable (${e.message})`,
      [`console ${location.host}`]);
  }
  let answer = null;
  try {
    answer = await response.json();
  } catch (e) {
    answer = null;
  }
  if (!response.ok) {
    if (response.status === 401 && path !== "login") onLoginNeeded();
    const error = answer && answer.error ? answer.error : `${method} /api/${path}: HTTP ${response.status}`;
    throw new ApiFailure(response.status, error, (answer && answer.unreachable) || []);
  }
  return answer;
}

/**
 * GET /api/`path`; its `problems` (a partial answer) go to the banner, as does a failure (rethrown).
 */
export async function get(path) {
  const source = sourceOf(path);
  try {
    const answer = await request("GET", path);
    const problems = (answer && answer.problems) || [];
    setBanner(source, problems.map((text) => ({ level: "warning", text })));
    return answer;
  } catch (failure) {
    showFailure(source, failure);
    throw failure;
  }
}

/** A change (POST, PUT, DELETE) with the header the API asks for; failures are only rethrown. */
export function change(method, path, body) {
  return request(method, path, body);
}

/** The API's query string from an object, leaving out empty values. */
export function query(params) {
  const q = new URLSearchParams();
  for (const [key, value] of Object.entries(params)) {
    if (value !== undefined && value !== null && value !== "") q.set(key, String(value));
  }
  const text = q.toString();
  return text ? `?${text}` : "";
}

export function enc(segment) {
  return encodeURIComponent(segment);
}

// -- polling ----------------------------------------------------------------------------------------
// A page's pollers run every `ms` while the tab is shown; hidden, they stop, and they run again at once
// when it is shown.  The app stops them all when the page changes.

const pollers = new Set();

export function poll(task, ms) {
  const poller = { task, ms, timer: null, running: false, stopped: false };
  pollers.add(poller);
  schedule(poller);
  return () => stopPoller(poller);
}

function schedule(poller) {
  if (poller.stopped || document.visibilityState === "hidden") return;
  clearTimeout(poller.timer);
  poller.timer = setTimeout(() => run(poller), poller.ms);
}

async function run(poller) {
  poller.timer = null;
  if (poller.stopped || poller.running || document.visibilityState === "hidden") return;
  poller.running = true;
  try {
    await poller.task();
  } catch (e) {
    // (the banner shows it; the next round tries again)
  } finally {
    poller.running = false;
  }
  schedule(poller);
}

function stopPoller(poller) {
  poller.stopped = true;
  clearTimeout(poller.timer);
  pollers.delete(poller);
}

export function stopPolling() {
  for (const poller of [...pollers]) stopPoller(poller);
}

/** How many pollers are waiting to run (for the browser tests: 0 while the tab is hidden). */
export function pollingState() {
  const all = [...pollers];
  return { pollers: all.length, waiting: all.filter((p) => p.timer !== null || p.running).length };
}

document.addEventListener("visibilitychange", () => {
  for (const poller of pollers) {
    if (document.visibilityState === "hidden") {
      clearTimeout(poller.timer);
      poller.timer = null;
    } else {
      run(poller);
    }
  }
});
