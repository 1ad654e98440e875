// A task card of the board: key, priority, title, chips (the host its project runs on among
// them), flags, the running agent's latest step, its pull request's badge, cost, a "Log"
// button, a "Move to" select (the keyboard's way to move it) and a menu of more actions
// ("Run with several agents", not while it is in progress).

import { h } from "../dom.js";
import * as format from "../format.js";
import { register, t } from "../i18n.js";
import { pendingApprovals } from "../store.js";
import { agentBadge, waitingText } from "./agent_parts.js";
import { requestSummary } from "./approval_card.js";
import { handIcon } from "./common.js";
import { hostBadge, hostWaitingText, sandboxChip, waitingHelp } from "./host_parts.js";
import { prBadge } from "./pr_parts.js";

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
