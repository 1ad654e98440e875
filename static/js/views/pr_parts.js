// A task's pull request as the views show it (design §16): the card's badge (its number, the
// state of its checks by colour, icon and words, merged or closed), the task page's "Pull
// request" section (link, state, checks, review, automatic fixes, why it stopped or waits
// for a person, and what the board did: the task's log entries of kind "pr"), and the words
// of a "Needs you" entry. task.pr is null without a pull request the board follows.

import { h } from "../dom.js";
import * as format from "../i18n.js";
import { register, t } from "../i18n.js";
import { parameterRangeOf } from "../schema.js";
import { api, projectPrFixMax } from "../store.js";
import { handIcon } from "./common.js";

register({  // key: [English, Turkish]
  "pr.title": ["Pull request", "Çekme isteği"],
  "pr.badge": ["Pull request #{n}: {what}", "Çekme isteği #{n}: {what}"],
  "pr.checks.pending": ["checks pending", "denetimler sürüyor"],
  "pr.checks.passing": ["checks passing", "denetimler geçti"],
  "pr.checks.failing": ["checks failing", "denetimler başarısız"],
  "pr.checks.none": ["no checks", "denetim yok"],
  "pr.state.open": ["open", "açık"],
  "pr.state.merged": ["merged", "birleştirildi"],
  "pr.state.closed": ["closed without merging", "birleştirilmeden kapatıldı"],
  "pr.review.none": ["no review yet", "henüz inceleme yok"],
  "pr.review.approved": ["approved", "onaylandı"],
  "pr.review.changes_requested": ["changes requested", "değişiklik istendi"],
  "pr.waits": ["waits for you", "sizi bekliyor"],
  "pr.stopped": ["no longer followed", "artık izlenmiyor"],
  "pr.newTab": ["Opens in a new tab", "Yeni sekmede açılır"],
  "pr.state": ["State", "Durum"],
  "pr.checks": ["Checks", "Denetimler"],
  "pr.review": ["Review", "İnceleme"],
  "pr.fixes": ["Automatic fixes", "Otomatik düzeltmeler"],
  "pr.fixesOf": ["{n} of {max}", "{n} / {max}"],
  "pr.needsYou": ["The pull request waits for you", "Çekme isteği sizi bekliyor"],
  "pr.error": ["The board stopped following this pull request", "Pano bu çekme isteğini izlemeyi bıraktı"],
  "pr.did": ["What the board did", "Panonun yaptıkları"],
  "pr.didNothing": ["Nothing yet.", "Henüz bir şey yok."],
  "pr.held": ["Held: not a collaborator", "Bekletiliyor: katkıcı değil"],
  "pr.heldHelp": ["Only reviews and comments of people the repository trusts (its owners, members and collaborators, and the project's trusted authors) go back to the agent by themselves. Read these first: send one only if you want the agent to act on it.",
    "Yalnızca deponun güvendiği kişilerin (sahipleri, üyeleri, katkıcıları ve projenin güvenilen yazarları) incelemeleri ve yorumları ajana kendiliğinden gider. Önce bunları okuyun: yalnızca ajanın üzerinde çalışmasını istediğinizi gönderin."],
  "pr.heldBy": ["{what} by {author}", "{author}: {what}"],
  "pr.someone": ["someone", "biri"],
  "pr.send": ["Send to the agent", "Ajana gönder"],
  "pr.sent": ["Sent: it goes back with the next look at the pull request.", "Gönderildi: çekme isteğine bir sonraki bakışta ajana gider."],
});

/** The icon of each checks state and of a merged or closed pull request (colour is CSS). */
const ICONS = { pending: "◷", passing: "✓", failing: "✗", none: "○", merged: "⇲", closed: "⊘" };

/** What a pull request is at, in words: its checks while open, else merged or closed. */
function stateWords(pr) {
  return pr.state === "open" ? t(`pr.checks.${pr.checks}`) : t(`pr.state.${pr.state}`);
}

/** "Pull request #7: checks failing" (and whether it waits for a person or is no longer followed). */
export function prLabel(pr) {
  const what = [stateWords(pr), pr.needsYou ? t("pr.waits") : null, pr.error ? t("pr.stopped") : null];
  return t("pr.badge", { n: pr.number, what: what.filter(Boolean).join(", ") });
}

/** The look of a pull request: "open" state shows its checks. */
const look = (pr) => (pr.state === "open" ? pr.checks : pr.state);

/**
 * The card's badge: "✗ #7" linking to the pull request, its state in colour and icon (a ring
 * when it waits for a person, ⚠ when no longer followed), and in words for screen readers
 * and the tooltip. One element, no listener; null without a PR.
 */
export function prBadge(task) {
  const pr = task.pr;
  if (!pr) return null;
  const label = prLabel(pr);
  const why = pr.needsYou || pr.error;
  const classes = ["card-pr", "pr-badge", `pr-${look(pr)}`, pr.needsYou && "pr-needs", pr.error && "pr-error"];
  return h("a", { class: classes.filter(Boolean).join(" "), href: pr.url, target: "_blank", rel: "noopener noreferrer",
    draggable: "false", "data-testid": "card-pr", "data-state": look(pr), "aria-label": label,
    title: why ? `${label}\n${why}` : label },
  h("span", { "aria-hidden": "true" }, `${pr.error ? "⚠" : ICONS[look(pr)]} #${pr.number}`));
}

/**
 * The log entries of kind "pr" of a task, oldest first: the server filters them, in pages as
 * large as it allows, newest first, until the first one.
 * @returns {Promise<Object[]>}
 */
export async function loadPrLog(taskId) {
  const { max } = parameterRangeOf("/api/tasks/{task_id}/logs", "limit");
  const found = [];
  let before = null;
  for (;;) {
    const page = await api.taskLogs(taskId, max, before, "pr");
    found.unshift(...page);
    if (page.length < max) break;
    before = page[0].id;
  }
  return found;
}

/**
 * The task page's "Pull request" section; entries: its log entries of kind "pr", oldest
 * first (null while they load); failed: why they could not be read, else null.
 * @param {Object} task  with task.pr set
 * @param {Object[]|null} entries
 * @param {string|null} [failed]
 */
export function prSection(task, entries, failed = null) {
  const pr = task.pr;
  const max = projectPrFixMax(task.project_id);
  const rows = [
    [t("pr.title"), h("a", { href: pr.url, target: "_blank", rel: "noopener noreferrer", "data-testid": "pr-link",
      title: t("pr.newTab") }, pr.url)],
    [t("pr.state"), h("span", { class: `pr-state pr-${pr.state}`, "data-testid": "pr-state" }, t(`pr.state.${pr.state}`))],
    [t("pr.checks"), h("span", { class: `pr-checks pr-${pr.checks}`, "data-testid": "pr-checks" },
      h("span", { "aria-hidden": "true" }, `${ICONS[pr.checks]} `), t(`pr.checks.${pr.checks}`))],
    [t("pr.review"), h("span", { "data-testid": "pr-review" }, t(`pr.review.${pr.review}`))],
    [t("pr.fixes"), h("span", { "data-testid": "pr-fixes" },
      max === undefined ? String(pr.fixAttempts) : t("pr.fixesOf", { n: pr.fixAttempts, max }))],
  ];
  return h("section", { class: "detail-text pr-section", "data-testid": "task-pr", "aria-labelledby": "pr-heading" },
    h("h2", { id: "pr-heading" }, t("pr.title")),
    pr.error ? h("div", { class: "alert alert-error", role: "alert", "data-testid": "pr-error" },
      h("strong", {}, t("pr.error")), h("p", {}, pr.error)) : null,
    pr.needsYou ? h("div", { class: "alert alert-warn", role: "status", "data-testid": "pr-needs-you" },
      h("strong", {}, handIcon(), " ", t("pr.needsYou")), h("p", {}, pr.needsYou)) : null,
    h("dl", { class: "field-list pr-fields" }, rows.map(([label, value]) => [h("dt", {}, label), h("dd", {}, value)])),
    pr.held?.length ? heldList(task) : null,
    h("h3", { class: "pr-did-head" }, t("pr.did")),
    failed ? h("p", { class: "error" }, failed) : null,
    entries === null ? h("p", { class: "muted" }, t("common.loading"))
      : entries.length ? h("ol", { class: "pr-did", "data-testid": "pr-log" }, entries.map((entry) =>
        h("li", { class: entry.isError ? "is-error" : "" },
          h("time", { datetime: entry.createdAt }, format.dateTime(entry.createdAt)), " ", entry.message)))
        : failed ? null : h("p", { class: "muted" }, t("pr.didNothing")));
}

/**
 * The reviews and comments of people the repository does not trust: each with who wrote it,
 * what it says, and a button that sends it back to the agent (a person's decision).
 */
function heldList(task) {
  return h("div", { class: "pr-held", "data-testid": "pr-held" },
    h("h3", {}, t("pr.held")),
    h("p", { class: "muted" }, t("pr.heldHelp")),
    h("ul", {}, task.pr.held.map((item) => {
      const said = h("p", { class: "pr-held-sent", role: "status" });
      const send = h("button", { type: "button", "data-testid": "pr-held-send", onclick: async () => {
        send.disabled = true;
        try {
          await api.releasePr(task.id, item.key);
          said.textContent = t("pr.sent");
        } catch (err) {
          send.disabled = false;
          said.textContent = err.message;
        }
      } }, t("pr.send"));
      return h("li", { "data-key": item.key },
        h("strong", {}, t("pr.heldBy", { what: item.what, author: item.author || t("pr.someone") })),
        h("blockquote", {}, item.text), send, said);
    })));
}
