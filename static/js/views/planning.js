// Planning wizard (#/projects/:projectId/plan): a read-only agent turns a topic into backlog
// tasks. The form starts a session; plan:* events drive the live stepper, stats, tool log
// and the planner's text; plan/status reconnects to a running session after a reload.

import { api } from "../api.js";
import { clear, confirmDialog, h, toast } from "../dom.js";
import { dateTime, duration, tokens } from "../format.js";
import { onLanguageChange, register, t } from "../i18n.js";
import { onEvent, state, subscribe } from "../store.js";
import { field, projectHeader, select } from "./common.js";

register({  // key: [English, Turkish]
  "plan.intro": ["A read-only agent reads the project's code and turns a topic into backlog tasks with dependencies.", "Salt okunur bir ajan projenin kodunu okur ve bir konuyu bağımlılıklarıyla birlikte bekleyen görevlere dönüştürür."],
  "plan.topic": ["Topic", "Konu"],
  "plan.topicHelp": ["What should be planned?", "Ne planlanmalı?"],
  "plan.context": ["Context", "Bağlam"],
  "plan.contextHelp": ["Stack, constraints, anything the planner should know.", "Teknoloji yığını, kısıtlar ve planlayıcının bilmesi gereken her şey."],
  "plan.granularity": ["Granularity", "Ayrıntı düzeyi"],
  "plan.model": ["Model", "Model"],
  "plan.effort": ["Thinking effort", "Düşünme düzeyi"],
  "plan.gran.high-level": ["High-level (3–5 tasks)", "Üst düzey (3–5 görev)"],
  "plan.gran.balanced": ["Balanced (5–10 tasks)", "Dengeli (5–10 görev)"],
  "plan.gran.detailed": ["Detailed (10–20 tasks)", "Ayrıntılı (10–20 görev)"],
  "plan.start": ["Start planning", "Planlamayı başlat"],
  "plan.starting": ["Starting…", "Başlatılıyor…"],
  "plan.topicRequired": ["Enter a topic.", "Bir konu girin."],
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

const PHASES = ["starting", "exploring", "writing", "done"];
const GRANULARITIES = ["high-level", "balanced", "detailed"];
const MODELS = ["model_small", "model_medium", "model_large"];
const EFFORTS = ["low", "medium", "high"];
const MAX_LOG = 500;

/** Mount the planning view. */
export function mount(root, { projectId }) {
  const draft = { topic: "", context: "", granularity: "balanced", model: "model_medium", effort: "medium" };
  /** The running session, or null. */
  let session = null;
  /** The latest finished session ({planId, status, topic, tasks, error, warnings, finishedAt}). */
  let result = null;
  let loading = true;
  let formError = "";
  let busy = false;
  let refetchTimer = null;
  const parts = {};  // live elements of the session panel
  const ended = new Set();  // planIds seen finishing (a fast failure can end before start answers)
  let heardAt = Date.now();
  let alive = true;

  const ticker = setInterval(() => {
    if (!session) return;
    updateStats();
    if (Date.now() - heardAt > 15000) {  // quiet for long: make sure it is still running
      heardAt = Date.now();
      loadStatus();
    }
  }, 1000);

  function newSession(data) {
    heardAt = Date.now();
    return { planId: data.planId, topic: data.topic || "", model: data.model, effort: data.effort,
      granularity: data.granularity, phase: data.phase || "starting", log: [], text: "",
      stats: { elapsed: data.elapsed || 0, tokens: data.tokens || { input: 0, output: 0 },
        toolCalls: data.toolCalls || 0, turns: data.turns || 0 },
      statsAt: Date.now(), reattached: Boolean(data.reattached), cancelling: false };
  }

  async function loadStatus() {
    try {
      const status = await api.planStatus(projectId);
      if (!alive) return;
      if (status.active && session && session.planId === status.planId && parts.steps) {
        // The session shown goes on: bring phase and stats up to date, keep the log as it is.
        Object.assign(session, { phase: status.phase, stats: statsOf(status), statsAt: Date.now() });
        updateSteps();
        updateStats();
        return;
      }
      if (status.active) {
        if (!session || session.planId !== status.planId) session = newSession({ ...status, reattached: true });
      } else {
        session = null;
        result = status.last;
      }
    } catch (error) {
      if (!alive) return;
      formError = error.message;
    }
    loading = false;
    render();
  }

  const statsOf = (d) => ({ elapsed: d.elapsed || 0, tokens: d.tokens || { input: 0, output: 0 },
    toolCalls: d.toolCalls || 0, turns: d.turns || 0 });

  // --- rendering ---------------------------------------------------------------------

  function render() {
    clear(root);
    root.append(projectHeader(projectId, "/plan"));
    if (loading) {
      root.append(h("p", { class: "muted" }, t("common.loading")));
      return;
    }
    if (session) {
      root.append(sessionPanel());
    } else {
      if (result) root.append(resultPanel(result));
      root.append(form());
    }
  }

  function form() {
    const topic = h("input", { type: "text", name: "topic", required: true, maxlength: "10000",
      value: draft.topic, "data-testid": "plan-topic", oninput: (e) => { draft.topic = e.target.value; } });
    const context = h("textarea", { name: "context", rows: "4", value: draft.context,
      oninput: (e) => { draft.context = e.target.value; } });
    const pick = (name, values, label) => select(values, draft[name], label,
      { name, onchange: (e) => { draft[name] = e.target.value; } });
    const error = h("p", { class: "error", role: "alert", "data-testid": "plan-error" }, formError);
    const submit = h("button", { type: "submit", class: "primary", disabled: busy },
      busy ? t("plan.starting") : t("plan.start"));
    const el = h("form", { class: "card-panel plan-form", novalidate: true, onsubmit: async (event) => {
      event.preventDefault();
      if (!draft.topic.trim()) {
        formError = t("plan.topicRequired");
        error.textContent = formError;
        topic.focus();
        return;
      }
      busy = true;
      submit.disabled = true;
      submit.textContent = t("plan.starting");
      try {
        const answer = await api.startPlan(projectId, { ...draft, topic: draft.topic.trim() });
        if (!alive) return;
        formError = "";
        if (ended.has(answer.planId)) {
          busy = false;
          render();
          return;
        }
        if (!session || session.planId !== answer.planId) {
          session = newSession({ planId: answer.planId, topic: draft.topic.trim(), model: draft.model,
            effort: draft.effort, granularity: draft.granularity });
        }
        session.granularity = session.granularity || draft.granularity;
        busy = false;
        render();
      } catch (failure) {
        if (!alive) return;
        busy = false;
        formError = failure.message;
        if (failure.status === 409) {  // a session is already active: say so and show it
          toast(failure.message, "error");
          loadStatus();
        }  // someone else is planning: show that session
        else render();
      }
    } },
    h("h2", {}, t("plan.newSession")),
    h("p", { class: "muted" }, t("plan.intro")),
    field(t("plan.topic"), topic, t("plan.topicHelp")),
    field(t("plan.context"), context, t("plan.contextHelp")),
    h("div", { class: "plan-choices" },
      field(t("plan.granularity"), pick("granularity", GRANULARITIES, (v) => t(`plan.gran.${v}`))),
      field(t("plan.model"), pick("model", MODELS, (v) => t(`model.${v}`))),
      field(t("plan.effort"), pick("effort", EFFORTS, (v) => t(`effort.${v}`)))),
    error,
    h("div", { class: "actions" }, submit));
    return el;
  }

  function sessionPanel() {
    const s = session;
    parts.steps = h("ol", { class: "plan-steps", "aria-label": t("plan.steps"), "data-testid": "plan-steps" });
    parts.stats = h("dl", { class: "ins-tiles plan-stats", "data-testid": "plan-stats" });
    parts.log = h("ol", { class: "plan-log", "aria-live": "off", "data-testid": "plan-log" });
    parts.text = h("pre", { class: "plan-text", "data-testid": "plan-text" });
    parts.cancel = h("button", { type: "button", class: "danger", disabled: s.cancelling,
      "data-testid": "plan-cancel", onclick: cancel }, s.cancelling ? t("plan.cancelling") : t("plan.cancel"));
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
    updateSteps();
    updateStats();
    for (const entry of s.log) parts.log.append(logItem(entry));
    if (!s.log.length) parts.log.append(h("li", { class: "muted empty-line" }, t("plan.nothingYet")));
    parts.text.textContent = s.text || t("plan.nothingYet");
    parts.text.classList.toggle("muted", !s.text);
    return panel;
  }

  function updateSteps(final = null) {
    if (!parts.steps) return;
    const phase = final ? "done" : session ? session.phase : "starting";
    const current = PHASES.indexOf(phase);
    parts.steps.replaceChildren(...PHASES.map((name, i) => h("li", {
      class: `step ${i < current || final === "completed" ? "step-done" : i === current ? "step-current" : "step-todo"}`
        + (final && final !== "completed" && name === "done" ? " step-failed" : ""),
      "aria-current": i === current && !final ? "step" : null,
    }, h("span", { class: "step-dot", "aria-hidden": "true" }, String(i + 1)), t(`plan.phase.${name}`))));
  }

  function updateStats() {
    if (!parts.stats || !session) return;
    const s = session.stats;
    const elapsed = s.elapsed + (session.finished ? 0 : Date.now() - session.statsAt);
    const tile = (key, value) => h("div", { class: "ins-tile" }, h("dt", {}, t(key)), h("dd", {}, value));
    parts.stats.replaceChildren(
      tile("plan.stat.elapsed", duration(elapsed)),
      tile("plan.stat.input", tokens(s.tokens?.input)),
      tile("plan.stat.output", tokens(s.tokens?.output)),
      tile("plan.stat.tools", String(s.toolCalls || 0)),
      tile("plan.stat.turns", String(s.turns || 0)));
  }

  function logItem(entry) {
    const type = ["tool", "result", "error", "phase"].includes(entry.type) ? entry.type : "result";
    return h("li", { class: `plan-log-${type}` },
      h("span", { class: "log-type" }, t(`plan.log.${type}`)),
      entry.tool ? h("strong", { class: "log-tool" }, entry.tool) : null,
      h("span", { class: "log-message" }, entry.message || ""));
  }

  function appendLog(entry) {
    session.log.push(entry);
    if (session.log.length > MAX_LOG) session.log.shift();
    if (!parts.log) return;
    const follow = parts.log.scrollHeight - parts.log.scrollTop - parts.log.clientHeight < 40;
    parts.log.querySelector(".empty-line")?.remove();
    parts.log.append(logItem(entry));
    while (parts.log.children.length > MAX_LOG) parts.log.firstChild.remove();
    if (follow) parts.log.scrollTop = parts.log.scrollHeight;
  }

  function appendText(content) {
    session.text = session.text ? `${session.text}\n\n${content}` : content;
    if (!parts.text) return;
    const follow = parts.text.scrollHeight - parts.text.scrollTop - parts.text.clientHeight < 40;
    parts.text.textContent = session.text;
    parts.text.classList.remove("muted");
    if (follow) parts.text.scrollTop = parts.text.scrollHeight;
  }

  function resultPanel(last) {
    const live = !last.finishedAt;
    const tasks = last.tasks || [];
    const warnings = last.warnings || [];
    let outcome;
    if (last.status === "cancelled") outcome = h("p", { class: "muted" }, t("plan.cancelled"));
    else if (last.status === "interrupted") outcome = h("p", { class: "error" }, t("plan.interrupted"));
    else if (last.error) outcome = h("div", { class: "plan-error", role: "alert" },
      h("strong", {}, t("plan.failed")), h("p", {}, last.error));
    else outcome = h("p", { class: "plan-ok" }, t("plan.created", { n: tasks.length }));
    const st = last.stats;
    return h("section", { class: "card-panel plan-result", "data-testid": "plan-result", tabindex: "-1" },
      h("h2", {}, live ? t("plan.result") : t("plan.last")),
      h("p", {}, h("strong", {}, last.topic || ""),
        last.finishedAt ? h("span", { class: "muted" }, ` · ${t("plan.finishedAt", { when: dateTime(last.finishedAt) })}`) : null),
      outcome,
      st ? h("p", { class: "muted plan-final-stats" }, [
        `${t("plan.stat.elapsed")}: ${duration(st.elapsed)}`,
        `${t("plan.stat.input")}: ${tokens(st.tokens?.input)}`,
        `${t("plan.stat.output")}: ${tokens(st.tokens?.output)}`,
        `${t("plan.stat.tools")}: ${st.toolCalls || 0}`,
        `${t("plan.stat.turns")}: ${st.turns || 0}`].join(" · ")) : null,
      tasks.length ? h("ul", { class: "plan-tasks" }, tasks.map((task) => h("li", {},
        h("a", { href: `#/tasks/${task.id}` }, h("span", { class: "ins-key" }, task.task_key || `#${task.id}`),
          " ", task.title),
        task.task_type ? h("span", { class: "ins-pill" }, t(`type.${task.task_type}`)) : null))) : null,
      warnings.length ? h("div", { class: "plan-warnings" }, h("h3", {}, t("plan.warnings")),
        h("ul", {}, warnings.map((w) => h("li", {}, w)))) : null);
  }

  // --- actions and events ------------------------------------------------------------

  async function cancel() {
    const planId = session?.planId;
    const sure = await confirmDialog(t("plan.confirmCancel"),
      { ok: t("plan.cancel"), cancel: t("plan.keepGoing"), danger: true });
    if (!sure || !alive || !session || session.planId !== planId) return;
    session.cancelling = true;
    parts.cancel.disabled = true;
    parts.cancel.textContent = t("plan.cancelling");
    try {
      await api.cancelPlan(projectId);
    } catch (error) {
      if (!alive) return;
      toast(error.message, "error");
      if (session) session.cancelling = false;
      loadStatus();
    }
  }

  function finish(data, status) {
    ended.add(data.planId);
    if (session) {
      session.finished = true;
      if (data.stats) Object.assign(session.stats, statsOf(data.stats));
    }
    result = { planId: data.planId, status, topic: session ? session.topic : "", tasks: data.tasks || [],
      error: status === "cancelled" ? null : data.error, warnings: data.warnings || [], finishedAt: null,
      stats: session ? session.stats : null };
    formError = "";
    session = null;
    Object.keys(parts).forEach((k) => delete parts[k]);
    render();
    root.querySelector("[data-testid=plan-result]")?.focus({ preventScroll: true });
  }

  const stopEvents = onEvent(({ event, data }) => {
    if (!event.startsWith("plan:") || !data || data.projectId !== projectId) return;
    heardAt = Date.now();
    if (event === "plan:started") {
      if ((!session || session.planId !== data.planId) && !ended.has(data.planId)) {
        session = newSession(data);
        loading = false;
        render();
      }
      return;
    }
    if (!session || session.planId !== data.planId) {
      // An event of a session this page did not see start (e.g. loaded meanwhile): ask.
      if (event !== "plan:completed" && event !== "plan:cancelled") {
        clearTimeout(refetchTimer);
        refetchTimer = setTimeout(loadStatus, 300);
      } else if (!loading) {
        loadStatus();
      }
      return;
    }
    switch (event) {
      case "plan:phase":
        session.phase = data.phase;
        updateSteps();
        break;
      case "plan:stats":
        session.stats = statsOf(data);
        session.statsAt = Date.now();
        updateStats();
        break;
      case "plan:log":
        appendLog(data);
        break;
      case "plan:progress":
        if (typeof data.content === "string" && data.content) appendText(data.content);
        break;
      case "plan:completed":
        finish(data, data.error ? "failed" : "completed");
        break;
      case "plan:cancelled":
        finish(data, "cancelled");
        break;
      default:
        break;
    }
  });
  const stopLanguage = onLanguageChange(render);
  // Events sent before the socket (re)opened are not replayed after a reload: ask again.
  const stopConnection = subscribe((s, event) => {
    if (event === "connection" && state.connection === "open" && !loading) loadStatus();
  });
  const stopProject = onEvent(({ event, data }) => {
    if (event === "project:updated" && data.id === projectId) render();
    if (event === "resync") loadStatus();
  });

  render();
  loadStatus();

  return () => {
    alive = false;
    clearInterval(ticker);
    clearTimeout(refetchTimer);
    stopEvents();
    stopLanguage();
    stopConnection();
    stopProject();
  };
}
