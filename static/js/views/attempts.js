// The attempts of a task run by several agents at once (best of N, design §18), side by side
// on its page: a column per attempt with its agent, model, status, cost, time, tokens, diff
// size, the project's check, the verifier's verdict and summary, and its error; its diff and
// its log (the fetched entries of ?attempt=n, then the live task:log entries of its runs) each
// open in a dialog; "Pick" on an ended attempt while none is picked. Kept current by the
// attempt:updated events (and task:usage, for the cost of a running attempt); each has its
// preview (preview.js) where the project has one. The columns stack on a phone.

import { confirmDialog, h, openDialog, toast } from "../dom.js";
import { duration, onLanguageChange, register, t, tokens } from "../i18n.js";
import { api, loadAttempts, onEvent, projectStopCheck, state, subscribe } from "../store.js";
import { agentName, costText } from "./common.js";
import { LOG_PAGE, createLogView } from "./log_view.js";
import { attemptPreviews } from "./preview.js";
import { diffClass, put } from "./task_tabs.js";

register({  // key: [English, Turkish]
  "attempts.title": ["Attempts", "Denemeler"],
  "attempts.working": ["{n} agents work on this task at once, each on a branch of its own.", "{n} ajan bu görev üzerinde aynı anda, her biri kendi dalında çalışıyor."],
  "attempts.compare": ["Every attempt ended: compare them and pick one. Its branch becomes the task's.", "Bütün denemeler bitti: karşılaştırıp birini seçin. Onun dalı görevin dalı olur."],
  "attempts.pickedNote": ["Attempt {n} was picked: its branch is the task's.", "{n}. deneme seçildi: onun dalı görevin dalı."],
  "attempts.column": ["Attempt {n}: {agent}, {model}", "{n}. deneme: {agent}, {model}"],
  "attempts.status.queued": ["Queued", "Sırada"],
  "attempts.status.running": ["Running", "Çalışıyor"],
  "attempts.status.done": ["Done", "Bitti"],
  "attempts.status.failed": ["Failed", "Başarısız"],
  "attempts.status.stopped": ["Stopped", "Durduruldu"],
  "attempts.picked": ["Picked", "Seçildi"],
  "attempts.cost": ["Cost", "Maliyet"],
  "attempts.time": ["Time", "Süre"],
  "attempts.tokens": ["Tokens", "Token'lar"],
  "attempts.changes": ["Changes", "Değişiklikler"],
  "attempts.changesValue": ["{files} files, +{additions} −{deletions}", "{files} dosya, +{additions} −{deletions}"],
  "attempts.changesValue1": ["1 file, +{additions} −{deletions}", "1 dosya, +{additions} −{deletions}"],
  "attempts.check": ["Check", "Denetim"],
  "attempts.passed": ["✓ passed", "✓ geçti"],
  "attempts.failedCheck": ["✗ failed (exit {code})", "✗ başarısız (çıkış {code})"],
  "attempts.notRun": ["✗ could not run", "✗ çalıştırılamadı"],
  "attempts.output": ["Output of {command}", "{command} çıktısı"],
  "attempts.verdict": ["Verdict", "Karar"],
  "attempts.verdict.approve": ["✓ approve", "✓ onay"],
  "attempts.verdict.reject": ["✗ reject", "✗ ret"],
  "attempts.branch": ["Branch", "Dal"],
  "attempts.effort": ["{effort} effort", "{effort} efor"],
  "attempts.none": ["—", "—"],
  "attempts.noCheck": ["— the project has no check command:", "— projenin denetim komutu yok:"],
  "attempts.setCheck": ["set one in its settings", "ayarlarından belirleyin"],
  "attempts.diff": ["Diff", "Fark"],
  "attempts.log": ["Log", "Günlük"],
  "attempts.pick": ["Pick", "Seç"],
  "attempts.diffLabel": ["Show the diff of attempt {n}", "{n}. denemenin farkını göster"],
  "attempts.logLabel": ["Show the log of attempt {n}", "{n}. denemenin günlüğünü göster"],
  "attempts.pickLabel": ["Pick attempt {n}", "{n}. denemeyi seç"],
  "attempts.diffTitle": ["Diff of attempt {n} ({agent}, {model})", "{n}. denemenin farkı ({agent}, {model})"],
  "attempts.logTitle": ["Log of attempt {n} ({agent}, {model})", "{n}. denemenin günlüğü ({agent}, {model})"],
  "attempts.pickConfirm": ["Pick attempt {n} ({agent}, {model})? Its branch becomes the task's; the other attempts stop and their worktrees are removed.", "{n}. deneme ({agent}, {model}) seçilsin mi? Onun dalı görevin dalı olur; diğer denemeler durur ve çalışma ağaçları silinir."],
  "attempts.pickedToast": ["Attempt {n} picked", "{n}. deneme seçildi"],
  "attempts.moreLines": ["Show {n} more lines", "{n} satır daha göster"],
  "attempts.noDiff": ["No changes.", "Değişiklik yok."],
});

/** Diff lines rendered at once; more on request. */
const DIFF_CHUNK = 2000;
/** The states of an attempt that has not ended (it cannot be picked yet). */
const ACTIVE = new Set(["queued", "running"]);

const label = (a) => ({ n: a.n, agent: agentName(a.agent), model: t(`model.${a.model}`) });

/** "2 files, +10 −3" of an attempt's diff, or null when it has none yet. */
function changesText(diff) {
  if (!diff) return null;
  return t(diff.files === 1 ? "attempts.changesValue1" : "attempts.changesValue", diff);
}

/** The check's line (passed, or failed and its exit code) and its output on demand; where
 * the project has no check command, where to set one. */
function checkCell(a, open, projectId) {
  const check = a.check;
  if (!check && projectStopCheck(projectId) === "") {
    return h("span", { class: "muted", "data-testid": "attempt-check" }, t("attempts.noCheck"), " ",
      h("a", { href: `#/projects/${projectId}/settings` }, t("attempts.setCheck")));
  }
  if (!check) return t("attempts.none");
  const verdict = check.passed ? t("attempts.passed") : check.exitCode == null ? t("attempts.notRun")
    : t("attempts.failedCheck", { code: check.exitCode });
  const output = check.output ? h("details", { class: "attempt-output", open: open.has(`check-${a.n}`),
    "data-open": `check-${a.n}` },
  h("summary", {}, t("attempts.output", { command: check.command })),
  h("pre", {}, check.output)) : null;
  return [h("span", { class: check.passed ? "attempt-ok" : "attempt-bad", "data-testid": "attempt-check" }, verdict), output];
}

/** The diff of one attempt in a dialog, DIFF_CHUNK lines at a time. */
function openDiff(taskId, a) {
  const body = h("div", { class: "attempt-diff" }, h("p", { class: "muted" }, t("common.loading")));
  openDialog(t("attempts.diffTitle", label(a)), body, { wide: true });
  api.attemptDiff(taskId, a.n).then(({ diff, branch, stats }) => {
    const lines = diff ? diff.replace(/\n$/, "").split("\n") : [];
    const chunk = (from) => lines.slice(from, from + DIFF_CHUNK).map((line) =>
      h("span", { class: `d-line ${diffClass(line)}` }, line || " "));
    const pre = h("pre", { class: "diff", tabindex: "0" }, chunk(0));
    let shown = DIFF_CHUNK;
    const more = h("button", { type: "button", class: "small", hidden: lines.length <= shown });
    const moreLabel = () => { more.textContent = t("attempts.moreLines", { n: Math.min(DIFF_CHUNK, lines.length - shown) }); };
    moreLabel();
    more.addEventListener("click", () => {
      pre.append(...chunk(shown));
      shown += DIFF_CHUNK;
      more.hidden = lines.length <= shown;
      moreLabel();
    });
    put(body, h("p", { class: "diff-stats" }, h("strong", {}, t(stats.files === 1 ? "detail.diffStats1" : "detail.diffStats", stats)),
      branch ? ` ${t("detail.onBranch", { branch })}` : ""),
    lines.length ? [pre, more] : h("p", { class: "muted" }, t("attempts.noDiff")));
  }).catch((error) => put(body, h("p", { class: "error", role: "alert" }, error.message)));
}

/**
 * The log of one attempt in a dialog: the entries of its runs (GET …/logs?attempt=n), then
 * the live task:log entries of those runs (and of the runs it starts while the dialog is open).
 */
function openLog(taskId, a) {
  const runs = new Set(a.runId ? [a.runId] : []);
  const log = createLogView({ older: (before, limit) => api.attemptLogs(taskId, a.n, limit, before) });
  const error = h("p", { class: "error", role: "alert", hidden: true });
  const { dialog } = openDialog(t("attempts.logTitle", label(a)), h("div", { class: "attempt-log" }, error, log.el), { wide: true });
  const read = (show) => api.attemptLogs(taskId, a.n, LOG_PAGE).then((list) => {
    for (const entry of list) if (entry.runId) runs.add(entry.runId);
    show(list);
  });
  const off = onEvent(({ event, data }) => {
    if (event === "resync") read((list) => log.catchUp(list, LOG_PAGE)).catch(() => {});  // what a reconnect missed
    if (!data || data.taskId !== taskId) return;
    if (event === "attempt:updated" && data.n === a.n && data.runId) runs.add(data.runId);
    else if (event === "task:log" && Array.isArray(data.entries)) {
      const mine = data.entries.filter((entry) => runs.has(entry.runId));
      if (mine.length) log.append(mine);
    }
  });
  read((list) => log.setEntries(list, list.length < LOG_PAGE)).catch((failure) => {
    error.textContent = failure.message;
    error.hidden = false;
  });
  dialog.addEventListener("close", () => { off(); log.destroy(); });
}

/**
 * The attempts section of a task page.
 * @param {number} taskId
 * @returns {{el: HTMLElement, setTask: (task: Object) => void, destroy: () => void}}
 */
export function createAttempts(taskId) {
  const el = h("section", { class: "attempts-panel", "aria-labelledby": "attempts-title", hidden: true,
    "data-testid": "attempts" });
  let task = null;
  let loadedCount;  // how many attempts the last read found (undefined: none yet)
  let loading = null;
  let frame = 0;
  let picking = false;
  const live = new Map();  // run id -> its latest task:usage
  const open = new Set();  // the check outputs shown ("check-<n>")

  function load() {
    if (loading) return;  // loadAttempts reads again for what is heard meanwhile
    loading = loadAttempts(taskId).then((list) => { loadedCount = list.length; })
      .catch((error) => toast(error.message, "error"))
      .finally(() => { loading = null; schedule(); });
  }

  const rows = () => state.attempts.get(taskId) || new Map();

  function schedule() {
    if (!frame) frame = requestAnimationFrame(() => { frame = 0; render(); });
  }
  const previews = attemptPreviews(taskId, schedule);  // each attempt's running app

  async function pick(a) {
    const ok = await confirmDialog(t("attempts.pickConfirm", label(a)),
      { ok: t("attempts.pick"), cancel: t("common.cancel") });
    if (!ok) return;
    picking = true;
    schedule();
    try {
      const list = await api.pickAttempt(taskId, a.n);
      state.attempts.set(taskId, new Map(list.map((x) => [x.n, x])));
      toast(t("attempts.pickedToast", { n: a.n }));
    } catch (error) {
      toast(error.message, "error");
    } finally {
      picking = false;
      schedule();
    }
  }

  function column(a, canPick) {
    const running = a.status === "running";
    const cost = a.costUsd + (running && live.has(a.runId) ? live.get(a.runId).cost : 0);
    const field = (key, value, attrs = {}) => [h("dt", {}, t(key)), h("dd", attrs, value ?? t("attempts.none"))];
    const button = (key, onclick, attrs = {}) => h("button", { type: "button", class: "small", onclick,
      "data-key": `${key}-${a.n}`, ...attrs }, t(`attempts.${key}`));
    const titleId = `attempt-title-${a.n}`;
    return h("article", { class: `attempt-col${a.picked ? " picked" : ""}`, "aria-labelledby": titleId,
      "data-testid": `attempt-${a.n}`, "data-status": a.status },
    h("header", { class: "attempt-head" },
      h("h3", { id: titleId }, h("span", { class: "attempt-n" }, `#${a.n}`), " ", agentName(a.agent)),
      h("span", { class: "bchip model" }, t(`model.${a.model}`)),
      h("span", { class: "bchip" }, t("attempts.effort", { effort: t(`effort.${a.effort}`) })),
      h("span", { class: `attempt-status st-${a.status}`, "data-testid": "attempt-status" },
        running ? h("span", { class: "spinner", "aria-hidden": "true" }) : null, t(`attempts.status.${a.status}`)),
      a.picked ? h("span", { class: "attempt-picked", "data-testid": "attempt-picked" }, `★ ${t("attempts.picked")}`) : null),
    h("dl", { class: "field-list attempt-fields" },
      field("attempts.cost", costText(cost, false), { "data-testid": "attempt-cost" }),
      field("attempts.time", a.durationMs > 0 ? duration(a.durationMs) : null),
      field("attempts.tokens", tokens(a.tokens)),
      field("attempts.changes", changesText(a.diff), { "data-testid": "attempt-changes" }),
      field("attempts.check", checkCell(a, open, task.project_id)),
      field("attempts.verdict", a.verdict ? t(`attempts.verdict.${a.verdict}`) : null, { "data-testid": "attempt-verdict" }),
      a.branch ? field("attempts.branch", h("code", { class: "wrap" }, a.branch)) : null),
    a.summary ? h("p", { class: "prose attempt-summary", "data-testid": "attempt-summary" }, a.summary) : null,
    a.error ? h("p", { class: "attempt-error", role: "alert", "data-testid": "attempt-error" }, a.error) : null,
    h("div", { class: "attempt-actions" },
      button("diff", () => openDiff(taskId, a), { disabled: !a.branch, "aria-label": t("attempts.diffLabel", { n: a.n }) }),
      button("log", () => openLog(taskId, a), { "aria-label": t("attempts.logLabel", { n: a.n }) }),
      canPick && !ACTIVE.has(a.status) && a.branch ? button("pick", () => pick(a), {
        class: "small primary", disabled: picking, "aria-label": t("attempts.pickLabel", { n: a.n }) }) : null),
    a.branch && (task.status === "in_progress" || task.status === "testing") ? previews.controls(task, a.n) : null);
  }

  function note(list) {
    const picked = list.find((a) => a.picked);
    if (picked) return t("attempts.pickedNote", { n: picked.n });
    if (list.some((a) => ACTIVE.has(a.status))) return t("attempts.working", { n: list.length });
    return t("attempts.compare");
  }

  function render() {
    if (!task || task.attempts == null) {
      el.hidden = true;
      return;
    }
    el.hidden = false;
    const focusKey = el.contains(document.activeElement) ? document.activeElement.dataset.key : null;
    const list = [...rows().values()].sort((a, b) => a.n - b.n);
    const canPick = !list.some((a) => a.picked);
    put(el, h("h2", { id: "attempts-title" }, t("attempts.title"), " ", h("span", { class: "muted" }, `(${list.length || task.attempts})`)),
      list.length ? [h("p", { class: "muted attempts-note", "data-testid": "attempts-note" }, note(list)),
        h("div", { class: "attempt-grid" }, list.map((a) => column(a, canPick)))]
        : h("p", { class: "muted" }, t("common.loading")));
    if (focusKey) el.querySelector(`[data-key="${CSS.escape(focusKey)}"]`)?.focus();
  }

  el.addEventListener("toggle", (event) => {
    const key = event.target.dataset?.open;
    if (!key) return;
    if (event.target.open) open.add(key);
    else open.delete(key);
  }, true);

  // Read beside the task itself when it may have attempts (not known yet, or known to have).
  const known = state.tasks.get(taskId);
  if (!known || known.attempts != null) load();

  const offs = [
    onEvent(({ event, data }) => {
      if (!data || data.taskId !== taskId) return;
      if (event === "attempt:updated") {
        schedule();  // the store has it
      } else if (event === "task:usage" && data.runId) {
        live.set(data.runId, data);
        if ([...rows().values()].some((a) => a.runId === data.runId && a.status === "running")) schedule();
      }
    }),
    subscribe((s, event) => {
      if (event === "resync" && task && task.attempts != null) load();
    }),
    onLanguageChange(schedule),
  ];

  return {
    el,
    /** The task as it is now: a new set of attempts (another count) is read again. */
    setTask(next) {
      task = next;
      if (task.attempts != null && task.attempts !== loadedCount) load();
      schedule();
    },
    destroy() {
      for (const off of offs) off();
      previews.destroy();
      if (frame) cancelAnimationFrame(frame);
    },
  };
}
