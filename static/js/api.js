// The only module that knows URLs and fetch(). Every call resolves with the decoded JSON
// or throws ApiError(message, status, code, field).

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
    response = await fetch(path, options);
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

/** The HTTP API, one function per route. */
export const api = {
  health: () => request("GET", "/api/health"),
  openapi: () => request("GET", "/api/openapi.json"),
  logout: () => request("POST", "/api/logout"),
  // projects
  projects: () => request("GET", "/api/projects"),
  projectSummaries: () => request("GET", "/api/projects/summary"),
  project: (id) => request("GET", `/api/projects/${id}`),
  createProject: (body) => request("POST", "/api/projects", body),
  updateProject: (id, body) => request("PUT", `/api/projects/${id}`, body),
  deleteProject: (id) => request("DELETE", `/api/projects/${id}`),
  // tasks
  tasks: (projectId) => request("GET", `/api/projects/${projectId}/tasks`),
  task: (id) => request("GET", `/api/tasks/${id}`),
  taskDetail: (id) => request("GET", `/api/tasks/${id}/detail`),
  createTask: (projectId, body) => request("POST", `/api/projects/${projectId}/tasks`, body),
  updateTask: (id, body) => request("PUT", `/api/tasks/${id}`, body),
  moveTask: (id, status) => request("PATCH", `/api/tasks/${id}/status`, { status }),
  deleteTask: (id) => request("DELETE", `/api/tasks/${id}`),
  taskLogs: (id, limit = 500) => request("GET", `/api/tasks/${id}/logs?limit=${limit}`),
  revisions: (id) => request("GET", `/api/tasks/${id}/revisions`),
  uploadAttachment: (taskId, file) => {
    const form = new FormData();
    form.append("file", file);
    return request("POST", `/api/tasks/${taskId}/attachments`, form);
  },
  attachmentUrl: (id) => `/api/attachments/${id}`,
  deleteAttachment: (id) => request("DELETE", `/api/attachments/${id}`),
  // the channel to a running agent: approvals (the "Needs you" inbox), messages, review
  approvals: (status) => request("GET", `/api/approvals${status ? `?status=${enc(status)}` : ""}`),
  taskApprovals: (taskId) => request("GET", `/api/tasks/${taskId}/approvals`),
  decideApproval: (id, body) => request("POST", `/api/approvals/${id}`, body),
  messages: (taskId) => request("GET", `/api/tasks/${taskId}/messages`),
  sendMessage: (taskId, body) => request("POST", `/api/tasks/${taskId}/messages`, body),
  review: (taskId) => request("GET", `/api/tasks/${taskId}/review`),
  sendReview: (taskId, body) => request("POST", `/api/tasks/${taskId}/review`, body),
  // templates, snippets, webhooks: kind is "templates" | "snippets" | "webhooks"
  list: (projectId, kind) => request("GET", `/api/projects/${projectId}/${kind}`),
  create: (projectId, kind, body) => request("POST", `/api/projects/${projectId}/${kind}`, body),
  update: (projectId, kind, id, body) =>
    request("PUT", `/api/projects/${projectId}/${kind}/${id}`, body),
  remove: (projectId, kind, id) => request("DELETE", `/api/projects/${projectId}/${kind}/${id}`),
  deliveries: (projectId, hookId) =>
    request("GET", `/api/projects/${projectId}/webhooks/${hookId}/deliveries`),
  testWebhook: (projectId, hookId) =>
    request("POST", `/api/projects/${projectId}/webhooks/${hookId}/test`),
  // planning
  startPlan: (projectId, body) => request("POST", `/api/projects/${projectId}/plan`, body),
  planStatus: (projectId) => request("GET", `/api/projects/${projectId}/plan/status`),
  cancelPlan: (projectId) => request("POST", `/api/projects/${projectId}/plan/cancel`),
  // statistics and settings
  stats: (projectId) => request("GET", `/api/projects/${projectId}/stats`),
  activity: (projectId, limit = 50, offset = 0) =>
    request("GET", `/api/projects/${projectId}/activity?limit=${limit}&offset=${offset}`),
  usage: () => request("GET", "/api/stats/agent-usage"),
  settings: () => request("GET", "/api/settings"),
  updateSettings: (body) => request("PUT", "/api/settings", body),
  // desktop (local-only) commands: 403 local_only when the board is opened from elsewhere
  desktop: (command, body = {}) => request("POST", `/api/desktop/${enc(command)}`, body),
};
