// The board of a project (#/projects/:projectId): five status columns of task cards,
// filters, drag and drop (optimistic, rolled back on error), a "Move to" select on each
// card for the keyboard, live activity lines and a docked log panel.

import { api } from "../api.js";
import { h, toast } from "../dom.js";
import * as format from "../format.js";
import { onLanguageChange, register, t } from "../i18n.js";
import { go } from "../router.js";
import { followLogs } from "../socket.js";
import { loadTasks, notify, onEvent, state, subscribe, tasksOf } from "../store.js";
import { projectHeader } from "./common.js";
import { createLogView } from "./log_view.js";
import { MODELS, TASK_TYPES, openTaskDialog } from "./task_dialog.js";

register({  // key: [English, Turkish]
  "board.newTask": ["New task", "Yeni görev"],
  "board.search": ["Search tasks", "Görevlerde ara"],
  "board.allTypes": ["All types", "Tüm türler"],
  "board.allModels": ["All models", "Tüm modeller"],
  "board.allTags": ["All tags", "Tüm etiketler"],
  "board.clearFilters": ["Clear filters", "Filtreleri temizle"],
  "board.filters": ["Filters", "Filtreler"],
  "board.empty": ["No tasks", "Görev yok"],
  "board.emptyFiltered": ["No matching tasks", "Eşleşen görev yok"],
  "board.running": ["running", "çalışıyor"],
  "board.moveTo": ["Move to…", "Taşı…"],
  "board.moveLabel": ["Move {key} to another column", "{key} görevini başka sütuna taşı"],
  "board.moveFailed": ["Could not move {key}: {error}", "{key} taşınamadı: {error}"],
  "board.denials": ["{n} tool calls refused", "{n} araç çağrısı reddedildi"],
  "board.denials1": ["1 tool call refused", "1 araç çağrısı reddedildi"],
  "board.awaiting": ["waiting for sub-tasks", "alt görevleri bekliyor"],
  "board.retries": ["retry {n}", "{n}. yeniden deneme"],
  "board.revisions": ["{n} revisions", "{n} revizyon"],
  "board.revisions1": ["1 revision", "1 revizyon"],
  "board.pr": ["Pull request", "Çekme isteği"],
  "board.tokens": ["{n} tokens", "{n} token"],
  "board.openLog": ["Log", "Günlük"],
  "board.openLogLabel": ["Show the live log of {key}", "{key} canlı günlüğünü göster"],
  "board.closeLog": ["Close the log panel", "Günlük panelini kapat"],
  "board.loadFailed": ["Could not load the tasks: {error}", "Görevler yüklenemedi: {error}"],
  "board.cardHelp": ["Enter opens the task; Alt+Left/Right moves it to the previous/next column.", "Enter görevi açar; Alt+Sol/Sağ onu önceki/sonraki sütuna taşır."],
});

/** The five columns, left to right. */
export const STATUSES = ["backlog", "in_progress", "testing", "done", "failed"];
/** Store events after which the board renders again. */
const RENDER_ON = new Set(["local", "tasks:loaded", "resync", "task:created", "task:updated",
  "task:deleted", "settings:updated", "project:deleted"]);
/** Filters survive a visit to a task and back (per project, for this page load). */
const filtersByProject = new Map();

/** The latest thing a running agent did, for the card's activity line. */
function activityOf(entries) {
  for (let i = entries.length - 1; i >= 0; i -= 1) {
    const entry = entries[i];
    if (entry.kind === "tool_call") return `⚙ ${entry.message}`;
    if (entry.kind === "text" && entry.message) return entry.message.split("\n", 1)[0];
  }
  return null;
}

/** @param {HTMLElement} root  @param {{projectId: number}} params */
export function mount(root, { projectId }) {
  const filters = filtersByProject.get(projectId) || { type: "", model: "", tag: "", q: "" };
  filtersByProject.set(projectId, filters);
  const moves = new Map();     // task id -> status while a move is on its way
  const activity = new Map();  // task id -> activity line
  const live = new Map();      // task id -> the latest task:usage data
  const cards = new Map();     // task id -> {el, sig}
  let columns = new Map();     // status -> {el, body, count}
  let lastStatus = null;       // task id -> status, to notice a start (autoOpenTerminal)
  let loaded = false;
  let loadError = null;
  let frame = 0;
  let dragId = null;
  let panel = null;            // the docked log panel: {taskId, view, el}
  let tagKey = null;
  let head, tagSelect, clearButton;

  const board = h("div", { class: "board", "aria-describedby": "board-help" });
  const help = h("p", { id: "board-help", class: "board-sr-only" });

  // --- skeleton (rebuilt when the language changes) ------------------------------

  function build() {
    cards.clear();
    tagKey = null;
    head = projectHeader(projectId, "");
    const search = h("input", { type: "search", class: "board-search", value: filters.q,
      placeholder: t("board.search"), "aria-label": t("board.search") });
    search.addEventListener("input", () => { filters.q = search.value; schedule(); });
    const pick = (name, values, allKey, label) => {
      const control = h("select", { "aria-label": t(allKey) },
        h("option", { value: "" }, t(allKey)),
        values.map((v) => h("option", { value: v, selected: filters[name] === v }, label(v))));
      control.addEventListener("change", () => { filters[name] = control.value; schedule(); });
      return control;
    };
    tagSelect = pick("tag", [], "board.allTags", (v) => v);
    clearButton = h("button", { type: "button", class: "link-button", onclick: () => {
      Object.assign(filters, { type: "", model: "", tag: "", q: "" });
      build();
    } }, t("board.clearFilters"));
    const toolbar = h("div", { class: "board-toolbar", role: "search", "aria-label": t("board.filters") },
      search,
      pick("type", TASK_TYPES, "board.allTypes", (v) => t(`type.${v}`)),
      pick("model", MODELS, "board.allModels", (v) => t(`model.${v}`)),
      tagSelect, clearButton,
      h("span", { class: "spacer" }),
      h("button", { type: "button", class: "primary", "data-testid": "new-task",
        onclick: () => openTaskDialog({ projectId }) }, t("board.newTask")));
    columns = new Map(STATUSES.map((status) => {
      const count = h("span", { class: "col-count" });
      const body = h("div", { class: "col-cards" });
      const el = h("section", { class: `board-col col-${status}`, "data-status": status,
        "aria-labelledby": `col-title-${status}` },
      h("h2", { class: "col-head", id: `col-title-${status}` }, t(`status.${status}`), count), body);
      return [status, { el, body, count }];
    }));
    board.replaceChildren(...[...columns.values()].map((c) => c.el));
    help.textContent = t("board.cardHelp");
    root.replaceChildren(head, toolbar, help, board, panel ? panel.el : "");
    if (panel) openPanel(panel.taskId, true);
    schedule();
  }

  // --- cards ---------------------------------------------------------------------

  const statusOf = (task) => moves.get(task.id) ?? task.status;
  const costOf = (task) => task.total_cost + (task.is_running && live.has(task.id) ? live.get(task.id).cost || 0 : 0);

  function matches(task) {
    if (filters.type && task.task_type !== filters.type) return false;
    if (filters.model && task.model !== filters.model) return false;
    if (filters.tag && !format.tags(task.tags).includes(filters.tag)) return false;
    const q = filters.q.trim().toLowerCase();
    if (q && !`${task.task_key} ${task.title} ${task.description}`.toLowerCase().includes(q)) return false;
    return true;
  }

  function card(task, status) {
    const running = task.is_running;
    const chips = [
      h("span", { class: `bchip type-${task.task_type}` }, t(`type.${task.task_type}`)),
      h("span", { class: "bchip model" }, t(`model.${task.model}`)),
      format.tags(task.tags).map((tag) => h("span", { class: "bchip tag" }, `#${tag}`)),
    ];
    const flags = [
      task.permission_denials > 0 ? h("span", { class: "flag flag-denied" },
        `⚠ ${t(task.permission_denials === 1 ? "board.denials1" : "board.denials", { n: task.permission_denials })}`) : null,
      task.awaiting_subtasks ? h("span", { class: "flag flag-awaiting" }, `◷ ${t("board.awaiting")}`) : null,
      task.retry_count > 0 ? h("span", { class: "flag flag-retry" }, `↻ ${t("board.retries", { n: task.retry_count })}`) : null,
      task.revision_count > 0 ? h("span", { class: "flag" }, t(task.revision_count === 1 ? "board.revisions1" : "board.revisions", { n: task.revision_count })) : null,
    ];
    const move = h("select", { class: "card-move", "data-action": "move",
      "aria-label": t("board.moveLabel", { key: task.task_key }) },
    h("option", { value: "" }, t("board.moveTo")),
    STATUSES.filter((s) => s !== status).map((s) => h("option", { value: s }, t(`status.${s}`))));
    const line = activity.get(task.id);
    return h("article", {
      class: `task-card prio-${task.priority}${running ? " running" : ""}${moves.has(task.id) ? " moving" : ""}`,
      tabindex: "0", draggable: "true", "data-id": String(task.id),
      "aria-label": `${task.task_key} ${task.title}`, "aria-describedby": "board-help" },
    h("div", { class: "card-top" },
      h("span", { class: "card-key" }, task.task_key),
      h("span", { class: `prio prio-${task.priority}` }, t(`priority.${task.priority}`)),
      running ? h("span", { class: "run-mark" }, h("span", { class: "spinner", "aria-hidden": "true" }), t("board.running")) : null),
    h("a", { class: "card-title", href: `#/tasks/${task.id}`, tabindex: "-1", draggable: "false" }, task.title),
    h("div", { class: "card-chips" }, chips),
    flags.some(Boolean) ? h("div", { class: "card-flags" }, flags) : null,
    status === "failed" && task.last_error ? h("p", { class: "card-error", title: task.last_error }, task.last_error) : null,
    h("p", { class: "card-activity", hidden: !(running && line) }, running && line ? line : ""),
    h("div", { class: "card-foot" },
      task.pr_url ? h("a", { class: "card-pr", href: task.pr_url, target: "_blank", rel: "noopener noreferrer" },
        `↗ ${t("board.pr")}`) : null,
      running ? h("button", { type: "button", class: "small", "data-action": "log",
        "aria-label": t("board.openLogLabel", { key: task.task_key }) }, t("board.openLog")) : null,
      h("span", { class: "card-cost", title: t("board.tokens", { n: format.tokens(task.input_tokens + task.output_tokens) }) },
        task.total_cost > 0 || running ? format.cost(costOf(task)) : ""),
      move));
  }

  // --- rendering -----------------------------------------------------------------

  function schedule() {
    if (!frame) frame = requestAnimationFrame(render);
  }

  function render() {
    frame = 0;
    const focused = document.activeElement?.closest?.(".task-card");
    const focusId = focused && board.contains(focused) ? focused.dataset.id : null;
    const all = tasksOf(projectId);
    const active = Boolean(filters.type || filters.model || filters.tag || filters.q.trim());
    clearButton.hidden = !active;
    updateTagOptions(all);
    noticeStarts(all);
    const seen = new Set();
    for (const [status, column] of columns) {
      const inColumn = all.filter((task) => statusOf(task) === status);
      const shown = inColumn.filter(matches);
      column.count.textContent = loaded ? (active ? `${shown.length}/${inColumn.length}` : String(shown.length)) : "";
      const nodes = shown.map((task) => {
        seen.add(task.id);
        const sig = `${JSON.stringify(task)}|${status}|${moves.has(task.id)}`;
        let entry = cards.get(task.id);
        if (!entry || entry.sig !== sig) {
          entry = { el: card(task, status), sig };
          cards.set(task.id, entry);
        }
        return entry.el;
      });
      if (!nodes.length) {
        nodes.push(h("p", { class: "col-empty" }, !loaded ? (loadError || t("common.loading"))
          : t(active && inColumn.length ? "board.emptyFiltered" : "board.empty")));
      }
      const current = [...column.body.children];
      if (current.length !== nodes.length || current.some((node, i) => node !== nodes[i])) {
        column.body.replaceChildren(...nodes);
      }
    }
    for (const id of cards.keys()) if (!seen.has(id)) cards.delete(id);
    const running = all.filter((task) => task.is_running).map((task) => task.id);
    if (panel && !running.includes(panel.taskId)) running.push(panel.taskId);
    followLogs(running);
    if (focusId && !board.contains(document.activeElement)) cards.get(Number(focusId))?.el.focus();
  }

  function updateTagOptions(all) {
    const tags = [...new Set(all.flatMap((task) => format.tags(task.tags)))].sort();
    if (filters.tag && !tags.includes(filters.tag)) tags.push(filters.tag);
    const key = tags.join("\n");
    if (key === tagKey) return;
    tagKey = key;
    tagSelect.replaceChildren(h("option", { value: "" }, t("board.allTags")),
      ...tags.map((tag) => h("option", { value: tag, selected: filters.tag === tag }, tag)));
    tagSelect.hidden = tags.length === 0;
  }

  /** With settings.autoOpenTerminal, show the log of a task that just started. */
  function noticeStarts(all) {
    if (!loaded) return;
    const now = new Map(all.map((task) => [task.id, task.status]));
    if (lastStatus && state.settings?.autoOpenTerminal) {
      const started = all.find((task) => task.status === "in_progress" && lastStatus.has(task.id)
        && lastStatus.get(task.id) !== "in_progress");
      if (started) openPanel(started.id);
    }
    lastStatus = now;
  }

  // --- moving --------------------------------------------------------------------

  async function move(id, status) {
    const task = state.tasks.get(id);
    if (!task || !STATUSES.includes(status) || statusOf(task) === status) return;
    moves.set(id, status);
    schedule();
    try {
      const updated = await api.moveTask(id, status);
      const current = state.tasks.get(id);
      if (current && updated.updated_at >= current.updated_at) state.tasks.set(id, updated);
      moves.delete(id);
      notify("local");
    } catch (error) {
      moves.delete(id);
      schedule();
      toast(t("board.moveFailed", { key: task.task_key, error: error.message }), "error");
    }
  }

  const cardOf = (target) => target.closest?.(".task-card");
  const idOf = (el) => Number(el.dataset.id);

  board.addEventListener("click", (event) => {
    const el = cardOf(event.target);
    if (!el) return;
    const action = event.target.closest("[data-action]")?.dataset.action;
    if (action === "log") openPanel(idOf(el));
    if (action || event.target.closest("a, button, select, input")) return;
    go(`/tasks/${idOf(el)}`);
  });
  board.addEventListener("change", (event) => {
    if (event.target.dataset.action !== "move") return;
    const el = cardOf(event.target);
    const status = event.target.value;
    event.target.value = "";  // the select is an action, not a state
    if (el && status) move(idOf(el), status);
  });
  board.addEventListener("keydown", (event) => {
    const el = cardOf(event.target);
    if (!el || event.target !== el) return;
    if (event.key === "Enter") {
      event.preventDefault();
      go(`/tasks/${idOf(el)}`);
    } else if (event.altKey && (event.key === "ArrowLeft" || event.key === "ArrowRight")) {
      event.preventDefault();
      const task = state.tasks.get(idOf(el));
      const next = STATUSES.indexOf(statusOf(task)) + (event.key === "ArrowLeft" ? -1 : 1);
      if (next >= 0 && next < STATUSES.length) move(task.id, STATUSES[next]);
    }
  });

  // drag and drop between columns
  const columnOf = (target) => target.closest?.(".board-col");
  const unmark = () => board.querySelectorAll(".drop-target, .dragging").forEach((el) => el.classList.remove("drop-target", "dragging"));
  board.addEventListener("dragstart", (event) => {
    const el = cardOf(event.target);
    if (!el) return;
    dragId = idOf(el);
    event.dataTransfer.setData("text/plain", String(dragId));
    event.dataTransfer.effectAllowed = "move";
    el.classList.add("dragging");
  });
  board.addEventListener("dragover", (event) => {
    const column = columnOf(event.target);
    if (!column || dragId === null) return;
    event.preventDefault();
    event.dataTransfer.dropEffect = "move";
    if (!column.classList.contains("drop-target")) {
      board.querySelectorAll(".drop-target").forEach((el) => el.classList.remove("drop-target"));
      column.classList.add("drop-target");
    }
  });
  board.addEventListener("dragleave", (event) => {
    const column = columnOf(event.target);
    if (column && !column.contains(event.relatedTarget)) column.classList.remove("drop-target");
  });
  board.addEventListener("drop", (event) => {
    const column = columnOf(event.target);
    if (!column || dragId === null) return;
    event.preventDefault();
    const id = dragId;
    dragId = null;
    unmark();
    move(id, column.dataset.status);
  });
  board.addEventListener("dragend", () => { dragId = null; unmark(); });

  // --- the docked log panel --------------------------------------------------------

  function openPanel(taskId, rebuild = false) {
    if (panel && panel.taskId === taskId && !rebuild) return;
    closePanel();
    const task = state.tasks.get(taskId);
    const view = createLogView();
    const el = h("aside", { class: "term-panel", "aria-label": task ? `${task.task_key} ${task.title}` : "" },
      h("header", { class: "term-head" },
        h("a", { href: `#/tasks/${taskId}` }, task ? `${task.task_key} ${task.title}` : `#${taskId}`),
        h("button", { type: "button", class: "icon", "aria-label": t("board.closeLog"), title: t("board.closeLog"),
          onclick: () => { closePanel(); schedule(); } }, "×")),
      view.el);
    panel = { taskId, view, el };
    root.append(el);
    api.taskLogs(taskId, 2000).then((list) => {
      if (panel && panel.view === view) view.setEntries(list);
    }).catch((error) => toast(error.message, "error"));
    schedule();
  }

  function closePanel() {
    if (!panel) return;
    panel.view.destroy();
    panel.el.remove();
    panel = null;
  }

  // --- store, events, language ---------------------------------------------------

  const offs = [
    subscribe((s, event) => {
      if (RENDER_ON.has(event)) schedule();
      if (event === "project:updated" || event === "resync") {
        const next = projectHeader(projectId, "");
        head.replaceWith(next);
        head = next;
      }
    }),
    onEvent(({ event, data }) => {
      if (event === "task:log" && data && Array.isArray(data.entries)) {
        if (panel && panel.taskId === data.taskId) panel.view.append(data.entries);
        const line = activityOf(data.entries);
        if (!line) return;
        activity.set(data.taskId, line);
        const el = cards.get(data.taskId)?.el.querySelector(".card-activity");
        if (el && el.closest(".running")) {
          el.textContent = line;
          el.hidden = false;
        }
      } else if (event === "task:usage" && data) {
        live.set(data.taskId, data);
        const task = state.tasks.get(data.taskId);
        const el = cards.get(data.taskId)?.el.querySelector(".card-cost");
        if (task && el) el.textContent = format.cost(costOf(task));
      } else if (event === "task:updated" && data && !data.is_running) {
        live.delete(data.id);
      }
    }),
    onLanguageChange(build),
  ];

  build();
  loadTasks(projectId).then(() => {
    loaded = true;
    schedule();
  }).catch((error) => {
    loadError = t("board.loadFailed", { error: error.message });
    toast(loadError, "error");
    schedule();
  });

  return () => {
    for (const off of offs) off();
    if (frame) cancelAnimationFrame(frame);
    closePanel();
    followLogs([]);
  };
}
