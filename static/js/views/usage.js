// Agent usage (#/usage): token and cost totals of every agent run, per model tier, a daily
// cost chart drawn as inline SVG, and today's cost against the daily limit.

import { api } from "../api.js";
import { clear, h, svg } from "../dom.js";
import { cost, tokens } from "../format.js";
import { currentLanguage, onLanguageChange, register, t } from "../i18n.js";
import { onEvent } from "../store.js";

register({  // key: [English, Turkish]
  "usage.title": ["Agent usage", "Ajan kullanımı"],
  "usage.totalCost": ["Estimated cost", "Tahmini maliyet"],
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
  "usage.tasks": ["Tasks", "Görevler"],
  "usage.cost": ["Cost", "Maliyet"],
  "usage.total": ["Total", "Toplam"],
  "usage.daily": ["Daily cost (last {n} days)", "Günlük maliyet (son {n} gün)"],
  "usage.chartLabel": ["Estimated cost per day, last {n} days", "Günlük tahmini maliyet, son {n} gün"],
  "usage.noRuns": ["No agent has run yet.", "Henüz hiçbir ajan çalışmadı."],
  "usage.data": ["Show the numbers", "Sayıları göster"],
  "usage.date": ["Day", "Gün"],
  "usage.limitLine": ["limit", "sınır"],
  "usage.note": ["Costs are estimates from published prices and may differ from your bill.", "Maliyetler yayımlanmış fiyatlardan yapılan tahminlerdir ve faturanızdan farklı olabilir."],
});

const DAYS = 30;
const TIERS = ["model_large", "model_medium", "model_small"];

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

/** Mount the usage view. */
export function mount(root) {
  let data = null;
  let error = "";
  let timer = null;
  let alive = true;
  let chartBox = null;
  let lastWidth = 0;

  async function load() {
    try {
      const answer = await api.usage();
      if (!alive) return;
      data = answer;
      error = "";
    } catch (failure) {
      error = failure.message;
    }
    if (alive) render();
  }

  function chartDays() {
    const byDate = new Map(data.timeline.map((row) => [row.date, row]));
    const today = localDay(new Date());
    const newest = data.timeline.length ? data.timeline[data.timeline.length - 1].date : today;
    return dayRange(newest > today ? newest : today, DAYS)
      .map((date) => byDate.get(date) || { date, cost: 0, inputTokens: 0, outputTokens: 0 });
  }

  /** The daily cost bars, sized to the box they live in. */
  function drawChart() {
    if (!chartBox || !data) return;
    const width = Math.max(280, Math.floor(chartBox.clientWidth));
    lastWidth = width;
    const height = 220;
    const m = { left: 56, right: 22, top: 12, bottom: 34 };
    const plotW = width - m.left - m.right;
    const plotH = height - m.top - m.bottom;
    const days = chartDays();
    const limit = data.limits.dailyLimit;
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
      svg("text", { x: m.left - 6, y: y(v) + 4, "text-anchor": "end" }, cost(v)))),
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
    chartBox.replaceChildren(chart);
  }

  function limitPanel() {
    const { dailyLimit, currentUsage } = data.limits;
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

  function render() {
    clear(root);
    root.append(h("h1", {}, t("usage.title")));
    if (error) root.append(h("p", { class: "error", role: "alert" }, error));
    if (!data) {
      if (!error) root.append(h("p", { class: "muted" }, t("common.loading")));
      chartBox = null;
      return;
    }
    const u = data.usage;
    const tile = (key, value) => h("div", { class: "ins-tile" }, h("dt", {}, t(key)), h("dd", {}, value));
    const rows = TIERS.map((tier) => [tier, data.models[tier] || { tasks: 0, inputTokens: 0, outputTokens: 0, cost: 0 }]);
    const sum = (k) => rows.reduce((acc, [, r]) => acc + (r[k] || 0), 0);
    chartBox = h("div", { class: "chart-box" });
    const days = chartDays();
    root.append(
      h("dl", { class: "ins-tiles", "data-testid": "usage-tiles" },
        tile("usage.totalCost", cost(u.totalCost)), tile("usage.today", cost(data.limits.currentUsage)),
        tile("usage.input", tokens(u.totalInputTokens)), tile("usage.output", tokens(u.totalOutputTokens)),
        tile("usage.cacheRead", tokens(u.totalCacheRead)), tile("usage.cacheCreation", tokens(u.totalCacheCreation))),
      limitPanel(),
      h("section", { class: "card-panel" }, h("h2", {}, t("usage.daily", { n: DAYS })),
        data.timeline.length ? null : h("p", { class: "muted" }, t("usage.noRuns")),
        chartBox,
        h("details", { class: "ins-details" }, h("summary", {}, t("usage.data")),
          h("div", { class: "table-scroll" }, h("table", {},
            h("thead", {}, h("tr", {}, h("th", {}, t("usage.date")), h("th", { class: "num" }, t("usage.input")),
              h("th", { class: "num" }, t("usage.output")), h("th", { class: "num" }, t("usage.cost")))),
            h("tbody", {}, days.slice().reverse().filter((d) => d.cost || d.inputTokens).map((d) => h("tr", {},
              h("td", {}, d.date), h("td", { class: "num" }, tokens(d.inputTokens)),
              h("td", { class: "num" }, tokens(d.outputTokens)), h("td", { class: "num" }, cost(d.cost))))))))),
      h("section", { class: "card-panel" }, h("h2", {}, t("usage.tiers")),
        h("div", { class: "table-scroll" }, h("table", { class: "ins-table", "data-testid": "usage-tiers" },
          h("thead", {}, h("tr", {}, h("th", {}, t("usage.tier")), h("th", { class: "num" }, t("usage.tasks")),
            h("th", { class: "num" }, t("usage.input")), h("th", { class: "num" }, t("usage.output")),
            h("th", { class: "num" }, t("usage.cost")))),
          h("tbody", {}, rows.map(([tier, r]) => h("tr", {}, h("th", { scope: "row" }, t(`model.${tier}`)),
            h("td", { class: "num" }, String(r.tasks)), h("td", { class: "num" }, tokens(r.inputTokens)),
            h("td", { class: "num" }, tokens(r.outputTokens)), h("td", { class: "num" }, cost(r.cost))))),
          h("tfoot", {}, h("tr", {}, h("th", { scope: "row" }, t("usage.total")),
            h("td", { class: "num" }, String(sum("tasks"))), h("td", { class: "num" }, tokens(sum("inputTokens"))),
            h("td", { class: "num" }, tokens(sum("outputTokens"))), h("td", { class: "num" }, cost(sum("cost")))))))),
      h("p", { class: "muted ins-small" }, t("usage.note")));
    drawChart();
  }

  const resize = new ResizeObserver(() => {
    if (chartBox && Math.abs(chartBox.clientWidth - lastWidth) > 4) drawChart();
  });
  resize.observe(root);

  const refresh = () => { clearTimeout(timer); timer = setTimeout(load, 1500); };
  const stopEvents = onEvent(({ event }) => {
    if (event === "task:updated" || event === "task:usage" || event === "plan:completed"
      || event === "settings:updated" || event === "task:deleted" || event === "resync") refresh();
  });
  const stopLanguage = onLanguageChange(render);

  render();
  load();
  return () => {
    alive = false;
    clearTimeout(timer);
    resize.disconnect();
    stopEvents();
    stopLanguage();
  };
}
