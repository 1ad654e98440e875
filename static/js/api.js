// The only module that knows URLs and fetch(). Every call resolves with the decoded JSON
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
  let response;
  try {
    response = await ((method === "GET" && window.taskboardEarly?.(path)) || fetch(path, options));
  } catch (error) {
    throw new ApiError("The server cannot be reached.", 0, "unreachable");
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

/** The project list with the fields of each project the board shows (boot.js asks it early). */
export const PROJECTS_PATH = "/api/projects?fields=agent,host,prFixMaxAttempts,simulated,stopCheckCommand";

/** The HTTP API, one function per route. */
export const api = {
  health: () => request("GET", "/api/health"),
  agents: () => request("GET", "/api/agents"),
  openapi: () => request("GET", "/api/openapi.json"),
  logout: () => request("POST", "/api/logout"),
  // projects
  projects: () => request("GET", PROJECTS_PATH),
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
