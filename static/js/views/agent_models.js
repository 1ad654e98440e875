// The agentModels setting as a grid: one row per agent CLI (with its state here, and the hosts
// that have it when it is not installed here), one input per model tier, the model name that
// agent is given for that tier. An empty input leaves the built-in model of that agent and
// tier (the tier is not sent); a grid left all empty saves null (every built-in). Agents and
// tiers come from the server's API description; it checks the names.

import { h } from "../dom.js";
import { register, t } from "../i18n.js";
import { enumOf, propertyOf } from "../schema.js";
import { api, state, subscribe } from "../store.js";
import { agentName } from "./common.js";

register({  // key: [English, Turkish]
  "models.agent": ["Agent", "Ajan"],
  "models.placeholder": ["Built-in default", "Yerleşik varsayılan"],
  "models.cell": ["{agent}: {tier} model", "{agent}: {tier} model"],
  "models.cliDefault": ["The CLI's own default", "CLI'nin kendi varsayılanı"],
  "models.notFound": ["not installed", "kurulu değil"],
  "models.notFoundHere": ["not installed here", "burada kurulu değil"],
  "models.found": ["found", "bulundu"],
});

/** Agent -> the hosts whose last check found it ({name, version}), from /api/agents. */
let onHosts = new Map();

/** The model an agent gets for a tier when the setting names none (the server's table). */
const builtIn = (agent, tier) => {
  const table = propertyOf("Settings", "agentModels")?.["x-builtIn"] || {};
  const name = table[agent]?.[tier];
  return name === undefined ? t("models.placeholder") : name || t("models.cliDefault");
};

/**
 * "codex-cli 0.169.0", "not installed" (with each host that has it: "not installed here ·
 * vm: 2.1.197"), or nothing while the server has not looked.
 */
function cliState(agent) {
  const cli = state.health?.agents?.[agent];
  if (!cli || cli.found === null || cli.found === undefined) return null;
  const hosts = cli.found ? [] : onHosts.get(agent) || [];
  const here = cli.found ? cli.version || "" : t(hosts.length ? "models.notFoundHere" : "models.notFound");
  return h("div", { class: "muted ins-small", "data-testid": `cli-${agent}` },
    [here, ...hosts.map((host) => `${host.name}: ${host.version || t("models.found")}`)].join(" · "));
}

/**
 * Each agent's CLI state in a slot that follows /api/health (it may come after the grid),
 * and names the hosts that have it once /api/agents answers.
 */
function cliSlots() {
  const slots = new Map(agents().map((agent) => [agent, h("span", {}, cliState(agent))]));
  const paint = () => { for (const [agent, slot] of slots) slot.replaceChildren(cliState(agent) || ""); };
  api.agents().then((list) => {
    onHosts = new Map(list.map((a) => [a.name, (a.hosts || []).filter((host) => host.found)]));
    paint();
  }).catch(() => { /* the hosts are not named */ });
  let shown = false;
  const off = subscribe((s, event) => {
    if (event !== "health") return;
    if (![...slots.values()][0].isConnected) {
      if (shown) off();  // the grid is gone
      return;
    }
    shown = true;
    paint();
  });
  return slots;
}

const agents = () => enumOf("Project", "agent");
const tiers = () => enumOf("Task", "model");

/** {agent: {tier: "name" or ""}} of every agent and tier, from the setting's value. */
function toRaw(value) {
  const chosen = value && typeof value === "object" ? value : {};
  return Object.fromEntries(agents().map((agent) => [agent, Object.fromEntries(tiers().map((tier) =>
    [tier, typeof chosen[agent]?.[tier] === "string" ? chosen[agent][tier] : ""]))]));
}

/** The setting to send: the filled inputs only, or null when none is. */
function fromRaw(raw) {
  const value = {};
  for (const [agent, byTier] of Object.entries(raw)) {
    const filled = Object.entries(byTier).map(([tier, name]) => [tier, name.trim()]).filter(([, name]) => name);
    if (filled.length) value[agent] = Object.fromEntries(filled);
  }
  return { value: Object.keys(value).length ? value : null };
}

/** The grid: a table with a row per agent, inputs named "Codex: Large model"; raw is the kit's. */
function render(spec, raw, ids, changed) {
  const controls = [];
  const slots = cliSlots();
  const model = () => raw[spec.key];  // replaced, not changed, when the server's value comes in
  const cell = (agent, tier) => {
    const input = h("input", { type: "text", value: model()[agent][tier], placeholder: builtIn(agent, tier),
      autocomplete: "off", spellcheck: "false", class: "mono", "data-key": `${spec.key}:${agent}:${tier}`,
      "aria-label": t("models.cell", { agent: agentName(agent), tier: t(`model.${tier}`) }) });
    input.addEventListener("input", () => { model()[agent][tier] = input.value; changed(); });
    controls.push(input);
    return h("td", {}, input);
  };
  const element = h("fieldset", { class: "field agent-models", "data-field": spec.key, "aria-describedby": ids.described },
    h("legend", {}, spec.label()),
    h("div", { class: "table-scroll" }, h("table", { class: "models-grid" },
      h("thead", {}, h("tr", {}, h("th", {}, t("models.agent")), tiers().map((tier) => h("th", {}, t(`model.${tier}`))))),
      h("tbody", {}, agents().map((agent) => h("tr", {}, h("th", { scope: "row" }, agentName(agent), slots.get(agent)),
        tiers().map((tier) => cell(agent, tier))))))),
    ids.help, ids.error);
  return { element, controls };
}

/** Put new raw values into the inputs. */
function show(parts, raw) {
  for (const input of parts.controls) {
    const [, agent, tier] = input.dataset.key.split(":");
    input.value = raw[agent]?.[tier] ?? "";
  }
}

/** The form kit's spec of the agentModels setting (settings.js adds group and label). */
export const agentModelsField = { kind: "custom", custom: { toRaw, fromRaw, render, show } };
