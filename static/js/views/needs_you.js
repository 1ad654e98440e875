// "Needs you": the header's count of what waits for a person across every project — tool
// approvals and questions of running agents, tasks waiting for review (in testing), pull
// requests whose automatic fixes are used up (design §16) — and the
// inbox it opens (GET /api/inbox, newest first, kept in store.state.inbox and read again
// after the /ws events that change it). Each entry names the project, the task and the
// request, and opens the task (an approval or question at its card: #/tasks/7?approval=12).

import { h, openDialog } from "../dom.js";
import * as format from "../i18n.js";
import { register, t } from "../i18n.js";
import { needsYouCount, state, subscribe } from "../store.js";
import { requestSummary } from "./approval_card.js";
import { prLabel } from "./pr_parts.js";

register({  // key: [English, Turkish]
  "needs.button": ["Needs you", "Sizi bekliyor"],
  "needs.label": ["Needs you: {n} waiting for your answer or review", "Sizi bekliyor: cevabınızı ya da incelemenizi bekleyen {n} iş"],
  "needs.title": ["Needs you", "Sizi bekliyor"],
  "needs.intro": ["Agents wait for your answer, finished tasks for your review, and pull requests the board stopped fixing for your decision.", "Ajanlar cevabınızı, biten görevler incelemenizi, panonun düzeltmeyi bıraktığı çekme istekleri kararınızı bekliyor."],
  "needs.none": ["Nothing waits for you.", "Sizi bekleyen bir şey yok."],
  "needs.open": ["Open the task", "Görevi aç"],
  "needs.question": ["Question", "Soru"],
  "needs.tool": ["Tool", "Araç"],
  "needs.review": ["Review", "İnceleme"],
  "needs.reviewText": ["Finished: waiting for your review", "Bitti: incelemenizi bekliyor"],
  "needs.pull_request": ["Pull request", "Çekme isteği"],
});

/** Where an entry goes: the task, at the request for an approval or question. */
export function entryHref(item) {
  const task = `#/tasks/${Number(item.taskId)}`;
  return item.approval ? `${task}?approval=${Number(item.approval.id)}` : task;
}

/** What an entry asks for: the approval's request, the review, or why the pull request waits. */
function requestText(item) {
  if (item.approval) return requestSummary(item.approval, { short: true });
  if (item.kind === "pull_request") {
    const pr = item.pr;
    return pr ? [h("a", { href: pr.url, target: "_blank", rel: "noopener noreferrer", "aria-label": prLabel(pr) },
      `#${pr.number}`), " ", pr.needsYou || t("pr.needsYou")] : t("pr.needsYou");
  }
  return t("needs.reviewText");
}

/** One entry of the inbox. */
function entry(item, close) {
  const kind = ["review", "question", "pull_request"].includes(item.kind) ? item.kind : "tool";
  return h("li", { class: `needs-item needs-${kind}`, "data-testid": "needs-entry", "data-kind": item.kind },
    h("div", { class: "needs-where muted" }, item.projectName || `#${item.projectId}`, " › ",
      h("span", { class: "card-key" }, item.taskKey || `#${item.taskId}`)),
    h("a", { href: entryHref(item), class: "needs-link", onclick: close }, h("strong", {}, item.taskTitle || t("needs.open"))),
    h("p", { class: "needs-request" }, h("span", { class: "bchip" }, t(`needs.${kind}`)), " ", requestText(item)),
    item.at ? h("time", { class: "muted ins-small", datetime: item.at }, format.dateTime(item.at)) : null);
}

/** The inbox's entries, newest first (as the server sends them). */
function inboxList(close) {
  if (!state.inbox) return h("p", { class: "muted" }, t("common.loading"));
  const items = state.inbox.items;
  if (!items.length) return h("p", { class: "empty", "data-testid": "needs-none" }, t("needs.none"));
  return h("ul", { class: "needs-list" }, items.map((item) => entry(item, close)));
}

/** Open the inbox; it follows the store until closed. */
function openInbox() {
  const body = h("div", { class: "needs-inbox" });
  const { dialog, close } = openDialog(t("needs.title"), body);
  const render = () => body.replaceChildren(h("p", { class: "muted" }, t("needs.intro")), inboxList(close));
  render();
  const off = subscribe((s, event) => {
    if (event === "inbox:loaded" || event === "resync") render();
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
      const n = needsYouCount();
      el.classList.toggle("has-requests", n > 0);
      el.setAttribute("aria-label", t("needs.label", { n }));
      el.replaceChildren(t("needs.button"), n ? h("span", { class: "badge", "data-testid": "needs-you-count" }, String(n)) : "");
    },
  };
}
