// The live planning session and its outcome: the stepper of phases, the stats tiles, the
// tool log and the planner's text while it runs; what it created (or why not) when it ends.

import { h } from "../dom.js";
import { dateTime, duration, tokens } from "../format.js";
import { register, t } from "../i18n.js";
import { enumOf } from "../schema.js";
import { statTiles } from "./common.js";

register({  // key: [English, Turkish]
  "plan.running": ["Planning: {topic}", "Planlanıyor: {topic}"],
  "plan.phase.starting": ["Starting", "Başlatılıyor"],
  "plan.phase.exploring": ["Exploring the code", "Kod inceleniyor"],
  "plan.phase.writing": ["Writing the plan", "Plan yazılıyor"],
  "plan.phase.done": ["Done", "Bitti"],
  "plan.steps": ["Progress", "İlerleme"],
  "plan.stat.elapsed": ["Elapsed", "Geçen süre"],
  "plan.stat.input": ["Input tokens", "Girdi token'ları"],
  "plan.stat.output": ["Output tokens", "Çıktı token'ları"],
  "plan.stat.tools": ["Tool calls", "Araç çağrıları"],
  "plan.stat.turns": ["Turns", "Turlar"],
  "plan.cancel": ["Cancel planning", "Planlamayı iptal et"],
  "plan.cancelling": ["Cancelling…", "İptal ediliyor…"],
  "plan.confirmCancel": ["Cancel this planning session? Nothing will be created.", "Bu planlama oturumu iptal edilsin mi? Hiçbir şey oluşturulmayacak."],
  "plan.keepGoing": ["Keep planning", "Planlamaya devam et"],
  "plan.log": ["Tool log", "Araç günlüğü"],
  "plan.text": ["Planner's answer", "Planlayıcının yanıtı"],
  "plan.nothingYet": ["Nothing yet.", "Henüz bir şey yok."],
  "plan.reattached": ["Reconnected to a running session: what it logged before is not shown.", "Çalışan bir oturuma yeniden bağlanıldı: daha önce yazdıkları gösterilmiyor."],
  "plan.log.tool": ["tool", "araç"],
  "plan.log.result": ["result", "sonuç"],
  "plan.log.error": ["error", "hata"],
  "plan.log.phase": ["phase", "aşama"],
  "plan.log.network": ["network", "ağ"],
  "plan.created": ["{n} tasks created", "{n} görev oluşturuldu"],
  "plan.warnings": ["Warnings", "Uyarılar"],
  "plan.failed": ["Planning failed", "Planlama başarısız oldu"],
  "plan.cancelled": ["Planning was cancelled; nothing was created.", "Planlama iptal edildi; hiçbir şey oluşturulmadı."],
  "plan.interrupted": ["The server stopped during planning; nothing was created.", "Planlama sırasında sunucu durdu; hiçbir şey oluşturulmadı."],
  "plan.last": ["Last session", "Son oturum"],
  "plan.finishedAt": ["Finished {when}", "Bitiş: {when}"],
  "plan.result": ["Result", "Sonuç"],
  "plan.newSession": ["Plan something new", "Yeni bir şey planla"],
  "plan.meta": ["{model} model · {effort} effort · {granularity}", "{model} model · {effort} düşünme · {granularity}"],
});

const MAX_LOG = 500;
const LOG_TYPES = ["tool", "result", "error", "phase", "network"];

/** The steps shown: the server's phases, then "done". */
const phases = () => [...enumOf("PlanStatus", "phase"), "done"];

/** A session's stats from an event or status: {elapsed, tokens, toolCalls, turns}. */
export const statsOf = (d) => ({ elapsed: d.elapsed || 0, tokens: d.tokens || { input: 0, output: 0 },
  toolCalls: d.toolCalls || 0, turns: d.turns || 0 });

/** A session as the page keeps it, from plan:started, plan/status or the start answer. */
export function newSession(data) {
  return { planId: data.planId, topic: data.topic || "", model: data.model, effort: data.effort,
    granularity: data.granularity, phase: data.phase || "starting", log: [], text: "",
    stats: statsOf(data), statsAt: Date.now(), reattached: Boolean(data.reattached), cancelling: false };
}

/** The stats of a session as label/value pairs (tiles while it runs, a line when it ended). */
function statItems(s, elapsed) {
  return [["plan.stat.elapsed", duration(elapsed)], ["plan.stat.input", tokens(s.tokens?.input)],
    ["plan.stat.output", tokens(s.tokens?.output)], ["plan.stat.tools", String(s.toolCalls || 0)],
    ["plan.stat.turns", String(s.turns || 0)]];
}

/** Show the session's phase in the stepper; final: "completed" | "failed" | … once it ended. */
export function updateSteps(parts, session, final = null) {
  if (!parts.steps) return;
  const names = phases();
  const phase = final ? "done" : session ? session.phase : "starting";
  const current = names.indexOf(phase);
  parts.steps.replaceChildren(...names.map((name, i) => h("li", {
    class: `step ${i < current || final === "completed" ? "step-done" : i === current ? "step-current" : "step-todo"}`
      + (final && final !== "completed" && name === "done" ? " step-failed" : ""),
    "aria-current": i === current && !final ? "step" : null,
  }, h("span", { class: "step-dot", "aria-hidden": "true" }, String(i + 1)), t(`plan.phase.${name}`))));
}

/** Show the session's stats (the elapsed time counts on between two stats events). */
export function updateStats(parts, session) {
  if (!parts.stats || !session) return;
  const elapsed = session.stats.elapsed + (session.finished ? 0 : Date.now() - session.statsAt);
  parts.stats.replaceChildren(...statTiles(statItems(session.stats, elapsed)).children);
}

function logItem(entry) {
  const type = LOG_TYPES.includes(entry.type) ? entry.type : "result";
  return h("li", { class: `plan-log-${type}` },
    h("span", { class: "log-type" }, t(`plan.log.${type}`)),
    entry.tool ? h("strong", { class: "log-tool" }, entry.tool) : null,
    h("span", { class: "log-message" }, entry.message || ""));
}

/** Scroll el to its end after fn() when it was at its end before. */
function following(el, fn) {
  const follow = el.scrollHeight - el.scrollTop - el.clientHeight < 40;
  fn();
  if (follow) el.scrollTop = el.scrollHeight;
}

/** Add a tool log line (the last MAX_LOG are kept). */
export function appendLog(parts, session, entry) {
  session.log.push(entry);
  if (session.log.length > MAX_LOG) session.log.shift();
  if (!parts.log) return;
  following(parts.log, () => {
    parts.log.querySelector(".empty-line")?.remove();
    parts.log.append(logItem(entry));
    while (parts.log.children.length > MAX_LOG) parts.log.firstChild.remove();
  });
}

/** Add a piece of the planner's answer. */
export function appendText(parts, session, content) {
  session.text = session.text ? `${session.text}\n\n${content}` : content;
  if (!parts.text) return;
  following(parts.text, () => {
    parts.text.textContent = session.text;
    parts.text.classList.remove("muted");
  });
}

/**
 * The panel of the running session; its live parts go into parts (steps, stats, log, text,
 * cancel) for the events to update.
 */
export function sessionPanel(s, parts, { formError, onCancel }) {
  parts.steps = h("ol", { class: "plan-steps", "aria-label": t("plan.steps"), "data-testid": "plan-steps" });
  parts.stats = h("dl", { class: "ins-tiles plan-stats", "data-testid": "plan-stats" });
  parts.log = h("ol", { class: "plan-log", "aria-live": "off", "data-testid": "plan-log" });
  parts.text = h("pre", { class: "plan-text", "data-testid": "plan-text" });
  parts.cancel = h("button", { type: "button", class: "danger", disabled: s.cancelling,
    "data-testid": "plan-cancel", onclick: onCancel }, s.cancelling ? t("plan.cancelling") : t("plan.cancel"));
  const meta = t("plan.meta", { model: s.model ? t(`model.${s.model}`) : "?",
    effort: s.effort ? t(`effort.${s.effort}`) : "?",
    granularity: s.granularity ? t(`plan.gran.${s.granularity}`) : "" });
  const panel = h("section", { class: "card-panel plan-session", "data-testid": "plan-session",
    "aria-busy": "true" },
  h("div", { class: "plan-session-head" },
    h("h2", {}, t("plan.running", { topic: s.topic })), parts.cancel),
  s.model ? h("p", { class: "muted" }, meta) : null,
  formError ? h("p", { class: "error", role: "alert", "data-testid": "plan-error" }, formError) : null,
  parts.steps, parts.stats,
  s.reattached ? h("p", { class: "muted" }, t("plan.reattached")) : null,
  h("div", { class: "plan-columns" },
    h("section", {}, h("h3", {}, t("plan.log")), parts.log),
    h("section", {}, h("h3", {}, t("plan.text")), parts.text)));
  updateSteps(parts, s);
  updateStats(parts, s);
  for (const entry of s.log) parts.log.append(logItem(entry));
  if (!s.log.length) parts.log.append(h("li", { class: "muted empty-line" }, t("plan.nothingYet")));
  parts.text.textContent = s.text || t("plan.nothingYet");
  parts.text.classList.toggle("muted", !s.text);
  return panel;
}

/** The result of a session that just ended (plan:completed or plan:cancelled). */
export function endedResult(data, status, session) {
  return { planId: data.planId, status, topic: session ? session.topic : "", tasks: data.tasks || [],
    error: status === "cancelled" ? null : data.error, warnings: data.warnings || [], finishedAt: null,
    stats: session ? session.stats : null };
}

/** What a finished session did: created tasks, was cancelled, failed. */
function outcome(last, count) {
  if (last.status === "cancelled") return h("p", { class: "muted" }, t("plan.cancelled"));
  if (last.status === "interrupted") return h("p", { class: "error" }, t("plan.interrupted"));
  if (last.error) return h("div", { class: "plan-error", role: "alert" }, h("strong", {}, t("plan.failed")), h("p", {}, last.error));
  return h("p", { class: "plan-ok" }, t("plan.created", { n: count }));
}

/** The latest finished session ({planId, status, topic, tasks, error, warnings, finishedAt, stats}). */
export function resultPanel(last) {
  const live = !last.finishedAt;
  const tasks = last.tasks || [];
  const warnings = last.warnings || [];
  const st = last.stats;
  return h("section", { class: "card-panel plan-result", "data-testid": "plan-result", tabindex: "-1" },
    h("h2", {}, live ? t("plan.result") : t("plan.last")),
    h("p", {}, h("strong", {}, last.topic || ""),
      last.finishedAt ? h("span", { class: "muted" }, ` · ${t("plan.finishedAt", { when: dateTime(last.finishedAt) })}`) : null),
    outcome(last, tasks.length),
    st ? h("p", { class: "muted plan-final-stats" },
      statItems(st, st.elapsed).map(([key, value]) => `${t(key)}: ${value}`).join(" · ")) : null,
    tasks.length ? h("ul", { class: "plan-tasks" }, tasks.map((task) => h("li", {},
      h("a", { href: `#/tasks/${task.id}` }, h("span", { class: "ins-key" }, task.task_key || `#${task.id}`),
        " ", task.title),
      task.task_type ? h("span", { class: "ins-pill" }, t(`type.${task.task_type}`)) : null))) : null,
    warnings.length ? h("div", { class: "plan-warnings" }, h("h3", {}, t("plan.warnings")),
      h("ul", {}, warnings.map((w) => h("li", {}, w)))) : null);
}
