// The field list of a task page (task_detail.js): status, type, priority, model, effort,
// agent, tags, parent and sub-tasks, times, retries, queue position, tokens, cost (live while
// it runs), branch, pull request (one the board does not follow: pr_parts.js shows the others),
// session and refused tool calls.

import { h } from "../dom.js";
import * as format from "../i18n.js";
import { register, t } from "../i18n.js";
import { projectAgent, tasksOf } from "../store.js";
import { agentName, costText } from "./common.js";
import { badge, taskLink } from "./task_panel.js";

register({  // key: [English, Turkish]
  "detail.status": ["Status", "Durum"],
  "detail.type": ["Type", "Tür"],
  "detail.priority": ["Priority", "Öncelik"],
  "detail.model": ["Model", "Model"],
  "detail.effort": ["Thinking effort", "Düşünme eforu"],
  "detail.agent": ["Agent", "Ajan"],
  "detail.projectAgent": ["{name} (the project's)", "{name} (projeninki)"],
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
  "detail.sandbox": ["Sandbox", "Korumalı alan"],
  "detail.sandboxed": ["its latest run was sandboxed (bubblewrap)", "son çalışması korumalı alandaydı (bubblewrap)"],
  "detail.unsandboxed": ["its latest run was not sandboxed", "son çalışması korumalı alanda değildi"],
  "detail.branchAt": ["in {where}", "yeri: {where}"],
  "detail.pr": ["Pull request", "Çekme isteği"],
  "detail.session": ["Session", "Oturum"],
  "detail.denialsField": ["Refused tool calls", "Reddedilen araç çağrıları"],
  "detail.network": ["Network", "Ağ"],
  "detail.reached": ["reached: {hosts}", "ulaşılan: {hosts}"],
  "detail.refused": ["refused: {hosts}", "reddedilen: {hosts}"],
  "detail.refusedMore": ["{n} connections refused in all", "toplam {n} bağlantı reddedildi"],
});

/** Its latest sandboxed run's network: the hosts it reached and those refused, with why. */
function networkOf(network) {
  const refused = network.refusedHosts.map((r) => h("span", { title: r.rule },
    `${r.host}:${r.port}${r.count > 1 ? ` ×${r.count}` : ""}`));
  return h("span", { "data-testid": "task-network" },
    network.reached.length ? h("div", {}, t("detail.reached", { hosts: network.reached.join(", ") })) : "",
    refused.length ? h("div", { class: "warn" }, t("detail.refused", { hosts: "" }),
      refused.flatMap((r, n) => (n ? [", ", r] : [r]))) : "",
    network.refused ? h("div", { class: "muted" }, t("detail.refusedMore", { n: network.refused })) : "");
}

/** The field list beside the texts; live: the latest task:usage of the current run. */
export function taskFields(task, live) {
  const rows = [];
  const add = (label, ...value) => { if (value.some((v) => v !== null && v !== "" && v !== undefined)) rows.push(h("dt", {}, label), h("dd", {}, value)); };
  const running = task.is_running && live;
  const tags = format.tags(task.tags);
  const children = tasksOf(task.project_id).filter((other) => other.parent_task_id === task.id);
  const estimated = task.cost_estimated;
  const cost = running ? t("detail.liveCost", { cost: format.costMark(task.total_cost + (live.cost || 0), estimated) })
    : costText(task.total_cost, estimated);
  const ownAgent = projectAgent(task.project_id);
  const inTokens = task.input_tokens + (running ? live.inputTokens || 0 : 0);
  const outTokens = task.output_tokens + (running ? live.outputTokens || 0 : 0);
  add(t("detail.status"), badge(task.status));
  add(t("detail.type"), t(`type.${task.task_type}`));
  add(t("detail.priority"), t(`priority.${task.priority}`));
  add(t("detail.model"), t(`model.${task.model}`));
  add(t("detail.effort"), t(`effort.${task.thinking_effort}`));
  add(t("detail.agent"), h("span", { "data-testid": "task-agent" }, task.agent ? agentName(task.agent)
    : ownAgent ? t("detail.projectAgent", { name: agentName(ownAgent) }) : ""));
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
  if (typeof task.sandboxed === "boolean") {
    add(t("detail.sandbox"), h("span", { "data-testid": "task-sandbox", class: task.sandboxed ? "" : "warn" },
      t(task.sandboxed ? "detail.sandboxed" : "detail.unsandboxed")));
  }
  if (task.network && (task.network.reached.length || task.network.refused)) {
    add(t("detail.network"), networkOf(task.network));
  }
  if (task.branch_name) {
    add(t("detail.branch"), h("code", {}, task.branch_name), task.branchAt
      ? h("div", { class: "muted", "data-testid": "branch-at" }, t("detail.branchAt", { where: task.branchAt }))
      : "");
  }
  if (task.pr_url && !task.pr) add(t("detail.pr"), h("a", { href: task.pr_url, target: "_blank", rel: "noopener noreferrer" }, task.pr_url));
  if (task.session_id) add(t("detail.session"), h("code", { class: "wrap" }, task.session_id));
  if (task.permission_denials) add(t("detail.denialsField"), h("strong", { class: "error" }, String(task.permission_denials)));
  return h("dl", { class: "field-list" }, rows);
}
