// The board's first data requests, started while its page is being parsed: the server
// writes this classic script into the page (allowed by its hash in the page's CSP), so
// they go out before the modules are even asked for. store.js takes each answer once
// (window.taskboardEarly) instead of asking again; anything asked later goes to the server.
// What the first paint reads is the server's list (the page's JSON block #first-data, name ->
// path; store.js reads its paths from window.taskboardEarly.paths). Opened by a signed-in
// browser, the page carries some of those answers already (a JSON block each, data-answer
// naming its path): those are not asked for, and their text is handed over unparsed.
// Then the modules: the shell's and those of the view the address opens, as the server
// lists them in the page's JSON block #first-views (the page names none itself).

(() => {
  /** An early answer is taken within this many ms of the start, or not at all. */
  const FRESH_MS = 10000;
  const early = new Map();

  /** A status whose Response has no body (new Response(body) throws on them). */
  const BODILESS = new Set([101, 204, 205, 304]);

  // each answer is handed over with its body read: when they all are, the first view has
  // its data (window.taskboardEarly.settled: main.js leaves what can wait until then)
  const ask = (path) => {
    const answer = fetch(path, { credentials: "same-origin" }).then(async (response) => {
      const body = BODILESS.has(response.status) ? null : await response.arrayBuffer();
      const { status, statusText, headers } = response;
      return new Response(body, { status, statusText, headers });
    });
    early.set(path, answer);
    answer.catch(() => early.delete(path));  // unreachable: whoever asks later asks the server
  };

  let views = {};
  try {
    views = JSON.parse(document.getElementById("first-views")?.textContent || "{}");
  } catch { /* no list: each module comes when it is imported */ }

  /** Preload the modules of the shell, or of one view (FIRST_VIEWS of the server), in order. */
  const preload = (view) => {
    for (const url of views[view] || []) {
      const link = document.createElement("link");
      link.rel = "modulepreload";
      link.href = url;
      document.head.append(link);
    }
  };

  let paths = {};
  try {
    paths = JSON.parse(document.getElementById("first-data")?.textContent || "{}");
  } catch { /* none: each is asked for when it is needed */ }
  for (const block of document.querySelectorAll("script[data-answer]")) {
    // the seq of the events the answer reflects, as the API names it (store.js reads it)
    const headers = { "Content-Type": "application/json", "X-Taskboard-Seq": block.dataset.seq };
    early.set(block.dataset.answer, Promise.resolve(new Response(block.textContent, { headers })));
  }
  for (const path of Object.values(paths)) {
    if (!early.has(path)) ask(path);
  }
  // what the view of the address needs first: a board's tasks, or a task and its newest log
  const [, kind, id] = /^#\/(projects|tasks)\/([1-9]\d{0,15})(?:[?]|$)/.exec(location.hash) || [];
  if (kind === "projects") ask(`/api/projects/${id}/tasks`);
  if (kind === "tasks") {
    ask(`/api/tasks/${id}`);
    ask(`/api/tasks/${id}/logs?limit=1000`);  // LOG_PAGE of views/log_view.js
    ask(`/api/tasks/${id}/attempts`);  // its comparison, when it ran with several agents
  }
  preload("shell");
  if (!kind && /^(#\/?)?$/.test(location.hash)) preload("projects");
  if (kind === "projects") preload("board");
  if (kind === "tasks") {
    preload("task_detail");
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
  window.taskboardEarly.settled = Promise.allSettled([...early.values()]);
  window.taskboardEarly.paths = paths;
})();
