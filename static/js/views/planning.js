// Planning wizard (#/projects/:projectId/plan): a read-only agent turns a topic into backlog
// tasks. The form starts a session; plan:* events drive the live stepper, stats, tool log
// and the planner's text (plan_session.js); plan/status reconnects to a running session
// after a reload. The form's choices and limits come from the server's start-plan body.

import { clear, confirmDialog, h, toast } from "../dom.js";
import { onLanguageChange, register, t } from "../i18n.js";
import { defaultOf, enumOf, maxLengthOf } from "../schema.js";
import { api, onEvent, state, subscribe } from "../store.js";
import { agentSelect, field, projectHeader, select } from "./common.js";
import {
  appendLog, appendText, endedResult, newSession, resultPanel, sessionPanel, statsOf, updateStats,
  updateSteps,
} from "./plan_session.js";

register({  // key: [English, Turkish]
  "plan.intro": ["A read-only agent reads the project's code and turns a topic into backlog tasks with dependencies.", "Salt okunur bir ajan projenin kodunu okur ve bir konuyu bağımlılıklarıyla birlikte bekleyen görevlere dönüştürür."],
  "plan.topic": ["Topic", "Konu"],
  "plan.topicHelp": ["What should be planned?", "Ne planlanmalı?"],
  "plan.context": ["Context", "Bağlam"],
  "plan.contextHelp": ["Stack, constraints, anything the planner should know.", "Teknoloji yığını, kısıtlar ve planlayıcının bilmesi gereken her şey."],
  "plan.granularity": ["Granularity", "Ayrıntı düzeyi"],
  "plan.agent": ["Agent", "Ajan"],
  "plan.model": ["Model", "Model"],
  "plan.effort": ["Thinking effort", "Düşünme düzeyi"],
  "plan.gran.high-level": ["High-level (3–5 tasks)", "Üst düzey (3–5 görev)"],
  "plan.gran.balanced": ["Balanced (5–10 tasks)", "Dengeli (5–10 görev)"],
  "plan.gran.detailed": ["Detailed (10–20 tasks)", "Ayrıntılı (10–20 görev)"],
  "plan.start": ["Start planning", "Planlamayı başlat"],
  "plan.starting": ["Starting…", "Başlatılıyor…"],
  "plan.topicRequired": ["Enter a topic.", "Bir konu girin."],
});

const BODY = "api_start_plan_body";

/** What the form starts with: the server's defaults. */
const newDraft = () => ({ topic: "", context: "", agent: "", granularity: defaultOf(BODY, "granularity"),
  model: defaultOf(BODY, "model"), effort: defaultOf(BODY, "effort") });

/**
 * The form that starts a session: onStart() on a submit with a topic, onInvalid(message)
 * without one. draft keeps what was typed across renders.
 */
function planForm(projectId, draft, { busy, formError, onStart, onInvalid }) {
  const topic = h("input", { type: "text", name: "topic", required: true, maxlength: maxLengthOf(BODY, "topic"),
    value: draft.topic, "data-testid": "plan-topic", oninput: (e) => { draft.topic = e.target.value; } });
  const context = h("textarea", { name: "context", rows: "4", value: draft.context, maxlength: maxLengthOf(BODY, "context"),
    oninput: (e) => { draft.context = e.target.value; } });
  const pick = (name, label) => select(enumOf(BODY, name), draft[name], label,
    { name, onchange: (e) => { draft[name] = e.target.value; } });
  const error = h("p", { class: "error", role: "alert", "data-testid": "plan-error" }, formError);
  const submit = h("button", { type: "submit", class: "primary", disabled: busy },
    busy ? t("plan.starting") : t("plan.start"));
  return h("form", { class: "card-panel plan-form", novalidate: true, onsubmit: (event) => {
    event.preventDefault();
    if (!draft.topic.trim()) {
      error.textContent = t("plan.topicRequired");
      onInvalid(error.textContent);
      topic.focus();
      return;
    }
    submit.disabled = true;
    submit.textContent = t("plan.starting");
    onStart();
  } },
  h("h2", {}, t("plan.newSession")),
  h("p", { class: "muted" }, t("plan.intro")),
  field(t("plan.topic"), topic, t("plan.topicHelp")),
  field(t("plan.context"), context, t("plan.contextHelp")),
  h("div", { class: "plan-choices" },
    field(t("plan.agent"), agentSelect(projectId, draft.agent, { name: "agent", "data-testid": "plan-agent",
      onchange: (e) => { draft.agent = e.target.value; } })),
    field(t("plan.granularity"), pick("granularity", (v) => t(`plan.gran.${v}`))),
    field(t("plan.model"), pick("model", (v) => t(`model.${v}`))),
    field(t("plan.effort"), pick("effort", (v) => t(`effort.${v}`)))),
  error,
  h("div", { class: "actions" }, submit));
}

/**
 * What a plan:* event means for the page: "follow" a session that started, "apply" it to
 * the session shown, "ask" (or "ask soon") the server about a session this page did not see
 * start, or nothing.
 */
function planEventAction(event, data, session, ended) {
  const shown = session && session.planId === data.planId;
  if (event === "plan:started") return !shown && !ended.has(data.planId) ? "follow" : null;
  if (shown) return "apply";
  return event === "plan:completed" || event === "plan:cancelled" ? "ask" : "ask soon";
}

/** Apply a plan:* event to the session shown; "finished" when it ended (completed, cancelled). */
function applyPlanEvent(event, data, session, parts) {
  switch (event) {
    case "plan:phase":
      session.phase = data.phase;
      updateSteps(parts, session);
      return null;
    case "plan:stats":
      session.stats = statsOf(data);
      session.statsAt = Date.now();
      updateStats(parts, session);
      return null;
    case "plan:log":
      appendLog(parts, session, data);
      return null;
    case "plan:progress":
      if (typeof data.content === "string" && data.content) appendText(parts, session, data.content);
      return null;
    case "plan:completed":
      return data.error ? "failed" : "completed";
    case "plan:cancelled":
      return "cancelled";
    default:
      return null;
  }
}

/** Bring the session shown up to date with plan/status: phase and stats (the log stays). */
function catchUp(parts, session, status) {
  Object.assign(session, { phase: status.phase, stats: statsOf(status), statsAt: Date.now() });
  updateSteps(parts, session);
  updateStats(parts, session);
}

/** Cancel the running session; false when the server refused (the page asks for its state). */
async function cancelSession(projectId, session, parts) {
  session.cancelling = true;
  parts.cancel.disabled = true;
  parts.cancel.textContent = t("plan.cancelling");
  try {
    await api.cancelPlan(projectId);
    return true;
  } catch (error) {
    toast(error.message, "error");
    session.cancelling = false;
    return false;
  }
}

/** Mount the planning view. */
export function mount(root, { projectId }) {
  const draft = newDraft();
  let session = null;  // the running session, or null
  let result = null;  // the latest finished session ({planId, status, topic, tasks, error, warnings, finishedAt})
  let loading = true;
  let formError = "";
  let busy = false;
  let refetchTimer = null;
  const parts = {};  // live elements of the session panel
  const ended = new Set();  // planIds seen finishing (a fast failure can end before start answers)
  let heardAt = Date.now();
  let alive = true;

  const ticker = setInterval(() => {
    if (!session) return;
    updateStats(parts, session);
    if (Date.now() - heardAt > 15000) {  // quiet for long: make sure it is still running
      heardAt = Date.now();
      loadStatus();
    }
  }, 1000);

  const follow = (data) => {
    heardAt = Date.now();
    session = newSession(data);
  };

  async function loadStatus() {
    try {
      const status = await api.planStatus(projectId);
      if (!alive) return;
      if (status.active && session && session.planId === status.planId && parts.steps) {
        catchUp(parts, session, status);  // the session shown goes on
        return;
      }
      if (status.active) {
        if (!session || session.planId !== status.planId) follow({ ...status, reattached: true });
      } else {
        session = null;
        result = status.last;
      }
    } catch (error) {
      if (!alive) return;
      formError = error.message;
    }
    loading = false;
    render();
  }

  function render() {
    clear(root);
    root.append(projectHeader(projectId, "/plan"));
    if (loading) root.append(h("p", { class: "muted" }, t("common.loading")));
    else if (session) root.append(sessionPanel(session, parts, { formError, onCancel: cancel }));
    else root.append(result ? resultPanel(result) : "", planForm(projectId, draft, { busy, formError, onStart: start,
      onInvalid: (message) => { formError = message; } }));
  }

  async function start() {
    busy = true;
    try {
      const answer = await api.startPlan(projectId, { ...draft, topic: draft.topic.trim(), agent: draft.agent || null });
      if (!alive) return;
      formError = "";
      busy = false;
      if (!ended.has(answer.planId) && (!session || session.planId !== answer.planId)) {
        follow({ planId: answer.planId, topic: draft.topic.trim(), model: draft.model,
          effort: draft.effort, granularity: draft.granularity });
      }
      if (session) session.granularity = session.granularity || draft.granularity;
      render();
    } catch (failure) {
      if (!alive) return;
      busy = false;
      formError = failure.message;
      if (failure.status === 409) {  // a session is already active (someone else is planning): show it
        toast(failure.message, "error");
        loadStatus();
      } else render();
    }
  }

  async function cancel() {
    const planId = session?.planId;
    const sure = await confirmDialog(t("plan.confirmCancel"),
      { ok: t("plan.cancel"), cancel: t("plan.keepGoing"), danger: true });
    if (!sure || !alive || !session || session.planId !== planId) return;
    if (!(await cancelSession(projectId, session, parts)) && alive) loadStatus();
  }

  function finish(data, status) {
    ended.add(data.planId);
    if (session) {
      session.finished = true;
      if (data.stats) Object.assign(session.stats, statsOf(data.stats));
    }
    result = endedResult(data, status, session);
    formError = "";
    session = null;
    Object.keys(parts).forEach((k) => delete parts[k]);
    render();
    root.querySelector("[data-testid=plan-result]")?.focus({ preventScroll: true });
  }

  function onPlanEvent(event, data) {
    heardAt = Date.now();
    const action = planEventAction(event, data, session, ended);
    if (action === "follow") {
      follow(data);
      loading = false;
      render();
    } else if (action === "ask soon") {
      clearTimeout(refetchTimer);
      refetchTimer = setTimeout(loadStatus, 300);
    } else if (action === "ask" && !loading) {
      loadStatus();
    } else if (action === "apply") {
      const ending = applyPlanEvent(event, data, session, parts);
      if (ending) finish(data, ending);
    }
  }

  const offs = [
    onEvent(({ event, data }) => {
      if (event.startsWith("plan:") && data && data.projectId === projectId) onPlanEvent(event, data);
      if (event === "project:updated" && data.id === projectId) render();
      if (event === "resync") loadStatus();
    }),
    onLanguageChange(render),
    // Events sent before the socket (re)opened are not replayed after a reload: ask again.
    subscribe((s, event) => {
      if (event === "connection" && state.connection === "open" && !loading) loadStatus();
    }),
  ];

  render();
  loadStatus();

  return () => {
    alive = false;
    clearInterval(ticker);
    clearTimeout(refetchTimer);
    for (const off of offs) off();
  };
}
