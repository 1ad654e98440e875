// One task (#/tasks/:taskId): its fields, usage, actions and tabs — the live log,
// the raw event replay, revisions, diff, commits, attachments and dependencies.

import { api, ApiError } from "../api.js";
import { append, confirmDialog, h, openDialog, toast } from "../dom.js";
import * as format from "../format.js";
import { onLanguageChange, register, t } from "../i18n.js";
import { go } from "../router.js";
import { followLogs } from "../socket.js";
import { loadTasks, onEvent, refusedLocally, state, subscribe, tasksOf } from "../store.js";
import { projectName, select } from "./common.js";
import { createLogView } from "./log_view.js";
import { openTaskDialog } from "./task_dialog.js";

register({  // key: [English, Turkish]
  "detail.notFound": ["This task does not exist (any more).", "Bu görev yok (artık)."],
  "detail.deleted": ["This task was deleted.", "Bu görev silindi."],
  "detail.backToBoard": ["Back to the board", "Panoya dön"],
  "detail.running": ["running", "çalışıyor"],
  "detail.move": ["Move to", "Taşı"],
  "detail.approve": ["Approve", "Onayla"],
  "detail.requestChanges": ["Request changes", "Değişiklik iste"],
  "detail.feedback": ["What should the agent change?", "Ajan neyi değiştirmeli?"],
  "detail.send": ["Send", "Gönder"],
  "detail.stop": ["Stop", "Durdur"],
  "detail.restart": ["Restart", "Yeniden başlat"],
  "detail.addSubtask": ["Add sub-task", "Alt görev ekle"],
  "detail.stopped": ["{key} stopped", "{key} durduruldu"],
  "detail.restarted": ["{key} restarted", "{key} yeniden başlatıldı"],
  "detail.changesSent": ["Feedback sent; the agent resumes.", "Geri bildirim gönderildi; ajan devam ediyor."],
  "detail.description": ["Description", "Açıklama"],
  "detail.criteria": ["Acceptance criteria", "Kabul ölçütleri"],
  "detail.noDescription": ["No description.", "Açıklama yok."],
  "detail.lastError": ["The latest run failed", "Son çalıştırma başarısız oldu"],
  "detail.denials1": ["1 tool call was refused in the latest run: see the log, and allow the tool or change the project's permission mode.", "Son çalıştırmada 1 araç çağrısı reddedildi: günlüğe bakın ve araca izin verin ya da projenin izin kipini değiştirin."],
  "detail.denials": ["{n} tool calls were refused in the latest run: see the log, and allow the tools or change the project's permission mode.", "Son çalıştırmada {n} araç çağrısı reddedildi: günlüğe bakın ve araçlara izin verin ya da projenin izin kipini değiştirin."],
  "detail.awaiting": ["Waiting for its sub-tasks to finish.", "Alt görevlerinin bitmesini bekliyor."],
  "detail.status": ["Status", "Durum"],
  "detail.type": ["Type", "Tür"],
  "detail.priority": ["Priority", "Öncelik"],
  "detail.model": ["Model", "Model"],
  "detail.effort": ["Thinking effort", "Düşünme eforu"],
  "detail.tags": ["Tags", "Etiketler"],
  "detail.parent": ["Parent task", "Üst görev"],
  "detail.subtasks": ["Sub-tasks", "Alt görevler"],
  "detail.created": ["Created", "Oluşturuldu"],
  "detail.started": ["Started", "Başladı"],
  "detail.completed": ["Completed", "Tamamlandı"],
  "detail.workTime": ["Time worked", "Çalışma süresi"],
  "detail.retries": ["Retries", "Yeniden denemeler"],
  "detail.revisionCount": ["Revisions", "Revizyonlar"],
  "detail.queue": ["Queue position", "Kuyruk sırası"],
  "detail.tokens": ["Tokens (in / out)", "Token (giriş / çıkış)"],
  "detail.cache": ["Cache (read / written)", "Önbellek (okunan / yazılan)"],
  "detail.cost": ["Cost", "Maliyet"],
  "detail.liveCost": ["{cost} (live)", "{cost} (canlı)"],
  "detail.branch": ["Branch", "Dal"],
  "detail.pr": ["Pull request", "Çekme isteği"],
  "detail.session": ["Session", "Oturum"],
  "detail.denialsField": ["Refused tool calls", "Reddedilen araç çağrıları"],
  "detail.tab.log": ["Log", "Günlük"],
  "detail.tab.events": ["Events", "Olaylar"],
  "detail.tab.revisions": ["Revisions", "Revizyonlar"],
  "detail.tab.diff": ["Diff", "Fark"],
  "detail.tab.commits": ["Commits", "Commit'ler"],
  "detail.tab.attachments": ["Attachments", "Ekler"],
  "detail.tab.deps": ["Dependencies", "Bağımlılıklar"],
  "detail.refresh": ["Refresh", "Yenile"],
  "detail.limit": ["Newest", "En yeni"],
  "detail.noEvents": ["No agent events yet.", "Henüz ajan olayı yok."],
  "detail.run": ["run {n}", "{n}. çalıştırma"],
  "detail.noRevisions": ["No change requests yet.", "Henüz değişiklik isteği yok."],
  "detail.diffStats": ["{files} files changed, +{insertions} −{deletions}", "{files} dosya değişti, +{insertions} −{deletions}"],
  "detail.diffStats1": ["1 file changed, +{insertions} −{deletions}", "1 dosya değişti, +{insertions} −{deletions}"],
  "detail.onBranch": ["on {branch}", "{branch} dalında"],
  "detail.noDiff": ["No changes.", "Değişiklik yok."],
  "detail.moreLines": ["Show {n} more lines", "{n} satır daha göster"],
  "detail.noCommits": ["No commits yet.", "Henüz commit yok."],
  "detail.noAttachments": ["No attachments.", "Ek yok."],
  "detail.upload": ["Attach files", "Dosya ekle"],
  "detail.uploaded": ["{name} attached", "{name} eklendi"],
  "detail.parents": ["Waits for", "Bekledikleri"],
  "detail.children": ["Blocks", "Engelledikleri"],
  "detail.noDeps": ["None", "Yok"],
  "detail.addDep": ["Add a task this one waits for", "Bu görevin bekleyeceği bir görev ekle"],
  "detail.dependsOn": ["Task", "Görev"],
  "detail.condition": ["Condition", "Koşul"],
  "detail.add": ["Add", "Ekle"],
  "detail.remove": ["Remove", "Kaldır"],
  "detail.removeDep": ["Remove the dependency on {key}", "{key} bağımlılığını kaldır"],
  "cond.always": ["when it finishes", "bittiğinde"],
  "cond.on_success": ["when it succeeds", "başarılı olduğunda"],
  "cond.on_failure": ["when it fails", "başarısız olduğunda"],
});

const STATUSES = ["backlog", "in_progress", "testing", "done", "failed"];
const CONDITIONS = ["always", "on_success", "on_failure"];
const TABS = ["log", "events", "revisions", "diff", "commits", "attachments", "deps"];
/** Tabs whose data comes from desktop (local-only) commands. */
const LOCAL_TABS = new Set(["events", "diff", "deps"]);
/** Diff lines rendered at once; more on request. */
const DIFF_CHUNK = 2000;

/** Replace el's children (nested arrays allowed; null and false skipped). */
const put = (el, ...children) => { el.replaceChildren(); append(el, children); };
const isLocalOnly = (error) => error instanceof ApiError && error.code === "local_only";
const localOnlyNote = () => h("p", { class: "detail-local-only muted" }, t("common.localOnly"));

/** @param {HTMLElement} root  @param {{taskId: number}} params */
export function mount(root, { taskId }) {
  let task = null;
  let detail = null;
  let gone = false;
  let live = null;           // the latest task:usage of the current run
  let active = "log";
  let loaded = new Set();    // tabs whose panel holds data
  let frame = 0;
  let log = createLogView();
  const panels = new Map(TABS.map((name) => [name, h("div", { class: "tab-panel", role: "tabpanel",
    id: `panel-${name}`, "aria-labelledby": `tab-${name}`, tabindex: "0" })]));
  const top = h("div", { class: "detail-top" });
  const side = h("aside", { class: "detail-side" });
  const texts = h("div", { class: "detail-texts" });
  const tabBar = h("div", { class: "detail-tabs", role: "tablist" });
  root.replaceChildren(h("div", { class: "task-detail" }, top,
    h("div", { class: "detail-layout" }, texts, side,
      h("div", { class: "detail-tabarea" }, tabBar, ...panels.values()))));
  top.append(h("p", { class: "muted" }, t("common.loading")));

  // --- desktop commands ------------------------------------------------------------

  /** A desktop command; a local_only refusal is remembered and hides those features. */
  async function desktop(command, body) {
    try {
      return await api.desktop(command, body);
    } catch (error) {
      if (refusedLocally(error)) renderTop();
      throw error;
    }
  }

  /** Run an action; errors become toasts (a local_only refusal shows the note). */
  async function act(fn, done) {
    try {
      const result = await fn();
      if (result && result.id === taskId && result.task_key) setTask(result);
      if (done) toast(done);
    } catch (error) {
      toast(isLocalOnly(error) ? t("common.localOnly") : error.message, "error");
      schedule();  // e.g. the move select shows the real status again
    }
  }

  // --- the header, actions and fields ------------------------------------------------

  function setTask(next) {
    const revisions = task?.revision_count;
    task = { ...task, ...next };
    if (!task.is_running) live = null;
    if (revisions !== undefined && revisions !== task.revision_count && loaded.has("revisions")) {
      loaded.delete("revisions");
      if (active === "revisions") show("revisions");
    }
    schedule();
  }

  function schedule() {
    if (!frame) frame = requestAnimationFrame(() => { frame = 0; renderTop(); });
  }

  /** Only the field list (live usage arrives every second while the agent runs). */
  function renderSide() {
    if (!gone && task) side.replaceChildren(fields());
  }

  function badge(status) {
    return h("span", { class: `status-badge st-${status}` }, t(`status.${status}`));
  }

  const taskLink = (id) => {
    const other = state.tasks.get(id);
    return h("a", { href: `#/tasks/${id}` }, other ? `${other.task_key} ${other.title}` : `#${id}`);
  };

  function actions() {
    const local = !state.localOnlyRefused;
    const moveSelect = select(STATUSES, task.status, (s) => t(`status.${s}`),
      { "aria-label": t("detail.move"), "data-key": "move" });
    moveSelect.addEventListener("change", () => act(() => api.moveTask(taskId, moveSelect.value)));
    const button = (label, onclick, cls = "") => h("button", { type: "button", class: cls, onclick, "data-key": label }, label);
    return h("div", { class: "detail-actions" },
      button(t("common.edit"), async () => {
        const saved = await openTaskDialog({ projectId: task.project_id, task });
        if (saved) setTask(saved);
      }),
      h("label", { class: "inline-field" }, t("detail.move"), moveSelect),
      task.status === "testing" ? button(t("detail.approve"), () => act(() => api.moveTask(taskId, "done")), "primary") : null,
      local && task.status !== "backlog" ? button(t("detail.requestChanges"), requestChanges) : null,
      local && task.status === "in_progress" ? button(t("detail.stop"), () => act(() =>
        desktop("stop_task", { id: taskId }), t("detail.stopped", { key: task.task_key }))) : null,
      local ? button(t("detail.restart"), () => act(() => desktop("restart_task", { id: taskId }),
        t("detail.restarted", { key: task.task_key }))) : null,
      button(t("detail.addSubtask"), () => openTaskDialog({ projectId: task.project_id, parentTaskId: taskId })),
      button(t("common.delete"), remove, "danger"),
      state.localOnlyRefused ? h("span", { class: "muted detail-local-only" }, t("common.localOnly")) : null);
  }

  function requestChanges() {
    const text = h("textarea", { rows: "6", required: true });
    const error = h("p", { class: "error", role: "alert", hidden: true });
    const send = h("button", { type: "submit", class: "primary" }, t("detail.send"));
    const cancel = h("button", { type: "button" }, t("common.cancel"));
    const form = h("form", { novalidate: true }, h("div", { class: "field" },
      h("label", { for: "feedback-text" }, t("detail.feedback")), text), error,
    h("div", { class: "actions" }, cancel, send));
    text.id = "feedback-text";
    const { close } = openDialog(t("detail.requestChanges"), form);
    cancel.addEventListener("click", close);
    text.focus();
    form.addEventListener("submit", async (event) => {
      event.preventDefault();
      if (!text.value.trim()) { text.focus(); return; }
      send.disabled = true;
      try {
        setTask(await desktop("request_changes", { id: taskId, feedback: text.value }));
        toast(t("detail.changesSent"));
        close();
      } catch (err) {
        error.textContent = isLocalOnly(err) ? t("common.localOnly") : err.message;
        error.hidden = false;
        send.disabled = false;
      }
    });
  }

  async function remove() {
    if (state.settings?.confirmBeforeDelete !== false) {
      const ok = await confirmDialog(t("common.confirmDelete", { name: `${task.task_key} ${task.title}` }),
        { ok: t("common.delete"), cancel: t("common.cancel"), danger: true });
      if (!ok) return;
    }
    try {
      await api.deleteTask(taskId);
      go(`/projects/${task.project_id}`);
    } catch (error) {
      toast(error.message, "error");
    }
  }

  function fields() {
    const rows = [];
    const add = (label, ...value) => { if (value.some((v) => v !== null && v !== "" && v !== undefined)) rows.push(h("dt", {}, label), h("dd", {}, value)); };
    const tags = format.tags(task.tags);
    const children = tasksOf(task.project_id).filter((other) => other.parent_task_id === taskId);
    const cost = task.is_running && live ? t("detail.liveCost", { cost: format.cost(task.total_cost + (live.cost || 0)) })
      : format.cost(task.total_cost);
    const inTokens = task.input_tokens + (live && task.is_running ? live.inputTokens || 0 : 0);
    const outTokens = task.output_tokens + (live && task.is_running ? live.outputTokens || 0 : 0);
    add(t("detail.status"), badge(task.status));
    add(t("detail.type"), t(`type.${task.task_type}`));
    add(t("detail.priority"), t(`priority.${task.priority}`));
    add(t("detail.model"), t(`model.${task.model}`));
    add(t("detail.effort"), t(`effort.${task.thinking_effort}`));
    if (tags.length) add(t("detail.tags"), tags.map((tag) => h("span", { class: "bchip tag" }, `#${tag}`)));
    if (task.parent_task_id) add(t("detail.parent"), taskLink(task.parent_task_id));
    if (children.length) {
      add(t("detail.subtasks"), h("ul", { class: "plain-list" }, children.map((c) =>
        h("li", {}, taskLink(c.id), " ", badge(c.status)))));
    }
    add(t("detail.created"), format.dateTime(task.created_at));
    add(t("detail.started"), format.dateTime(task.started_at));
    add(t("detail.completed"), format.dateTime(task.completed_at));
    if (task.work_duration_ms) add(t("detail.workTime"), format.duration(task.work_duration_ms));
    if (task.retry_count) add(t("detail.retries"), String(task.retry_count));
    if (task.revision_count) add(t("detail.revisionCount"), String(task.revision_count));
    if (task.queue_position !== null && task.queue_position !== undefined) add(t("detail.queue"), String(task.queue_position));
    add(t("detail.tokens"), `${format.tokens(inTokens)} / ${format.tokens(outTokens)}`);
    if (task.cache_read_tokens || task.cache_creation_tokens) {
      add(t("detail.cache"), `${format.tokens(task.cache_read_tokens)} / ${format.tokens(task.cache_creation_tokens)}`);
    }
    add(t("detail.cost"), h("span", { "data-testid": "task-cost" }, cost));
    if (task.branch_name) add(t("detail.branch"), h("code", {}, task.branch_name));
    if (task.pr_url) add(t("detail.pr"), h("a", { href: task.pr_url, target: "_blank", rel: "noopener noreferrer" }, task.pr_url));
    if (task.session_id) add(t("detail.session"), h("code", { class: "wrap" }, task.session_id));
    if (task.permission_denials) add(t("detail.denialsField"), h("strong", { class: "error" }, String(task.permission_denials)));
    return h("dl", { class: "field-list" }, rows);
  }

  function renderTop() {
    if (gone || !task) return;
    const project = task.project_id;
    const focusKey = top.contains(document.activeElement) ? document.activeElement.dataset.key : null;
    put(top,
      h("nav", { class: "crumbs" }, h("a", { href: `#/projects/${project}` }, projectName(project)), " › ", task.task_key),
      h("header", { class: "detail-head" },
        h("h1", {}, h("span", { class: "card-key" }, task.task_key), " ", task.title),
        badge(task.status),
        task.is_running ? h("span", { class: "run-mark" }, h("span", { class: "spinner", "aria-hidden": "true" }), t("detail.running")) : null),
      task.last_error ? h("div", { class: "alert alert-error", role: "alert" },
        h("strong", {}, t("detail.lastError")), h("p", {}, task.last_error)) : null,
      task.permission_denials > 0 ? h("div", { class: "alert alert-warn" }, `⚠ ${t(task.permission_denials === 1 ? "detail.denials1" : "detail.denials", { n: task.permission_denials })}`) : null,
      task.awaiting_subtasks ? h("div", { class: "alert alert-info" }, `◷ ${t("detail.awaiting")}`) : null,
      actions());
    put(texts,
      h("section", { class: "detail-text" }, h("h2", {}, t("detail.description")),
        task.description ? h("div", { class: "prose" }, task.description) : h("p", { class: "muted" }, t("detail.noDescription"))),
      task.acceptance_criteria ? h("section", { class: "detail-text" }, h("h2", {}, t("detail.criteria")),
        h("div", { class: "prose" }, task.acceptance_criteria)) : null);
    put(side, fields());
    renderTabBar();
    if (focusKey) [...top.querySelectorAll("[data-key]")].find((el) => el.dataset.key === focusKey)?.focus();
  }

  // --- tabs ------------------------------------------------------------------------------

  function renderTabBar() {
    const focusedTab = tabBar.contains(document.activeElement) ? document.activeElement.id : null;
    tabBar.replaceChildren(...TABS.map((name) => h("button", {
      type: "button", role: "tab", id: `tab-${name}`, "aria-controls": `panel-${name}`,
      "aria-selected": String(name === active), tabindex: name === active ? "0" : "-1",
      class: `tab${name === active ? " active" : ""}`, onclick: () => show(name),
    }, t(`detail.tab.${name}`))));
    if (focusedTab) document.getElementById(focusedTab)?.focus();
  }

  tabBar.addEventListener("keydown", (event) => {
    const step = { ArrowRight: 1, ArrowLeft: -1 }[event.key];
    if (!step) return;
    event.preventDefault();
    const next = TABS[(TABS.indexOf(active) + step + TABS.length) % TABS.length];
    show(next);
    document.getElementById(`tab-${next}`)?.focus();
  });

  /** Show a tab, loading its data the first time (or again with reload). */
  function show(name, reload = false) {
    active = name;
    for (const [key, panel] of panels) panel.hidden = key !== name;
    renderTabBar();
    if (loaded.has(name) && !reload) return;
    loaded.add(name);
    const panel = panels.get(name);
    if (LOCAL_TABS.has(name) && state.localOnlyRefused) {
      put(panel, localOnlyNote());
      return;
    }
    ({ log: showLog, events: showEvents, revisions: showRevisions, diff: showDiff, commits: showCommits,
      attachments: showAttachments, deps: showDeps })[name](panel);
  }

  /** Load into a panel: loading note, then fill(data); a local_only refusal shows the note. */
  async function fill(panel, load, render) {
    put(panel, h("p", { class: "muted" }, t("common.loading")));
    try {
      const data = await load();
      put(panel, render(data));
    } catch (error) {
      put(panel, isLocalOnly(error) ? localOnlyNote() : h("p", { class: "error" }, error.message));
    }
  }

  const refresh = (name) => h("button", { type: "button", class: "small", onclick: () => show(name, true) }, t("detail.refresh"));
  const panelBar = (...items) => h("div", { class: "panel-bar" }, ...items);

  function showLog(panel) {
    put(panel, log.el);
  }

  let eventLimit = 500;
  function showEvents(panel) {
    const limit = select([100, 500, 2000, 10000], eventLimit, (n) => String(n), { "aria-label": t("detail.limit") });
    limit.addEventListener("change", () => { eventLimit = Number(limit.value); show("events", true); });
    const bar = panelBar(h("label", { class: "inline-field" }, t("detail.limit"), limit), refresh("events"));
    fill(panel, () => desktop("get_task_events", { taskId, limit: eventLimit }), (events) => [bar,
      events.length ? h("ol", { class: "event-list" }, events.map((event) => {
        const pre = h("pre", { class: "event-raw" });
        const item = h("details", { class: "event" },
          h("summary", {}, h("span", { class: "event-seq" }, `#${event.seq}`), " ",
            h("span", { class: `event-kind ek-${event.kind}` }, event.kind), " ",
            h("span", { class: "muted" }, `${format.dateTime(event.createdAt)} · ${t("detail.run", { n: event.runId })}`), " ",
            h("span", { class: "event-preview" }, event.raw.slice(0, 160))),
          pre);
        item.addEventListener("toggle", () => {
          if (!item.open || pre.textContent) return;
          try { pre.textContent = JSON.stringify(JSON.parse(event.raw), null, 2); } catch { pre.textContent = event.raw; }
        });
        return h("li", {}, item);
      })) : h("p", { class: "muted" }, t("detail.noEvents"))]);
  }

  function showRevisions(panel) {
    fill(panel, async () => {
      if ((task.revision_count || 0) !== (detail.revisions || []).length) detail.revisions = await api.revisions(taskId);
      return [...detail.revisions].reverse();
    }, (list) => (list.length ? h("ol", { class: "revision-list" }, list.map((rev) => h("li", {},
      h("div", { class: "muted" }, format.dateTime(rev.createdAt)), h("div", { class: "prose" }, rev.feedback))))
      : h("p", { class: "muted" }, t("detail.noRevisions"))));
  }

  function diffLines(lines, from) {
    return lines.slice(from, from + DIFF_CHUNK).map((line) => {
      const cls = line.startsWith("+++") || line.startsWith("---") || line.startsWith("diff ") || line.startsWith("index ")
        ? "d-meta" : line.startsWith("@@") ? "d-hunk" : line.startsWith("+") ? "d-add" : line.startsWith("-") ? "d-del" : "";
      return h("span", { class: `d-line ${cls}` }, line || " ");
    });
  }

  function showDiff(panel) {
    fill(panel, () => desktop("get_task_diff", { taskId }), ({ diff, branch, stats }) => {
      const lines = diff ? diff.replace(/\n$/, "").split("\n") : [];
      const pre = h("pre", { class: "diff" }, diffLines(lines, 0));
      let shown = DIFF_CHUNK;
      const more = h("button", { type: "button", class: "small", hidden: lines.length <= shown });
      const label = () => { more.textContent = t("detail.moreLines", { n: Math.min(DIFF_CHUNK, lines.length - shown) }); };
      label();
      more.addEventListener("click", () => {
        pre.append(...diffLines(lines, shown));
        shown += DIFF_CHUNK;
        more.hidden = lines.length <= shown;
        label();
      });
      return [panelBar(h("span", { class: "diff-stats" },
        h("strong", {}, t(stats.files === 1 ? "detail.diffStats1" : "detail.diffStats", stats)), branch ? ` ${t("detail.onBranch", { branch })}` : ""), refresh("diff")),
      lines.length ? [pre, more] : h("p", { class: "muted" }, t("detail.noDiff"))];
    });
  }

  function showCommits(panel) {
    const list = detail.commits || [];
    // commits come only with the task detail (which carries the whole log too)
    const reload = h("button", { type: "button", class: "small", onclick: async () => {
      try {
        detail.commits = (await api.taskDetail(taskId)).commits;
        showCommits(panel);
      } catch (error) {
        toast(error.message, "error");
      }
    } }, t("detail.refresh"));
    put(panel, panelBar(reload), list.length ? h("ol", { class: "commit-list" }, list.map((c) => h("li", {},
      h("code", { class: "commit-hash", title: c.hash }, c.hash.slice(0, 8)), " ", h("span", {}, c.message),
      h("div", { class: "muted" }, [c.author, format.dateTime(c.date)].filter(Boolean).join(" · ")))))
      : h("p", { class: "muted" }, t("detail.noCommits")));
  }

  function showAttachments(panel) {
    const list = detail.attachments || [];
    const input = h("input", { type: "file", multiple: true, id: "attach-input", class: "file-input" });
    input.addEventListener("change", async () => {
      for (const file of [...input.files]) {
        try {
          list.push(await api.uploadAttachment(taskId, file));
          toast(t("detail.uploaded", { name: file.name }));
        } catch (error) {
          toast(`${file.name}: ${error.message}`, "error");
        }
      }
      detail.attachments = list;
      showAttachments(panel);
    });
    put(panel,
      panelBar(h("label", { class: "button", for: "attach-input" }, t("detail.upload")), input),
      list.length ? h("ul", { class: "attachment-list" }, list.map((a) => h("li", {},
        h("a", { href: api.attachmentUrl(a.id), download: a.fileName }, a.fileName),
        h("span", { class: "muted" }, ` ${format.bytes(a.size)} · ${a.mimeType || ""}`),
        h("button", { type: "button", class: "small", "aria-label": `${t("common.delete")} ${a.fileName}`, onclick: async () => {
          try {
            await api.deleteAttachment(a.id);
            detail.attachments = list.filter((x) => x.id !== a.id);
            showAttachments(panel);
          } catch (error) {
            toast(error.message, "error");
          }
        } }, t("common.delete")))))
        : h("p", { class: "muted" }, t("detail.noAttachments")));
  }

  function showDeps(panel) {
    const load = async () => {
      const [deps, graph] = await Promise.all([
        desktop("get_task_dependencies", { taskId }),
        desktop("get_dependency_graph", { projectId: task.project_id }).catch(() => ({ edges: [] })),
      ]);
      const condition = new Map(graph.edges.map((e) => [`${e.from}>${e.to}`, e.conditionType]));
      return { ...deps, condition };
    };
    fill(panel, load, ({ parents, children, condition }) => {
      const row = (id, from, to, removeBody) => {
        const other = state.tasks.get(id);
        const cond = condition.get(`${from}>${to}`);
        return h("li", {}, taskLink(id), " ", other ? badge(other.status) : null, " ",
          cond ? h("span", { class: "bchip" }, t(`cond.${cond}`)) : null,
          h("button", { type: "button", class: "small", "aria-label": t("detail.removeDep", { key: other?.task_key || `#${id}` }),
            onclick: () => act(async () => { await desktop("remove_task_dependency", removeBody); show("deps", true); }) },
          t("detail.remove")));
      };
      const candidates = tasksOf(task.project_id).filter((other) => other.id !== taskId && !parents.includes(other.id)
        && !children.includes(other.id));
      const pick = select(candidates.map((c) => c.id), "", (id) => {
        const c = state.tasks.get(id);
        return `${c.task_key} ${c.title}`;
      });
      const cond = select(CONDITIONS, "on_success", (c) => t(`cond.${c}`));
      const error = h("p", { class: "error", role: "alert", hidden: true });
      const form = h("form", { class: "dep-form" },
        h("label", { class: "inline-field" }, t("detail.dependsOn"), pick),
        h("label", { class: "inline-field" }, t("detail.condition"), cond),
        h("button", { type: "submit" }, t("detail.add")), error);
      form.addEventListener("submit", async (event) => {
        event.preventDefault();
        if (!pick.value) return;
        try {
          await desktop("add_task_dependency", { taskId, dependsOnId: Number(pick.value), conditionType: cond.value });
          show("deps", true);
        } catch (err) {
          error.textContent = isLocalOnly(err) ? t("common.localOnly") : err.message;
          error.hidden = false;
        }
      });
      return [panelBar(refresh("deps")),
        h("h3", {}, t("detail.parents")),
        parents.length ? h("ul", { class: "dep-list" }, parents.map((id) => row(id, id, taskId, { taskId, dependsOnId: id })))
          : h("p", { class: "muted" }, t("detail.noDeps")),
        h("h3", {}, t("detail.children")),
        children.length ? h("ul", { class: "dep-list" }, children.map((id) => row(id, taskId, id, { taskId: id, dependsOnId: taskId })))
          : h("p", { class: "muted" }, t("detail.noDeps")),
        candidates.length ? [h("h3", {}, t("detail.addDep")), form] : null];
    });
  }

  // --- loading, events, language ---------------------------------------------------------

  function showGone(message) {
    gone = true;
    put(top, h("section", { class: "empty" }, h("p", {}, message),
      task ? h("a", { href: `#/projects/${task.project_id}` }, t("detail.backToBoard")) : h("a", { href: "#/" }, t("nav.projects"))));
    put(texts);
    put(side);
    tabBar.replaceChildren();
    for (const panel of panels.values()) panel.hidden = true;
  }

  followLogs([taskId]);
  const offs = [
    onEvent(({ event, data }) => {
      if (!data) return;
      if (event === "task:log" && data.taskId === taskId && Array.isArray(data.entries)) log.append(data.entries);
      else if (event === "task:updated" && data.id === taskId) setTask(data);
      else if (event === "task:usage" && data.taskId === taskId) { live = data; renderSide(); }
      else if (event === "task:deleted" && data.id === taskId) showGone(t("detail.deleted"));
      else if (event === "dependencies:updated" && task && data.projectId === task.project_id && loaded.has("deps")) {
        if (active === "deps") show("deps", true); else loaded.delete("deps");
      } else if (event.startsWith("task:") && task && (data.parent_task_id === taskId || data.id === task.parent_task_id)) {
        schedule();  // a sub-task or the parent changed
      }
    }),
    subscribe((s, event) => {
      if (["tasks:loaded", "resync", "project:updated"].includes(event)) schedule();
    }),
    onLanguageChange(() => {
      const entries = log.entries();
      log.destroy();
      log = createLogView();
      log.setEntries(entries);
      loaded = new Set();
      schedule();
      if (task && !gone) show(active);
    }),
  ];

  api.taskDetail(taskId).then((data) => {
    const { commits, revisions, attachments, logs, ...fieldsOnly } = data;
    detail = { commits, revisions, attachments };
    task = fieldsOnly;
    renderTop();
    show("log");
    log.setEntries(logs);
    if (!state.loadedProjects.has(task.project_id)) loadTasks(task.project_id).catch(() => {});
  }).catch((error) => {
    showGone(error.status === 404 ? t("detail.notFound") : error.message);
  });

  return () => {
    for (const off of offs) off();
    if (frame) cancelAnimationFrame(frame);
    log.destroy();
    followLogs([]);
  };
}
