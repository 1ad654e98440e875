// The tabs of a task page: the live log, the raw event replay, revisions, diff, commits,
// attachments and dependencies. Each tab loads its data the first time it is shown (or on
// "Refresh"); the tabs that need desktop commands say so when those are refused. The
// dependencies tab is task_deps.js and the diff's review diff_review.js, both imported when
// their tab is first shown; the pieces every panel uses are below the tabs.

import { append, h, toast } from "../dom.js";
import * as format from "../i18n.js";
import { register, t } from "../i18n.js";
import { parameterOf } from "../schema.js";
import { ApiError, api, state } from "../store.js";
import { select } from "./common.js";

register({  // key: [English, Turkish]
  "detail.tab.log": ["Log", "Günlük"],
  "detail.tab.events": ["Events", "Olaylar"],
  "detail.tab.revisions": ["Revisions", "Revizyonlar"],
  "detail.tab.diff": ["Diff", "Fark"],
  "detail.tab.commits": ["Commits", "Commit'ler"],
  "detail.tab.attachments": ["Attachments", "Ekler"],
  "detail.tab.deps": ["Dependencies", "Bağımlılıklar"],
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
});

const TABS = ["log", "events", "revisions", "diff", "commits", "attachments", "deps"];
/** Tabs whose data comes from desktop (local-only) commands. */
const LOCAL_TABS = new Set(["events", "diff", "deps"]);
/** Diff lines rendered at once; more on request. */
const DIFF_CHUNK = 2000;
/** The event counts offered (up to the server's largest). */
const EVENT_LIMITS = [100, 500, 2000];

function showLog(panel, tabs) {
  put(panel, tabs.ctx.log().el);
}

/** The count of events asked for, and what the server allows at most. */
function eventLimits(current) {
  const { maximum, default: fallback } = parameterOf("/api/desktop/get_task_events", "limit", "post");
  const values = [...new Set([...EVENT_LIMITS.filter((n) => n < maximum), fallback, maximum])].sort((a, b) => a - b);
  return { values, current: current ?? fallback };
}

function eventItem(event) {
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
}

function showEvents(panel, tabs) {
  const { values, current } = eventLimits(tabs.eventLimit);
  tabs.eventLimit = current;
  const limit = select(values, current, (n) => String(n), { "aria-label": t("detail.limit") });
  limit.addEventListener("change", () => { tabs.eventLimit = Number(limit.value); tabs.show("events", true); });
  const bar = panelBar(h("label", { class: "inline-field" }, t("detail.limit"), limit), refresh(tabs, "events"));
  fill(panel, () => tabs.ctx.desktop("get_task_events", { taskId: tabs.ctx.taskId, limit: current }), (events) => [bar,
    events.length ? h("ol", { class: "event-list" }, events.map(eventItem)) : muted("detail.noEvents")]);
}

function showRevisions(panel, tabs) {
  fill(panel, async () => (await api.revisions(tabs.ctx.taskId)).reverse(), (list) => (list.length ? h("ol", { class: "revision-list" }, list.map((rev) => h("li", {},
    h("div", { class: "muted" }, format.dateTime(rev.createdAt)), h("div", { class: "prose" }, rev.feedback))))
    : muted("detail.noRevisions")));
}

/** The class of one line of a unified diff (meta, hunk, added, removed or context). */
export function diffClass(line) {
  return line.startsWith("+++") || line.startsWith("---") || line.startsWith("diff ") || line.startsWith("index ")
    ? "d-meta" : line.startsWith("@@") ? "d-hunk" : line.startsWith("+") ? "d-add" : line.startsWith("-") ? "d-del" : "";
}

function diffLines(lines, from, review) {
  return lines.slice(from, from + DIFF_CHUNK).map((line, i) =>
    review.line(from + i, h("span", { class: `d-line ${diffClass(line)}` }, line || " ")));
}

/** The diff, with review comments on its lines (diff_review.js); the draft outlives a refresh. */
function showDiff(panel, tabs) {
  const { taskId, desktop } = tabs.ctx;
  tabs.reviewDraft ??= { comments: [], summary: "" };
  fill(panel, () => Promise.all([desktop("get_task_diff", { taskId }), api.review(taskId), import("./diff_review.js")]),
    ([{ diff, branch, stats }, kept, { diffPositions, diffReview }]) => {
    const lines = diff ? diff.replace(/\n$/, "").split("\n") : [];
    const review = diffReview({ taskId, positions: diffPositions(lines), kept, draft: tabs.reviewDraft,
      onSent: () => tabs.show("diff", true) });
    const pre = h("pre", { class: "diff", tabindex: "0", onkeydown: review.onKey }, diffLines(lines, 0, review));
    let shown = DIFF_CHUNK;
    const more = h("button", { type: "button", class: "small", hidden: lines.length <= shown });
    const label = () => { more.textContent = t("detail.moreLines", { n: Math.min(DIFF_CHUNK, lines.length - shown) }); };
    label();
    more.addEventListener("click", () => {
      pre.append(...diffLines(lines, shown, review));
      shown += DIFF_CHUNK;
      more.hidden = lines.length <= shown;
      label();
      review.place();
    });
    review.place();
    return [panelBar(h("span", { class: "diff-stats" },
      h("strong", {}, t(stats.files === 1 ? "detail.diffStats1" : "detail.diffStats", stats)), branch ? ` ${t("detail.onBranch", { branch })}` : ""), refresh(tabs, "diff")),
    lines.length ? [pre, more, review.box] : muted("detail.noDiff")];
  });
}

/** The task detail's commits and attachments, fetched when their tab is first shown (the
 * detail carries the whole log too, which the log tab pages through instead). */
function detailOf(tabs, reload = false) {
  if (reload || !tabs.detail) {
    const loading = api.taskDetail(tabs.ctx.taskId).then(({ commits, attachments }) => ({ commits, attachments }));
    loading.catch(() => { if (tabs.detail === loading) tabs.detail = null; });  // the next show tries again
    tabs.detail = loading;
  }
  return tabs.detail;
}

function showCommits(panel, tabs, reload = false) {
  fill(panel, () => detailOf(tabs, reload), ({ commits }) => [panelBar(h("button", { type: "button", class: "small",
    onclick: () => showCommits(panel, tabs, true) }, t("detail.refresh"))),
  commits.length ? h("ol", { class: "commit-list" }, commits.map((c) => h("li", {},
    h("code", { class: "commit-hash", title: c.hash }, c.hash.slice(0, 8)), " ", h("span", {}, c.message),
    h("div", { class: "muted" }, [c.author, format.dateTime(c.date)].filter(Boolean).join(" · ")))))
    : muted("detail.noCommits")]);
}

/** Upload the chosen files one by one; each answer joins the list. */
async function upload(files, list, taskId) {
  for (const file of files) {
    try {
      list.push(await api.uploadAttachment(taskId, file));
      toast(t("detail.uploaded", { name: file.name }));
    } catch (error) {
      toast(`${file.name}: ${error.message}`, "error");
    }
  }
}

function showAttachments(panel, tabs) {
  fill(panel, () => detailOf(tabs), (detail) => attachmentList(panel, tabs, detail));
}

/** The attachments panel's content; an upload or a delete redraws it. */
function attachmentList(panel, tabs, detail) {
  const list = detail.attachments;
  const redraw = () => put(panel, attachmentList(panel, tabs, detail));
  const input = h("input", { type: "file", multiple: true, id: "attach-input", class: "file-input" });
  input.addEventListener("change", async () => {
    await upload([...input.files], list, tabs.ctx.taskId);
    redraw();
  });
  const remove = async (a) => {
    try {
      await api.deleteAttachment(a.id);
      detail.attachments = list.filter((x) => x.id !== a.id);
      redraw();
    } catch (error) {
      toast(error.message, "error");
    }
  };
  return [
    panelBar(h("label", { class: "button", for: "attach-input" }, t("detail.upload")), input),
    list.length ? h("ul", { class: "attachment-list" }, list.map((a) => h("li", {},
      h("a", { href: api.attachmentUrl(a.id), download: a.fileName }, a.fileName),
      h("span", { class: "muted" }, ` ${format.bytes(a.size)} · ${a.mimeType || ""}`),
      h("button", { type: "button", class: "small", "aria-label": `${t("common.delete")} ${a.fileName}`,
        onclick: () => remove(a) }, t("common.delete")))))
      : muted("detail.noAttachments")];
}

const SHOW = { log: showLog, events: showEvents, revisions: showRevisions, diff: showDiff, commits: showCommits,
  attachments: showAttachments, deps: showDeps };

async function showDeps(panel, tabs) {
  try {
    (await import("./task_deps.js")).showDeps(panel, tabs);
  } catch (error) {  // the module cannot be had (offline, say)
    put(panel, h("p", { class: "error" }, error.message));
  }
}

/**
 * The tab bar and panels of a task page.
 * @param {{taskId: number, task: () => Object, log: () => Object,
 *   desktop: (command: string, body: Object) => Promise<any>, act: (fn: Function, done?: string) => void}} ctx
 */
export function taskTabs(ctx) {
  const panels = new Map(TABS.map((name) => [name, h("div", { class: "tab-panel", role: "tabpanel",
    id: `panel-${name}`, "aria-labelledby": `tab-${name}`, tabindex: "0" })]));
  const bar = h("div", { class: "detail-tabs", role: "tablist" });
  const tabs = {
    ctx, bar, panels,
    active: "log",
    loaded: new Set(),  // tabs whose panel holds data
    eventLimit: null,
    detail: null,  // the promise of the task detail's commits and attachments
    /** The bar as the active tab and the language say, its buttons kept: the page renders
     * it at every change of its task, and a button replaced between a press and its release
     * would lose the click (and the focus). */
    renderBar() {
      if (bar.childElementCount !== TABS.length) {
        bar.replaceChildren(...TABS.map((name) => h("button", {
          type: "button", role: "tab", id: `tab-${name}`, "aria-controls": `panel-${name}`,
          onclick: () => tabs.show(name) })));
      }
      TABS.forEach((name, n) => {
        const button = bar.children[n];
        const on = name === tabs.active;
        const label = t(`detail.tab.${name}`);
        button.setAttribute("aria-selected", String(on));
        button.tabIndex = on ? 0 : -1;
        button.className = `tab${on ? " active" : ""}`;
        if (button.textContent !== label) button.textContent = label;
      });
    },
    /** Show a tab, loading its data the first time (or again with reload). */
    show(name, reload = false) {
      tabs.active = name;
      for (const [key, panel] of panels) panel.hidden = key !== name;
      tabs.renderBar();
      if (tabs.loaded.has(name) && !reload) return;
      tabs.loaded.add(name);
      const panel = panels.get(name);
      if (LOCAL_TABS.has(name) && state.localOnlyRefused) put(panel, localOnlyNote());
      else SHOW[name](panel, tabs);
    },
    /** Load a tab again when it is shown, now when it is. */
    stale(name) {
      if (!tabs.loaded.has(name)) return;
      if (tabs.active === name) tabs.show(name, true);
      else tabs.loaded.delete(name);
    },
    /** After a reconnect: every tab but the live log reads again (now, if it is shown). */
    staleAll() {
      tabs.detail = null;
      for (const name of TABS) if (name !== "log") tabs.stale(name);
    },
    hide() {
      bar.replaceChildren();
      for (const panel of panels.values()) panel.hidden = true;
    },
  };
  bar.addEventListener("keydown", (event) => {
    const step = { ArrowRight: 1, ArrowLeft: -1 }[event.key];
    if (!step) return;
    event.preventDefault();
    const next = TABS[(TABS.indexOf(tabs.active) + step + TABS.length) % TABS.length];
    tabs.show(next);
    document.getElementById(`tab-${next}`)?.focus();
  });
  return tabs;
}

// --- the pieces of panels -----------------------------------------------------------------------

// The pieces of a task page's panels (task_detail.js, task_tabs.js, task_deps.js,
// attempts.js): filling a panel (loading note, data, or the note that desktop commands are
// refused), its bar and "Refresh" button, a muted line, and a task's status badge and link.

register({  // key: [English, Turkish]
  "detail.refresh": ["Refresh", "Yenile"],
});

/** Replace el's children (nested arrays allowed; null and false skipped). */
export const put = (el, ...children) => { el.replaceChildren(); append(el, children); };
/** Whether an error is the server's refusal of a desktop command (local_only). */
export const isLocalOnly = (error) => error instanceof ApiError && error.code === "local_only";
/** The note shown instead of what desktop commands would give. */
export const localOnlyNote = () => h("p", { class: "detail-local-only muted" }, t("common.localOnly"));
/** A muted line of text (an i18n key). */
export const muted = (key) => h("p", { class: "muted" }, t(key));

/** A task's status as a coloured badge. */
export function badge(status) {
  return h("span", { class: `status-badge st-${status}` }, t(`status.${status}`));
}

/** A link to a task: its key and title when the store knows it. */
export function taskLink(id) {
  const other = state.tasks.get(id);
  return h("a", { href: `#/tasks/${id}` }, other ? `${other.task_key} ${other.title}` : `#${id}`);
}

/** Load into a panel: loading note, then render(data); a local_only refusal shows the note. */
export async function fill(panel, load, render) {
  put(panel, h("p", { class: "muted" }, t("common.loading")));
  try {
    const data = await load();
    put(panel, render(data));
  } catch (error) {
    put(panel, isLocalOnly(error) ? localOnlyNote() : h("p", { class: "error" }, error.message));
  }
}

/** The bar at the top of a panel. */
export const panelBar = (...items) => h("div", { class: "panel-bar" }, ...items);
/** The "Refresh" button of a tab: shows it again, loading its data anew. */
export const refresh = (tabs, name) => h("button", { type: "button", class: "small", onclick: () => tabs.show(name, true) },
  t("detail.refresh"));
