// Agent usage (#/usage): token and cost totals of every agent run, per agent CLI and per
// model tier, a daily cost chart drawn as inline SVG, today's cost against the daily
// limit, and which agent gets picked when tasks run with several (attempt_stats.js). A cost
// partly estimated from token counts is marked "≈ estimated".

import { h, svg } from "../dom.js";
import { cost, costMark, currentLanguage, register, t, tokens } from "../i18n.js";
import { enumOf } from "../schema.js";
import { api } from "../store.js";
import { attemptStatsPanel } from "./attempt_stats.js";
import { agentName, costText, numberTable, statTiles } from "./common.js";
import { loadedView } from "./loaded_view.js";

register({  // key: [English, Turkish]
  "usage.title": ["Agent usage", "Ajan kullanımı"],
  "usage.totalCost": ["Total cost", "Toplam maliyet"],
  "usage.today": ["Today", "Bugün"],
  "usage.input": ["Input tokens", "Girdi token'ları"],
  "usage.output": ["Output tokens", "Çıktı token'ları"],
  "usage.cacheRead": ["Cache reads", "Önbellek okumaları"],
  "usage.cacheCreation": ["Cache writes", "Önbellek yazmaları"],
  "usage.limit": ["Daily cost limit", "Günlük maliyet sınırı"],
  "usage.noLimit": ["No daily cost limit is set.", "Günlük maliyet sınırı ayarlanmamış."],
  "usage.setLimit": ["Set one in the settings", "Ayarlardan belirleyin"],
  "usage.ofLimit": ["{used} of {limit} today ({pct}%)", "Bugün {used} / {limit} kullanıldı (%{pct})"],
  "usage.limitReached": ["The limit is reached: the queue starts no new agent today.", "Sınıra ulaşıldı: kuyruk bugün yeni ajan başlatmayacak."],
  "usage.tiers": ["Per model tier", "Model katmanına göre"],
  "usage.tier": ["Tier", "Katman"],
  "usage.agents": ["Per agent", "Ajana göre"],
  "usage.agent": ["Agent", "Ajan"],
  "usage.tasks": ["Tasks", "Görevler"],
  "usage.cost": ["Cost", "Maliyet"],
  "usage.total": ["Total", "Toplam"],
  "usage.daily": ["Daily cost (last {n} days)", "Günlük maliyet (son {n} gün)"],
  "usage.chartLabel": ["Estimated cost per day, last {n} days", "Günlük tahmini maliyet, son {n} gün"],
  "usage.noRuns": ["No agent has run yet.", "Henüz hiçbir ajan çalışmadı."],
  "usage.data": ["Show the numbers", "Sayıları göster"],
  "usage.date": ["Day", "Gün"],
  "usage.limitLine": ["limit", "sınır"],
  "usage.countedTwice": ["A task run with several agents or model tiers (best of N, a verifier's, a revision's) counts in each of their rows; the total counts it once.", "Birkaç ajanla ya da model katmanıyla çalışan bir görev (en iyi N, bir doğrulayıcınınki, bir revizyonunki) her birinin satırında sayılır; toplam onu bir kez sayar."],
  "usage.note": ["Costs are estimates from published prices and may differ from your bill.", "Maliyetler yayımlanmış fiyatlardan yapılan tahminlerdir ve faturanızdan farklı olabilir."],
});

const DAYS = 30;
/** Events after which the usage is asked for again. */
const CHANGES = new Set(["task:updated", "task:usage", "plan:completed", "settings:updated", "task:deleted",
  "attempt:updated"]);

/** "2026-11-22" of a Date in local time. */
function localDay(date) {
  const pad = (n) => String(n).padStart(2, "0");
  return `${date.getFullYear()}-${pad(date.getMonth() + 1)}-${pad(date.getDate())}`;
}

/** The `count` days ending with `last` ("YYYY-MM-DD"), oldest first. Pure. */
export function dayRange(last, count) {
  const [y, m, d] = last.split("-").map(Number);
  const days = [];
  for (let i = count - 1; i >= 0; i -= 1) days.push(new Date(Date.UTC(y, m - 1, d - i)).toISOString().slice(0, 10));
  return days;
}

/** The smallest 1/2/2.5/5 × 10^k at or above value. Pure. */
export function niceMax(value) {
  if (!(value > 0)) return 0.01;
  const power = 10 ** Math.floor(Math.log10(value));
  for (const step of [1, 2, 2.5, 5, 10]) if (step * power >= value) return step * power;
  return 10 * power;
}

/**
 * A cost on the chart's axis, with the decimals its value needs: "$1", "$0.50", "$0",
 * "$0.125", "$0.0025". Pure.
 */
export function axisCost(value) {
  if (!value) return "$0";
  if (Number.isInteger(value)) return `$${value}`;
  const places = [2, 3, 4, 5, 6].find((n) => Math.abs(Number(value.toFixed(n)) - value) < 1e-9) ?? 6;
  return `$${value.toFixed(places)}`;
}

/** The last DAYS days (up to today, or the newest day with usage), each with its usage. */
function chartDays(data) {
  const byDate = new Map(data.timeline.map((row) => [row.date, row]));
  const today = localDay(new Date());
  const newest = data.timeline.length ? data.timeline[data.timeline.length - 1].date : today;
  return dayRange(newest > today ? newest : today, DAYS)
    .map((date) => byDate.get(date) || { date, cost: 0, inputTokens: 0, outputTokens: 0 });
}

/** The daily cost bars as SVG, width px wide, with the daily limit's line. */
function costChart(days, limit, width) {
  const height = 220;
  const m = { left: 56, right: 22, top: 12, bottom: 34 };
  const plotW = width - m.left - m.right;
  const plotH = height - m.top - m.bottom;
  const top = niceMax(Math.max(...days.map((d) => d.cost), limit || 0));
  const y = (v) => m.top + plotH - (v / top) * plotH;
  const band = plotW / days.length;
  const every = Math.max(1, Math.ceil(days.length / Math.max(1, Math.floor(plotW / 56))));
  const label = (date) => new Date(`${date}T12:00:00`).toLocaleDateString(
    currentLanguage() === "tr" ? "tr-TR" : "en-GB", { day: "numeric", month: "short" });
  const ticks = [0, top / 2, top];
  const chart = svg("svg", { width, height, viewBox: `0 0 ${width} ${height}`, class: "cost-chart",
    role: "img", "aria-label": t("usage.chartLabel", { n: DAYS }), "data-testid": "cost-chart" },
  ticks.map((v) => svg("g", { class: "axis" },
    svg("line", { x1: m.left, x2: width - m.right, y1: y(v), y2: y(v), class: "grid" }),
    svg("text", { x: m.left - 6, y: y(v) + 4, "text-anchor": "end" }, axisCost(v)))),
  days.map((d, i) => {
    const x = m.left + i * band;
    const barH = Math.max(d.cost > 0 ? 1 : 0, (d.cost / top) * plotH);
    return svg("g", { class: d.date === localDay(new Date()) ? "day today" : "day" },
      svg("rect", { x: x + band * 0.15, y: m.top + plotH - barH, width: Math.max(1, band * 0.7), height: barH,
        class: "bar-rect" },
      svg("title", {}, `${label(d.date)}: ${cost(d.cost)} · ${tokens(d.inputTokens)} / ${tokens(d.outputTokens)}`)),
      (days.length - 1 - i) % every === 0  // counted from today, so today is always labelled
        ? svg("text", { x: x + band / 2, y: height - m.bottom + 16, "text-anchor": "middle", class: "x-label" },
          label(d.date)) : null);
  }),
  limit ? svg("g", { class: "limit" },
    svg("line", { x1: m.left, x2: width - m.right, y1: y(limit), y2: y(limit) }),
    svg("text", { x: m.left + 4, y: y(limit) - 4, "text-anchor": "start" },
      `${t("usage.limitLine")} ${cost(limit)}`)) : null,
  svg("line", { x1: m.left, x2: width - m.right, y1: m.top + plotH, y2: m.top + plotH, class: "baseline" }));
  return chart;
}

/** Today's cost against the daily limit (or how to set one). */
function limitPanel({ dailyLimit, currentUsage }) {
  if (dailyLimit === null || dailyLimit === undefined) {
    return h("section", { class: "card-panel", "data-testid": "usage-limit" }, h("h2", {}, t("usage.limit")),
      h("p", { class: "muted" }, t("usage.noLimit"), " ", h("a", { href: "#/settings" }, t("usage.setLimit"))));
  }
  const pct = dailyLimit > 0 ? Math.round((currentUsage / dailyLimit) * 100) : 100;
  const reached = currentUsage >= dailyLimit;
  return h("section", { class: "card-panel", "data-testid": "usage-limit" }, h("h2", {}, t("usage.limit")),
    h("progress", { class: reached ? "limit-bar reached" : "limit-bar", max: String(dailyLimit || 1),
      value: String(Math.min(currentUsage, dailyLimit)), "aria-label": t("usage.limit") }),
    h("p", {}, t("usage.ofLimit", { used: cost(currentUsage), limit: cost(dailyLimit), pct })),
    reached ? h("p", { class: "error", role: "status" }, t("usage.limitReached")) : null);
}

/** The numbers behind the chart: the days with usage, newest first. */
function dailyTable(days) {
  return h("details", { class: "ins-details" }, h("summary", {}, t("usage.data")),
    numberTable([t("usage.date"), { value: t("usage.input"), num: true }, { value: t("usage.output"), num: true },
      { value: t("usage.cost"), num: true }],
    days.slice().reverse().filter((d) => d.cost || d.inputTokens).map((d) => [d.date,
      { value: tokens(d.inputTokens), num: true }, { value: tokens(d.outputTokens), num: true },
      { value: cost(d.cost), num: true }])));
}

/** Usage per model tier (the server's models, in its order), with a total (its tasks the
 * server's count, each once). */
function tiersTable(models, totalTasks) {
  const rows = enumOf("Task", "model").map((tier) => [tier, models[tier] || { tasks: 0, inputTokens: 0, outputTokens: 0, cost: 0 }]);
  const sum = (k) => (k === "tasks" ? totalTasks : rows.reduce((acc, [, r]) => acc + (r[k] || 0), 0));
  const line = (label, r) => [{ value: label, head: true }, { value: String(r.tasks), num: true },
    { value: tokens(r.inputTokens), num: true }, { value: tokens(r.outputTokens), num: true }, { value: cost(r.cost), num: true }];
  return numberTable([t("usage.tier"), ...["usage.tasks", "usage.input", "usage.output", "usage.cost"].map((key) =>
    ({ value: t(key), num: true }))],
  rows.map(([tier, r]) => line(t(`model.${tier}`), r)),
  { foot: line(t("usage.total"), { tasks: sum("tasks"), inputTokens: sum("inputTokens"), outputTokens: sum("outputTokens"),
    cost: sum("cost") }), attrs: { class: "ins-table", "data-testid": "usage-tiers" } });
}

/** Usage per agent CLI (the server's agents, in its order), with a total (its tasks the
 * server's count, each once); a cost partly estimated from token counts is marked. */
function agentsTable(agents, estimated, totalTasks) {
  const rows = enumOf("Project", "agent").map((name) => [name, agents[name] || { tasks: 0, inputTokens: 0, outputTokens: 0, cost: 0 }]);
  const sum = (k) => (k === "tasks" ? totalTasks : rows.reduce((acc, [, r]) => acc + (r[k] || 0), 0));
  const line = (label, r, marked) => [{ value: label, head: true }, { value: String(r.tasks), num: true },
    { value: tokens(r.inputTokens), num: true }, { value: tokens(r.outputTokens), num: true },
    { value: costText(r.cost, marked), num: true }];
  return numberTable([t("usage.agent"), ...["usage.tasks", "usage.input", "usage.output", "usage.cost"].map((key) =>
    ({ value: t(key), num: true }))],
  rows.map(([name, r]) => line(agentName(name), r, r.costEstimated)),
  { foot: line(t("usage.total"), { tasks: sum("tasks"), inputTokens: sum("inputTokens"), outputTokens: sum("outputTokens"),
    cost: sum("cost") }, estimated), attrs: { class: "ins-table", "data-testid": "usage-agents" } });
}

/** Mount the usage view. */
export function mount(root) {
  let chartBox = null;
  let lastWidth = 0;
  const drawChart = (data) => {
    if (!chartBox || !data) return;
    lastWidth = Math.max(280, Math.floor(chartBox.clientWidth));
    chartBox.replaceChildren(costChart(chartDays(data), data.limits.dailyLimit, lastWidth));
  };
  const view = loadedView(root, {
    delay: 1500,
    head: () => h("h1", {}, t("usage.title")),
    load: async () => {
      const [usage, attempts] = await Promise.all([api.usage(), api.attemptStats()]);
      return { ...usage, attempts };
    },
    render: (data) => {
      const u = data.usage;
      chartBox = h("div", { class: "chart-box" });
      const today = data.timeline.find((day) => day.date === localDay(new Date()));
      /** Whether a table's rows count some task more than once (then it says why). */
      const twice = (groups) => Object.values(groups).reduce((n, r) => n + r.tasks, 0) > u.totalTasks;
      const countedTwice = (groups) => (twice(groups)
        ? h("p", { class: "muted ins-small", "data-testid": "usage-counted-twice" }, t("usage.countedTwice")) : null);
      return [
        statTiles([["usage.totalCost", costText(u.totalCost, u.costEstimated), { "data-testid": "usage-total" }], ["usage.today", costMark(data.limits.currentUsage, today?.costEstimated), { "data-testid": "usage-today" }],
          ["usage.input", tokens(u.totalInputTokens)], ["usage.output", tokens(u.totalOutputTokens)],
          ["usage.cacheRead", tokens(u.totalCacheRead)], ["usage.cacheCreation", tokens(u.totalCacheCreation)]],
        { "data-testid": "usage-tiles" }),
        limitPanel(data.limits),
        h("section", { class: "card-panel" }, h("h2", {}, t("usage.daily", { n: DAYS })),
          data.timeline.length ? null : h("p", { class: "muted" }, t("usage.noRuns")),
          chartBox, dailyTable(chartDays(data))),
        h("section", { class: "card-panel" }, h("h2", {}, t("usage.agents")),
          agentsTable(data.agents, u.costEstimated, u.totalTasks), countedTwice(data.agents)),
        h("section", { class: "card-panel" }, h("h2", {}, t("usage.tiers")), tiersTable(data.models, u.totalTasks),
          countedTwice(data.models)),
        attemptStatsPanel(data.attempts),
        h("p", { class: "muted ins-small" }, t("usage.note"))];
    },
    rendered: drawChart,
    on: (event) => (CHANGES.has(event) ? "load" : null),
  });
  const resize = new ResizeObserver(() => {
    if (chartBox && Math.abs(chartBox.clientWidth - lastWidth) > 4) drawChart(view.data);
  });
  resize.observe(root);
  return () => {
    view.stop();
    resize.disconnect();
  };
}
