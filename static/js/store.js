// Client state, kept current by /ws events. Views read store.state and subscribe();
// raw events (plan:*, task:log, webhook:delivery, ...) reach listeners of onEvent().

import { api } from "./api.js";

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
      || a.created_at.localeCompare(b.created_at) || a.id - b.id);
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

/** Entry point for socket.js. */
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
