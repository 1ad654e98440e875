// Which agent wins (best of N, design §18): per agent CLI and model tier, the attempts that
// ended, how many of them were picked, the win rate and the mean cost (GET
// /api/stats/attempts), as a table on the agent usage page (usage.js).

import { h } from "../dom.js";
import { cost, register, t } from "../i18n.js";
import { agentName, numberTable } from "./common.js";

register({  // key: [English, Turkish]
  "attemptstats.title": ["Runs with several agents: who gets picked", "Birkaç ajanlı çalıştırmalar: kim seçiliyor"],
  "attemptstats.agent": ["Agent", "Ajan"],
  "attemptstats.model": ["Model", "Model"],
  "attemptstats.attempts": ["Attempts", "Denemeler"],
  "attemptstats.picks": ["Picked", "Seçilen"],
  "attemptstats.winRate": ["Win rate", "Kazanma oranı"],
  "attemptstats.meanCost": ["Mean cost", "Ortalama maliyet"],
  "attemptstats.none": ["No task has been run with several agents yet (“Run with several agents” on a task).", "Henüz hiçbir görev birkaç ajanla çalıştırılmadı (bir görevde “Birkaç ajanla çalıştır”)."],
  "attemptstats.note": ["Counts the attempts that ended; a win is an attempt that was picked.", "Biten denemeleri sayar; kazanan, seçilen denemedir."],
});

/** "40%" of a rate between 0 and 1. */
const percent = (rate) => `${Math.round((rate || 0) * 100)}%`;

/** The section: a row per agent CLI and model tier, the best win rate first. */
export function attemptStatsPanel(stats) {
  const rows = (stats?.agents || []).slice().sort((a, b) => b.winRate - a.winRate || b.attempts - a.attempts);
  return h("section", { class: "card-panel", "data-testid": "attempt-stats" },
    h("h2", {}, t("attemptstats.title")),
    rows.length ? [numberTable([t("attemptstats.agent"), t("attemptstats.model"),
      ...["attemptstats.attempts", "attemptstats.picks", "attemptstats.winRate", "attemptstats.meanCost"]
        .map((key) => ({ value: t(key), num: true }))],
    rows.map((r) => [{ value: agentName(r.agent), head: true }, t(`model.${r.model}`),
      { value: String(r.attempts), num: true }, { value: String(r.picks), num: true },
      { value: percent(r.winRate), num: true }, { value: cost(r.meanCostUsd), num: true }]),
    { attrs: { class: "ins-table" } }),
    h("p", { class: "muted ins-small" }, t("attemptstats.note"))]
      : h("p", { class: "muted" }, t("attemptstats.none")));
}
