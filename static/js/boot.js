// The board's first data requests, started while its page is being parsed: the server
// writes this classic script into the page (allowed by its hash in the page's CSP), so
// they go out before the modules are even asked for. api.js takes each answer once
// (window.taskboardEarly) instead of asking again; anything asked later goes to the server.

(() => {
  /** An early answer is taken within this many ms of the start, or not at all. */
  const FRESH_MS = 10000;
  const early = new Map();

  const ask = (path) => {
    const answer = fetch(path, { credentials: "same-origin" });
    early.set(path, answer);
    answer.catch(() => early.delete(path));  // unreachable: whoever asks later asks the server
  };

  ask("/api/openapi.json");
  ask("/api/settings");
  ask("/api/projects?fields=agent,host,prFixMaxAttempts,simulated,stopCheckCommand");  // PROJECTS_PATH of api.js
  ask("/api/health");
  // what the view of the address needs first: a board's tasks, or a task and its newest log
  const [, kind, id] = /^#\/(projects|tasks)\/([1-9]\d{0,15})(?:[?]|$)/.exec(location.hash) || [];
  if (kind === "projects") ask(`/api/projects/${id}/tasks`);
  if (kind === "tasks") {
    ask(`/api/tasks/${id}`);
    ask(`/api/tasks/${id}/logs?limit=1000`);  // LOG_PAGE of views/log_view.js
    ask(`/api/tasks/${id}/attempts`);  // its comparison, when it ran with several agents
    // a task page shows dates: a page's first date format costs tens of ms (the locale
    // data), spent while the answers are on their way rather than before its first paint
    setTimeout(() => new Intl.DateTimeFormat().format(0));
  }

  /** The early answer to a GET of this path, once; undefined when there is none. */
  window.taskboardEarly = (path) => {
    const answer = early.get(path);
    early.delete(path);
    return performance.now() < FRESH_MS ? answer : undefined;
  };
})();
