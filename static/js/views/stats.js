// Project statistics (#/projects/:projectId/stats): tiles, bar charts of the status, type
// and priority counts, and the activity feed with "Load more". Refreshes (debounced) when
// a task of the project changes.

import { api } from "../api.js";
import { clear, h } from "../dom.js";
import { bytes, cost, dateTime, duration, tokens } from "../format.js";
import { onLanguageChange, register, t } from "../i18n.js";
import { onEvent } from "../store.js";
import { projectHeader } from "./common.js";

register({  // key: [English, Turkish]
  "stats.total": ["Tasks", "Görevler"],
  "stats.completedToday": ["Done today", "Bugün tamamlanan"],
  "stats.avgDuration": ["Average time in progress", "Ortalama çalışma süresi"],
  "stats.agentRuns": ["Agent runs", "Ajan çalıştırmaları"],
  "stats.inputTokens": ["Input tokens", "Girdi token'ları"],
  "stats.outputTokens": ["Output tokens", "Çıktı token'ları"],
  "stats.totalCost": ["Estimated cost", "Tahmini maliyet"],
  "stats.worktrees": ["Worktrees", "Çalışma ağaçları"],
  "stats.worktreesValue": ["{n} · {size}", "{n} · {size}"],
  "stats.byStatus": ["By status", "Duruma göre"],
  "stats.byType": ["By type", "Türe göre"],
  "stats.byPriority": ["By priority", "Önceliğe göre"],
  "stats.activity": ["Activity", "Etkinlik"],
  "stats.loadMore": ["Load more", "Daha fazla yükle"],
  "stats.noActivity": ["No activity yet.", "Henüz etkinlik yok."],
  "stats.created": ["created in {to}", "{to} içinde oluşturuldu"],
  "stats.moved": ["{from} → {to}", "{from} → {to}"],
  "stats.costNote": ["Costs are estimates from published prices.", "Maliyetler yayımlanmış fiyatlardan yapılan tahminlerdir."],
  "stats.none": ["—", "—"],
});

const PAGE = 50;
const MAX_PAGE = 1000;  // the server's largest activity page

/** Mount the statistics view. */
export function mount(root, { projectId }) {
  let stats = null;
  let activity = [];      // newest first
  let hasMore = false;
  let error = "";
  let timer = null;
  let alive = true;

  async function load() {
    try {
      const wanted = Math.min(Math.max(PAGE, activity.length), MAX_PAGE);
      const [s, page] = await Promise.all([api.stats(projectId), api.activity(projectId, wanted, 0)]);
      if (!alive) return;
      stats = s;
      activity = page.slice().reverse();
      hasMore = page.length === wanted;
      error = "";
    } catch (failure) {
      error = failure.message;
    }
    if (alive) render();
  }

  async function loadMore(button) {
    button.disabled = true;
    try {
      const page = await api.activity(projectId, PAGE, activity.length);
      if (!alive) return;
      activity = activity.concat(page.slice().reverse());
      hasMore = page.length === PAGE;
      render();
      root.querySelector(".activity-list li:nth-last-child(" + Math.max(1, page.length) + ") a")?.focus();
    } catch (failure) {
      error = failure.message;
      render();
    }
  }

  function tile(key, value, testid) {
    return h("div", { class: "ins-tile", "data-testid": testid }, h("dt", {}, t(key)), h("dd", {}, value));
  }

  /** A horizontal bar chart of {label, value, cls} rows (CSS bars sized with the CSSOM). */
  function bars(title, rows) {
    const max = Math.max(1, ...rows.map((r) => r.value));
    return h("section", { class: "card-panel chart" }, h("h2", {}, title),
      h("ul", { class: "bars" }, rows.map((row) => h("li", {},
        h("span", { class: "bar-label" }, row.label),
        h("span", { class: "bar-track", "aria-hidden": "true" },
          h("span", { class: `ins-bar ${row.cls || ""}`, style: { width: `${(row.value / max) * 100}%` } })),
        h("span", { class: "bar-value" }, String(row.value))))));
  }

  function activityLine(entry) {
    const status = (s) => (s ? t(`status.${s}`) : "?");
    const what = entry.event === "created" ? t("stats.created", { to: status(entry.to) })
      : t("stats.moved", { from: status(entry.from), to: status(entry.to) });
    return h("li", {},
      h("time", { datetime: entry.timestamp, class: "muted" }, dateTime(entry.timestamp)),
      entry.taskId
        ? h("a", { href: `#/tasks/${entry.taskId}` }, entry.taskTitle || `#${entry.taskId}`)
        : h("span", { class: "muted" }, entry.taskTitle || "?"),
      h("span", { class: `activity-what ${entry.to ? `status-${entry.to}` : ""}` }, what));
  }

  function render() {
    const focused = root.contains(document.activeElement) ? document.activeElement.getAttribute("href") : null;
    clear(root);
    root.append(projectHeader(projectId, "/stats"));
    if (error) root.append(h("p", { class: "error", role: "alert" }, error));
    if (!stats) {
      if (!error) root.append(h("p", { class: "muted" }, t("common.loading")));
      return;
    }
    const s = stats;
    root.append(
      h("dl", { class: "ins-tiles", "data-testid": "stats-tiles" },
        tile("stats.total", String(s.totalTasks), "stat-total"),
        tile("stats.completedToday", String(s.completedToday), "stat-today"),
        tile("stats.avgDuration", s.avgDuration ? duration(s.avgDuration) : t("stats.none")),
        tile("stats.agentRuns", String(s.agentRuns)),
        tile("stats.inputTokens", tokens(s.inputTokens)),
        tile("stats.outputTokens", tokens(s.outputTokens)),
        tile("stats.totalCost", cost(s.totalCost)),
        tile("stats.worktrees", s.worktrees
          ? t("stats.worktreesValue", { n: s.worktrees, size: bytes(s.worktreeBytes) }) : "0")),
      h("p", { class: "muted ins-small" }, t("stats.costNote")),
      h("div", { class: "chart-grid" },
        bars(t("stats.byStatus"), Object.entries(s.statusCounts).map(([k, v]) =>
          ({ label: t(`status.${k}`), value: v, cls: `status-${k}` }))),
        bars(t("stats.byType"), Object.entries(s.typeCounts).map(([k, v]) =>
          ({ label: t(`type.${k}`), value: v }))),
        bars(t("stats.byPriority"), Object.entries(s.priorityCounts).sort((a, b) => b[0] - a[0])
          .map(([k, v]) => ({ label: t(`priority.${k}`), value: v, cls: `priority-${k}` })))),
      h("section", { class: "card-panel" }, h("h2", {}, t("stats.activity")),
        activity.length
          ? h("ol", { class: "activity-list", "data-testid": "activity" }, activity.map(activityLine))
          : h("p", { class: "muted" }, t("stats.noActivity")),
        hasMore ? h("div", { class: "actions" }, h("button", { type: "button", "data-testid": "load-more",
          onclick: (e) => loadMore(e.currentTarget) }, t("stats.loadMore"))) : null));
    if (focused) root.querySelector(`a[href="${CSS.escape(focused)}"]`)?.focus({ preventScroll: true });
  }

  const refresh = () => { clearTimeout(timer); timer = setTimeout(load, 600); };
  const stopEvents = onEvent(({ event, data }) => {
    if (event === "resync") return refresh();
    if (!event.startsWith("task:") || event === "task:log" || !data) return;
    if ((data.project_id ?? data.projectId) === projectId) refresh();
  });
  const stopProject = onEvent(({ event, data }) => {
    if (event === "project:updated" && data.id === projectId) render();
  });
  const stopLanguage = onLanguageChange(render);

  render();
  load();
  return () => {
    alive = false;
    clearTimeout(timer);
    stopEvents();
    stopProject();
    stopLanguage();
  };
}
