// The agent CLI of projects and tasks as the views show it: the task's agent select (the
// project's, or one of the server's list), the card's badge, the usage-limit wait and the
// mark of a cost that is partly estimated.

import { h } from "../dom.js";
import * as format from "../format.js";
import { register, t } from "../i18n.js";
import { enumOf } from "../schema.js";
import { projectAgent } from "../store.js";
import { select } from "./common.js";

register({  // key: [English, Turkish]
  "agentpart.label": ["Agent", "Ajan"],
  "agentpart.help": ["The agent CLI that runs this task.", "Bu görevi çalıştıran ajan CLI'si."],
  "agentpart.project": ["Project's ({name})", "Projeninki ({name})"],
  "agentpart.projectUnknown": ["Project's", "Projeninki"],
  "agentpart.badgeTitle": ["Runs with {name}", "{name} ile çalışır"],
  "agentpart.waiting": ["Usage limit — continues at {time}", "Kullanım sınırı — {time} itibarıyla devam eder"],
  "agentpart.waitingHelp": ["The agent hit its usage limit; the task goes on by itself then.", "Ajan kullanım sınırına ulaştı; görev o saatte kendiliğinden devam eder."],
});

/** The display name of an agent CLI: "Codex". */
export const agentName = (agent) => t(`agent.${agent}`);

/** The label of "the project's agent", naming it once known. */
export function projectsLabel(projectId) {
  const agent = projectAgent(projectId);
  return agent ? t("agentpart.project", { name: agentName(agent) }) : t("agentpart.projectUnknown");
}

/**
 * The task's agent: "" (sent as null) is the project's, then the server's list of agents.
 * The first option names the project's agent as soon as it is known.
 * @returns {HTMLSelectElement}
 */
export function agentSelect(projectId, current, attrs = {}) {
  const values = ["", ...enumOf("Task", "agent")];
  const el = select(values, current ?? "", (v) => (v === "" ? projectsLabel(projectId) : agentName(v)), attrs);
  return el;
}

/** The value of an agentSelect as the API takes it (null: the project's). */
export const agentValue = (el) => el.value || null;

/** The agent a task runs: its own, else its project's (undefined while not known). */
export const taskAgent = (task) => task.agent || projectAgent(task.project_id);

/** A card's badge when the task chose an agent of its own (the project's needs no badge). */
export function agentBadge(task) {
  if (!task.agent || task.agent === projectAgent(task.project_id)) return null;
  const name = agentName(task.agent);
  return h("span", { class: "bchip agent", "data-testid": "card-agent", title: t("agentpart.badgeTitle", { name }) },
    name);
}

/** "Usage limit — continues at 14:03" of a task waiting for its agent's limit, else null. */
export function waitingText(task) {
  return task.waitingUntil ? t("agentpart.waiting", { time: format.clock(task.waitingUntil) }) : null;
}

/** A cost; "≈$0.04 estimated" (with a tooltip) when part of it is estimated from token counts. */
export function costText(value, estimated) {
  if (!estimated) return format.cost(value);
  return h("span", { class: "estimated", title: t("cost.estimatedHelp"), "data-estimated": "" },
    format.costMark(value, true), h("small", { class: "muted" }, ` ${t("cost.estimated")}`));
}
