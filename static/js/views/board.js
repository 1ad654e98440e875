// The board of a project (#/projects/:projectId): a column of task cards per status (the
// server's list, in its order), filters, drag and drop (optimistic, rolled back on error), a
// "Move to" select on each card for the keyboard, live activity lines and a docked log panel.
// A column renders its first PAGE matching cards (and any card moved here from this page),
// with "Show more" for the rest: a board of thousands of tasks stays a few thousand nodes;
// its count is always the whole column's.
// The cards are board_card.js, their clicks, keys and drags board_moves.js, the log panel
// board_dock.js.

import { api } from "../api.js";
import { confirmDialog, h, toast } from "../dom.js";
import * as format from "../format.js";
import { onLanguageChange, register, t } from "../i18n.js";
import { enumOf } from "../schema.js";
import { followLogs } from "../socket.js";
import { liveUsage, loadTasks, notify, onEvent, projectSimulated, state, subscribe, tasksOf }
  from "../store.js";
import { activityLine, activityOf, matches, taskCard } from "./board_card.js";
import { dockedLog } from "./board_dock.js";
import { askingMove, bindCards, bindDragAndDrop } from "./board_moves.js";
import { projectHeader } from "./common.js";
import { hostSignature } from "./host_parts.js";

/** The task form, imported when first opened (a board that is only looked at never needs it). */
const openTaskDialog = async (options) => (await import("./task_dialog.js")).openTaskDialog(options);
/** "Run with several agents" of a card's menu, imported when first opened too. */
const openAttemptsDialog = async (task) => (await import("./attempt_dialog.js")).openAttemptsDialog(task);

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
  "board.moveFailed": ["Could not move {key}: {error}", "{key} taşınamadı: {error}"],
  "board.loadFailed": ["Could not load the tasks: {error}", "Görevler yüklenemedi: {error}"],
  "board.cardHelp": ["Enter opens the task; Alt+Left/Right moves it to the previous/next column.", "Enter görevi açar; Alt+Sol/Sağ onu önceki/sonraki sütuna taşır."],
  "board.hintStart": ["Drag a card to {column} to start its agent (or choose {column} in its “{move}” list).", "Ajanını başlatmak için bir kartı {column} sütununa sürükleyin (ya da kartın “{move}” listesinde {column} seçin)."],
  "board.hintEmpty": ["No tasks yet: add one with “{add}”, then drag its card to {column} to start its agent.", "Henüz görev yok: “{add}” ile bir tane ekleyin, sonra ajanını başlatmak için kartını {column} sütununa sürükleyin."],
  "board.stopConfirm": ["{key} is running: moving it to {column} stops its agent.", "{key} çalışıyor: {column} sütununa taşımak ajanını durdurur."],
  "board.stopAndMove": ["Stop and move", "Durdur ve taşı"],
  "board.showMore": ["Show {n} more ({hidden} not shown)", "{n} tane daha göster ({hidden} gösterilmiyor)"],
});

/** Cards a column renders at first, and how many more each "Show more" adds. */
const PAGE = 50;
/** New cards a column builds in one frame; the rest follow in the next frames, so that
 * no single task of the main thread builds the whole board. */
const BUILD_STEP = 15;

/** Store events after which the board renders again. */
const RENDER_ON = new Set(["local", "tasks:loaded", "resync", "task:created", "task:updated",
  "task:deleted", "settings:updated", "project:updated", "project:deleted",
  "hosts:loaded", "host:created", "host:updated", "host:deleted", "approvals:loaded", "approval:requested",
  "approval:resolved"]);
const NO_FILTERS = { type: "", model: "", tag: "", q: "" };
/** Filters survive a visit to a task and back (per project, for this page load). */
const filtersByProject = new Map();

/**
 * The search box and filter selects; onChange() after each change, onClear() for "Clear".
 * @returns {{el: HTMLElement, tagSelect: HTMLSelectElement, clearButton: HTMLButtonElement}}
 */
function toolbar(projectId, filters, onChange, onClear) {
  const search = h("input", { type: "search", class: "board-search", value: filters.q,
    placeholder: t("board.search"), "aria-label": t("board.search") });
  search.addEventListener("input", () => { filters.q = search.value; onChange(); });
  const pick = (name, values, allKey, label) => {
    const control = h("select", { "aria-label": t(allKey) },
      h("option", { value: "" }, t(allKey)),
      values.map((v) => h("option", { value: v, selected: filters[name] === v }, label(v))));
    control.addEventListener("change", () => { filters[name] = control.value; onChange(); });
    return control;
  };
  const tagSelect = pick("tag", [], "board.allTags", (v) => v);
  const clearButton = h("button", { type: "button", class: "link-button", onclick: onClear }, t("board.clearFilters"));
  const el = h("div", { class: "board-toolbar", role: "search", "aria-label": t("board.filters") },
    search,
    pick("type", enumOf("Task", "task_type"), "board.allTypes", (v) => t(`type.${v}`)),
    pick("model", enumOf("Task", "model"), "board.allModels", (v) => t(`model.${v}`)),
    tagSelect, clearButton,
    h("span", { class: "spacer" }),
    h("button", { type: "button", class: "primary", "data-testid": "new-task",
      onclick: () => openTaskDialog({ projectId }).catch((error) => toast(error.message, "error")) }, t("board.newTask")));
  return { el, tagSelect, clearButton };
}

/** A column per status: status -> {el, body, count, more}; more() shows another page. */
function buildColumns(statuses, more) {
  return new Map(statuses.map((status) => {
    const count = h("span", { class: "col-count" });
    const body = h("div", { class: "col-cards" });
    const button = h("button", { type: "button", class: "link-button col-more",
      "data-testid": "show-more", onclick: () => more(status) });
    const el = h("section", { class: `board-col col-${status}`, "data-status": status,
      "aria-labelledby": `col-title-${status}` },
    h("h2", { class: "col-head", id: `col-title-${status}` }, t(`status.${status}`), count), body);
    return [status, { el, body, count, more: button }];
  }));
}

/** Fill the tag filter with the tags in use (kept when unchanged). Returns the new key. */
function fillTags(tagSelect, all, filters, lastKey) {
  const tags = [...new Set(all.flatMap((task) => format.tags(task.tags)))].sort();
  if (filters.tag && !tags.includes(filters.tag)) tags.push(filters.tag);
  const key = tags.join("\n");
  if (key === lastKey) return key;
  tagSelect.replaceChildren(h("option", { value: "" }, t("board.allTags")),
    ...tags.map((tag) => h("option", { value: tag, selected: filters.tag === tag }, tag)));
  tagSelect.hidden = tags.length === 0;
  return key;
}

/** The empty line of a column: loading, could not load, the start hint, nothing (matching). */
function emptyLine(view, status, filtered) {
  if (view.loaded && !filtered && view.hint?.status === status) {
    return h("p", { class: "col-empty board-hint", role: "note", "data-testid": "board-hint" }, view.hint.text);
  }
  return h("p", { class: "col-empty" }, !view.loaded ? (view.loadError || t("common.loading"))
    : t(filtered ? "board.emptyFiltered" : "board.empty"));
}

/**
 * How to start an agent, for a newcomer: on a board with no task in progress that is empty
 * (then also how to add one) or is the Demo of --demo (its runs are simulated). Null otherwise.
 * It stands in the empty In progress column (the empty Backlog, where a new task lands, on an
 * empty board): the first start or the last end replaces it there, and nothing else moves.
 * @returns {{status: string, text: string}|null}
 */
function startHint(projectId, all) {
  if (all.some((task) => task.status === "in_progress")) return null;
  const names = { column: t("status.in_progress"), move: t("board.moveTo"), add: t("board.newTask") };
  if (!all.length) return { status: "backlog", text: t("board.hintEmpty", names) };
  return projectSimulated(projectId) ? { status: "in_progress", text: t("board.hintStart", names) } : null;
}

/** Render every column: its first pages of matching cards (and the cards kept in view),
 * rebuilt only when their task changed, at most BUILD_STEP new ones a column at a time.
 * Returns whether some column is not whole yet (render again in the next frame). */
function renderColumns(view, all, active) {
  let partial = false;
  const seen = new Set();
  const byStatus = new Map(view.statuses.map((status) => [status, []]));
  for (const task of all) byStatus.get(view.statusOf(task))?.push(task);
  for (const [status, column] of view.columns) {
    const inColumn = byStatus.get(status);
    const shown = active ? inColumn.filter((task) => matches(task, view.filters)) : inColumn;
    column.count.textContent = view.loaded ? (active ? `${shown.length}/${inColumn.length}` : String(shown.length)) : "";
    const limit = view.limits.get(status) || PAGE;
    const rendered = shown.filter((task, i) => i < limit || view.keep.has(task.id));
    const nodes = [];
    let built = 0;
    for (const task of rendered) {
      seen.add(task.id);
      const moving = view.moves.has(task.id);
      const asking = activityLine(task.id, "");  // the question its agent waits on
      const sig = `${JSON.stringify(task)}|${status}|${moving}|${hostSignature(task)}|${asking}`;
      let entry = view.cards.get(task.id);
      if (!entry || entry.sig !== sig) {
        if (built === BUILD_STEP) {  // its turn comes in the next frame; till then as it was
          partial = true;
          if (entry) nodes.push(entry.el);
          continue;
        }
        built += 1;
        const shownAs = { statuses: view.statuses, moving, activity: view.activity.get(task.id), cost: view.costOf(task) };
        entry = { el: taskCard(task, status, shownAs), sig };
        view.cards.set(task.id, entry);
      }
      nodes.push(entry.el);
    }
    if (!nodes.length) nodes.push(emptyLine(view, status, active && inColumn.length));
    const hidden = shown.length - rendered.length;
    if (hidden > 0 && nodes.length === rendered.length) {
      column.more.textContent = t("board.showMore", { n: Math.min(PAGE, hidden), hidden });
      nodes.push(column.more);
    }
    const current = [...column.body.children];
    if (current.length === 1 && nodes.length === 1 && !nodes[0].dataset.id && current[0].isEqualNode(nodes[0])) continue;
    if (current.length !== nodes.length || current.some((node, i) => node !== nodes[i])) {
      column.body.replaceChildren(...nodes);
    }
  }
  for (const id of view.cards.keys()) if (!seen.has(id)) view.cards.delete(id);
  return partial;
}

/** Follow /ws messages of running tasks: log lines (the store does not keep them) and live usage. */
function followRuns(view, dock) {
  return onEvent(({ event, data }) => {
    if (event === "resync") dock.catchUp();
    if (event === "task:log" && data && Array.isArray(data.entries)) {
      dock.append(data.taskId, data.entries);
      const line = activityOf(data.entries);
      if (!line) return;
      view.activity.set(data.taskId, line);
      const el = view.cards.get(data.taskId)?.el.querySelector(".card-activity");
      if (el && el.closest(".running")) {
        el.textContent = activityLine(data.taskId, line);
        el.hidden = false;
      }
    } else if (event === "task:usage" && data) {
      const task = state.tasks.get(data.taskId);
      const el = view.cards.get(data.taskId)?.el.querySelector(".card-cost");
      if (task && el) el.textContent = format.costMark(view.costOf(task), task.cost_estimated);
    }
  });
}

/** @param {HTMLElement} root  @param {{projectId: number}} params */
export function mount(root, { projectId }) {
  const filters = filtersByProject.get(projectId) || { ...NO_FILTERS };
  filtersByProject.set(projectId, filters);
  const view = {
    statuses: enumOf("Task", "status"),  // the columns, left to right
    filters,
    moves: new Map(),     // task id -> status while a move is on its way
    activity: new Map(),  // task id -> activity line
    cards: new Map(),     // task id -> {el, sig}
    columns: new Map(),   // status -> {el, body, count, more}
    limits: new Map(),    // status -> how many matching cards the column renders
    keep: new Set(),      // task ids moved from this page: rendered wherever they land
    hint: null,           // {status, text}: how to start an agent, in that column while empty
    loaded: false,
    loadError: null,
    statusOf: (task) => view.moves.get(task.id) ?? task.status,
    costOf: (task) => task.total_cost + (liveUsage(task)?.cost || 0),
  };
  let lastStatus = null;  // task id -> status, to notice a start (autoOpenTerminal)
  let frame = 0;
  let tagKey = null;
  let head, bar;
  const board = h("div", { class: "board", "aria-describedby": "board-help" });
  const help = h("p", { id: "board-help", class: "board-sr-only" });
  const schedule = () => { if (!frame) frame = requestAnimationFrame(render); };
  const dock = dockedLog(root, schedule);

  /** The skeleton (again when the language changes). */
  function build() {
    view.cards.clear();
    tagKey = null;
    head = projectHeader(projectId, "");
    bar = toolbar(projectId, filters, schedule, () => { Object.assign(filters, NO_FILTERS); build(); });
    view.columns = buildColumns(view.statuses, (status) => {
      view.limits.set(status, (view.limits.get(status) || PAGE) + PAGE);
      schedule();
    });
    board.replaceChildren(...[...view.columns.values()].map((c) => c.el));
    help.textContent = t("board.cardHelp");
    root.replaceChildren(head, bar.el, help, board, dock.el || "");
    if (dock.taskId !== null) dock.open(dock.taskId, true);
    schedule();
  }

  function render() {
    frame = 0;
    const focused = document.activeElement?.closest?.(".task-card");
    const focusId = focused && board.contains(focused) ? focused.dataset.id : null;
    const all = tasksOf(projectId);
    const active = Boolean(filters.type || filters.model || filters.tag || filters.q.trim());
    bar.clearButton.hidden = !active;
    tagKey = fillTags(bar.tagSelect, all, filters, tagKey);
    noticeStarts(all);
    view.hint = view.loaded ? startHint(projectId, all) : null;
    if (renderColumns(view, all, active)) schedule();
    const running = all.filter((task) => task.is_running).map((task) => task.id);
    if (dock.taskId !== null && !running.includes(dock.taskId)) running.push(dock.taskId);
    followLogs(running);
    // the card keeps the focus in its new column, and the view stays where it was (a phone
    // shows one column: following the card would carry the view away)
    if (focusId && !board.contains(document.activeElement)) view.cards.get(Number(focusId))?.el.focus({ preventScroll: true });
  }

  /** With settings.autoOpenTerminal, show the log of a task that just started. */
  function noticeStarts(all) {
    if (!view.loaded) return;
    if (lastStatus && state.settings?.autoOpenTerminal) {
      const started = all.find((task) => task.status === "in_progress" && lastStatus.has(task.id)
        && lastStatus.get(task.id) !== "in_progress");
      if (started) { dock.open(started.id); schedule(); }
    }
    lastStatus = new Map(all.map((task) => [task.id, task.status]));
  }

  async function move(id, status) {
    const task = state.tasks.get(id);
    if (!task || !view.statuses.includes(status) || view.statusOf(task) === status) return;
    view.moves.set(id, status);
    view.keep.add(id);
    schedule();
    try {
      const updated = await api.moveTask(id, status);
      const current = state.tasks.get(id);
      if (current && updated.updated_at >= current.updated_at) state.tasks.set(id, updated);
      view.moves.delete(id);
      notify("local");
    } catch (error) {
      view.moves.delete(id);
      schedule();
      toast(t("board.moveFailed", { key: task.task_key, error: error.message }), "error");
    }
  }

  const moveAsking = askingMove(move, (task, status) => confirmDialog(
    t("board.stopConfirm", { key: task.task_key, column: t(`status.${status}`) }),
    { ok: t("board.stopAndMove"), cancel: t("common.cancel"), danger: true }));
  bindCards(board, { statuses: view.statuses, statusOf: view.statusOf, move: moveAsking,
    openLog: (id) => { dock.open(id); schedule(); },
    runSeveral: (id) => {
      const task = state.tasks.get(id);
      if (task) openAttemptsDialog(task).catch((error) => toast(error.message, "error"));
    } });
  bindDragAndDrop(board, moveAsking);
  const offs = [
    subscribe((s, event) => {
      if (RENDER_ON.has(event)) schedule();
      if (event === "project:updated" || event === "resync") {
        const next = projectHeader(projectId, "");
        head.replaceWith(next);
        head = next;
      }
    }),
    followRuns(view, dock),
    onLanguageChange(build),
  ];

  build();
  loadTasks(projectId).then(() => {
    view.loaded = true;
    schedule();
  }).catch((error) => {
    view.loadError = t("board.loadFailed", { error: error.message });
    toast(view.loadError, "error");
    schedule();
  });

  return () => {
    for (const off of offs) off();
    if (frame) cancelAnimationFrame(frame);
    dock.close();
    followLogs([]);
  };
}
