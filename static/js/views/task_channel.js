// The task page's channel to its agent (design §12): the requests waiting for a person
// (approval_card.js), live from store.state.approvals, and the conversation — the messages
// of both authors, live from message:created / message:updated, and the box that sends one
// (queued until the agent's turn ends, or at once with "Send now"; on a task in testing or
// failed it is a request for changes).

import { api } from "../api.js";
import { h, toast } from "../dom.js";
import * as format from "../format.js";
import { onLanguageChange, register, t } from "../i18n.js";
import { attemptsOpen, loadApprovals, onEvent, pendingApprovals, state, subscribe } from "../store.js";
import { agentName, taskAgent } from "./agent_parts.js";
import { approvalCard } from "./approval_card.js";

register({  // key: [English, Turkish]
  "channel.waiting": ["Waiting for your answer", "Cevabınızı bekliyor"],
  "channel.talk": ["Talk to the agent", "Ajanla konuşun"],
  "channel.none": ["No messages yet.", "Henüz mesaj yok."],
  "channel.label": ["Message to the agent", "Ajana mesaj"],
  "channel.send": ["Send", "Gönder"],
  "channel.sendChanges": ["Send as a request for changes", "Değişiklik isteği olarak gönder"],
  "channel.sendNow": ["Send now", "Hemen gönder"],
  "channel.sendNowTitle": ["Interrupt the agent's turn and send this at once", "Ajanın turunu kesip bunu hemen gönder"],
  "channel.hintRunning": ["Sent when the agent's turn ends; Send now interrupts it.", "Ajanın turu bitince gönderilir; Hemen gönder turu keser."],
  "channel.hintChanges": ["The agent goes back to work on this task with your message.", "Ajan mesajınızla bu görev üzerinde yeniden çalışır."],
  "channel.hintOneWay": ["{name} cannot be reached during its run, and approvals are not available for it: your message resumes it when the run ends.", "{name} çalışırken ona ulaşılamaz ve onaylar kullanılamaz: mesajınız çalışma bitince onu yeniden başlatır."],
  "channel.hintIdle": ["Messages reach the agent while the task is in progress, or in testing or failed as a request for changes.", "Mesajlar, görev devam ederken ya da test veya başarısız durumundayken değişiklik isteği olarak ajana ulaşır."],
  "channel.hintPick": ["Several agents work on this task: a message goes to one of them. Once they end, pick the attempt to keep (above), then write to its agent here.", "Bu görev üzerinde birkaç ajan çalışıyor: bir mesaj yalnızca birine gider. Bitince tutulacak denemeyi seçin (yukarıda), sonra onun ajanına buradan yazın."],
  "channel.sentOk": ["Message sent", "Mesaj gönderildi"],
  "channel.interrupt": ["sent now", "hemen gönderildi"],
  "msg.author.person": ["You", "Siz"],
  "msg.author.agent": ["Agent", "Ajan"],
  "msg.author.verifier": ["Verifier (changes requested)", "Doğrulayıcı (değişiklik istedi)"],
  "msg.author.pull_request": ["Pull request (changes requested)", "Çekme isteği (değişiklik istedi)"],
  "msg.state.queued": ["queued", "sırada"],
  "msg.state.sent": ["sent", "gönderildi"],
});

/** Statuses in which a message reaches the agent (the server answers 409 elsewhere). */
const WORKING = "in_progress";
const CHANGES = ["testing", "failed"];

/** One message of the conversation. */
function messageItem(message) {
  const person = message.author === "person";
  const toAgent = message.author !== "agent";  // a person's, or an automatic request for changes
  return h("li", { class: `message ${toAgent ? "from-person" : "from-agent"}`, "data-testid": "message",
    "data-state": message.state, "data-author": message.author },
  h("div", { class: "message-head" },
    h("strong", {}, t(`msg.author.${message.author}`)), " ",
    h("time", { class: "muted", datetime: message.createdAt }, format.dateTime(message.createdAt)),
    person ? h("span", { class: `message-state st-${message.state}`, "data-testid": "message-state" },
      t(`msg.state.${message.state}`)) : null,
    person && message.interrupt ? h("span", { class: "message-state" }, t("channel.interrupt")) : null),
  h("div", { class: "prose message-text" }, message.text));
}

/**
 * The requests of this task waiting for a person, one card each (kept while they wait). The
 * card of focusId (the request a notification or the inbox opened) is scrolled to and marked.
 */
function approvalsPanel(taskId, focusId) {
  let revealed = false;
  const cards = new Map();  // approval id -> card (typed text survives a redraw)
  const count = h("span", { class: "badge" });
  const list = h("div", { class: "approval-list" });
  const heading = h("h2", {});
  const el = h("section", { class: "approvals-panel", "data-testid": "approvals", hidden: true,
    "aria-live": "polite" }, heading, list);
  function render(rebuild = false) {
    const pending = pendingApprovals(taskId);
    const ids = new Set(pending.map((a) => a.id));
    for (const [id, card] of cards) {
      if (!ids.has(id) || rebuild) { card.remove(); cards.delete(id); }
    }
    for (const approval of pending) if (!cards.has(approval.id)) cards.set(approval.id, approvalCard(approval));
    const wanted = pending.map((a) => cards.get(a.id));
    // moving a node drops its focus (a card, a typed message): only when the list changed
    if (wanted.length !== list.children.length || wanted.some((card, i) => list.children[i] !== card)) {
      list.replaceChildren(...wanted);
    }
    count.textContent = String(pending.length);
    heading.replaceChildren(t("channel.waiting"), count);
    el.hidden = pending.length === 0;
    reveal();
  }
  function reveal() {
    const card = focusId && !revealed ? cards.get(focusId) : null;
    if (!card) return;
    revealed = true;
    card.classList.add("approval-focus");
    card.setAttribute("tabindex", "-1");
    requestAnimationFrame(() => {  // once the page around it is laid out
      card.scrollIntoView({ block: "center" });
      card.focus({ preventScroll: true });
    });
  }
  return { el, render, revealed: () => revealed };
}

/** The conversation: the messages and the box that sends one. */
function conversation(taskId) {
  const messages = new Map();
  let status = null;
  let oneWay = null;  // the name of the task's agent when it has no channel into a run
  let pickFirst = false;  // its attempts wait for a pick: no agent to write to yet
  const list = h("ol", { class: "message-list", "data-testid": "messages" });
  const empty = h("p", { class: "muted" });
  const heading = h("h2", {});
  const label = h("label", { for: `message-${taskId}` });
  const text = h("textarea", { id: `message-${taskId}`, rows: "3", class: "message-input" });
  const send = h("button", { type: "submit", class: "primary", "data-testid": "message-send" });
  const now = h("button", { type: "button", "data-testid": "message-send-now" });
  const hint = h("p", { class: "muted message-hint" });
  const error = h("p", { class: "error", role: "alert", hidden: true });
  const form = h("form", { class: "message-form", novalidate: true }, label, text,
    h("div", { class: "message-actions" }, hint, now, send), error);
  const el = h("section", { class: "detail-text talk-panel", "data-testid": "talk" }, heading, list, empty, form);

  function renderList() {
    const sorted = [...messages.values()].sort((a, b) => a.id - b.id);
    const atBottom = list.scrollTop + list.clientHeight >= list.scrollHeight - 8;
    list.replaceChildren(...sorted.map(messageItem));
    list.hidden = !sorted.length;
    empty.hidden = sorted.length > 0;
    if (atBottom) list.scrollTop = list.scrollHeight;
  }
  function renderForm() {
    const working = status === WORKING && !pickFirst;
    const changes = CHANGES.includes(status) && !pickFirst;
    heading.textContent = t("channel.talk");
    empty.textContent = t("channel.none");
    label.textContent = t("channel.label");
    send.textContent = t(changes ? "channel.sendChanges" : "channel.send");
    now.textContent = t("channel.sendNow");
    now.title = t("channel.sendNowTitle");
    now.hidden = !working || Boolean(oneWay);
    send.disabled = !(working || changes);
    text.disabled = !(working || changes);
    hint.textContent = working && oneWay ? t("channel.hintOneWay", { name: oneWay })
      : t(pickFirst ? "channel.hintPick" : working ? "channel.hintRunning" : changes ? "channel.hintChanges" : "channel.hintIdle");
  }
  function upsert(message) {
    messages.set(message.id, { ...messages.get(message.id), ...message });
    renderList();
  }
  async function submit(interrupt) {
    const body = text.value.trim();
    if (!body) { text.focus(); return; }
    error.hidden = true;
    send.disabled = now.disabled = true;
    try {
      const message = await api.sendMessage(taskId, interrupt ? { text: body, interrupt: true } : { text: body });
      text.value = "";
      if (!messages.has(message.id)) upsert(message);  // its events may have come first (and are newer)
      toast(t("channel.sentOk"));
    } catch (err) {
      error.textContent = err.message;
      error.hidden = false;
    } finally {
      now.disabled = false;
      renderForm();
    }
  }
  form.addEventListener("submit", (event) => { event.preventDefault(); submit(false); });
  now.addEventListener("click", () => submit(true));
  text.addEventListener("keydown", (event) => {
    if (event.key === "Enter" && (event.ctrlKey || event.metaKey)) { event.preventDefault(); submit(false); }
  });
  async function load() {
    try {
      for (const message of await api.messages(taskId)) {  // an event may have brought a newer one
        if (messages.get(message.id)?.state !== "sent") messages.set(message.id, message);
      }
      renderList();
    } catch (err) {
      error.textContent = err.message;
      error.hidden = false;
    }
  }
  return {
    el, load, upsert, renderList,
    /** The task's status, its agent when one-way, whether its attempts wait for a pick. */
    setStatus(next, agent, pick = false) {
      if (next !== status || pick !== pickFirst) error.hidden = true;  // said of what was
      status = next;
      oneWay = agent;
      pickFirst = pick;
      renderForm();
    },
    relabel() { renderForm(); renderList(); },
  };
}

/**
 * The channel of one task page.
 * @param {number} taskId
 * @param {number|null} [focusApproval]  the request to show first (it may be answered already)
 * @returns {{approvals: HTMLElement, talk: HTMLElement, setTask: (task: Object) => void, destroy: () => void}}
 */
export function createChannel(taskId, focusApproval = null) {
  const panel = approvalsPanel(taskId, focusApproval);
  const talk = conversation(taskId);
  talk.setStatus(null, null);
  panel.render();
  talk.load();
  let alive = true;
  let task = null;
  /** Whether messages can reach a run depends on the task's agent and on health (its CLI). */
  const showStatus = () => {
    if (!task) return;
    const agent = taskAgent(task);
    talk.setStatus(task.status, state.health?.agents?.[agent]?.twoWay === false ? agentName(agent) : null,
      attemptsOpen(task));
  };
  loadApprovals().then(() => {  // fresh on opening the task (the store follows the events)
    if (alive && focusApproval && !panel.revealed()) toast(t("approval.gone"));
  }).catch(() => {});
  const offs = [
    subscribe((s, event) => {
      if (event.startsWith("approval")) panel.render();
      if (event === "resync") talk.load();
      if (event === "health" || event === "attempt:updated" || event === "attempts:loaded") showStatus();
    }),
    onEvent(({ event, data }) => {
      if ((event === "message:created" || event === "message:updated") && data?.taskId === taskId) talk.upsert(data);
    }),
    onLanguageChange(() => { panel.render(true); talk.relabel(); }),
  ];
  return {
    approvals: panel.el,
    talk: talk.el,
    setTask(next) {
      task = next;
      showStatus();
    },
    destroy() {
      alive = false;
      for (const off of offs) off();
    },
  };
}
