// One request of a running agent waiting for a person (design §12): a tool call to allow or
// deny (its input shown readably: a command as code, a file path, an edit's before and
// after; the rule the CLI suggests remembering), or a question with its options. The
// decision goes to POST /api/approvals/:id; the approval:resolved event takes it away.

import { h, toast } from "../dom.js";
import * as format from "../i18n.js";
import { register, t } from "../i18n.js";
import { enumOf } from "../schema.js";
import { api, loadApprovals } from "../store.js";

register({  // key: [English, Turkish]
  "approval.toolTitle": ["The agent asks to use {tool}", "Ajan {tool} aracını kullanmak istiyor"],
  "approval.questionTitle": ["The agent asks you", "Ajan size soruyor"],
  "approval.command": ["Command", "Komut"],
  "approval.file": ["File", "Dosya"],
  "approval.before": ["Before", "Önce"],
  "approval.after": ["After", "Sonra"],
  "approval.content": ["Content", "İçerik"],
  "approval.input": ["Input", "Girdi"],
  "approval.suggested": ["Suggested rule", "Önerilen kural"],
  "approval.allow": ["Allow", "İzin ver"],
  "approval.allowSession": ["Allow for this session", "Bu oturum için izin ver"],
  "approval.allowProject": ["Allow always for this project", "Bu projede her zaman izin ver"],
  "approval.deny": ["Deny", "Reddet"],
  "approval.denyMessage": ["Message to the agent (optional)", "Ajana mesaj (isteğe bağlı)"],
  "approval.ownAnswer": ["Your own answer", "Kendi cevabınız"],
  "approval.sendAnswer": ["Send the answer", "Cevabı gönder"],
  "approval.skip": ["Do not answer", "Cevaplama"],
  "approval.answerAll": ["Answer every question first.", "Önce her soruyu cevaplayın."],
  "approval.multi": ["Choose one or more", "Bir veya daha fazlasını seçin"],
  "approval.gone": ["This request was already answered (or has expired).", "Bu istek zaten cevaplandı (ya da süresi doldu)."],
  "approval.asked": ["asked {when}", "{when} soruldu"],
});

/** The decision and remember values the server takes (from its API description). */
function choices() {
  const decisions = enumOf("api_decide_approval_body", "decision");
  const remember = enumOf("api_decide_approval_body", "remember");
  const need = (list, value) => {
    if (!list.includes(value)) throw new Error(`The server's API description has no approval decision ${value}.`);
    return value;
  };
  return { allow: need(decisions, "allow"), deny: need(decisions, "deny"),
    session: remember.includes("session") ? "session" : null,
    project: remember.includes("project") ? "project" : null };
}

const str = (value) => (typeof value === "string" ? value : "");

/** A file path of a tool's input, if it has one. */
const pathOf = (input) => str(input.file_path) || str(input.notebook_path) || str(input.path);

/** The rules the CLI suggests remembering, as text ("Bash(npm test:*)", "Edit"). */
export function suggestedRules(approval) {
  const out = [];
  for (const suggestion of Array.isArray(approval.suggestions) ? approval.suggestions : []) {
    if (!suggestion || typeof suggestion !== "object") continue;
    const rules = Array.isArray(suggestion.rules) ? suggestion.rules : [];
    for (const rule of rules) {
      if (rule && rule.toolName) out.push(rule.ruleContent ? `${rule.toolName}(${rule.ruleContent})` : String(rule.toolName));
    }
    if (!rules.length && suggestion.mode) out.push(`mode: ${suggestion.mode}`);
    if (!rules.length && Array.isArray(suggestion.directories)) out.push(...suggestion.directories.map(String));
  }
  return out;
}

/** A long path as its last two parts ("…/demo-repo/NOTES.md"), for narrow lists. */
const shortPath = (path) => {
  const parts = path.split("/").filter(Boolean);
  return parts.length > 2 ? `…/${parts.slice(-2).join("/")}` : path;
};

/**
 * One line about a request, for lists: "Edit: NOTES.md", "Bash: npm test", the question.
 * short: a file path as its last two parts.
 */
export function requestSummary(approval, { short = false } = {}) {
  const input = approval.input && typeof approval.input === "object" ? approval.input : {};
  if (approval.kind === "question") {
    const questions = Array.isArray(input.questions) ? input.questions : [];
    return questions.map((q) => str(q?.question)).filter(Boolean).join(" · ") || t("approval.questionTitle");
  }
  const path = pathOf(input);
  const detail = str(input.command) || (short && path ? shortPath(path) : path) || str(input.pattern) || str(input.url)
    || str(input.description);
  return detail ? `${approval.toolName}: ${detail}` : String(approval.toolName || "");
}

/**
 * Send a decision; its buttons stay disabled until the approval:resolved event removes the
 * card. A 409 (answered elsewhere, expired) is said calmly and the list is read again; any
 * other error is shown in errorEl. Resolves true when it was decided here.
 */
async function decide(approval, body, errorEl, buttons) {
  errorEl.hidden = true;
  for (const button of buttons) button.disabled = true;
  try {
    await api.decideApproval(approval.id, body);  // its approval:resolved event takes the card away
    return true;
  } catch (error) {
    if (error.status === 409 || error.status === 404) {
      toast(t("approval.gone"));
      loadApprovals().catch(() => {});  // read again: the list no longer holds it
    } else {
      errorEl.textContent = error.message;
      errorEl.hidden = false;
    }
    for (const button of buttons) button.disabled = false;
    return false;
  }
}

const block = (label, cls, text) => h("div", { class: "approval-block" },
  h("div", { class: "approval-label" }, label), h("pre", { class: `approval-code ${cls}` }, h("code", {}, text)));

/** The tool's input, readably. */
function toolInput(approval) {
  const input = approval.input && typeof approval.input === "object" ? approval.input : {};
  const path = pathOf(input);
  const parts = [];
  if (typeof input.command === "string") {
    parts.push(block(t("approval.command"), "approval-command", input.command));
    if (str(input.description)) parts.push(h("p", { class: "muted approval-note" }, input.description));
  }
  if (path) parts.push(h("p", { class: "approval-path" }, h("span", { class: "approval-label" }, t("approval.file")), " ", h("code", {}, path)));
  if (typeof input.new_string === "string" || typeof input.old_string === "string") {
    parts.push(h("div", { class: "approval-edit" },
      str(input.old_string) ? block(t("approval.before"), "d-del", input.old_string) : null,
      block(t("approval.after"), "d-add", str(input.new_string))));
  } else if (typeof input.content === "string") {
    parts.push(block(t("approval.content"), "d-add", input.content));
  }
  if (!parts.length) parts.push(block(t("approval.input"), "", JSON.stringify(input, null, 2)));
  return parts;
}

/** The card of a tool request: its input, the suggested rule and the four answers. */
function toolCard(approval) {
  const c = choices();
  const rules = suggestedRules(approval);
  const error = h("p", { class: "error", role: "alert", hidden: true });
  const messageId = `deny-message-${approval.id}`;
  const message = h("input", { type: "text", id: messageId, class: "approval-message" });
  const buttons = [];
  message.addEventListener("keydown", (event) => {  // Enter in the message denies with it
    if (event.key === "Enter") { event.preventDefault(); deny.click(); }
  });
  const button = (label, cls, body) => {
    const el = h("button", { type: "button", class: cls, onclick: () => decide(approval, body(), error, buttons) }, label);
    buttons.push(el);
    return el;
  };
  const deny = button(t("approval.deny"), "danger", () => (message.value.trim()
    ? { decision: c.deny, message: message.value.trim() } : { decision: c.deny }));
  return [
    h("header", { class: "approval-head" }, h("strong", {}, t("approval.toolTitle", { tool: approval.toolName })),
      h("time", { class: "muted", datetime: approval.createdAt }, t("approval.asked", { when: format.dateTime(approval.createdAt) }))),
    toolInput(approval),
    rules.length ? h("p", { class: "approval-rules" }, h("span", { class: "approval-label" }, t("approval.suggested")), " ",
      rules.map((rule) => h("code", { class: "bchip" }, rule))) : null,
    h("div", { class: "approval-actions" },
      button(t("approval.allow"), "primary", () => ({ decision: c.allow })),
      rules.length && c.session ? button(t("approval.allowSession"), "", () => ({ decision: c.allow, remember: c.session })) : null,
      rules.length && c.project ? button(t("approval.allowProject"), "", () => ({ decision: c.allow, remember: c.project })) : null),
    h("div", { class: "approval-deny" }, h("label", { for: messageId }, t("approval.denyMessage")), message, deny),
    error];
}

/**
 * One question: its options as toggle buttons. A click selects one (another click another
 * instead), or adds and removes one where several answers are allowed; nothing is sent.
 */
function questionBlock(question, index, approvalId, onEnter) {
  const chosen = new Set();
  const own = h("input", { type: "text", id: `own-answer-${approvalId}-${index}`, class: "approval-own" });
  own.addEventListener("keydown", (event) => { if (event.key === "Enter") { event.preventDefault(); onEnter(); } });
  const options = (Array.isArray(question.options) ? question.options : []).map((option) => {
    const label = str(option?.label);
    const el = h("button", { type: "button", class: "approval-option", "aria-pressed": "false", "data-label": label },
      h("span", { class: "approval-option-label" }, label),
      str(option?.description) ? h("span", { class: "approval-option-desc" }, option.description) : null);
    el.addEventListener("click", () => {
      if (question.multiSelect) {
        if (chosen.has(label)) chosen.delete(label); else chosen.add(label);
      } else {
        chosen.clear();
        chosen.add(label);
      }
      for (const other of el.parentElement.children) other.setAttribute("aria-pressed", String(chosen.has(other.dataset.label)));
    });
    return el;
  });
  const el = h("fieldset", { class: "approval-question" },
    h("legend", {}, str(question.header) ? h("span", { class: "bchip" }, question.header) : null, " ", str(question.question)),
    question.multiSelect ? h("p", { class: "muted approval-note" }, t("approval.multi")) : null,
    h("div", { class: "approval-options", role: "group" }, options),
    h("div", { class: "approval-own-field" }, h("label", { for: own.id }, t("approval.ownAnswer")), own));
  const answer = () => {
    if (own.value.trim()) return own.value.trim();
    if (!chosen.size) return null;
    return question.multiSelect ? [...chosen] : [...chosen][0];
  };
  return { el, answer };
}

/** The card of a question: its options are chosen, then "Send the answer" sends them. */
function questionCard(approval) {
  const c = choices();
  const questions = (Array.isArray(approval.input?.questions) ? approval.input.questions : []).filter((q) => q && typeof q === "object");
  const error = h("p", { class: "error", role: "alert", hidden: true });
  const buttons = [];
  const send = () => {
    const answers = {};
    for (const [i, q] of questions.entries()) {
      const value = blocks[i].answer();
      if (value === null) {
        error.textContent = t("approval.answerAll");
        error.hidden = false;
        return;
      }
      answers[str(q.question)] = value;
    }
    decide(approval, { decision: c.allow, answers }, error, buttons);
  };
  const blocks = questions.map((q, i) => questionBlock(q, i, approval.id, send));
  const sendButton = h("button", { type: "button", class: "primary", onclick: send }, t("approval.sendAnswer"));
  const skip = h("button", { type: "button", onclick: () => decide(approval, { decision: c.deny }, error, buttons) }, t("approval.skip"));
  buttons.push(sendButton, skip, ...blocks.flatMap((b) => [...b.el.querySelectorAll("button")]));
  return [
    h("header", { class: "approval-head" }, h("strong", {}, t("approval.questionTitle")),
      h("time", { class: "muted", datetime: approval.createdAt }, t("approval.asked", { when: format.dateTime(approval.createdAt) }))),
    blocks.map((b) => b.el),
    h("div", { class: "approval-actions" }, sendButton, skip),
    error];
}

/**
 * The card of one pending approval.
 * @param {Object} approval  as GET /api/approvals answers it
 * @returns {HTMLElement}
 */
export function approvalCard(approval) {
  const question = approval.kind === "question";
  const el = h("article", { class: `approval ${question ? "approval-q" : "approval-tool"}`, "data-testid": "approval",
    "data-id": String(approval.id), "aria-label": requestSummary(approval) });
  try {
    el.append(...[question ? questionCard(approval) : toolCard(approval)].flat(Infinity).filter(Boolean));
  } catch (error) {  // a board newer than its server: say so
    el.append(h("p", { class: "error" }, error.message));
  }
  return el;
}
