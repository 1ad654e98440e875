// The board's first data requests, started as soon as the page is parsed: this module
// imports nothing, so it runs before main.js's module graph has loaded. api.js takes each
// answer once (take()) instead of asking again; anything asked later goes to the server.

/** An early answer is taken within this many ms of the start, or not at all. */
const FRESH_MS = 10000;
const early = new Map();

function ask(path) {
  const answer = fetch(path, { credentials: "same-origin" });
  early.set(path, answer);
  answer.catch(() => early.delete(path));  // unreachable: whoever asks later asks the server
}

ask("/api/openapi.json");
ask("/api/settings");
ask("/api/projects");
ask("/api/health");
// what the view of the address needs first: a board's tasks, or a task and its newest log
const [, kind, id] = /^#\/(projects|tasks)\/([1-9]\d{0,15})(?:[?]|$)/.exec(location.hash) || [];
if (kind === "projects") ask(`/api/projects/${id}/tasks`);
if (kind === "tasks") {
  ask(`/api/tasks/${id}`);
  ask(`/api/tasks/${id}/logs?limit=1000`);  // LOG_PAGE of views/log_view.js
}

/** The early answer to a GET of this path, once; undefined when there is none. */
export function take(path) {
  const answer = early.get(path);
  early.delete(path);
  return performance.now() < FRESH_MS ? answer : undefined;
}
