// Project statistics (#/projects/:projectId/stats): tiles, bar charts of the status, type
// and priority counts, and the activity feed with "Load more" (pages as large as the
// server's activity route allows). Refreshes (debounced) when
// a task of the project changes.

import { h } from "../dom.js";
import { bytes, cost, dateTime, duration, register, t, tokens } from "../i18n.js";
import { parameterOf } from "../schema.js";
import { api } from "../store.js";
import { projectHeader, statTiles } from "./common.js";
import { loadedView, projectOf } from "./loaded_view.js";

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

/** The activity route's page sizes: {page: its default, max: its largest}. */
function pageSizes() {
  const limit = parameterOf("/api/projects/{project_id}/activity", "limit");
  return { page: limit.default, max: limit.maximum };
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

/** The tiles and the three bar charts of the project's stats. */
function summary(s) {
  return [
    statTiles([
      ["stats.total", String(s.totalTasks), {}, { "data-testid": "stat-total" }],
      ["stats.completedToday", String(s.completedToday), {}, { "data-testid": "stat-today" }],
      ["stats.avgDuration", s.avgDuration ? duration(s.avgDuration) : t("stats.none")],
      ["stats.agentRuns", String(s.agentRuns)],
      ["stats.inputTokens", tokens(s.inputTokens)],
      ["stats.outputTokens", tokens(s.outputTokens)],
      ["stats.totalCost", cost(s.totalCost)],
      ["stats.worktrees", s.worktrees ? t("stats.worktreesValue", { n: s.worktrees, size: bytes(s.worktreeBytes) }) : "0"],
    ], { "data-testid": "stats-tiles" }),
    h("p", { class: "muted ins-small" }, t("stats.costNote")),
    h("div", { class: "chart-grid" },
      bars(t("stats.byStatus"), Object.entries(s.statusCounts).map(([k, v]) =>
        ({ label: t(`status.${k}`), value: v, cls: `status-${k}` }))),
      bars(t("stats.byType"), Object.entries(s.typeCounts).map(([k, v]) =>
        ({ label: t(`type.${k}`), value: v }))),
      bars(t("stats.byPriority"), Object.entries(s.priorityCounts).sort((a, b) => b[0] - a[0])
        .map(([k, v]) => ({ label: t(`priority.${k}`), value: v, cls: `priority-${k}` })))),
  ];
}

/** Mount the statistics view. */
export function mount(root, { projectId }) {
  const sizes = pageSizes();

  async function loadMore(button, view) {
    button.disabled = true;
    try {
      const { activity } = view.data;
      const page = await api.activity(projectId, sizes.page, activity.length);
      if (!view.alive()) return;
      view.data = { ...view.data, activity: activity.concat(page.slice().reverse()), hasMore: page.length === sizes.page };
      view.render();
      root.querySelector(`.activity-list li:nth-last-child(${Math.max(1, page.length)}) a`)?.focus();
    } catch (failure) {
      view.error = failure.message;
      view.render();
    }
  }

  const view = loadedView(root, {
    delay: 600,
    head: () => projectHeader(projectId, "/stats"),
    load: async (previous) => {
      const wanted = Math.min(Math.max(sizes.page, previous ? previous.activity.length : 0), sizes.max);
      const [stats, page] = await Promise.all([api.stats(projectId), api.activity(projectId, wanted, 0)]);
      return { stats, activity: page.slice().reverse(), hasMore: page.length === wanted };
    },
    render: ({ stats, activity, hasMore }) => [...summary(stats),
      h("section", { class: "card-panel" }, h("h2", {}, t("stats.activity")),
        activity.length
          ? h("ol", { class: "activity-list", "data-testid": "activity" }, activity.map(activityLine))
          : h("p", { class: "muted" }, t("stats.noActivity")),
        hasMore ? h("div", { class: "actions" }, h("button", { type: "button", "data-testid": "load-more",
          onclick: (e) => loadMore(e.currentTarget, view) }, t("stats.loadMore"))) : null)],
    on: (event, data) => {
      if (event === "project:updated" && data.id === projectId) return "render";
      return event.startsWith("task:") && event !== "task:log" && projectOf(data) === projectId ? "load" : null;
    },
  });
  return view.stop;
}
