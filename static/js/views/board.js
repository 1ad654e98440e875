// The board of a project (#/projects/:projectId): a column of task cards per status (the
// server's list, in its order), filters, drag and drop (optimistic, rolled back on error), a
// "Move to" select on each card for the keyboard, live activity lines and a docked log panel.
// A column renders its first PAGE matching cards (and any card moved here from this page),
// with "Show more" for the rest: a board of thousands of tasks stays a few thousand nodes;
// its count is always the whole column's.
// Below the view: its cards, its docked log panel, and how cards are opened and moved.

import { h, toast } from "../dom.js";
import * as format from "../i18n.js";
import { onLanguageChange, register, t } from "../i18n.js";
import { go } from "../main.js";
import { enumOf } from "../schema.js";
import {
  api, followLogs, liveUsage, loadTasks, notify, onEvent, pendingApprovals, projectSimulated,
  state, subscribe, tasksOf,
} from "../store.js";
import { requestSummary } from "./approval_card.js";
import {
  agentBadge, askingMove, handIcon, hostBadge, hostSignature, hostWaitingText, projectHeader,
  sandboxChip, waitingHelp, waitingText,
} from "./common.js";
import { prBadge } from "./pr_parts.js";

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

  const moveAsking = askingMove(move);
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

// --- the cards ----------------------------------------------------------------------------------

// A task card of the board: key, priority, title, chips (the host its project runs on among
// them), flags, the running agent's latest step, its pull request's badge, cost, a "Log"
// button, a "Move to" select (the keyboard's way to move it) and a menu of more actions
// ("Run with several agents", not while it is in progress).

register({  // key: [English, Turkish]
  "board.running": ["running", "çalışıyor"],
  "board.moveTo": ["Move to…", "Taşı…"],
  "board.moveLabel": ["Move {key} to another column", "{key} görevini başka sütuna taşı"],
  "board.denials": ["{n} tool calls refused", "{n} araç çağrısı reddedildi"],
  "board.denials1": ["1 tool call refused", "1 araç çağrısı reddedildi"],
  "board.awaiting": ["waiting for sub-tasks", "alt görevleri bekliyor"],
  "board.retries": ["retry {n}", "{n}. yeniden deneme"],
  "board.revisions": ["{n} revisions", "{n} revizyon"],
  "board.revisions1": ["1 revision", "1 revizyon"],
  "board.pr": ["Pull request", "Çekme isteği"],
  "board.tokens": ["{n} tokens", "{n} token"],
  "board.openLog": ["Log", "Günlük"],
  "board.needsYou": ["Needs you ({n})", "Sizi bekliyor ({n})"],
  "board.needsYouTitle": ["The agent waits for your answer: open the task", "Ajan cevabınızı bekliyor: görevi açın"],
  "board.openLogLabel": ["Show the live log of {key}", "{key} canlı günlüğünü göster"],
  "board.menu": ["More actions for {key}", "{key} için diğer işlemler"],
  "board.runSeveral": ["Run with several agents…", "Birkaç ajanla çalıştır…"],
  "board.asks": ["Asks you: {question}", "Size soruyor: {question}"],
});

/** The latest thing a running agent did, for the card's activity line (null: nothing yet). */
export function activityOf(entries) {
  for (let i = entries.length - 1; i >= 0; i -= 1) {
    const entry = entries[i];
    if (entry.kind === "tool_call") {
      return `⚙ ${entry.tool === format.QUESTION_TOOL ? `${entry.tool}: ${format.questionLine(entry.message)}` : entry.message}`;
    }
    if (entry.kind === "text" && entry.message) return entry.message.split("\n", 1)[0];
  }
  return null;
}

/**
 * A running card's activity line: while its agent waits on a question, the question (not the
 * tool that asked it); else its latest step.
 * @param {number} taskId  @param {string|null|undefined} latest  activityOf its log
 */
export function activityLine(taskId, latest) {
  const asked = pendingApprovals(taskId).find((approval) => approval.kind === "question");
  return asked ? `❓ ${t("board.asks", { question: requestSummary(asked) })}` : latest;
}

/** Whether a task passes the board's filters ({type, model, tag, q}). */
export function matches(task, filters) {
  if (filters.type && task.task_type !== filters.type) return false;
  if (filters.model && task.model !== filters.model) return false;
  if (filters.tag && !format.tags(task.tags).includes(filters.tag)) return false;
  const q = filters.q.trim().toLowerCase();
  return !q || `${task.task_key} ${task.title} ${task.description}`.toLowerCase().includes(q);
}

/**
 * The flags of a card: waiting for a person, for a usage limit, for its host, refused tool
 * calls, waiting for sub-tasks, retries, revisions.
 */
function flags(task) {
  const plural = (n, one, many) => t(n === 1 ? one : many, { n });
  const waiting = waitingText(task);
  const hostWaiting = hostWaitingText(task);
  return [
    task.pending_approvals > 0 ? h("span", { class: "flag flag-needs", "data-testid": "card-needs-you",
      title: t("board.needsYouTitle") }, handIcon(), " ", t("board.needsYou", { n: task.pending_approvals })) : null,
    waiting ? h("span", { class: "flag flag-waiting", "data-testid": "card-waiting", title: t("agentpart.waitingHelp") },
      `⏸ ${waiting}`) : null,
    hostWaiting ? h("span", { class: "flag flag-waiting flag-host", "data-testid": "card-host-waiting",
      title: waitingHelp(task) }, `⏸ ${hostWaiting}`) : null,
    task.permission_denials > 0 ? h("span", { class: "flag flag-denied" },
      `⚠ ${plural(task.permission_denials, "board.denials1", "board.denials")}`) : null,
    task.awaiting_subtasks ? h("span", { class: "flag flag-awaiting" }, `◷ ${t("board.awaiting")}`) : null,
    task.retry_count > 0 ? h("span", { class: "flag flag-retry" }, `↻ ${t("board.retries", { n: task.retry_count })}`) : null,
    task.revision_count > 0 ? h("span", { class: "flag" }, plural(task.revision_count, "board.revisions1", "board.revisions")) : null,
  ];
}

/**
 * One card.
 * @param {Object} task
 * @param {string} status  the column it stands in (a move on its way counts)
 * @param {{statuses: string[], moving: boolean, activity: string|null|undefined, cost: number}} shown
 */
export function taskCard(task, status, { statuses, moving, activity: latest, cost }) {
  const running = task.is_running;
  const activity = activityLine(task.id, latest);
  const chips = [
    h("span", { class: `bchip type-${task.task_type}` }, t(`type.${task.task_type}`)),
    h("span", { class: "bchip model" }, t(`model.${task.model}`)),
    agentBadge(task),
    hostBadge(task),
    sandboxChip(task),
    format.tags(task.tags).map((tag) => h("span", { class: "bchip tag" }, `#${tag}`)),
  ];
  const flagged = flags(task);
  const move = h("select", { class: "card-move", "data-action": "move",
    "aria-label": t("board.moveLabel", { key: task.task_key }) },
  h("option", { value: "" }, t("board.moveTo")),
  statuses.filter((s) => s !== status).map((s) => h("option", { value: s }, t(`status.${s}`))));
  const classes = ["task-card", `prio-${task.priority}`, running && "running", moving && "moving",
    task.pending_approvals > 0 && "asks-you"];
  return h("article", {
    class: classes.filter(Boolean).join(" "),
    tabindex: "0", draggable: "true", "data-id": String(task.id),
    "aria-label": `${task.task_key} ${task.title}`, "aria-describedby": "board-help" },
  h("div", { class: "card-top" },
    h("span", { class: "card-key" }, task.task_key),
    h("span", { class: `prio prio-${task.priority}` }, t(`priority.${task.priority}`)),
    running ? h("span", { class: "run-mark" }, h("span", { class: "spinner", "aria-hidden": "true" }), t("board.running")) : null),
  h("a", { class: "card-title", href: `#/tasks/${task.id}`, tabindex: "-1", draggable: "false" }, task.title),
  h("div", { class: "card-chips" }, chips),
  flagged.some(Boolean) ? h("div", { class: "card-flags" }, flagged) : null,
  status === "failed" && task.last_error ? h("p", { class: "card-error", title: task.last_error }, task.last_error) : null,
  h("p", { class: "card-activity", hidden: !(running && activity) }, running && activity ? activity : ""),
  h("div", { class: "card-foot" },
    task.pr ? prBadge(task) : task.pr_url ? h("a", { class: "card-pr", href: task.pr_url, target: "_blank",
      rel: "noopener noreferrer" }, `↗ ${t("board.pr")}`) : null,
    running ? h("button", { type: "button", class: "small", "data-action": "log",
      "aria-label": t("board.openLogLabel", { key: task.task_key }) }, t("board.openLog")) : null,
    h("span", { class: "card-cost", "data-testid": "card-cost", title: [t("board.tokens",
      { n: format.tokens(task.input_tokens + task.output_tokens) }), task.cost_estimated ? t("cost.estimatedHelp") : ""]
      .filter(Boolean).join(" · ") }, task.total_cost > 0 || running ? format.costMark(cost, task.cost_estimated) : ""),
    move, cardMenu(task, status)));
}

/** The card's menu of more actions (a <details>: its summary opens it), or null when none applies. */
function cardMenu(task, status) {
  if (status === "in_progress") return null;
  return h("details", { class: "card-menu" },
    h("summary", { class: "card-menu-button", title: t("board.menu", { key: task.task_key }),
      "aria-label": t("board.menu", { key: task.task_key }) }, "⋯"),
    h("div", { class: "card-menu-items" },
      h("button", { type: "button", class: "small", "data-action": "attempts" }, t("board.runSeveral"))));
}

// --- the docked log -----------------------------------------------------------------------------

// The docked log panel of the board: the live log of one task at a time, beside the
// columns, opened from a card's "Log" button (or when a task starts, with autoOpenTerminal).

/** The log view, imported on the first open (the board paints without it). */
const logView = () => import("./log_view.js");

register({  // key: [English, Turkish]
  "board.closeLog": ["Close the log panel", "Günlük panelini kapat"],
});

/** The newest entries a docked log shows. */
const DOCK_PAGE = 2000;

/**
 * The docked log panel of one task at a time: open(taskId) shows its live log in root.
 * onClose() after the user closed it.
 */
export function dockedLog(root, onClose) {
  let panel = null;  // {taskId, view, el}
  const dock = {
    get taskId() { return panel ? panel.taskId : null; },
    get el() { return panel ? panel.el : null; },
    open(taskId, rebuild = false) {
      if (panel && panel.taskId === taskId && !rebuild) return;
      dock.close();
      const task = state.tasks.get(taskId);
      const el = h("aside", { class: "term-panel", "aria-label": task ? `${task.task_key} ${task.title}` : "" },
        h("header", { class: "term-head" },
          h("a", { href: `#/tasks/${taskId}` }, task ? `${task.task_key} ${task.title}` : `#${taskId}`),
          h("button", { type: "button", class: "icon", "aria-label": t("board.closeLog"), title: t("board.closeLog"),
            onclick: () => { dock.close(); onClose(); } }, "×")));
      const mine = { taskId, view: null, el };
      panel = mine;
      root.append(el);
      const entries = api.taskLogs(taskId, DOCK_PAGE);
      entries.catch(() => {});  // told below, unless the panel closed meanwhile
      logView().then(({ createLogView }) => {
        if (panel !== mine) return null;
        mine.view = createLogView();
        el.append(mine.view.el);
        return entries.then((list) => {
          if (panel === mine) mine.view.setEntries(list);
        });
      }).catch((error) => toast(error.message, "error"));
    },
    /** After a reconnect: what the log got meanwhile (see createLogView's catchUp). */
    catchUp() {
      if (!panel) return;
      const { taskId, view } = panel;
      api.taskLogs(taskId, DOCK_PAGE).then((list) => {
        if (panel && panel.view === view) view.catchUp(list, DOCK_PAGE);
      }).catch(() => { /* the next reconnect tries again */ });
    },
    append(taskId, entries) {
      if (panel && panel.taskId === taskId) panel.view?.append(entries);
    },
    close() {
      if (!panel) return;
      panel.view?.destroy();
      panel.el.remove();
      panel = null;
    },
  };
  return dock;
}

// --- opening and moving cards -------------------------------------------------------------------

// How cards of the board are opened and moved: clicks, the "Move to" select, the card's menu,
// the keys of a focused card (Enter, Alt+Left/Right) and drag and drop between the columns.

const cardOf = (target) => target.closest?.(".task-card");
const idOf = (el) => Number(el.dataset.id);
const columnOf = (target) => target.closest?.(".board-col");


/** Clicks, "Move to", the menu and the keys of the cards: open, move, show the log, run the
 * task with several agents. An open card menu closes at a click anywhere else. A held
 * Alt+arrow moves once: its repeats would carry a card into In progress and on out of it. */
export function bindCards(board, { statuses, statusOf, move, openLog, runSeveral }) {
  board.addEventListener("click", (event) => {
    const menu = event.target.closest?.(".card-menu");
    board.querySelectorAll(".card-menu[open]").forEach((open) => { if (open !== menu) open.open = false; });
    const el = cardOf(event.target);
    if (!el) return;
    const action = event.target.closest("[data-action]")?.dataset.action;
    if (action === "log") openLog(idOf(el));
    if (action === "attempts") {
      if (menu) menu.open = false;
      runSeveral(idOf(el));
    }
    if (action || event.target.closest("a, button, select, input, summary")) return;
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
      if (event.repeat) return;
      const task = state.tasks.get(idOf(el));
      const next = statuses.indexOf(statusOf(task)) + (event.key === "ArrowLeft" ? -1 : 1);
      if (next >= 0 && next < statuses.length) move(task.id, statuses[next]);
    }
  });
}

/** Drag and drop of cards between columns: move(id, status) on a drop. A card re-rendered
 * during its drag (its task changed) is out of the page when the drag ends: its dragend does
 * not reach the board, so the card itself ends the drag (else a later drop of anything else
 * would move the card). */
export function bindDragAndDrop(board, move) {
  let dragId = null;
  const unmark = () => board.querySelectorAll(".drop-target, .dragging").forEach((el) => el.classList.remove("drop-target", "dragging"));
  const end = () => { dragId = null; unmark(); };
  board.addEventListener("dragstart", (event) => {
    const el = cardOf(event.target);
    dragId = el ? idOf(el) : null;
    if (!el) return;
    el.addEventListener("dragend", end, { once: true });
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
  board.addEventListener("dragend", end);
}
