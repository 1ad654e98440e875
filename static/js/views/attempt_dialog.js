// "Run with several agents" (best of N, design §18): a dialog of 2–4 rows, each an agent CLI,
// a model tier and a thinking effort (the task's when left so), posted as one set of attempts
// (POST /api/tasks/:id/attempts). The CLIs /api/health says are not installed here are not
// offered; how many rows, the CLIs, tiers and efforts all come from the server's API
// description. The server's refusal (400 with the row's field, 409) shows under the rows.

import { h, openDialog, toast } from "../dom.js";
import { register, t } from "../i18n.js";
import { enumOf, propertyOf } from "../schema.js";
import { api, projectHost, state } from "../store.js";
import { agentName, select, taskAgent } from "./common.js";

register({  // key: [English, Turkish]
  "attemptdlg.title": ["Run {key} with several agents", "{key} görevini birkaç ajanla çalıştır"],
  "attemptdlg.help": ["Each agent works on a branch of its own at the same time; compare their work afterwards and pick one.", "Her ajan aynı anda kendi dalında çalışır; sonra çalışmalarını karşılaştırıp birini seçin."],
  "attemptdlg.row": ["Attempt {n}", "{n}. deneme"],
  "attemptdlg.agent": ["Agent", "Ajan"],
  "attemptdlg.model": ["Model", "Model"],
  "attemptdlg.effort": ["Effort", "Efor"],
  "attemptdlg.fieldLabel": ["Attempt {n}: {field}", "{n}. deneme: {field}"],
  "attemptdlg.tasksModel": ["Task's model: {name}", "Görevin modeli: {name}"],
  "attemptdlg.tasksEffort": ["Task's effort: {name}", "Görevin eforu: {name}"],
  "attemptdlg.add": ["Add an agent", "Ajan ekle"],
  "attemptdlg.remove": ["Remove", "Kaldır"],
  "attemptdlg.removeLabel": ["Remove attempt {n}", "{n}. denemeyi kaldır"],
  "attemptdlg.start": ["Start {n} attempts", "{n} denemeyi başlat"],
  "attemptdlg.limits": ["{min} to {max} agents.", "{min} ile {max} arası ajan."],
  "attemptdlg.noAgents": ["No agent CLI is installed here.", "Burada hiçbir ajan CLI'si kurulu değil."],
  "attemptdlg.replaces": ["This task ran with several agents before: unless one of those attempts was picked, they are replaced (their worktrees and branches go).", "Bu görev daha önce birkaç ajanla çalıştı: o denemelerden biri seçilmediyse yerlerine yenileri gelir (çalışma ağaçları ve dalları silinir)."],
  "attemptdlg.started": ["{key} runs with {n} agents", "{key} {n} ajanla çalışıyor"],
});

/** The body's limits and lists: {min, max} rows, from the server's description of the body. */
function rowLimits() {
  const agents = propertyOf("api_start_attempts_body", "agents");
  return { min: agents.minItems ?? 2, max: agents.maxItems ?? 4 };
}

/**
 * The CLIs to offer: the server's list without those health says are not installed here
 * (a project on another machine: every CLI, its host's own check speaks there).
 */
export function offeredAgents(projectId) {
  const all = enumOf("Project", "agent");
  if (projectHost(projectId)) return all;
  return all.filter((agent) => state.health?.agents?.[agent]?.found !== false);
}

/** The rows a dialog starts with: two, the task's CLI first, then another installed one
 * (the same CLI with other model tiers when it is the only one). */
function firstRows(task, agents, min) {
  const mine = agents.includes(taskAgent(task)) ? taskAgent(task) : agents[0];
  const others = agents.filter((agent) => agent !== mine);
  const tiers = enumOf("Task", "model").filter((tier) => tier !== task.model);
  return Array.from({ length: min }, (_, i) => {
    if (i === 0) return { agent: mine, model: "", effort: "" };
    if (others.length) return { agent: others[(i - 1) % others.length], model: "", effort: "" };
    return { agent: mine, model: tiers[(i - 1) % tiers.length] || "", effort: "" };
  });
}

/**
 * Open the dialog for a task; resolves with the attempts the server started, or null when
 * the dialog closed without starting.
 * @param {Object} task
 */
export function openAttemptsDialog(task) {
  const { min, max } = rowLimits();
  const agents = offeredAgents(task.project_id);
  const tiers = enumOf("Task", "model");
  const efforts = enumOf("Task", "thinking_effort");
  const rows = firstRows(task, agents, min);
  const list = h("ol", { class: "attempt-rows" });
  const error = h("p", { class: "error", role: "alert", hidden: true, "data-testid": "attempts-error" });
  const add = h("button", { type: "button", "data-testid": "attempt-add" }, `+ ${t("attemptdlg.add")}`);
  const start = h("button", { type: "submit", class: "primary" });
  const cancel = h("button", { type: "button" }, t("common.cancel"));
  const form = h("form", { class: "attempts-form", novalidate: true },
    h("p", { class: "muted" }, t("attemptdlg.help"), " ", t("attemptdlg.limits", { min, max })),
    task.attempts != null ? h("p", { class: "warning" }, t("attemptdlg.replaces")) : null,
    agents.length ? list : h("p", { class: "error" }, t("attemptdlg.noAgents")),
    error,
    h("div", { class: "actions" }, add, h("span", { class: "spacer" }), cancel, start));

  /** One row: its three selects, each under its name (and labelled "Attempt 2: Agent"), and
   * its remove button. Left so, a model or an effort is the task's, and says so. */
  function rowOf(row, i) {
    const n = i + 1;
    const label = (key) => t("attemptdlg.fieldLabel", { n, field: t(key) });
    const agent = select(agents, row.agent, agentName, { "aria-label": label("attemptdlg.agent"), "data-field": `agents[${i}].agent` });
    const model = select(["", ...tiers], row.model, (v) => (v ? t(`model.${v}`)
      : t("attemptdlg.tasksModel", { name: t(`model.${task.model}`) })), { "aria-label": label("attemptdlg.model"), "data-field": `agents[${i}].model` });
    const effort = select(["", ...efforts], row.effort, (v) => (v ? t(`effort.${v}`)
      : t("attemptdlg.tasksEffort", { name: t(`effort.${task.thinking_effort}`) })), { "aria-label": label("attemptdlg.effort"), "data-field": `agents[${i}].effort` });
    const named = (key, control) => h("label", { class: "attempt-field" },
      h("span", { class: "attempt-field-name", "aria-hidden": "true" }, t(key)), control);
    agent.addEventListener("change", () => { row.agent = agent.value; });
    model.addEventListener("change", () => { row.model = model.value; });
    effort.addEventListener("change", () => { row.effort = effort.value; });
    const remove = h("button", { type: "button", class: "small", disabled: rows.length <= min,
      "aria-label": t("attemptdlg.removeLabel", { n }),
      onclick: () => { rows.splice(i, 1); render(); list.querySelector("select")?.focus(); } }, t("attemptdlg.remove"));
    return h("li", { class: "attempt-row" }, h("span", { class: "attempt-row-n" }, t("attemptdlg.row", { n })),
      named("attemptdlg.agent", agent), named("attemptdlg.model", model), named("attemptdlg.effort", effort), remove);
  }

  function render() {
    list.replaceChildren(...rows.map(rowOf));
    add.disabled = rows.length >= max || !agents.length;
    start.disabled = !agents.length;
    start.textContent = t("attemptdlg.start", { n: rows.length });
  }

  /** Say what the server refused, marking the row's control its field names. */
  function refused(err) {
    error.textContent = err.message;
    error.hidden = false;
    const where = err.field ? [...form.querySelectorAll("[data-field]")]
      .find((el) => err.field === el.dataset.field || err.field.startsWith(`${el.dataset.field}.`)) : null;
    if (where) {
      where.setAttribute("aria-invalid", "true");
      where.focus();
    }
  }

  add.addEventListener("click", () => {
    if (rows.length >= max) return;
    rows.push({ agent: agents[rows.length % agents.length], model: "", effort: "" });
    render();
    list.lastElementChild?.querySelector("select")?.focus();
  });
  render();
  return new Promise((resolve) => {
    let started = null;
    const { dialog, close } = openDialog(t("attemptdlg.title", { key: task.task_key }), form, { wide: true });
    dialog.addEventListener("close", () => resolve(started));
    cancel.addEventListener("click", close);
    list.querySelector("select")?.focus();
    form.addEventListener("submit", async (event) => {
      event.preventDefault();
      error.hidden = true;
      for (const el of form.querySelectorAll("[aria-invalid]")) el.removeAttribute("aria-invalid");
      start.disabled = true;
      const body = rows.map((row) => ({ agent: row.agent, ...(row.model ? { model: row.model } : {}),
        ...(row.effort ? { effort: row.effort } : {}) }));
      try {
        started = await api.startAttempts(task.id, body);
        toast(t("attemptdlg.started", { key: task.task_key, n: started.length }));
        close();
      } catch (err) {
        refused(err);
        start.disabled = false;
      }
    });
  });
}
