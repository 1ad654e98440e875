// The board's data, in three parts: the server's API, the client state the views read, and
// the /ws connection that keeps that state current.

// --- the API ------------------------------------------------------------------------------------

// The only code that knows URLs and fetch(). Every call resolves with the decoded JSON
// or throws ApiError(message, status, code, field). The first GETs of the page were started
// by boot.js, written into the page: those answers are taken from there.

export class ApiError extends Error {
  constructor(message, status, code = "", field = null) {
    super(message);
    this.status = status;
    this.code = code;
    this.field = field;
  }
}

async function request(method, path, body, { raw = false } = {}) {
  const options = { method, headers: {}, credentials: "same-origin" };
  if (body instanceof FormData) {
    options.body = body;
  } else if (body !== undefined) {
    options.headers["Content-Type"] = "application/json";
    options.body = JSON.stringify(body);
  }
  const counted = sending();
  let response;
  try {
    response = await ((method === "GET" && window.taskboardEarly?.(path)) || fetch(path, options));
  } catch (error) {
    throw new ApiError("The server cannot be reached.", 0, "unreachable");
  } finally {
    if (counted) answered(response);
  }
  if (response.status === 401 && !path.startsWith("/api/login")) {
    location.assign(`/login?next=${encodeURIComponent(location.pathname + location.hash)}`);
    throw new ApiError("Log in first.", 401, "unauthorized");
  }
  if (raw) return response;
  const text = await response.text();
  let data = null;
  try {
    data = text ? JSON.parse(text) : null;
  } catch {
    data = null;
  }
  if (!response.ok) {
    throw new ApiError((data && data.error) || `${response.status} ${response.statusText}`,
      response.status, data && data.code, data && data.field);
  }
  return data;
}

const enc = encodeURIComponent;

/**
 * An API path with ids in it: path`/api/tasks/${id}/logs`. Throws ApiError unless every
 * value is an id (a positive integer, or its digits): the second line of defence after the
 * router (design §11), so that a value such as "1/../../settings" never becomes a path.
 * Names that are not ids go through name().
 */
function path(strings, ...ids) {
  return strings.reduce((out, text, i) => {
    const id = ids[i - 1];
    const ok = (typeof id === "number" || typeof id === "string")
      && /^[1-9]\d*$/.test(String(id)) && Number.isSafeInteger(Number(id));
    if (!ok) throw new ApiError(`Not an id: ${String(id).slice(0, 40)}`, 0, "not_an_id");
    return out + String(id) + text;
  });
}

/**
 * A name in an API path (a list's kind, a desktop command): lowercase letters and "_" only,
 * so that it cannot change the path either (encodeURIComponent leaves ".." as it is).
 */
function name(value) {
  if (typeof value !== "string" || !/^[a-z][a-z_]*$/.test(value)) {
    throw new ApiError(`Not a name: ${String(value).slice(0, 40)}`, 0, "not_a_name");
  }
  return value;
}

/** The lists whose items have a path of their own (/api/schedules/7), not under their project. */
const OWN_ITEM_PATHS = new Set(["schedules"]);

/** A project's list of templates, snippets, webhooks or schedules (kind), or one item of it (id). */
function listPath(projectId, kind, id) {
  if (id !== undefined && OWN_ITEM_PATHS.has(kind)) return `/api/${name(kind)}` + path`/${id}`;
  return path`/api/projects/${projectId}/` + name(kind) + (id === undefined ? "" : path`/${id}`);
}

/** The project list with the fields of each project the board shows: the server names its
 * path in the page (FIRST_DATA), boot.js reads it there and asks it early. */
const projectsPath = () => window.taskboardEarly.paths.projects;

/** The HTTP API, one function per route. */
export const api = {
  health: () => request("GET", "/api/health"),
  agents: () => request("GET", "/api/agents"),
  openapi: () => request("GET", "/api/openapi.json"),
  logout: () => request("POST", "/api/logout"),
  // projects
  projects: () => request("GET", projectsPath()),
  projectSummaries: () => request("GET", "/api/projects/summary"),
  project: (id) => request("GET", path`/api/projects/${id}`),
  createProject: (body) => request("POST", "/api/projects", body),
  folder: (dir) => request("GET", `/api/folder?path=${enc(dir)}`),
  updateProject: (id, body) => request("PUT", path`/api/projects/${id}`, body),
  deleteProject: (id) => request("DELETE", path`/api/projects/${id}`),
  // tasks
  tasks: (projectId) => request("GET", path`/api/projects/${projectId}/tasks`),
  task: (id) => request("GET", path`/api/tasks/${id}`),
  taskDetail: (id) => request("GET", path`/api/tasks/${id}/detail`),
  createTask: (projectId, body) =>
    request("POST", path`/api/projects/${projectId}/tasks`, body),
  updateTask: (id, body) => request("PUT", path`/api/tasks/${id}`, body),
  moveTask: (id, status) => request("PATCH", path`/api/tasks/${id}/status`, { status }),
  deleteTask: (id) => request("DELETE", path`/api/tasks/${id}`),
  taskLogs: (id, limit = 500, before = null, kind = null) =>
    request("GET", path`/api/tasks/${id}/logs` + `?limit=${Number(limit)}`
      + (before == null ? "" : `&before=${Number(before)}`)
      + (kind == null ? "" : `&kind=${encodeURIComponent(kind)}`)),
  revisions: (id) => request("GET", path`/api/tasks/${id}/revisions`),
  uploadAttachment: (taskId, file) => {
    const form = new FormData();
    form.append("file", file);
    return request("POST", path`/api/tasks/${taskId}/attachments`, form);
  },
  attachmentUrl: (id) => path`/api/attachments/${id}`,
  deleteAttachment: (id) => request("DELETE", path`/api/attachments/${id}`),
  // the channel to a running agent: approvals, messages, review; the "Needs you" inbox
  approvals: (status) => request("GET", `/api/approvals${status ? `?status=${enc(status)}` : ""}`),
  taskApprovals: (taskId) => request("GET", path`/api/tasks/${taskId}/approvals`),
  decideApproval: (id, body) => request("POST", path`/api/approvals/${id}`, body),
  inbox: () => request("GET", "/api/inbox"),
  messages: (taskId) => request("GET", path`/api/tasks/${taskId}/messages`),
  sendMessage: (taskId, body) => request("POST", path`/api/tasks/${taskId}/messages`, body),
  review: (taskId) => request("GET", path`/api/tasks/${taskId}/review`),
  sendReview: (taskId, body) => request("POST", path`/api/tasks/${taskId}/review`, body),
  releasePr: (taskId, key) => request("POST", path`/api/tasks/${taskId}/pr/release`, { key }),
  // best of N (design §18): a task run by several agents at once, compared, one picked
  attempts: (taskId) => request("GET", path`/api/tasks/${taskId}/attempts`),
  startAttempts: (taskId, agents) => request("POST", path`/api/tasks/${taskId}/attempts`, { agents }),
  attemptDiff: (taskId, n) => request("GET", path`/api/tasks/${taskId}/attempts/${n}/diff`),
  attemptLogs: (taskId, n, limit = 500, before = null) =>
    request("GET", path`/api/tasks/${taskId}/logs` + `?attempt=${Number(n)}&limit=${Number(limit)}`
      + (before == null ? "" : `&before=${Number(before)}`)),
  pickAttempt: (taskId, n) => request("POST", path`/api/tasks/${taskId}/attempts/${n}/pick`),
  attemptStats: () => request("GET", "/api/stats/attempts"),
  // a task's preview (design §21): its dev server on a port of its own; an attempt's too
  preview: (taskId) => request("GET", path`/api/tasks/${taskId}/preview`),
  startPreview: (taskId) => request("POST", path`/api/tasks/${taskId}/preview`),
  stopPreview: (taskId) => request("DELETE", path`/api/tasks/${taskId}/preview`),
  attemptPreview: (taskId, n) => request("GET", path`/api/tasks/${taskId}/attempts/${n}/preview`),
  startAttemptPreview: (taskId, n) => request("POST", path`/api/tasks/${taskId}/attempts/${n}/preview`),
  stopAttemptPreview: (taskId, n) => request("DELETE", path`/api/tasks/${taskId}/attempts/${n}/preview`),
  // templates, snippets, webhooks, schedules: kind is "templates" | "snippets" | "webhooks" | "schedules"
  list: (projectId, kind) => request("GET", listPath(projectId, kind)),
  create: (projectId, kind, body) => request("POST", listPath(projectId, kind), body),
  update: (projectId, kind, id, body) => request("PUT", listPath(projectId, kind, id), body),
  remove: (projectId, kind, id) => request("DELETE", listPath(projectId, kind, id)),
  deliveries: (projectId, hookId) =>
    request("GET", path`/api/projects/${projectId}/webhooks/${hookId}/deliveries`),
  testWebhook: (projectId, hookId) =>
    request("POST", path`/api/projects/${projectId}/webhooks/${hookId}/test`),
  // planning
  startPlan: (projectId, body) => request("POST", path`/api/projects/${projectId}/plan`, body),
  planStatus: (projectId) => request("GET", path`/api/projects/${projectId}/plan/status`),
  cancelPlan: (projectId) => request("POST", path`/api/projects/${projectId}/plan/cancel`),
  // statistics and settings
  stats: (projectId) => request("GET", path`/api/projects/${projectId}/stats`),
  activity: (projectId, limit = 50, offset = 0) =>
    request("GET", path`/api/projects/${projectId}/activity`
      + `?limit=${Number(limit)}&offset=${Number(offset)}`),
  usage: () => request("GET", "/api/stats/agent-usage"),
  settings: () => request("GET", "/api/settings"),
  updateSettings: (body) => request("PUT", "/api/settings", body),
  // Web Push: this board's key and the devices that receive its notifications
  pushKey: () => request("GET", "/api/push/key"),
  pushSubscriptions: () => request("GET", "/api/push/subscriptions"),
  savePushSubscription: (body) => request("POST", "/api/push/subscriptions", body),
  deletePushSubscription: (id) => request("DELETE", path`/api/push/subscriptions/${id}`),
  testPushSubscription: (id) => request("POST", path`/api/push/subscriptions/${id}/test`),
  // hosts: the machines agents run on besides this one, reached over SSH
  hosts: () => request("GET", "/api/hosts"),
  createHost: (body) => request("POST", "/api/hosts", body),
  updateHost: (id, body) => request("PUT", path`/api/hosts/${id}`, body),
  deleteHost: (id) => request("DELETE", path`/api/hosts/${id}`),
  checkHost: (id) => request("POST", path`/api/hosts/${id}/check`),
  // personal tokens: bearers for scripts and other programs; a new one's secret is in its answer only
  tokens: () => request("GET", "/api/tokens"),
  createToken: (body) => request("POST", "/api/tokens", body),
  deleteToken: (id) => request("DELETE", path`/api/tokens/${id}`),
  // desktop (local-only) commands: 403 local_only when the board is opened from elsewhere
  desktop: (command, body = {}) => request("POST", `/api/desktop/${name(command)}`, body),
};

// --- the state ----------------------------------------------------------------------------------

// Client state, kept current by /ws events. Views read store.state and subscribe();
// raw events (plan:*, task:log, webhook:delivery, ...) reach listeners of onEvent().

/**
 * @typedef {Object} State
 * @property {Object|null} settings
 * @property {Object[]} projects       the project list entries
 * @property {Map<number, Object>} tasks   task id -> task, for the projects loaded so far
 * @property {Set<number>} loadedProjects
 * @property {"connecting"|"open"|"closed"} connection
 * @property {Object|null} health
 * @property {boolean} localOnlyRefused  true once a desktop command answered 403 local_only
 * @property {Map<number, Object>} approvals  approval id -> approval waiting for a person, every project
 * @property {boolean} approvalsLoaded  the pending approvals were read at least once
 * @property {{count: number, items: Object[]}|null} inbox  the "Needs you" inbox (GET /api/inbox):
 *   pending approvals and questions, tasks waiting for review, newest first; null until read
 * @property {Map<number, Object>} hosts  host id -> host: the machines agents run on besides this one
 * @property {boolean} hostsLoaded  the hosts were read at least once
 * @property {Map<number, Object>} live  task id -> the latest task:usage of its running run
 *   (its tokens and cost so far; the task's own totals do not count the run until it ends)
 * @property {Map<number, Map<number, Object>>} attempts  task id -> n -> its attempt (best of
 *   N), for the tasks whose attempts were read
 */

/** @type {State} */
export const state = {
  settings: null,
  projects: [],
  tasks: new Map(),
  loadedProjects: new Set(),
  connection: "connecting",
  health: null,
  localOnlyRefused: false,
  approvals: new Map(),
  approvalsLoaded: false,
  inbox: null,
  hosts: new Map(),
  hostsLoaded: false,
  live: new Map(),
  attempts: new Map(),
};

const subscribers = new Set();
const eventListeners = new Set();

/** Call fn(state, event) after every change; returns the remover. */
export function subscribe(fn) {
  subscribers.add(fn);
  return () => subscribers.delete(fn);
}

/** Call fn(message) for every /ws message ({seq, event, data}); returns the remover. */
export function onEvent(fn) {
  eventListeners.add(fn);
  return () => eventListeners.delete(fn);
}

/** Tell subscribers something changed (event is the /ws event name or a local reason). */
export function notify(event = "local") {
  for (const fn of subscribers) fn(state, event);
}

/**
 * True when a desktop command was refused because the board is opened from another machine
 * (403 local_only). The refusal is remembered, so every view hides those features and says why.
 */
export function refusedLocally(error) {
  if (error?.code !== "local_only") return false;
  state.localOnlyRefused = true;
  notify("localOnlyRefused");
  return true;
}

/** The tasks of a project in the API's order (priority, queue position, age). */
export function tasksOf(projectId) {
  return [...state.tasks.values()]
    .filter((task) => task.project_id === projectId)
    .sort((a, b) => b.priority - a.priority || (a.queue_position ?? 0) - (b.queue_position ?? 0)
      || compareText(a.created_at, b.created_at) || a.id - b.id);
}

/** Two strings in the order of their code units, as SQLite orders text: not localeCompare(),
 * whose collation is not the server's and costs tens of ms at its first use (a board's first
 * paint sorts its tasks). */
function compareText(a, b) {
  return a < b ? -1 : a > b ? 1 : 0;
}

/**
 * What a task's running run has used so far (its latest task:usage: inputTokens,
 * outputTokens, cost), or null when it runs not or has reported nothing yet. The board's
 * card and the task page add it to the task's totals.
 */
export function liveUsage(task) {
  return (task.is_running && state.live.get(task.id)) || null;
}

/** Events heard per list ("tasks:<project id>", "approvals", "inbox", "hosts", "schedules:<project id>"). */
const heard = new Map();
const hear = (list) => heard.set(list, (heard.get(list) || 0) + 1);

/**
 * read() a list, and again (a few times at most) while an event of that list arrived during
 * the read: an answer that left before a change whose event came meanwhile would undo that
 * change (or miss it, when the list was not loaded yet and the event was ignored).
 */
async function settledRead(list, read) {
  for (let attempt = 1; ; attempt++) {
    const seen = heard.get(list) || 0;
    const answer = await read();
    if ((heard.get(list) || 0) === seen || attempt === 5) return answer;
  }
}

/** Load (or reload) a project's tasks into the store (see settledRead). */
export async function loadTasks(projectId) {
  const tasks = await settledRead(`tasks:${projectId}`, () => api.tasks(projectId));
  for (const [id, task] of state.tasks) if (task.project_id === projectId) state.tasks.delete(id);
  for (const task of tasks) state.tasks.set(task.id, task);
  state.loadedProjects.add(projectId);
  notify("tasks:loaded");
  return tasks;
}

/**
 * The events of a project's templates, snippets, webhooks and schedules (their lists are kept
 * by the views, item_list.js): the name of the item's kind, and what happened to it.
 */
const LIST_EVENT = /^(template|snippet|webhook|schedule):(created|updated|deleted|fired)$/;

/**
 * Read a project's templates, snippets, webhooks or schedules (kind: "templates", ...), and
 * again while one of their events came meanwhile (see settledRead). The list is the view's to
 * keep: from then on it follows the same events.
 * @param {number} projectId
 * @param {"templates"|"snippets"|"webhooks"|"schedules"} kind
 */
export function loadList(projectId, kind) {
  return settledRead(`${kind}:${projectId}`, () => api.list(projectId, kind));
}

/** Load (or reload) a task's attempts into the store (see settledRead). */
export async function loadAttempts(taskId) {
  const list = await settledRead(`attempts:${taskId}`, () => api.attempts(taskId));
  state.attempts.set(taskId, new Map(list.map((a) => [a.n, a])));
  notify("attempts:loaded");
  return list;
}

/**
 * Whether a task run by several agents waits for one of its attempts to be picked (as read
 * into the store: false until they are): till then nothing can be sent to "its" agent.
 * @param {Object} task
 */
export function attemptsOpen(task) {
  const attempts = task && task.attempts != null ? state.attempts.get(task.id) : null;
  return Boolean(attempts && attempts.size) && ![...attempts.values()].some((a) => a.picked);
}

/** Load every project's pending approvals into the store (see settledRead). */
export async function loadApprovals() {
  const list = await settledRead("approvals", () => api.approvals("pending"));
  state.approvals = new Map(list.map((approval) => [approval.id, approval]));
  state.approvalsLoaded = true;
  notify("approvals:loaded");
  return list;
}

/** The pending approvals of one task (all of them without a task id), oldest first. */
export function pendingApprovals(taskId = null) {
  return [...state.approvals.values()].filter((a) => taskId === null || a.taskId === taskId)
    .sort((a, b) => a.id - b.id);
}

/** Inbox reads started so far: only the latest one's answer is kept. */
let inboxReads = 0;
let inboxTimer = null;

/** Read the "Needs you" inbox into the store (see settledRead and touchesInbox). */
export async function loadInbox() {
  const mine = ++inboxReads;
  const answer = await settledRead("inbox", () => api.inbox());
  if (mine !== inboxReads) return state.inbox;  // a later read is on its way
  state.inbox = { count: answer.items.length, items: answer.items };
  notify("inbox:loaded");
  return state.inbox;
}

/** Read the inbox again soon (several events in a row make one read). */
function refreshInbox() {
  clearTimeout(inboxTimer);
  inboxTimer = setTimeout(() => loadInbox().catch(() => {}), 150);
}

/** The number of entries of the inbox (0 until it is read). */
export const needsYouCount = () => (state.inbox ? state.inbox.items.length : 0);

/**
 * Whether a /ws message may change the inbox: an approval asked or answered, a task reaching or
 * leaving testing (or renamed, deleted), a task whose pull request starts waiting for a person,
 * a project of an entry renamed or deleted. Pure.
 * @param {State} s
 * @param {{event: string, data: Object}} message
 */
export function touchesInbox(s, { event, data }) {
  const items = s.inbox ? s.inbox.items : [];
  if (event.startsWith("approval:")) return true;
  if (!data) return false;
  if (event === "task:created" || event === "task:updated") {
    return data.status === "testing" || Boolean(data.pr?.needsYou) || items.some((item) => item.taskId === data.id);
  }
  if (event === "task:deleted") return items.some((item) => item.taskId === data.id);
  if (event === "project:updated" || event === "project:deleted") {
    return items.some((item) => item.projectId === data.id);
  }
  return false;
}

/** Load the hosts into the store (see settledRead). */
export async function loadHosts() {
  const list = await settledRead("hosts", () => api.hosts());
  state.hosts = new Map(list.map((host) => [host.id, host]));
  state.hostsLoaded = true;
  notify("hosts:loaded");
  return list;
}

/** Take a host the server answered with at once (the event that follows changes nothing). */
export function putHost(host) {
  const known = state.hosts.get(host.id);
  if (known && known.updatedAt > host.updatedAt) return;  // an event brought a newer one
  state.hosts.set(host.id, host);
  notify("host:updated");
}

/** Forget a host the server deleted at once (the event that follows changes nothing). */
export function dropHost(hostId) {
  if (state.hosts.delete(hostId)) notify("host:deleted");
}

/**
 * Load settings and projects (at start and after a resync), then the approvals, the inbox
 * and the hosts: at once, or when `later` resolves (at start: after the first paint).
 */
export async function loadAll(later = null) {
  const [settings, projects] = await Promise.all([api.settings(), api.projects()]);
  state.settings = settings;
  state.projects = projects;
  Promise.resolve(later).then(() => {
    loadApprovals().catch(() => {});
    loadInbox().catch(() => {});
    loadHosts().catch(() => {});
  });
  await Promise.all([...state.loadedProjects].map((id) => loadTasks(id).catch(() => {})));
  notify("resync");
}

/** A field of a project (the list carries those the board shows), undefined until it is known. */
const projectExtra = (projectId, name) => state.projects.find((p) => p.id === projectId)?.[name];

/** The agent CLI of a project ("claude", "codex", ...), or undefined until it is known. */
export const projectAgent = (projectId) => projectExtra(projectId, "agent");

/** The host id a project's tasks run on, null for this machine, undefined until it is known. */
export const projectHost = (projectId) => projectExtra(projectId, "host");

/** Whether a project's runs use the simulated agent (the Demo of --demo); undefined until known. */
export const projectSimulated = (projectId) => projectExtra(projectId, "simulated");

/** How many automatic fixes one pull request of a project gets (undefined until known). */
export const projectPrFixMax = (projectId) => projectExtra(projectId, "prFixMaxAttempts");
/** The project's stopCheckCommand ("": none; undefined while not known). */
export const projectStopCheck = (projectId) => projectExtra(projectId, "stopCheckCommand");

/**
 * Apply one /ws message to the state (pure with respect to the network).
 * @param {State} s
 * @param {{event: string, data: Object}} message
 */
export function applyEvent(s, message) {
  const { event, data } = message;
  switch (event) {
    case "task:created":
    case "task:updated":
      if (s.loadedProjects.has(data.project_id)) s.tasks.set(data.id, data);
      if (!data.is_running) s.live.delete(data.id);  // a finished run is in the totals now
      break;
    case "task:usage":
      s.live.set(data.taskId, data);
      break;
    case "task:deleted":
      s.tasks.delete(data.id);
      s.live.delete(data.id);
      break;
    case "project:created":
      if (!s.projects.some((p) => p.id === data.id)) s.projects.push(data);
      break;
    case "project:updated":
      s.projects = s.projects.map((p) => (p.id === data.id ? { ...p, ...data } : p));
      break;
    case "project:deleted":
      s.projects = s.projects.filter((p) => p.id !== data.id);
      for (const [id, task] of s.tasks) if (task.project_id === data.id) s.tasks.delete(id);
      s.loadedProjects.delete(data.id);
      break;
    case "settings:updated":
      s.settings = data;
      break;
    case "approval:requested":
      s.approvals.set(data.id, data);
      break;
    case "approval:resolved":
      s.approvals.delete(data.id);
      break;
    case "host:created":
    case "host:updated":
      s.hosts.set(data.id, data);
      break;
    case "host:deleted":
      s.hosts.delete(data.id);
      break;
    case "attempt:updated":
      s.attempts.get(data.taskId)?.set(data.n, data);
      break;
    default:
      break;
  }
  return s;
}

/** Entry point for the /ws connection (below). */
export function receive(message) {
  if (message.event === "resync") {
    loadAll().catch(() => {});
  } else {
    applyEvent(state, message);
    const { event, data } = message;
    if (event.startsWith("approval:")) hear("approvals");
    if (event.startsWith("host:")) hear("hosts");
    if (event === "attempt:updated") hear(`attempts:${data.taskId}`);
    const listEvent = LIST_EVENT.exec(event);
    if (listEvent && data) hear(`${listEvent[1]}s:${data.projectId}`);
    if (touchesInbox(state, message)) {
      hear("inbox");
      refreshInbox();
    }
    if (event === "task:created" || event === "task:updated" || event === "task:deleted") {
      hear(`tasks:${data.project_id ?? data.projectId}`);
    }
  }
  for (const fn of eventListeners) fn(message);
  notify(message.event);
}

// --- the /ws connection -------------------------------------------------------------------------

// The /ws connection: reconnects with backoff and asks for what it missed (?since=).
// The first one asks for what followed the page's reads: each answer names the seq of the
// events it reflects (X-Taskboard-Seq), so the first connection waits (FIRST_WAIT_MS at
// most) for the requests sent before it and asks ?since= the lowest seq they named. One that
// answers later than that, reflecting less than the connection replays, means a resync.

/** How long the first connection waits for the answers to the requests sent before it. */
const FIRST_WAIT_MS = 3000;
/** The ?since= of the first connection: undefined till it is made, null when it had none. */
let firstSince;
let unanswered = 0;  // requests sent before the first connection, not answered yet
let firstWait = null;  // the first connection waits for them: its timer

let socket = null;
let lastSeq = null;
let retry = 0;
let logs = new Set();
let switching = false;  // followLogs() closed the socket on purpose: reconnect at once
let opened = false;  // a connection was open before: a new one may have missed events

function url() {
  const params = new URLSearchParams();
  if (lastSeq !== null) params.set("since", String(lastSeq));
  for (const id of logs) params.append("logs", String(id));
  const scheme = location.protocol === "https:" ? "wss" : "ws";
  const query = params.toString();
  return `${scheme}://${location.host}/ws${query ? `?${query}` : ""}`;
}

function setConnection(value) {
  if (state.connection !== value) {
    state.connection = value;
    notify("connection");
  }
}

/** Whether a request being sent counts for the first connection (then answered() follows). */
function sending() {
  if (firstSince !== undefined) return false;
  unanswered++;
  return true;
}

/** A request sent before the first connection has its answer (undefined: it failed). */
function answered(response) {
  unanswered--;
  const seq = Number(response?.headers.get("X-Taskboard-Seq"));
  if (Number.isSafeInteger(seq) && seq > 0) {
    if (firstSince === undefined) lastSeq = lastSeq === null ? seq : Math.min(lastSeq, seq);
    else if (firstSince === null || seq < firstSince) receive({ event: "resync", data: {} });
  }
  if (unanswered === 0 && firstWait !== null) {
    clearTimeout(firstWait);
    dial();
  }
}

/** Open the connection (again); the first one once the requests sent before it have answered. */
export function connect() {
  setConnection("connecting");
  if (firstSince === undefined && unanswered > 0) {
    firstWait ??= setTimeout(dial, FIRST_WAIT_MS);
    return;
  }
  dial();
}

function dial() {
  firstWait = null;
  if (firstSince === undefined) firstSince = lastSeq;
  socket = new WebSocket(url());
  socket.addEventListener("open", () => {
    retry = 0;
    setConnection("open");
    // with no seq heard yet there was no ?since=, so the server cannot say resync: say it here
    if (opened && lastSeq === null) receive({ event: "resync", data: {} });
    opened = true;
  });
  socket.addEventListener("message", (event) => {
    let message;
    try {
      message = JSON.parse(event.data);
    } catch {
      return;
    }
    if (message.event === "ping") return;
    if (typeof message.seq === "number") lastSeq = message.seq;
    receive(message);
  });
  socket.addEventListener("close", () => {
    socket = null;
    if (switching) {  // not an outage: no "offline" state, no backoff
      switching = false;
      connect();
      return;
    }
    setConnection("closed");
    retry = Math.min(retry + 1, 6);
    setTimeout(connect, Math.min(500 * 2 ** retry, 15000));
  });
}

/**
 * Follow the live log of these task ids (task:log is sent only to those who ask):
 * reconnects with the new ?logs= list, replaying what was missed meanwhile.
 * @param {number[]} taskIds
 */
export function followLogs(taskIds) {
  const next = new Set(taskIds);
  if (next.size === logs.size && [...next].every((id) => logs.has(id))) return;
  logs = next;
  if (socket) {
    switching = true;  // the close handler reconnects with the new list
    const current = socket;
    if (current.readyState === WebSocket.CONNECTING) {
      current.addEventListener("open", () => current.close(), { once: true });  // closing now warns
    } else {
      current.close();
    }
  }
}
