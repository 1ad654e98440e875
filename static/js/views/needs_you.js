// "Needs you": the header's count of requests waiting for a person across every project
// (tool approvals and questions of running agents, kept live in store.state.approvals by
// the approval:* events) and the inbox it opens: each entry names the project, the task and
// the request, and opens the task.

import { api } from "../api.js";
import { h, openDialog } from "../dom.js";
import * as format from "../format.js";
import { register, t } from "../i18n.js";
import { pendingApprovals, state, subscribe } from "../store.js";
import { requestSummary } from "./approval_card.js";

register({  // key: [English, Turkish]
  "needs.button": ["Needs you", "Sizi bekliyor"],
  "needs.label": ["Needs you: {n} requests of agents waiting for your answer", "Sizi bekliyor: cevabınızı bekleyen {n} ajan isteği"],
  "needs.title": ["Needs you", "Sizi bekliyor"],
  "needs.intro": ["Running agents wait for your answer to these requests.", "Çalışan ajanlar bu isteklere cevabınızı bekliyor."],
  "needs.none": ["No agent is waiting for you.", "Sizi bekleyen bir ajan yok."],
  "needs.open": ["Open the task", "Görevi aç"],
  "needs.question": ["Question", "Soru"],
  "needs.tool": ["Tool", "Araç"],
});

/** Tasks the store does not hold (their project is not loaded), read once: id -> task. */
const fetched = new Map();

/** The task of an approval: from the store, or read once (then the list is redrawn). */
function taskOf(taskId, redraw) {
  const known = state.tasks.get(taskId) || fetched.get(taskId);
  if (known) return known;
  if (!fetched.has(taskId)) {
    fetched.set(taskId, null);
    api.task(taskId).then((task) => { fetched.set(taskId, task); redraw(); }).catch(() => fetched.delete(taskId));
  }
  return null;
}

/** The inbox's entries. */
function inboxList(close, redraw) {
  const list = pendingApprovals();
  if (!state.approvalsLoaded) return h("p", { class: "muted" }, t("common.loading"));
  if (!list.length) return h("p", { class: "empty", "data-testid": "needs-none" }, t("needs.none"));
  return h("ul", { class: "needs-list" }, list.map((approval) => {
    const task = taskOf(approval.taskId, redraw);
    const project = state.projects.find((p) => p.id === approval.projectId);
    return h("li", { class: "needs-item", "data-testid": "needs-entry" },
      h("div", { class: "needs-where muted" }, project ? project.name : `#${approval.projectId}`, " › ",
        task ? h("span", { class: "card-key" }, task.task_key) : `#${approval.taskId}`),
      h("a", { href: `#/tasks/${approval.taskId}`, class: "needs-link", onclick: close },
        h("strong", {}, task ? task.title : t("needs.open"))),
      h("p", { class: "needs-request" },
        h("span", { class: "bchip" }, t(approval.kind === "question" ? "needs.question" : "needs.tool")), " ",
        requestSummary(approval)),
      h("time", { class: "muted ins-small", datetime: approval.createdAt }, format.dateTime(approval.createdAt)));
  }));
}

/** Open the inbox; it follows the store until closed. */
function openInbox() {
  const body = h("div", { class: "needs-inbox" });
  const { dialog, close } = openDialog(t("needs.title"), body);
  const render = () => body.replaceChildren(h("p", { class: "muted" }, t("needs.intro")), inboxList(close, render));
  render();
  const off = subscribe((s, event) => {
    if (event.startsWith("approval") || event === "tasks:loaded" || event === "resync") render();
  });
  dialog.addEventListener("close", off);
}

/**
 * The header's control: a button with the count that opens the inbox. main.js puts the same
 * element in the header each time it draws it, and calls render() then.
 * @returns {{el: HTMLElement, render: () => void}}
 */
export function needsYouControl() {
  const el = h("button", { type: "button", class: "needs-you", "data-testid": "needs-you", onclick: openInbox });
  return {
    el,
    render() {
      const n = state.approvals.size;
      el.classList.toggle("has-requests", n > 0);
      el.setAttribute("aria-label", t("needs.label", { n }));
      el.replaceChildren(t("needs.button"), n ? h("span", { class: "badge", "data-testid": "needs-you-count" }, String(n)) : "");
    },
  };
}
