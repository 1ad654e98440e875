// One task (#/tasks/:taskId): its fields (below), usage and actions, its pull request
// (pr_parts.js), its preview (preview.js), the attempts of its run with several agents
// (attempts.js; the dialog that starts one is attempt_dialog.js, imported when first opened),
// and its tabs (task_tabs.js): the live log, the raw event replay, revisions, diff, commits,
// attachments, dependencies.

import { confirmDialog, h, openDialog, toast } from "../dom.js";
import * as format from "../i18n.js";
import { onLanguageChange, register, t } from "../i18n.js";
import { go, queryId } from "../main.js";
import { enumOf } from "../schema.js";
import {
  api, attemptsOpen, followLogs, liveUsage, loadTasks, onEvent, projectAgent, refusedLocally,
  state, subscribe, tasksOf,
} from "../store.js";
import { createAttempts } from "./attempts.js";
import {
  agentName, askingMove, costText, hostWaitingText, projectName, runsOnText, select, waitingHelp,
  waitingText,
} from "./common.js";
import { LOG_PAGE, createLogView } from "./log_view.js";
import { loadPrLog, prSection } from "./pr_parts.js";
import { createPreview } from "./preview.js";
import { createChannel } from "./task_channel.js";
import { badge, isLocalOnly, put, taskLink, taskTabs } from "./task_tabs.js";

/** The task form, imported when first opened (a task page that is only read never needs it). */
const openTaskDialog = async (options) => (await import("./task_dialog.js")).openTaskDialog(options);
/** The dialog that runs it with several agents, imported when first opened. */
const openAttemptsDialog = async (task) => (await import("./attempt_dialog.js")).openAttemptsDialog(task);

register({  // key: [English, Turkish]
  "detail.notFound": ["This task does not exist (any more).", "Bu görev yok (artık)."],
  "detail.deleted": ["This task was deleted.", "Bu görev silindi."],
  "detail.backToBoard": ["Back to the board", "Panoya dön"],
  "detail.running": ["running", "çalışıyor"],
  "detail.move": ["Move to", "Taşı"],
  "detail.approve": ["Approve", "Onayla"],
  "detail.requestChanges": ["Request changes", "Değişiklik iste"],
  "detail.feedback": ["What should the agent change?", "Ajan neyi değiştirmeli?"],
  "detail.send": ["Send", "Gönder"],
  "detail.stop": ["Stop", "Durdur"],
  "detail.restart": ["Restart", "Yeniden başlat"],
  "detail.addSubtask": ["Add sub-task", "Alt görev ekle"],
  "detail.runSeveral": ["Run with several agents", "Birkaç ajanla çalıştır"],
  "detail.stopped": ["{key} stopped", "{key} durduruldu"],
  "detail.restarted": ["{key} restarted", "{key} yeniden başlatıldı"],
  "detail.changesSent": ["Feedback sent; the agent resumes.", "Geri bildirim gönderildi; ajan devam ediyor."],
  "detail.description": ["Description", "Açıklama"],
  "detail.criteria": ["Acceptance criteria", "Kabul ölçütleri"],
  "detail.noDescription": ["No description.", "Açıklama yok."],
  "detail.lastError": ["The latest run failed", "Son çalıştırma başarısız oldu"],
  "detail.denials1": ["1 tool call was refused in the latest run: see the log, and allow the tool or change the project's permission mode.", "Son çalıştırmada 1 araç çağrısı reddedildi: günlüğe bakın ve araca izin verin ya da projenin izin kipini değiştirin."],
  "detail.denials": ["{n} tool calls were refused in the latest run: see the log, and allow the tools or change the project's permission mode.", "Son çalıştırmada {n} araç çağrısı reddedildi: günlüğe bakın ve araçlara izin verin ya da projenin izin kipini değiştirin."],
  "detail.awaiting": ["Waiting for its sub-tasks to finish.", "Alt görevlerinin bitmesini bekliyor."],
});

/** Ask what the agent should change; sent as request_changes. onSent(task) gets the answer. */
function requestChanges(taskId, desktop, onSent) {
  const text = h("textarea", { rows: "6", required: true, id: "feedback-text" });
  const error = h("p", { class: "error", role: "alert", hidden: true });
  const send = h("button", { type: "submit", class: "primary" }, t("detail.send"));
  const cancel = h("button", { type: "button" }, t("common.cancel"));
  const form = h("form", { novalidate: true }, h("div", { class: "field" },
    h("label", { for: "feedback-text" }, t("detail.feedback")), text), error,
  h("div", { class: "actions" }, cancel, send));
  const { close } = openDialog(t("detail.requestChanges"), form);
  cancel.addEventListener("click", close);
  text.focus();
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    if (!text.value.trim()) { text.focus(); return; }
    send.disabled = true;
    try {
      onSent(await desktop("request_changes", { id: taskId, feedback: text.value }));
      toast(t("detail.changesSent"));
      close();
    } catch (err) {
      error.textContent = isLocalOnly(err) ? t("common.localOnly") : err.message;
      error.hidden = false;
      send.disabled = false;
    }
  });
}

/** Delete the task (after asking, when the settings say so) and go back to its board. */
async function removeTask(task) {
  if (state.settings?.confirmBeforeDelete !== false) {
    const ok = await confirmDialog(t("common.confirmDelete", { name: `${task.task_key} ${task.title}` }),
      { ok: t("common.delete"), cancel: t("common.cancel"), danger: true });
    if (!ok) return;
  }
  try {
    await api.deleteTask(task.id);
    go(`/projects/${task.project_id}`);
  } catch (error) {
    toast(error.message, "error");
  }
}

/**
 * The action bar: edit, move, approve, request changes (not while its attempts wait for a
 * pick: the talk box says why), stop, restart, run with several agents (not while it runs),
 * sub-task, delete.
 */
function taskActions(task, { act, desktop, setTask }) {
  const taskId = task.id;
  const local = !state.localOnlyRefused;
  const moveSelect = select(enumOf("Task", "status"), task.status, (s) => t(`status.${s}`),
    { "aria-label": t("detail.move"), "data-key": "move" });
  const move = askingMove((id, status) => act(() => api.moveTask(id, status)), () => task);
  moveSelect.addEventListener("change", () => move(taskId, moveSelect.value)
    .then(() => { moveSelect.value = task.status; }));  // not moved: it shows where it is
  const button = (label, onclick, cls = "") => h("button", { type: "button", class: cls, onclick, "data-key": label }, label);
  return h("div", { class: "detail-actions" },
    button(t("common.edit"), async () => {
      const saved = await openTaskDialog({ projectId: task.project_id, task });
      if (saved) setTask(saved);
    }),
    h("label", { class: "inline-field" }, t("detail.move"), moveSelect),
    task.status === "testing" ? button(t("detail.approve"), () => act(() => api.moveTask(taskId, "done")), "primary") : null,
    local && task.status !== "backlog" && !attemptsOpen(task) ? button(t("detail.requestChanges"), () => requestChanges(taskId, desktop, setTask)) : null,
    local && task.status === "in_progress" ? button(t("detail.stop"), () => act(() =>
      desktop("stop_task", { id: taskId }), t("detail.stopped", { key: task.task_key }))) : null,
    local ? button(t("detail.restart"), () => act(() => desktop("restart_task", { id: taskId }),
      t("detail.restarted", { key: task.task_key }))) : null,
    task.status !== "in_progress" ? button(t("detail.runSeveral"), async () => {
      if (await openAttemptsDialog(task)) act(() => api.task(taskId));
    }) : null,
    button(t("detail.addSubtask"), () => openTaskDialog({ projectId: task.project_id, parentTaskId: taskId })),
    button(t("common.delete"), () => removeTask(task), "danger"),
    state.localOnlyRefused ? h("span", { class: "muted detail-local-only" }, t("common.localOnly")) : null);
}

/** The top of the page: crumbs, title, status, where it runs, alerts (its actions follow). */
function taskHeader(task) {
  const project = task.project_id;
  const runsOn = runsOnText(task);
  const hostWaiting = hostWaitingText(task);
  return [
    h("nav", { class: "crumbs" }, h("a", { href: `#/projects/${project}` }, projectName(project)), " › ", task.task_key),
    h("header", { class: "detail-head" },
      h("h1", {}, h("span", { class: "card-key" }, task.task_key), " ", task.title),
      badge(task.status),
      task.is_running ? h("span", { class: "run-mark" }, h("span", { class: "spinner", "aria-hidden": "true" }), t("detail.running")) : null),
    runsOn ? h("p", { class: "runs-on muted", "data-testid": "task-host" }, runsOn) : null,
    hostWaiting ? h("div", { class: "alert alert-warn", role: "status", "data-testid": "task-waiting-host" },
      `⏸ ${hostWaiting}`, h("p", { class: "muted" }, waitingHelp(task))) : null,
    task.last_error ? h("div", { class: "alert alert-error", role: "alert" },
      h("strong", {}, t("detail.lastError")), h("p", {}, task.last_error)) : null,
    task.permission_denials > 0 ? h("div", { class: "alert alert-warn" }, `⚠ ${t(task.permission_denials === 1 ? "detail.denials1" : "detail.denials", { n: task.permission_denials })}`) : null,
    task.awaiting_subtasks ? h("div", { class: "alert alert-info" }, `◷ ${t("detail.awaiting")}`) : null,
    waitingText(task) ? h("div", { class: "alert alert-warn", role: "status", "data-testid": "task-waiting" },
      `⏸ ${waitingText(task)}`, h("p", { class: "muted" }, t("agentpart.waitingHelp"))) : null,
  ];
}

/** The description and the acceptance criteria. */
function taskTexts(task) {
  return [
    h("section", { class: "detail-text" }, h("h2", {}, t("detail.description")),
      task.description ? h("div", { class: "prose" }, task.description) : h("p", { class: "muted" }, t("detail.noDescription"))),
    task.acceptance_criteria ? h("section", { class: "detail-text" }, h("h2", {}, t("detail.criteria")),
      h("div", { class: "prose" }, task.acceptance_criteria)) : null];
}

/** @param {HTMLElement} root  @param {{taskId: number}} params */
export function mount(root, { taskId }) {
  let task = null;
  let gone = false;
  let frame = 0;
  const older = (before, limit) => api.taskLogs(taskId, limit, before);
  let log = createLogView({ older });
  const top = h("div", { class: "detail-top" });
  const side = h("aside", { class: "detail-side" });
  // requests waiting for a person (the one of #/tasks/7?approval=12 shown), the conversation
  const channel = createChannel(taskId, queryId(location.hash, "approval"));
  const attempts = createAttempts(taskId);  // best of N: shown once the task has attempts
  const preview = createPreview(taskId);  // its running app, where its project has a previewCommand
  const textBody = h("div", {});
  const prBody = h("div", {});
  // its log entries of kind "pr" (id -> entry): read once it has a pull request, then live
  const pr = { entries: new Map(), loaded: false, loading: false, error: null };
  const texts = h("div", { class: "detail-texts" }, prBody, textBody, channel.talk);
  const tabs = taskTabs({ taskId, task: () => task, log: () => log, desktop, act });
  root.replaceChildren(h("div", { class: "task-detail" }, top, preview.el, channel.approvals, attempts.el,
    h("div", { class: "detail-layout" }, texts, side,
      h("div", { class: "detail-tabarea" }, tabs.bar, ...tabs.panels.values()))));
  top.append(h("p", { class: "muted" }, t("common.loading")));

  /** A desktop command; a local_only refusal is remembered and hides those features. */
  async function desktop(command, body) {
    try {
      return await api.desktop(command, body);
    } catch (error) {
      if (refusedLocally(error)) renderTop();
      throw error;
    }
  }

  /** Run an action; errors become toasts (a local_only refusal shows the note). */
  async function act(fn, done) {
    try {
      const result = await fn();
      if (result && result.id === taskId && result.task_key) setTask(result);
      if (done) toast(done);
    } catch (error) {
      toast(isLocalOnly(error) ? t("common.localOnly") : error.message, "error");
      schedule();  // e.g. the move select shows the real status again
    }
  }

  function setTask(next) {
    const revisions = task?.revision_count;
    task = { ...task, ...next };
    channel.setTask(task);
    attempts.setTask(task);
    preview.setTask(task);
    if (revisions !== undefined && revisions !== task.revision_count) tabs.stale("revisions");
    schedule();
  }

  function schedule() {
    if (!frame) frame = requestAnimationFrame(() => { frame = 0; renderTop(); });
  }

  /** Read what the board did with the pull request (entries that came live stay). */
  function loadPr() {
    pr.loading = true;
    loadPrLog(taskId).then((list) => {
      for (const entry of list) pr.entries.set(entry.id, entry);
      pr.error = null;
    }).catch((error) => {
      pr.error = error.message;
    }).finally(() => {
      pr.loaded = true;
      pr.loading = false;
      schedule();
    });
  }

  function renderPr() {
    if (!task.pr) {
      put(prBody);
      return;
    }
    if (!pr.loaded && !pr.loading) loadPr();
    const entries = pr.loaded ? [...pr.entries.values()].sort((a, b) => a.id - b.id) : null;
    put(prBody, prSection(task, entries, pr.error));
  }

  function renderTop() {
    if (gone || !task) return;
    const focusKey = top.contains(document.activeElement) ? document.activeElement.dataset.key : null;
    put(top, taskHeader(task), taskActions(task, { act, desktop, setTask }));
    renderPr();
    put(textBody, taskTexts(task));
    put(side, taskFields(task, liveUsage(task)));
    tabs.renderBar();
    if (focusKey) [...top.querySelectorAll("[data-key]")].find((el) => el.dataset.key === focusKey)?.focus();
  }

  function showGone(message) {
    gone = true;
    put(top, h("section", { class: "empty" }, h("p", {}, message),
      task ? h("a", { href: `#/projects/${task.project_id}` }, t("detail.backToBoard")) : h("a", { href: "#/" }, t("nav.projects"))));
    put(texts);
    put(side);
    channel.approvals.hidden = true;
    attempts.el.hidden = true;
    preview.el.hidden = true;
    tabs.hide();
  }

  /**
   * After a reconnect (resync): read the task and the newest page of its log again, and
   * again while a task:updated of it came during the read (its answer may be older).
   */
  let updates = 0;  // task:updated events of this task heard
  async function catchUp() {
    for (let round = 1; !gone; round++) {
      const seen = updates;
      const [fields, tail] = await Promise.all([api.task(taskId), api.taskLogs(taskId, LOG_PAGE)]);
      if (gone) return;
      log.catchUp(tail, LOG_PAGE);
      if (updates === seen || round === 5) {
        setTask(fields);
        return;
      }
    }
  }

  followLogs([taskId]);
  const offs = [
    onEvent(({ event, data }) => {
      if (event === "resync" && task && !gone) {
        catchUp().catch((error) => { if (error.status === 404) showGone(t("detail.deleted")); });
        tabs.staleAll();
      }
      if (!data) return;
      if (event === "task:updated" && data.id === taskId) updates++;
      if (event === "task:log" && data.taskId === taskId && Array.isArray(data.entries)) {
        log.append(data.entries);
        const prEntries = data.entries.filter((entry) => entry.kind === "pr");
        for (const entry of prEntries) pr.entries.set(entry.id, entry);
        if (prEntries.length) schedule();
      }
      else if (event === "task:updated" && data.id === taskId) setTask(data);
      else if (event === "task:usage" && data.taskId === taskId) { if (!gone && task) put(side, taskFields(task, liveUsage(task))); }
      else if (event === "task:deleted" && data.id === taskId) showGone(t("detail.deleted"));
      else if (event === "dependencies:updated" && task && data.projectId === task.project_id) tabs.stale("deps");
      else if (event.startsWith("task:") && task && (data.parent_task_id === taskId || data.id === task.parent_task_id)) {
        schedule();  // a sub-task or the parent changed
      }
    }),
    subscribe((s, event) => {
      if (event === "resync") pr.loaded = false;  // entries may have been missed meanwhile
      if (["tasks:loaded", "resync", "project:updated", "hosts:loaded", "host:updated", "attempt:updated",
        "attempts:loaded"].includes(event)) {
        schedule();
      }
    }),
    onLanguageChange(() => {
      const entries = log.entries();
      const complete = log.complete();
      log.destroy();
      log = createLogView({ older });
      log.setEntries(entries, complete);
      tabs.loaded = new Set();
      schedule();
      if (task && !gone) tabs.show(tabs.active);
    }),
  ];

  // the task and the newest page of its log, asked together; older pages come as the log
  // scrolls up. The page (its attempts' comparison too) shows as soon as the task is here,
  // its log once the log's page is: the bigger answer holds up nothing else.
  const fields = api.task(taskId);
  const tail = api.taskLogs(taskId, LOG_PAGE);
  fields.then((answer) => {
    task = answer;
    channel.setTask(task);
    attempts.setTask(task);
    preview.setTask(task);
    renderTop();
    tabs.show("log");
  }).catch(() => {});  // shown below
  Promise.all([fields, tail]).then(([, entries]) => {
    log.setEntries(entries, entries.length < LOG_PAGE);
    // its project's tasks (the names of its parent, sub-tasks and dependencies), after the
    // frame that shows the log: a board's list can be big
    const projectId = task.project_id;
    requestAnimationFrame(() => setTimeout(() => {
      if (!state.loadedProjects.has(projectId)) loadTasks(projectId).catch(() => {});
    }));
  }).catch((error) => {
    showGone(error.status === 404 ? t("detail.notFound") : error.message);
  });

  return () => {
    for (const off of offs) off();
    channel.destroy();
    attempts.destroy();
    preview.destroy();
    if (frame) cancelAnimationFrame(frame);
    log.destroy();
    followLogs([]);
  };
}

// --- the fields ---------------------------------------------------------------------------------

// The field list of a task page: status, type, priority, model, effort,
// agent, tags, parent and sub-tasks, times, retries, queue position, tokens, cost (live while
// it runs), branch, pull request (one the board does not follow: pr_parts.js shows the others),
// session and refused tool calls.

register({  // key: [English, Turkish]
  "detail.status": ["Status", "Durum"],
  "detail.type": ["Type", "Tür"],
  "detail.priority": ["Priority", "Öncelik"],
  "detail.model": ["Model", "Model"],
  "detail.effort": ["Thinking effort", "Düşünme eforu"],
  "detail.agent": ["Agent", "Ajan"],
  "detail.projectAgent": ["{name} (the project's)", "{name} (projeninki)"],
  "detail.tags": ["Tags", "Etiketler"],
  "detail.parent": ["Parent task", "Üst görev"],
  "detail.subtasks": ["Sub-tasks", "Alt görevler"],
  "detail.created": ["Created", "Oluşturuldu"],
  "detail.started": ["Started", "Başladı"],
  "detail.completed": ["Completed", "Tamamlandı"],
  "detail.workTime": ["Time worked", "Çalışma süresi"],
  "detail.retries": ["Retries", "Yeniden denemeler"],
  "detail.revisionCount": ["Revisions", "Revizyonlar"],
  "detail.queue": ["Queue position", "Kuyruk sırası"],
  "detail.tokens": ["Tokens (in / out)", "Token (giriş / çıkış)"],
  "detail.cache": ["Cache (read / written)", "Önbellek (okunan / yazılan)"],
  "detail.cost": ["Cost", "Maliyet"],
  "detail.liveCost": ["{cost} (live)", "{cost} (canlı)"],
  "detail.branch": ["Branch", "Dal"],
  "detail.sandbox": ["Sandbox", "Korumalı alan"],
  "detail.sandboxed": ["its latest run was sandboxed (bubblewrap)", "son çalışması korumalı alandaydı (bubblewrap)"],
  "detail.unsandboxed": ["its latest run was not sandboxed", "son çalışması korumalı alanda değildi"],
  "detail.branchAt": ["in {where}", "yeri: {where}"],
  "detail.pr": ["Pull request", "Çekme isteği"],
  "detail.session": ["Session", "Oturum"],
  "detail.denialsField": ["Refused tool calls", "Reddedilen araç çağrıları"],
  "detail.network": ["Network", "Ağ"],
  "detail.reached": ["reached: {hosts}", "ulaşılan: {hosts}"],
  "detail.refused": ["refused: {hosts}", "reddedilen: {hosts}"],
  "detail.refusedMore": ["{n} connections refused in all", "toplam {n} bağlantı reddedildi"],
});

/** Its latest sandboxed run's network: the hosts it reached and those refused, with why. */
function networkOf(network) {
  const refused = network.refusedHosts.map((r) => h("span", { title: r.rule },
    `${r.host}:${r.port}${r.count > 1 ? ` ×${r.count}` : ""}`));
  return h("span", { "data-testid": "task-network" },
    network.reached.length ? h("div", {}, t("detail.reached", { hosts: network.reached.join(", ") })) : "",
    refused.length ? h("div", { class: "warn" }, t("detail.refused", { hosts: "" }),
      refused.flatMap((r, n) => (n ? [", ", r] : [r]))) : "",
    network.refused ? h("div", { class: "muted" }, t("detail.refusedMore", { n: network.refused })) : "");
}

/** The field list beside the texts; live: the latest task:usage of the current run. */
export function taskFields(task, live) {
  const rows = [];
  const add = (label, ...value) => { if (value.some((v) => v !== null && v !== "" && v !== undefined)) rows.push(h("dt", {}, label), h("dd", {}, value)); };
  const running = task.is_running && live;
  const tags = format.tags(task.tags);
  const children = tasksOf(task.project_id).filter((other) => other.parent_task_id === task.id);
  const estimated = task.cost_estimated;
  const cost = running ? t("detail.liveCost", { cost: format.costMark(task.total_cost + (live.cost || 0), estimated) })
    : costText(task.total_cost, estimated);
  const ownAgent = projectAgent(task.project_id);
  const inTokens = task.input_tokens + (running ? live.inputTokens || 0 : 0);
  const outTokens = task.output_tokens + (running ? live.outputTokens || 0 : 0);
  add(t("detail.status"), badge(task.status));
  add(t("detail.type"), t(`type.${task.task_type}`));
  add(t("detail.priority"), t(`priority.${task.priority}`));
  add(t("detail.model"), t(`model.${task.model}`));
  add(t("detail.effort"), t(`effort.${task.thinking_effort}`));
  add(t("detail.agent"), h("span", { "data-testid": "task-agent" }, task.agent ? agentName(task.agent)
    : ownAgent ? t("detail.projectAgent", { name: agentName(ownAgent) }) : ""));
  if (tags.length) add(t("detail.tags"), tags.map((tag) => h("span", { class: "bchip tag" }, `#${tag}`)));
  if (task.parent_task_id) add(t("detail.parent"), taskLink(task.parent_task_id));
  if (children.length) {
    add(t("detail.subtasks"), h("ul", { class: "plain-list" }, children.map((c) =>
      h("li", {}, taskLink(c.id), " ", badge(c.status)))));
  }
  add(t("detail.created"), format.dateTime(task.created_at));
  add(t("detail.started"), format.dateTime(task.started_at));
  add(t("detail.completed"), format.dateTime(task.completed_at));
  if (task.work_duration_ms) add(t("detail.workTime"), format.duration(task.work_duration_ms));
  if (task.retry_count) add(t("detail.retries"), String(task.retry_count));
  if (task.revision_count) add(t("detail.revisionCount"), String(task.revision_count));
  if (task.queue_position !== null && task.queue_position !== undefined) add(t("detail.queue"), String(task.queue_position));
  add(t("detail.tokens"), `${format.tokens(inTokens)} / ${format.tokens(outTokens)}`);
  if (task.cache_read_tokens || task.cache_creation_tokens) {
    add(t("detail.cache"), `${format.tokens(task.cache_read_tokens)} / ${format.tokens(task.cache_creation_tokens)}`);
  }
  add(t("detail.cost"), h("span", { "data-testid": "task-cost" }, cost));
  if (typeof task.sandboxed === "boolean") {
    add(t("detail.sandbox"), h("span", { "data-testid": "task-sandbox", class: task.sandboxed ? "" : "warn" },
      t(task.sandboxed ? "detail.sandboxed" : "detail.unsandboxed")));
  }
  if (task.network && (task.network.reached.length || task.network.refused)) {
    add(t("detail.network"), networkOf(task.network));
  }
  if (task.branch_name) {
    add(t("detail.branch"), h("code", {}, task.branch_name), task.branchAt
      ? h("div", { class: "muted", "data-testid": "branch-at" }, t("detail.branchAt", { where: task.branchAt }))
      : "");
  }
  if (task.pr_url && !task.pr) add(t("detail.pr"), h("a", { href: task.pr_url, target: "_blank", rel: "noopener noreferrer" }, task.pr_url));
  if (task.session_id) add(t("detail.session"), h("code", { class: "wrap" }, task.session_id));
  if (task.permission_denials) add(t("detail.denialsField"), h("strong", { class: "error" }, String(task.permission_denials)));
  return h("dl", { class: "field-list" }, rows);
}
